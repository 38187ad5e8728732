"""``scaling_sweep`` adds runs only to a sweep file of the same settings: ``--quick`` into the course's
``data/scaling`` used to add tiny runs to the committed ``sweep.json`` and mark it ``quick: true``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from minillm.experiments import scaling_sweep

COMMITTED = Path(__file__).resolve().parents[1] / "data" / "scaling" / scaling_sweep.RESULT


@pytest.fixture
def no_training(monkeypatch) -> None:
    """A refusal must come before the corpus is encoded or anything is trained."""

    def fail(*args, **kwargs):
        raise AssertionError("the sweep started work it should have refused")

    monkeypatch.setattr(scaling_sweep, "corpus", fail)
    monkeypatch.setattr(scaling_sweep, "train_one", fail)


def test_quick_runs_are_refused_into_a_full_sweep(tmp_path, no_training) -> None:
    shutil.copy(COMMITTED, tmp_path / scaling_sweep.RESULT)
    before = (tmp_path / scaling_sweep.RESULT).read_bytes()
    with pytest.raises(SystemExit) as stopped:
        scaling_sweep.main(["--quick", "--out", str(tmp_path)])
    message = str(stopped.value)
    assert str(tmp_path / scaling_sweep.RESULT) in message and "quick: false → true" in message
    assert "budgets" in message and "nothing was added" in message
    assert (tmp_path / scaling_sweep.RESULT).read_bytes() == before


def test_full_runs_are_refused_into_a_quick_sweep(tmp_path, no_training) -> None:
    config = {"quick": True, "budgets": list(scaling_sweep.QUICK_BUDGETS), "context_length": scaling_sweep.CONTEXT}
    (tmp_path / scaling_sweep.RESULT).write_text(json.dumps({"runs": {}, "config": config}))
    first = next(iter(scaling_sweep.plan()))
    with pytest.raises(SystemExit, match="quick: true → false"):
        scaling_sweep.main(["--out", str(tmp_path), "--runs", first])
