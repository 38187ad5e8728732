"""``minillm.experiments.provenance``: a result records the hash of its module and of every ``minillm`` module that
module imports, and editing any of them makes the result stale."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from minillm.experiments import posttrain, sft_sweep
from minillm.experiments.provenance import (
    dependency_files,
    dependency_hashes,
    provenance,
    stale_results,
    untracked_dependencies,
)
from minillm.train import cli as train_cli

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


def test_every_committed_result_records_what_it_depends_on() -> None:
    """Every results file and model folder under data/ records the SHA-256 of each ``minillm`` module it ran with
    (``depends_on``); fails when a result is committed without them."""
    missing = []
    for path in sorted((ROOT / "data").rglob("*.json")):
        if untracked_dependencies(json.loads(path.read_text(encoding="utf-8"))):
            missing.append(path.relative_to(ROOT).as_posix())
    assert missing == []


@pytest.mark.parametrize("name", ["base", "base_long"])
def test_the_base_checkpoints_record_the_code_that_trained_them(name: str) -> None:
    """Every post-training result starts from these checkpoints, so they are kept as trained (data/README.md): their
    records name the commit, each module's hash there and what today's code trains instead, and ``stale_results``
    names what has changed since — among it the Trainer's loop (PyTorch's AdamW since commit 3feea96)."""
    record = json.loads((ROOT / "data" / name / "config.json").read_text(encoding="utf-8"))["provenance"]
    assert record["code"] == "minillm/train/cli.py" and len(record["commit"]) == 40
    assert {"minillm/model.py", "minillm/optim.py", "minillm/train/loop.py", "minillm/tokenizer/bpe.py"} <= set(
        record["depends_on"]
    )
    why = stale_results({"provenance": record}, train_cli)
    assert any(line.startswith(f"{record['command']} ran with minillm/train/loop.py at SHA-256") for line in why)
    assert record["today"] and record["kept"]
