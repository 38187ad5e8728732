"""The grading engine itself: how differences are put in words, that grading never raises and never changes the
notebook's state, and where progress is kept."""

from __future__ import annotations

import json
import random

import pytest
import torch
from grading_helpers import run_grader, stub

from minillm import grading
from minillm.grading import core, progress
from minillm.grading.core import Build, Mistake, Probe, differences, grade


@pytest.fixture(autouse=True)
def own_progress_file(tmp_path, monkeypatch):
    monkeypatch.setenv("MINILLM_CACHE_DIR", str(tmp_path))
    yield
    core.start_notebook("", edition="complete")


# ---------------------------------------------------------------------------------------------- differences
def test_differences_accepts_equal_values_within_tolerance():
    assert differences(torch.ones(3) + 1e-9, torch.ones(3), 1e-6, 1e-9) is None
    assert differences(3, 3, 0, 0) is None
    assert differences({"a": [1.0, torch.zeros(2)]}, {"a": [1.0, torch.zeros(2)]}, 0, 0) is None


@pytest.mark.parametrize(
    ("got", "want", "says"),
    [
        (torch.zeros(2, 3), torch.zeros(3, 2), "returned shape (2, 3), expected (3, 2)"),
        (torch.zeros(3, dtype=torch.float32), torch.zeros(3, dtype=torch.float64), "returned dtype torch.float32"),
        (torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 2.0]), "returned NaN in 1 of 2 entries"),
        (torch.tensor([float("inf")]), torch.tensor([2.0]), "returned inf in 1 of 1 entries"),
        (torch.tensor([1.0, 2.5]), torch.tensor([1.0, 2.0]), "differs by up to 0.5"),
        (torch.tensor([1, 2, 4]), torch.tensor([1, 2, 3]), "1 of 3 entries differ"),
        ([1.0, 2.0], torch.zeros(2), "returned a list, expected a tensor"),
        (None, 1.0, "returned None, expected a number"),
        (2.5, 2, "expected the whole number 2"),
        (float("nan"), 1.0, "returned NaN"),
        ({"a": 1}, {"a": 1, "b": 2}, "missing keys 'b'"),
        ({"a": 2}, {"a": 1}, "at key 'a': returned 2, expected 1"),
        ([1, 2], [1, 2, 3], "returned 2 items, expected 3"),
        ([1, 5, 3], (1, 2, 3), "item 1: returned 5, expected 2"),
        ("ab", "abc", "returned 'ab', expected 'abc'"),
        (
            {1, 2, 5},
            {1, 2, 3, 4},
            "returned a set of 3, expected 4: 2 expected items missing (e.g. 3, 4); 1 unexpected",
        ),
        ([1, 2], {1, 2}, "returned a list, expected a set of 2"),
        (True, False, "returned True, expected False"),
    ],
)
def test_differences_says_what_differs(got, want, says):
    problem = differences(got, want, 1e-9, 1e-12)
    assert problem is not None and says in problem, problem


def test_nan_matches_nan_only_when_asked():
    nan = torch.tensor([float("nan"), 1.0])
    assert differences(nan, nan.clone(), 0, 0) is not None
    assert differences(nan, nan.clone(), 0, 0, equal_nan=True) is None


# ------------------------------------------------------------------------------------------------ grading
def _square(x: torch.Tensor) -> torch.Tensor:
    return x * x


def _double(x: torch.Tensor) -> torch.Tensor:
    return x + x


SQUARE = Build(
    name="square",
    what="squaring",
    truth=_square,
    truth_name="x * x",
    fallback=_square,
    fallback_name="the course's square",
    probes=(Probe("three numbers", lambda f: f(torch.tensor([1.0, 3.0, -2.0], dtype=torch.float64))),),
    mistakes=(Mistake("doubling instead of squaring", "multiply x by itself.", _double),),
)


def test_grade_passes_a_right_build_and_hands_it_back(capsys):
    def mine(x):
        return x**2

    returned, out = run_grader(lambda f: grade(SQUARE, f), mine, capsys)
    assert returned is mine
    assert out == "✓ square: squaring matches x * x on 1 probe case\n"


def test_grade_names_a_known_mistake_and_falls_back(capsys):
    def doubles(x):
        return 2 * x

    returned, out = run_grader(lambda f: grade(SQUARE, f), doubles, capsys)
    assert returned is _square
    assert out.splitlines() == [
        "✗ square: on three numbers: the result — differs by up to 8 (tolerance 1e-09 + 1e-06·|expected|)"
        " (reference: x * x)",
        "  Looks like doubling instead of squaring: multiply x by itself.",
        "  The rest of this notebook uses the course's square until yours passes.",
    ]


def test_an_unknown_mistake_is_described_without_a_name(capsys):
    returned, out = run_grader(lambda f: grade(SQUARE, f), lambda x: x**3, capsys)
    assert returned is _square and "Looks like" not in out and "differs by up to 18" in out


def test_stub_none_raising_and_wrong_type_get_one_line_each(capsys):
    for learner, says in [
        (stub("square"), "✗ square: square is not written yet"),
        (None, "✗ square: square is not written yet"),
        (lambda x: x[7], "raised IndexError: index 7 is out of bounds"),
        (lambda x: x.tolist(), "returned a list, expected a tensor"),
        (lambda x: x.float() ** 2, "returned dtype torch.float32, expected torch.float64"),
    ]:
        returned, out = run_grader(lambda f: grade(SQUARE, f), learner, capsys)
        assert says in out and "Traceback" not in out and returned is _square, out


def test_a_broken_reference_is_reported_as_the_courses_fault(capsys):
    broken = Build(**{**SQUARE.__dict__, "truth": lambda x: x.nonexistent()})
    returned, out = run_grader(lambda f: grade(broken, f), _square, capsys)
    assert "the grader's reference failed" in out and returned is _square


def test_grading_leaves_the_notebooks_random_streams_dtype_and_threads_alone(capsys):
    def meddles(x):
        torch.manual_seed(0), random.seed(0), torch.rand(10)
        torch.set_default_dtype(torch.float64)
        torch.set_grad_enabled(False)
        return x * x

    torch.manual_seed(1234), random.seed(1234)
    expected = (torch.rand(3), random.random())
    torch.manual_seed(1234), random.seed(1234)
    threads = torch.get_num_threads()
    run_grader(lambda f: grade(SQUARE, f), meddles, capsys)
    assert torch.equal(torch.rand(3), expected[0]) and random.random() == expected[1]
    assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()
    assert torch.get_num_threads() == threads


# ----------------------------------------------------------------------------------------------- progress
def test_only_the_workbook_edition_records_progress(capsys, tmp_path):
    core.start_notebook("99_demo", edition="complete", builds=("square",))
    run_grader(lambda f: grade(SQUARE, f), _square, capsys)
    assert progress.load() == {}
    core.start_notebook("99_demo", edition="workbook", builds=("square", "cube"))
    run_grader(lambda f: grade(SQUARE, f), _square, capsys)
    assert progress.load() == {"99_demo": {"square": True}}
    assert progress.progress_file() == tmp_path / "progress.json"

    grading.show_progress()
    out = capsys.readouterr().out
    assert "99_demo (workbook edition): 1 of 2 builds pass" in out
    assert "  ✓ square" in out and "  · cube" in out

    run_grader(lambda f: grade(SQUARE, f), _double, capsys)
    assert progress.load() == {"99_demo": {"square": False}}
    grading.reset_progress("99_demo")
    assert progress.load() == {}


def test_start_notebook_refuses_an_unknown_edition():
    with pytest.raises(ValueError, match="edition must be one of"):
        core.start_notebook("05_optimization", edition="solutions")


def test_an_unreadable_progress_file_is_read_as_empty_and_set_aside(tmp_path):
    path = tmp_path / "progress.json"
    path.write_text("{not json", encoding="utf-8")
    assert progress.load() == {}
    progress.record("05_optimization", "AdamWByHand", True)
    assert progress.load() == {"05_optimization": {"AdamWByHand": True}}
    assert (tmp_path / "progress.json.unreadable").read_text(encoding="utf-8") == "{not json"
    assert json.loads(path.read_text(encoding="utf-8"))["format"] == progress.FORMAT


def test_the_default_progress_folder_is_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("MINILLM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert progress.progress_file() == tmp_path / "cache" / "minillm" / "progress.json"


def test_course_progress_lists_every_workbooks_builds(capsys):
    builds = grading.course_builds()
    assert builds["05_optimization"][:3] == ("AdamWByHand", "clip_grad_norm_by_hand", "warmup_cosine_by_hand")
    n05 = len(builds["05_optimization"])
    progress.record("05_optimization", "AdamWByHand", True)
    progress.record("05_optimization", "clip_grad_norm_by_hand", False)
    grading.show_course_progress()
    out = capsys.readouterr().out
    total = sum(len(names) for names in builds.values())
    assert f"the workbooks: 1 of {total} builds pass" in out
    assert f"1/{n05}  ✓AdamWByHand ✗clip_grad_norm_by_hand ·warmup_cosine_by_hand" in out
    grading.reset_progress()
    assert progress.load() == {}


def test_every_named_mistake_is_checked_by_its_notebooks_tests():
    """Each mistake a grader names appears in tests/test_grading_nbNN.py, where a wrong implementation written
    there (not taken from the grader) must get that name."""
    from pathlib import Path

    untested = []
    for notebook, builds in grading.course_catalogue().items():
        tests = (Path(__file__).parent / f"test_grading_nb{notebook[:2]}.py").read_text(encoding="utf-8")
        untested += [(build.name, m.name) for build in builds for m in build.mistakes if m.name not in tests]
    assert not untested, untested
