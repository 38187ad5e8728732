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
    onpolicy_rm = json.loads((out / "reward_model_onpolicy.json").read_text())
    for model in (rm, onpolicy_rm):
        assert -1.0 <= model["onpolicy_corr_words"] <= 1.0 and len(model["cue_probe"]["rm"]) == 5
    assert onpolicy_rm["config"]["train_prompts"] == 16 and onpolicy_rm["config"]["pairs"] >= 0
    rlhf = json.loads((out / "rlhf.json").read_text())
    runs = rlhf["runs"]
    assert set(runs) == {"ppo_gentle", "ppo", "grpo", "hack", "grpo_prefs", "oracle"}
    assert set(rlhf["reference_proxy_sampled"]) == {"onpolicy", "preference"}
    sources = {"oracle": "gold", "grpo_prefs": "reward model (preference set)"}
    for name, run in runs.items():
        assert len(run["reward"]) == len(run["gold"]) == len(run["kl"]) == run["config"]["steps"]
        assert set(evaluation) <= set(run["eval"])
        assert run["reward_source"] == sources.get(name, "reward model (on-policy comparisons)")
        assert (run["eval"]["proxy_sampled"] is None) == (name == "oracle")
    # the control optimises the gold scorer itself: what it logs as its reward is the gold score
    assert runs["oracle"]["reward"] == pytest.approx(runs["oracle"]["gold"], abs=1e-6)
    for name, source in (("dpo.json", "preference"), ("dpo_onpolicy.json", "onpolicy")):
        dpo = json.loads((out / name).read_text())
        assert set(evaluation) <= set(dpo["eval"]) and "accuracy" in dpo["val"]
        assert dpo["config"]["source"] == source
    for folder in ("sft", "rm", "rm_onpolicy"):
        assert (out / folder / "model.safetensors").is_file()
