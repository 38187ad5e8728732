"""``python -m minillm.experiments.posttrain`` (the longer runs notebooks 09 and 10 load): it runs end to end in
its ``--quick`` mode, writes every file the notebooks read with the fields they read and the code that produced
them, never replaces a result unless asked — and the committed results match the code as it is now."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from minillm.experiments import posttrain
from minillm.experiments.provenance import code_sha256, stale_results

ROOT = Path(__file__).resolve().parents[1]
POSTTRAIN = ROOT / "data" / "posttrain"
RESULT_FILES = (
    "sft.json", "reward_model.json", "reward_model_onpolicy.json", "rlhf.json", "dpo.json", "dpo_onpolicy.json",
)  # fmt: skip
MODEL_FOLDERS = ("sft", "rm", "rm_onpolicy", "aligned")


def _run(out: Path, *flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "minillm.experiments.posttrain", "--quick", "--out", str(out), *flags]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)


@pytest.mark.parametrize("name", RESULT_FILES)
def test_committed_results_were_made_by_the_code_as_it_is(name) -> None:
    """Fails when posttrain.py changed after its results were committed: rerun the stage (its docstring says how)."""
    payload = json.loads((POSTTRAIN / name).read_text(encoding="utf-8"))
    assert stale_results(payload, posttrain) == [], f"data/posttrain/{name} is stale: rerun its stage"


@pytest.mark.parametrize("folder", MODEL_FOLDERS)
def test_committed_models_were_made_by_the_code_as_it_is(folder) -> None:
    config = json.loads((POSTTRAIN / folder / "config.json").read_text(encoding="utf-8"))
    assert stale_results(config, posttrain) == [], f"data/posttrain/{folder}/ is stale: rerun its stage"


def test_stale_results_names_the_difference() -> None:
    current = code_sha256(posttrain)
    assert stale_results({"runs": {"a": {"provenance": {"code_sha256": current}}}}, posttrain) == []
    (why,) = stale_results({"x": 1, "provenance": {"code_sha256": "0" * 64, "command": "cmd"}}, posttrain)
    assert "cmd ran code with SHA-256 000000000000" in why and current[:12] in why
    assert stale_results({"no": "record"}, posttrain) == ["it records no provenance"]


def test_bad_flags_are_refused_before_any_work(tmp_path) -> None:
    for flags, message in (
        (["--runs", "ppo"], "--runs goes with --stage rlhf"),
        (["--stage", "rlhf", "--runs", "nope"], "unknown RLHF runs ['nope']"),
        (["--threads", "0"], "--threads must be at least 1"),
    ):
        done = _run(tmp_path / "out", *flags)
        assert done.returncode != 0 and message in done.stderr
    assert not (tmp_path / "out").exists()
    done = subprocess.run([sys.executable, "-m", "minillm.experiments.posttrain"], capture_output=True, text=True)
    assert done.returncode != 0 and "--out" in done.stderr  # never writes into data/ unless told where


@pytest.mark.slow
def test_quick_run_writes_what_the_notebooks_read(tmp_path) -> None:
    out = tmp_path / "posttrain"
    done = _run(out)
    assert done.returncode == 0, done.stderr[-2000:]
    sft = json.loads((out / "sft.json").read_text())
    evaluation = ("gold", "gold_by_kind", "scores", "replies", "val_loss", "gold_sampled", "sampled_scores")
    for result in (sft["base"], sft["runs"]["low"], sft["runs"]["high"]):
        assert set(evaluation) <= set(result)
        assert 0.0 <= result["gold"] <= 1.0 and 0.0 <= result["gold_sampled"] <= 1.0
        assert len(result["sampled_scores"]) == 8 * len(result["scores"])
    rm = json.loads((out / "reward_model.json").read_text())
    assert 0.0 <= rm["val_accuracy"] <= 1.0 and len(rm["val_chosen"]) == rm["val_pairs"]
    assert 0.0 <= rm["mean_gold"] <= 1.0 and 0.0 <= rm["best_of_n_gold"] <= 1.0
    onpolicy_rm = json.loads((out / "reward_model_onpolicy.json").read_text())
    for model in (rm, onpolicy_rm):
        assert -1.0 <= model["onpolicy_corr_words"] <= 1.0 and len(model["cue_probe"]["rm"]) == 5
    assert onpolicy_rm["config"]["train_prompts"] == 16 and onpolicy_rm["config"]["pairs"] >= 0
    rlhf = json.loads((out / "rlhf.json").read_text())
    runs = rlhf["runs"]
    assert set(runs) == set(posttrain.RLHF_RUNS)
    assert set(rlhf["reference_proxy_sampled"]) == {"onpolicy", "preference"}
    sources = {"oracle": "gold", "grpo_prefs": "reward model (preference set)"}
    for name, run in runs.items():
        assert len(run["reward"]) == len(run["gold"]) == len(run["kl"]) == run["config"]["steps"] == 3
        assert set(evaluation) <= set(run["eval"])
        assert run["reward_source"] == sources.get(name, "reward model (on-policy comparisons)")
        assert (run["eval"]["proxy_sampled"] is None) == (name == "oracle")
    # the control optimises the gold scorer itself: what it logs as its reward is the gold score
    assert runs["oracle"]["reward"] == pytest.approx(runs["oracle"]["gold"], abs=1e-6)
    for name, source in (("dpo.json", "preference"), ("dpo_onpolicy.json", "onpolicy")):
        dpo = json.loads((out / name).read_text())
        assert set(evaluation) <= set(dpo["eval"]) and "accuracy" in dpo["val"]
        assert dpo["config"]["source"] == source
    for folder in MODEL_FOLDERS:
        assert (out / folder / "model.safetensors").is_file()
        config = json.loads((out / folder / "config.json").read_text())
        assert config["provenance"]["code_sha256"] == code_sha256(posttrain)
    for name in RESULT_FILES:
        payload = json.loads((out / name).read_text())
        assert stale_results(payload, posttrain) == []
        assert "--quick" in json.dumps(payload["provenance"] if "provenance" in payload else payload["runs"])
    # a second run refuses to replace what the first wrote, naming the file, and leaves it as it was
    before = (out / "sft.json").read_bytes()
    again = _run(out, "--stage", "sft")
    assert again.returncode != 0 and "sft.json already holds a result; pass --overwrite" in again.stderr
    again = _run(out, "--stage", "rlhf", "--runs", "hack")
    assert again.returncode != 0 and "rlhf.json already holds hack; pass --overwrite" in again.stderr
    assert (out / "sft.json").read_bytes() == before
