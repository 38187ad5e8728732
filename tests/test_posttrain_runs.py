"""``benchmarks/posttrain_runs.py`` (the precomputed runs notebooks 09 and 10 load) runs end to end in its
``--quick`` mode and writes every file the notebooks read, with the fields they read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_quick_run_writes_what_the_notebooks_read(tmp_path) -> None:
    out = tmp_path / "posttrain"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "posttrain_runs.py"), "--quick", "--out", str(out)],
        check=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    sft = json.loads((out / "sft.json").read_text())
    evaluation = ("gold", "gold_by_kind", "scores", "replies", "val_loss", "gold_sampled", "sampled_scores")
    for result in (sft["base"], sft["runs"]["low"], sft["runs"]["high"]):
        assert set(evaluation) <= set(result)
        assert 0.0 <= result["gold"] <= 1.0 and 0.0 <= result["gold_sampled"] <= 1.0
        assert len(result["sampled_scores"]) == 8 * len(result["scores"])
    rm = json.loads((out / "reward_model.json").read_text())
    assert 0.0 <= rm["val_accuracy"] <= 1.0 and len(rm["val_chosen"]) == rm["val_pairs"]
    assert 0.0 <= rm["mean_gold"] <= 1.0 and 0.0 <= rm["best_of_n_gold"] <= 1.0
    runs = json.loads((out / "rlhf.json").read_text())["runs"]
    assert set(runs) == {"ppo_gentle", "ppo", "grpo", "hack", "oracle"}
    for name, run in runs.items():
        assert len(run["reward"]) == len(run["gold"]) == len(run["kl"]) == run["config"]["steps"]
        assert set(evaluation) <= set(run["eval"])
        assert run["reward_source"] == ("gold" if name == "oracle" else "reward model")
    # the control optimises the gold scorer itself: what it logs as its reward is the gold score
    assert runs["oracle"]["reward"] == pytest.approx(runs["oracle"]["gold"], abs=1e-6)
    dpo = json.loads((out / "dpo.json").read_text())
    assert set(evaluation) <= set(dpo["eval"]) and "accuracy" in dpo["val"]
    for folder in ("sft", "rm", "ppo", "dpo"):
        assert (out / folder / "model.safetensors").is_file()
