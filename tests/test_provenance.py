"""``minillm.experiments.provenance``: a result records the hash of its module and of every ``minillm`` module that
module imports, and editing any of them makes the result stale."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from minillm.experiments import posttrain, sft_sweep
from minillm.experiments.provenance import (
    dependency_files,
    dependency_hashes,
    provenance,
    stale_results,
    untracked_dependencies,
)

ROOT = Path(__file__).resolve().parents[1]


def _names(module) -> set[str]:
    return {path.relative_to(ROOT).as_posix() for path in dependency_files(module)}


def test_a_result_depends_on_the_experiments_it_builds_on_and_the_modules_it_trains_with() -> None:
    names = _names(sft_sweep)
    # sft_sweep's numbers come from code it inherits from posttrain.py, and from the SFT and LoRA it trains with
    for needed in ("minillm/experiments/posttrain.py", "minillm/sft.py", "minillm/lora.py", "minillm/model.py"):
        assert needed in names
    assert "minillm/alignment/loops.py" in _names(posttrain)  # through `from minillm.alignment import loops`
    assert "minillm/alignment/__init__.py" in names  # a package's __init__ runs when a submodule is imported
    assert "minillm/experiments/sft_sweep.py" not in names and "minillm/experiments/provenance.py" not in names
    record = provenance(sft_sweep, "cmd")
    assert (
        record["depends_on"] == dependency_hashes(sft_sweep) and stale_results({"provenance": record}, sft_sweep) == []
    )


def test_a_changed_dependency_makes_a_result_stale_and_says_which() -> None:
    record = provenance(sft_sweep, "python -m minillm.experiments.sft_sweep")
    edited = {**record, "depends_on": {**record["depends_on"], "minillm/sft.py": "0" * 64}}
    (why,) = stale_results({"runs": {"a": {"provenance": edited}}}, sft_sweep)
    assert "minillm/sft.py at SHA-256 000000000000" in why and "which is now" in why
    gone = {**record, "depends_on": {**record["depends_on"], "minillm/removed.py": "1" * 64}}
    assert stale_results({"provenance": gone}, sft_sweep) == [
        "python -m minillm.experiments.sft_sweep ran with minillm/removed.py at SHA-256 111111111111…, "
        "which no longer exists"
    ]


def test_editing_a_module_a_result_imports_is_caught(tmp_path) -> None:
    """A real edit: a copy of the package, a result recorded there, then one line added to posttrain.py —
    the module sft_sweep builds on — and the result is stale, naming that file."""
    shutil.copytree(ROOT / "minillm", tmp_path / "minillm", ignore=shutil.ignore_patterns("__pycache__", "_data"))
    script = """
import json, sys
from pathlib import Path
from minillm.experiments import sft_sweep
from minillm.experiments.provenance import provenance, stale_results
if sys.argv[1] == "record":
    Path("result.json").write_text(json.dumps({"provenance": provenance(sft_sweep, "sweep")}))
else:
    print(json.dumps(stale_results(json.loads(Path("result.json").read_text()), sft_sweep)))
"""

    def run(step: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", script, step], cwd=tmp_path, capture_output=True, text=True, timeout=300,
            env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    run("record")
    assert json.loads(run("check")) == []
    edited = tmp_path / "minillm" / "experiments" / "posttrain.py"
    edited.write_text(edited.read_text() + "\n# an edit after the result was recorded\n")
    (why,) = json.loads(run("check"))
    assert why.startswith("sweep ran with minillm/experiments/posttrain.py at SHA-256")


# Results committed before results recorded their dependencies (the code they ran may differ from today's in
# library modules their own hash does not cover): each is rerun, and leaves this list, when its experiment next runs.
# The post-training stages that sample from a model (on-policy reward model, RL, on-policy DPO) were rerun on
# 2026-12-06 too, on an AMD EPYC: their float differences from the Intel Xeon that wrote them grow over the samples
# into other trajectories (data/posttrain/README.md), so the committed runs, which the notebooks quote, are kept.
BEFORE_DEPENDENCY_TRACKING = {
    "data/posttrain/reward_model_onpolicy.json",
    "data/posttrain/rlhf.json",
    "data/posttrain/dpo_onpolicy.json",
    "data/posttrain/sft_sweep.json",
    "data/posttrain/rm_onpolicy/config.json",
    "data/posttrain/aligned/config.json",
    "data/scaling/sweep.json",
    "data/base/config.json",  # the shipped base checkpoints, written by `python -m minillm.train` (see data/README.md)
    "data/base_long/config.json",
}


def test_the_results_without_dependency_hashes_are_the_known_ones() -> None:
    """Fails when a new result is committed without ``depends_on``, and when a rerun result is still listed."""
    found = set()
    for path in sorted((ROOT / "data").rglob("*.json")):
        payload = json.loads(path.read_text(encoding="utf-8"))
        if untracked_dependencies(payload):
            found.add(path.relative_to(ROOT).as_posix())
    assert found == BEFORE_DEPENDENCY_TRACKING
