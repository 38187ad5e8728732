"""The workbook edition (scripts/make_editions.py): generated from the complete notebooks, never edited by hand."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import make_editions  # noqa: E402
from make_editions import EditionError, stub_source, workbook  # noqa: E402


def test_the_committed_workbooks_are_what_the_script_generates() -> None:
    files = make_editions.generated()
    workbooks = [p for p in files if p.parent == make_editions.WORKBOOK]
    assert sorted(p.name for p in workbooks) == sorted(p.name for p in make_editions.complete_notebooks())
    stale = [str(p.relative_to(ROOT)) for p, t in files.items() if not p.is_file() or p.read_text("utf-8") != t]
    assert not stale, f"run python scripts/make_editions.py: out of date {stale}"
    folders = (make_editions.WORKBOOK, make_editions.SPANISH, make_editions.SPANISH / "workbook")
    extra = {p for folder in folders for p in folder.glob("*.ipynb")} - set(files)
    assert not extra, f"not generated from any notebook: {sorted(str(p.relative_to(ROOT)) for p in extra)}"


def _code(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


@pytest.mark.parametrize("path", sorted(make_editions.WORKBOOK.glob("*.ipynb")), ids=lambda p: p.name)
def test_every_workbook_cell_is_valid_python_and_has_no_solution(path: Path) -> None:
    complete = json.loads((make_editions.NOTEBOOKS / path.name).read_text(encoding="utf-8"))
    solutions = ["".join(c["source"]) for c in complete["cells"] if "solution" in c["metadata"].get("tags", [])]
    builds = [c for c in complete["cells"] if "build" in c["metadata"].get("tags", [])]
    code = _code(path)
    for source in code:
        ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))
        assert source not in solutions
        assert "# BUILD BEGIN" not in source and "# BUILD END" not in source
    assert sum(source.count("raise NotWrittenYet(") for source in code) >= len(builds)
    if builds:
        assert sum('edition="workbook"' in source for source in code) == 1


BUILD = '''class Adam:
    """Docstring stays."""

    def step(self):
        """So does this one."""
        # BUILD BEGIN
        # hint: bias-correct m and v
        m = 1
        # Hint: then divide
        return m
        # BUILD END

    def zero_grad(self):
        pass


def schedule(step):
    # BUILD BEGIN
    return step
    # BUILD END'''


def test_a_build_region_becomes_its_hints_and_a_friendly_raise() -> None:
    text = stub_source(BUILD)
    assert text.splitlines()[:9] == [
        "class Adam:",
        '    """Docstring stays."""',
        "",
        "    def step(self):",
        '        """So does this one."""',
        "        # hint: bias-correct m and v",
        "        # Hint: then divide",
        "        # your code here: write this part, then run this cell and the grading cell below",
        '        raise NotWrittenYet("Adam.step")',
    ]
    assert "m = 1" not in text and "return step" not in text
    assert text.endswith('    raise NotWrittenYet("schedule")')
    assert "    def zero_grad(self):\n        pass" in text
    ast.parse(text)


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("def f():\n    # BUILD END\n", "without a # BUILD BEGIN"),
        ("# BUILD BEGIN\nx = 1\n# BUILD END\n", "not inside a function"),
        ("def f():\n    # BUILD BEGIN\n    return 1\n", "has no # BUILD END"),
        ("def f():\n    # BUILD BEGIN\n    # BUILD BEGIN\n    # BUILD END\n", "inside the region"),
        ("def f():\n    return 1\n", "has no # BUILD BEGIN"),
    ],
)
def test_misplaced_markers_are_errors_that_say_where(source: str, says: str) -> None:
    with pytest.raises(EditionError, match=says):
        stub_source(source, "05_demo.ipynb cell 3")


def _cell(kind: str, source: str, tags: tuple[str, ...] = (), outputs: bool = False) -> dict:
    cell = {"cell_type": kind, "id": f"c{abs(hash(source)) % 10**6}", "metadata": {"tags": list(tags)}}
    cell["source"] = source
    if kind == "code":
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "out"}] if outputs else []
        cell["execution_count"] = 1 if outputs else None
    return cell


def _notebook(*cells: dict) -> dict:
    return {"cells": list(cells), "metadata": {"widgets": {"state": {}}}, "nbformat": 4, "nbformat_minor": 5}


def test_a_workbook_drops_solutions_and_outputs_and_switches_the_edition() -> None:
    complete = _notebook(
        _cell("markdown", "# 99 Demo"),
        _cell("code", 'start_notebook("99_demo", edition="complete", builds=("f",))', outputs=True),
        _cell("code", "def f():\n    # BUILD BEGIN\n    return 1\n    # BUILD END", ("build",), outputs=True),
        _cell("code", "f = grade.f(f)", outputs=True),
        _cell("code", "print('the answer')", ("solution", "nbval-ignore-output")),
    )
    book = workbook(complete, "99_demo.ipynb")
    assert [c["id"] for c in book["cells"]][:2] == [complete["cells"][0]["id"], "workbook-edition"]
    sources = ["".join(c["source"]) for c in book["cells"]]
    assert "print('the answer')" not in sources
    assert 'start_notebook("99_demo", edition="workbook", builds=("f",))' in sources
    assert any('raise NotWrittenYet("f")' in s for s in sources)
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in book["cells"] if c["cell_type"] == "code")
    assert "widgets" not in book["metadata"]
    assert "notebooks/workbook/99_demo.ipynb" in sources[1] and "colab-badge" in sources[1]
    assert complete["cells"][1]["outputs"], "the complete notebook itself is left as it was"


def test_a_notebook_with_builds_needs_one_start_notebook_and_tagged_markers() -> None:
    build = _cell("code", "def f():\n    # BUILD BEGIN\n    return 1\n    # BUILD END", ("build",))
    with pytest.raises(EditionError, match="exactly one start_notebook"):
        workbook(_notebook(_cell("markdown", "# 99"), build), "99_demo.ipynb")
    untagged = _cell("code", "def f():\n    # BUILD BEGIN\n    return 1\n    # BUILD END")
    with pytest.raises(EditionError, match="no 'build' tag"):
        workbook(_notebook(_cell("markdown", "# 99"), untagged), "99_demo.ipynb")


def test_the_script_never_replaces_a_workbook_someone_has_worked_in(tmp_path, monkeypatch, capsys) -> None:
    notebooks, books = tmp_path / "notebooks", tmp_path / "notebooks" / "workbook"
    books.mkdir(parents=True)
    complete = _notebook(_cell("markdown", "# 99 Demo"), _cell("code", "x = 1"))
    (notebooks / "99_demo.ipynb").write_text(json.dumps(complete), encoding="utf-8")
    monkeypatch.setattr(make_editions, "NOTEBOOKS", notebooks)
    monkeypatch.setattr(make_editions, "WORKBOOK", books)
    monkeypatch.setattr(make_editions, "SPANISH", notebooks / "es")
    monkeypatch.setattr(make_editions, "ROOT", tmp_path)

    assert make_editions.main([]) == 0
    generated = (books / "99_demo.ipynb").read_text(encoding="utf-8")
    assert make_editions.main(["--check"]) == 0

    worked = json.loads(generated)
    worked["cells"][-1].update(outputs=[{"output_type": "stream", "name": "stdout", "text": "1"}], execution_count=3)
    (books / "99_demo.ipynb").write_text(json.dumps(worked), encoding="utf-8")
    (books / "my_notes.ipynb").write_text("{}", encoding="utf-8")
    assert make_editions.main(["--check"]) == 1
    assert make_editions.main([]) == 1
    assert "refusing to replace notebooks/workbook/99_demo.ipynb" in capsys.readouterr().err
    assert json.loads((books / "99_demo.ipynb").read_text(encoding="utf-8")) == worked

    (books / "99_demo.ipynb").write_text("{half a notebo", encoding="utf-8")
    assert make_editions.main([]) == 1, "an unreadable workbook may be a learner's: left alone"
    assert make_editions.main(["--overwrite"]) == 0
    assert (books / "99_demo.ipynb").read_text(encoding="utf-8") == generated
    assert (books / "my_notes.ipynb").read_text(encoding="utf-8") == "{}", "files it did not write are kept"


def test_the_readme_lists_every_workbook_and_every_graded_build_with_its_mistakes() -> None:
    from minillm.grading import course_catalogue
    from minillm.notebook import REPO_URL

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    colab = REPO_URL.replace("https://github.com/", "https://colab.research.google.com/github/")
    for path in sorted(make_editions.WORKBOOK.glob("*.ipynb")):
        assert f"]({colab}/blob/main/notebooks/workbook/{path.name})" in readme, f"no Colab badge for {path.name}"
    rows = {
        line.split(" | ")[1].strip("`"): line
        for line in readme.splitlines()
        if line.startswith("| ") and " | `" in line
    }
    catalogue = course_catalogue()
    for notebook, builds in catalogue.items():
        for build in builds:
            row = rows.get(build.name)
            assert row and row.startswith(f"| {notebook[:2]} |"), f"README misses the graded build {build.name}"
            for mistake in build.mistakes:
                assert mistake.name.replace("|", "\\|") in row, f"README row of {build.name} misses {mistake.name!r}"


def test_every_notebook_after_00_has_at_least_three_graded_builds_and_forty_in_all() -> None:
    from minillm.grading import course_catalogue

    catalogue = course_catalogue()
    numbers = sorted(int(p.name[:2]) for p in make_editions.complete_notebooks() if p.name[:2] != "00")
    assert sorted(int(nb[:2]) for nb in catalogue) == numbers
    assert all(len(builds) >= 3 for builds in catalogue.values()), {nb: len(b) for nb, b in catalogue.items()}
    assert sum(len(builds) for builds in catalogue.values()) >= 40
    assert all(len(build.mistakes) >= 2 for builds in catalogue.values() for build in builds)
    for notebook, builds in catalogue.items():  # each notebook grades the builds it declares, in order
        source = (make_editions.NOTEBOOKS / f"{notebook}.ipynb").read_text(encoding="utf-8")
        assert f'start_notebook(\\"{notebook}\\"' in source
        for build in builds:
            assert f"{build.name} = " in source, f"{notebook} never grades {build.name}"
