"""Translated editions: each markdown cell of a complete notebook replaced by its translation, kept beside the source.

A translation lives in ``notebooks/i18n/<lang>/<notebook name>.md``, one block per markdown cell, in notebook order::

    <!-- cell 2f08e0e3 en_sha256=<SHA-256 of the English cell's text> -->
    El texto traducido de la celda…

The hash ties a block to the exact English it translates: when the English cell changes, its hash no longer
matches and the checks (``drift_problems``) name the cell. ``python scripts/make_editions.py --todo es`` adds a
block marked ``todo`` (holding the new English) for every cell that has no current translation, keeps every current
one and drops the stale ones; a translator replaces each ``todo`` block's text and removes the word ``todo``.

A translation must keep the English cell's numbers, inline code spans, formulas and link targets exactly (only
prose changes), so a number fixed in the English and not in the translation is caught too. Code cells and their
outputs are the English notebook's, unchanged: the translated edition needs no run of its own.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
I18N = ROOT / "notebooks" / "i18n"

MARKER = re.compile(r"^<!-- cell (?P<id>\S+) en_sha256=(?P<sha>[0-9a-f]{64})(?P<todo> todo)? -->$")
HEADER = (
    "<!-- minillm translation of notebooks/{name} into '{lang}': one block per markdown cell, in order. Each marker "
    "carries the SHA-256 of the English cell it translates; see scripts/translation.py. -->\n"
)

_CODE = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_DISPLAY_MATH = re.compile(r"\$\$(.+?)\$\$", re.DOTALL)
_INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\$)(.+?)(?<![\\$])\$")
_LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


class TranslationError(ValueError):
    """A translation cannot make its edition: a cell has no current translation, or the file is malformed."""


@dataclass(frozen=True)
class Block:
    """One translated cell: the English cell's id and hash, the translation, and whether it is still to do."""

    cell_id: str
    en_sha256: str
    text: str
    todo: bool = False


def cell_text(cell: dict) -> str:
    source = cell["source"]
    return source if isinstance(source, str) else "".join(source)


def english_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def translation_path(name: str, lang: str) -> Path:
    """Where notebook ``name``'s translation into ``lang`` lives."""
    return I18N / lang / (Path(name).stem + ".md")


def parse(text: str, where: str = "translation") -> list[Block]:
    """The blocks of a translation file (text before the first marker is a header and is ignored)."""
    blocks: list[Block] = []
    current: tuple[str, str, bool] | None = None
    lines: list[str] = []

    def close() -> None:
        if current is not None:
            body = "\n".join(lines).strip("\n")
            if not body.strip():
                raise TranslationError(f"{where}: cell {current[0]} has an empty translation")
            blocks.append(Block(current[0], current[1], body, current[2]))

    for line in text.split("\n"):
        match = MARKER.match(line)
        if match:
            close()
            current, lines = (match["id"], match["sha"], bool(match["todo"])), []
        elif line.startswith("<!-- cell "):
            raise TranslationError(f"{where}: malformed marker line {line!r}")
        else:
            lines.append(line)
    close()
    return blocks


def read(name: str, lang: str) -> list[Block] | None:
    """The blocks of notebook ``name``'s translation into ``lang``, or None when it has none yet."""
    path = translation_path(name, lang)
    if not path.is_file():
        return None
    return parse(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))


def render(blocks: list[Block], name: str, lang: str) -> str:
    """A translation file's text (what ``parse`` reads back)."""
    parts = [HEADER.format(name=name, lang=lang)]
    for block in blocks:
        todo = " todo" if block.todo else ""
        parts.append(f"\n<!-- cell {block.cell_id} en_sha256={block.en_sha256}{todo} -->\n{block.text}\n")
    return "".join(parts)


def markdown_cells(notebook: dict) -> list[dict]:
    return [cell for cell in notebook["cells"] if cell["cell_type"] == "markdown"]


def todo_blocks(notebook: dict, blocks: list[Block] | None) -> list[Block]:
    """The file a translator works from: every markdown cell in order, its current translation where there is one
    (matched by hash), otherwise a ``todo`` block holding the English. Stale blocks are dropped."""
    done = {b.en_sha256: b for b in blocks or () if not b.todo}
    out = []
    for cell in markdown_cells(notebook):
        text, sha = cell_text(cell), english_sha256(cell_text(cell))
        block = done.get(sha)
        cell_id = cell.get("id", "?")
        out.append(Block(cell_id, sha, block.text) if block else Block(cell_id, sha, text, todo=True))
    return out


def _spans(pattern: re.Pattern[str], text: str) -> Counter[str]:
    return Counter(match.group(0) for match in pattern.finditer(text))


def invariants(text: str) -> dict[str, Counter[str]]:
    """What a translation must keep from its English cell: inline code, formulas, link targets and numbers.
    Numbers are counted outside code and formulas (those are compared whole)."""
    code = _spans(_CODE, text)
    rest = _CODE.sub(" ", text)
    display = _spans(_DISPLAY_MATH, rest)
    rest = _DISPLAY_MATH.sub(" ", rest)
    inline = _spans(_INLINE_MATH, rest)
    rest = _INLINE_MATH.sub(" ", rest)
    links = Counter(match.group(1) for match in _LINK.finditer(rest))
    rest = _LINK.sub("]", rest)
    return {
        "inline code": code,
        "formulas": display + inline,
        "link targets": links,
        "numbers": Counter(_NUMBER.findall(rest)),
    }


def drift_problems(notebook: dict, blocks: list[Block] | None, name: str) -> list[str]:
    """Everything that keeps a translation from being current: missing, unfinished or stale blocks, and blocks
    whose numbers, code, formulas or links differ from their English cell's. Empty when the translation is sound."""
    if blocks is None:
        return [f"{name}: no translation file ({translation_path(name, 'es').parent.relative_to(ROOT)}/)"]
    problems = []
    by_sha = {b.en_sha256: b for b in blocks}
    wanted = set()
    for cell in markdown_cells(notebook):
        english = cell_text(cell)
        sha = english_sha256(english)
        wanted.add(sha)
        block = by_sha.get(sha)
        where = f"{name} cell {cell.get('id', '?')}"
        if block is None:
            problems.append(f"{where}: no translation of the current English (changed or new cell)")
            continue
        if block.todo:
            problems.append(f"{where}: still marked todo")
            continue
        theirs, ours = invariants(english), invariants(block.text)
        for kind, expected in theirs.items():
            if ours[kind] != expected:
                missing, extra = expected - ours[kind], ours[kind] - expected
                problems.append(
                    f"{where}: {kind} differ from the English (missing {sorted(missing)}, extra {sorted(extra)})"
                )
    for block in blocks:
        if block.en_sha256 not in wanted:
            problems.append(f"{name}: block for cell {block.cell_id} matches no English cell (stale)")
    return problems


def _relink(text: str) -> str:
    """Links that leave ``notebooks/`` (``../README.md``) gain a level, since the edition sits one folder deeper."""
    return re.sub(r"\]\(\.\./", "](../../", text)


def translate(notebook: dict, blocks: list[Block] | None, name: str) -> dict:
    """The translated edition of one notebook: markdown cells replaced, everything else as it is."""
    problems = drift_problems(notebook, blocks, name)
    if problems:
        raise TranslationError("; ".join(problems[:3]) + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""))
    by_sha = {b.en_sha256: b.text for b in blocks or ()}
    out = copy.deepcopy(notebook)
    for cell in markdown_cells(out):
        text = _relink(by_sha[english_sha256(cell_text(cell))])
        lines = text.split("\n")
        cell["source"] = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    return out


def main(argv: list[str] | None = None) -> int:
    """``python scripts/translation.py es [05 10 …]``: print what keeps each translation from being current."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("lang")
    parser.add_argument("prefixes", nargs="*", help="notebook name prefixes such as 05 (default: every notebook)")
    args = parser.parse_args(argv)
    paths = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    paths = [p for p in paths if not args.prefixes or any(p.name.startswith(x) for x in args.prefixes)]
    count = 0
    for path in paths:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        try:
            problems = drift_problems(notebook, read(path.name, args.lang), path.name)
        except TranslationError as error:
            problems = [str(error)]
        for problem in problems:
            print(problem)
        count += len(problems)
    print(f"{len(paths)} notebooks, {count} problems")
    return 1 if count else 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
