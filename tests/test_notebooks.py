"""Every notebook is committed from one clean top-to-bottom run and is part of the course map."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import torch

from minillm.notebook import REPO_URL

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _code_cells(path: Path) -> list[dict]:
    cells = json.loads(path.read_text())["cells"]
    return [c for c in cells if c["cell_type"] == "code" and "".join(c["source"]).strip()]


def _expects_error(cell: dict) -> bool:
    source = "".join(cell["source"])
    return "NBVAL_RAISES_EXCEPTION" in source or "raises-exception" in cell.get("metadata", {}).get("tags", [])


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS and NOTEBOOKS[0].name == "00_start_here.ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_was_run_top_to_bottom_once(path: Path) -> None:
    counts = [c.get("execution_count") for c in _code_cells(path)]
    assert counts == list(range(1, len(counts) + 1)), f"{path.name}: re-run it on a fresh kernel"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_holds_no_unexpected_error(path: Path) -> None:
    for cell in _code_cells(path):
        if _expects_error(cell):
            continue
        kinds = [o.get("output_type") for o in cell.get("outputs", [])]
        assert "error" not in kinds, f"{path.name}: error output in cell {cell.get('execution_count')}"
        stderr = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("name") == "stderr")
        assert "Traceback" not in stderr, f"{path.name}: traceback in cell {cell.get('execution_count')}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_listed_in_the_readme(path: Path) -> None:
    assert f"notebooks/{path.name}" in (ROOT / "README.md").read_text()


def _imported_modules(path: Path) -> set[str]:
    """``minillm/x.py`` or ``minillm/x/`` (a subpackage) for every minillm module the notebook's code imports."""
    found = set()
    for cell in _code_cells(path):
        source = "\n".join(
            line for line in "".join(cell["source"]).splitlines() if not line.lstrip().startswith(("%", "!"))
        )
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("minillm"):
                names = [f"minillm.{a.name}" for a in node.names] if node.module == "minillm" else [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("minillm")]
            else:
                continue
            for name in names:
                parts = name.split(".")[:2]
                folder = ROOT.joinpath(*parts)
                found.add("/".join(parts) + ("/" if folder.is_dir() else ".py"))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_readme_row_lists_every_module_the_notebook_imports(path: Path) -> None:
    row = next(
        line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith(f"| [`notebooks/{path.name}`")
    )
    listed = set(re.findall(r"`(minillm/[^`]+)`", row.split("|")[3]))
    assert _imported_modules(path) <= listed, (
        f"README row of {path.name} misses {sorted(_imported_modules(path) - listed)}"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_starts_with_the_setup_cell(path: Path) -> None:
    first = "".join(_code_cells(path)[0]["source"])
    assert "from minillm.notebook import setup" in first
    assert REPO_URL in first, f"{path.name}: the setup cell must clone {REPO_URL}"
    assert "pip install" in first and "torch" not in first.split("pip install", 1)[1].split("\n")[0]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_exercises_have_solutions_that_check_themselves(path: Path) -> None:
    """Solution cells are ordinary code cells, so nbval runs them; each must assert its answer."""
    solutions = [c for c in _code_cells(path) if "solution" in c.get("metadata", {}).get("tags", [])]
    assert solutions, f"{path.name}: no exercise solution cell (tag 'solution')"
    for cell in solutions:
        assert "assert" in "".join(cell["source"]), f"{path.name}: solution cell {cell.get('execution_count')}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_solution_follows_an_empty_your_turn_cell_and_starts_hidden(path: Path) -> None:
    """A learner can attempt each exercise: an empty "your turn" cell comes first, and the solution is hidden until
    opened or run — in Colab by a ``#@title`` form (``cellView: form``), in JupyterLab by ``source_hidden`` and
    ``outputs_hidden``; and no output is committed, which would give the answer away (``run_notebooks.py``)."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    for i, cell in enumerate(cells):
        if "solution" not in cell.get("metadata", {}).get("tags", []):
            continue
        source = "".join(cell["source"])
        where = f"{path.name}, cell {i}"
        if i >= 2 and "build" in cells[i - 2].get("metadata", {}).get("tags", []):
            # A graded exercise: the "your turn" cell is a build (the workbook's stub is the empty cell), then its
            # grading cell `name = grade.name(name)`, then the solution, which uses the graded name.
            turn, grading = "".join(cells[i - 2]["source"]), "".join(cells[i - 1]["source"])
            assert turn.lstrip().startswith("# your turn"), where
            assert re.search(r"^(\w+) = \w+\.\w+\(\1\)", grading, re.MULTILINE), where
        else:
            previous = "".join(cells[i - 1]["source"]) if i else ""
            assert cells[i - 1]["cell_type"] == "code" and previous.lstrip().startswith("# your turn"), where
            assert all(line.startswith("#") or line.strip() in ("", "pass") for line in previous.splitlines()), where
        assert source.startswith("#@title"), where
        meta = cell["metadata"]
        assert meta.get("cellView") == "form", where
        assert meta.get("jupyter", {}).get("source_hidden") is True, where
        assert meta.get("jupyter", {}).get("outputs_hidden") is True, where
        # Colab shows a form cell's committed output: commit none (nbval still runs the cell and its asserts)
        assert cell["outputs"] == [] and "nbval-ignore-output" in meta["tags"], where


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_ends_by_printing_its_cell_time(path: Path) -> None:
    """The course's time budget is visible in every notebook: its last cell prints the cells' total run time."""
    last = _code_cells(path)[-1]
    source = "".join(last["source"])
    assert "print_run_time()" in source and source.startswith("# NBVAL_IGNORE_OUTPUT"), path.name
    printed = "".join("".join(o.get("text", "")) for o in last.get("outputs", []) if o.get("name") == "stdout")
    assert "cells ran for" in printed, f"{path.name}: re-run it so the last cell prints its cell time"


def test_the_cell_timer_adds_up_only_cell_execution() -> None:
    """Time between cells (a learner reading) must not count; time inside cells must."""
    import time

    from minillm.notebook import CellTimer

    timer = CellTimer()
    timer.post_run_cell()  # the setup cell ends
    after_setup = timer.total_s
    time.sleep(0.05)  # reading, not running
    timer.pre_run_cell()
    time.sleep(0.02)
    timer.post_run_cell()
    assert timer.cells == 2
    assert 0.02 <= timer.total_s - after_setup < 0.05


def test_check_asserts_before_it_prints(capsys) -> None:
    from minillm.notebook import check, check_close

    check_close("same", torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-6]), 1e-5)
    assert capsys.readouterr().out.startswith("✓ same: max |diff| = ")
    with pytest.raises(AssertionError, match="far: max"):
        check("far", 0.5, 1e-3)
    assert capsys.readouterr().out == ""  # nothing printed for a failed check
