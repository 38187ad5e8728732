"""Shared pieces of the grader tests: run a grader on a learner's implementation and read its verdict."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from minillm.grading import NotWrittenYet


def run_grader(grader: Callable[[Any], Any], learner: Any, capsys) -> tuple[Any, str]:
    """What the grader hands back and what it printed (it must never raise)."""
    capsys.readouterr()
    returned = grader(learner)
    return returned, capsys.readouterr().out


def assert_passes(grader: Callable[[Any], Any], learner: Any, capsys) -> None:
    returned, out = run_grader(grader, learner, capsys)
    assert out.startswith("✓"), out
    assert returned is learner


def assert_fails(grader, learner, capsys, *, says: str, fallback: Any = None) -> str:
    """The grader fails ``learner``, prints ``says`` and hands back its fallback (not the learner's)."""
    returned, out = run_grader(grader, learner, capsys)
    assert out.startswith("✗"), out
    assert says in out, out
    assert "The rest of this notebook uses" in out, out
    assert returned is not learner
    if fallback is not None:
        assert returned is fallback
    assert "Traceback" not in out
    return out


def stub(name: str) -> Callable[..., Any]:
    """What a workbook cell holds before the learner writes it."""

    def not_written(*args: Any, **kwargs: Any) -> Any:
        raise NotWrittenYet(name)

    return not_written


class StubClass:
    """A class whose constructor is still a stub (a learner who has not written ``__init__``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotWrittenYet("StubClass.__init__")
