"""The Spanish edition (notebooks/es/, from notebooks/i18n/es/): complete, current, and unable to drift."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import make_editions  # noqa: E402
import translation  # noqa: E402
from translation import Block, TranslationError, drift_problems, english_sha256, parse, render, translate  # noqa: E402

NOTEBOOKS = make_editions.complete_notebooks()


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------ the course's files
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_markdown_cell_has_a_current_translation(path: Path) -> None:
    problems = drift_problems(_load(path), translation.read(path.name, "es"), path.name)
    assert not problems, "\n".join(problems[:20]) + "\n(python scripts/make_editions.py --todo es marks what to do)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_spanish_editions_have_the_english_code_and_outputs(path: Path) -> None:
    english = _load(path)
    for spanish_path, source in ((make_editions.SPANISH / path.name, english),
                                 (make_editions.SPANISH / "workbook" / path.name,
                                  _load(make_editions.WORKBOOK / path.name))):  # fmt: skip
        spanish = _load(spanish_path)
        assert [c["cell_type"] for c in spanish["cells"]] == [c["cell_type"] for c in source["cells"]]
        for theirs, ours in zip(source["cells"], spanish["cells"], strict=True):
            if theirs["cell_type"] == "code":
                assert ours == theirs, f"{spanish_path.name}: code cell {theirs.get('id')} differs from the English"
        assert spanish["metadata"] == source["metadata"]
        changed = sum(a["source"] != b["source"] for a, b in zip(source["cells"], spanish["cells"], strict=True))
        assert changed >= 0.9 * sum(c["cell_type"] == "markdown" for c in source["cells"])  # the text is translated


@pytest.mark.parametrize("folder", ["es", "es/workbook"])
def test_every_spanish_notebook_is_a_valid_notebook_jupyter_can_open(folder: str) -> None:
    paths = sorted((ROOT / "notebooks" / folder).glob("*.ipynb"))
    assert [p.name for p in paths] == [p.name for p in NOTEBOOKS]
    for path in paths:
        nbformat.validate(nbformat.read(path, as_version=4))


# ------------------------------------------------------------------------------------ the checks catch drift
ENGLISH = "With lr 0.74 and 1,507 steps, `Muon(lr=0.02)` gives $x^2$; see [notebook 11](11_efficient_attention.ipynb)."
SPANISH = "Con lr 0.74 y 1,507 pasos, `Muon(lr=0.02)` da $x^2$; mira [el cuaderno 11](11_efficient_attention.ipynb)."


def _notebook(*markdown: str) -> dict:
    cells = [dict(cell_type="markdown", id=f"m{i}", metadata={}, source=text) for i, text in enumerate(markdown)]
    cells.append(dict(cell_type="code", id="c", metadata={}, source="x = 1", outputs=[], execution_count=1))
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _blocks(english: str, spanish: str) -> list[Block]:
    return [Block("m0", english_sha256(english), spanish)]


def test_a_faithful_translation_passes_and_replaces_only_the_markdown() -> None:
    notebook = _notebook(ENGLISH)
    assert drift_problems(notebook, _blocks(ENGLISH, SPANISH), "t.ipynb") == []
    out = translate(notebook, _blocks(ENGLISH, SPANISH), "t.ipynb")
    assert "".join(out["cells"][0]["source"]) == SPANISH and out["cells"][1] == notebook["cells"][1]


def test_one_number_changed_in_the_english_makes_the_translation_stale() -> None:
    blocks = _blocks(ENGLISH, SPANISH)
    edited = _notebook(ENGLISH.replace("0.74", "0.75"))  # the English changed, the Spanish did not
    problems = drift_problems(edited, blocks, "t.ipynb")
    assert any("no translation of the current English" in p for p in problems)
    assert any("matches no English cell (stale)" in p for p in problems)
    with pytest.raises(TranslationError):
        translate(edited, blocks, "t.ipynb")


@pytest.mark.parametrize(
    "wrong, kind",
    [
        (SPANISH.replace("0.74", "0,74"), "numbers"),  # a decimal comma is another number to the check
        (SPANISH.replace("1,507", "mil quinientos siete"), "numbers"),
        (SPANISH.replace("`Muon(lr=0.02)`", "`Muon(lr=0.2)`"), "inline code"),
        (SPANISH.replace("$x^2$", "$x^3$"), "formulas"),
        (SPANISH.replace("(11_efficient_attention.ipynb)", "(12_scaling_laws.ipynb)"), "link targets"),
    ],
)
def test_a_translation_that_changes_what_it_must_keep_is_caught(wrong: str, kind: str) -> None:
    problems = drift_problems(_notebook(ENGLISH), _blocks(ENGLISH, wrong), "t.ipynb")
    assert len(problems) == 1 and f"{kind} differ from the English" in problems[0]


def test_a_missing_or_unfinished_translation_is_caught() -> None:
    notebook = _notebook(ENGLISH, "## A second cell")
    problems = drift_problems(notebook, _blocks(ENGLISH, SPANISH), "t.ipynb")
    assert problems == ["t.ipynb cell m1: no translation of the current English (changed or new cell)"]
    todo = [Block("m0", english_sha256(ENGLISH), ENGLISH, todo=True)]
    assert drift_problems(_notebook(ENGLISH), todo, "t.ipynb") == ["t.ipynb cell m0: still marked todo"]
    assert drift_problems(_notebook(ENGLISH), None, "t.ipynb")[0].startswith("t.ipynb: no translation file")


def test_the_file_format_reads_back_what_it_writes_and_refuses_malformed_markers() -> None:
    blocks = [Block("a1", "0" * 64, "Texto con\n\nvarias líneas"), Block("b2", "f" * 64, "## Otro", todo=True)]
    assert parse(render(blocks, "t.ipynb", "es")) == blocks
    with pytest.raises(TranslationError, match="malformed marker"):
        parse("<!-- cell a1 en_sha256=abc -->\ntexto")
    with pytest.raises(TranslationError, match="empty translation"):
        parse(f"<!-- cell a1 en_sha256={'0' * 64} -->\n\n")


def test_todo_keeps_current_translations_and_marks_changed_cells() -> None:
    notebook = _notebook(ENGLISH, "## New")
    current = _blocks(ENGLISH, SPANISH) + [Block("old", english_sha256("## Gone"), "## Ido")]
    blocks = translation.todo_blocks(notebook, current)
    assert [(b.cell_id, b.text, b.todo) for b in blocks] == [("m0", SPANISH, False), ("m1", "## New", True)]


def test_links_that_leave_the_notebooks_folder_gain_a_level_in_the_edition() -> None:
    english = "Read [the README](../README.md) and [notebook 11](11_efficient_attention.ipynb)."
    spanish = "Lee [el README](../README.md) y [el cuaderno 11](11_efficient_attention.ipynb)."
    out = translate(_notebook(english), _blocks(english, spanish), "t.ipynb")
    assert "".join(out["cells"][0]["source"]) == spanish.replace("(../README.md)", "(../../README.md)")


# ----------------------------------------------------------------------------------------------- README.es.md
def test_the_spanish_readme_links_every_spanish_notebook_and_both_readmes_link_each_other() -> None:
    readme, spanish = (ROOT / "README.md").read_text("utf-8"), (ROOT / "README.es.md").read_text("utf-8")
    assert "README.es.md" in "\n".join(readme.splitlines()[:5])
    assert "README.md" in "\n".join(spanish.splitlines()[:5])
    colab = "https://colab.research.google.com/github/minillm-course/minillm/blob/main"
    for path in NOTEBOOKS:
        assert f"](notebooks/es/{path.name})" in spanish, f"README.es.md does not link notebooks/es/{path.name}"
        assert f"]({colab}/notebooks/es/{path.name})" in spanish
        assert f"]({colab}/notebooks/es/workbook/{path.name})" in spanish
    for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", spanish):
        if not target.startswith(("http://", "https://", "mailto:")):
            assert (ROOT / target).exists(), f"README.es.md links {target}, which does not exist"


def test_the_spanish_glossary_has_every_pair_of_the_english_one() -> None:
    readme, spanish = (ROOT / "README.md").read_text("utf-8"), (ROOT / "README.es.md").read_text("utf-8")
    section = readme[readme.index("## Glossary (English · español)") :]
    section = section[: section.index("\n## ", 5)]
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| term"):
            term, es, notebook = (cell.strip() for cell in line.strip().strip("|").split(" | "))
            row = f"| {es} | {term} | {notebook.replace('](notebooks/', '](notebooks/es/')} |"
            assert row in spanish, f"README.es.md's glossary lacks {term!r} (expected the row {row})"
