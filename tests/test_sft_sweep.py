"""``python -m minillm.experiments.sft_sweep`` (notebook 09's precomputed learning-rate sweep): the committed
results match the module as it is now and hold every run the notebook plots; the module runs end to end in its
``--quick`` mode, merges runs from separate processes, and never replaces a run unless asked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from minillm.experiments import sft_sweep
from minillm.experiments.provenance import stale_results

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "data" / "posttrain" / sft_sweep.RESULT


def _run(out: Path, *flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "minillm.experiments.sft_sweep", "--quick", "--out", str(out), *flags]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)


def test_committed_sweep_was_made_by_the_code_as_it_is() -> None:
    """Fails when sft_sweep.py changed after its results were committed: rerun it (its docstring says how)."""
    payload = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert stale_results(payload, sft_sweep) == [], f"{COMMITTED} is stale: rerun the sweep"
    assert set(payload["runs"]) == set(sft_sweep.RUNS), "every run the notebook plots is there"
    for name, run in payload["runs"].items():
        assert (run["family"], run["lr"]) == sft_sweep.RUNS[name]
        assert "--quick" not in run["provenance"]["command"]
        assert run["provenance"]["code"] == "minillm/experiments/sft_sweep.py"
        assert 0.0 <= run["gold"] <= 1.0 and run["val_loss"] > 0 and len(run["scores"]) == len(payload["prompts"])


def test_bad_flags_are_refused_before_any_work(tmp_path) -> None:
    for flags, message in ((["--runs", "full_7"], "unknown runs ['full_7']"), (["--threads", "0"], "at least 1")):
        done = _run(tmp_path / "out", *flags)
        assert done.returncode != 0 and message in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_quick_runs_from_two_calls_merge_and_are_not_replaced(tmp_path) -> None:
    out = tmp_path / "sweep"
    for runs in (["full_0.001", "lora_0.01"], ["mix_0.003"]):
        done = _run(out, "--runs", *runs)
        assert done.returncode == 0, done.stderr[-2000:]
    payload = json.loads((out / sft_sweep.RESULT).read_text())
    assert set(payload["runs"]) == {"full_0.001", "lora_0.01", "mix_0.003"}
    assert stale_results(payload, sft_sweep) == []
    for run in payload["runs"].values():
        assert set(sft_sweep.KEPT) <= set(run) and 0.0 <= run["gold_sampled"] <= 1.0
        assert run["provenance"]["code"] == "minillm/experiments/sft_sweep.py"  # not __main__.py under python -m
    assert payload["config"]["lora_rank"] == sft_sweep.LORA_RANK and set(payload["base"]) == set(sft_sweep.KEPT)
    before = (out / sft_sweep.RESULT).read_bytes()
    again = _run(out, "--runs", "lora_0.01")
    assert again.returncode != 0 and "already holds lora_0.01; pass --overwrite" in again.stderr
    assert (out / sft_sweep.RESULT).read_bytes() == before
