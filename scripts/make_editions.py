"""Generate the course's other editions from the complete notebooks (never edit a generated copy by hand).

    python scripts/make_editions.py            # write notebooks/workbook/*.ipynb
    python scripts/make_editions.py 05 10      # only the workbooks of the notebooks whose names start so
    python scripts/make_editions.py --check    # exit 1 if a committed copy differs from what would be written
    python scripts/make_editions.py --todo es  # mark what a translator must (re)translate in notebooks/i18n/es/

**The Spanish edition.** ``notebooks/es/`` (complete, outputs included) and ``notebooks/es/workbook/``: the same
notebooks with every markdown cell replaced by its translation from ``notebooks/i18n/es/`` (scripts/translation.py
says how a translation records the English it translates, and what it must keep).

**The workbook edition.** In the complete notebook a learner build is a code cell tagged ``build`` whose part
the learner writes lies between a ``# BUILD BEGIN`` and a ``# BUILD END`` line, inside a function or method::

    def warmup_cosine_by_hand(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
        \"\"\"Linear warmup for warmup_steps, then half a cosine down to min_lr.\"\"\"
        # BUILD BEGIN
        # hint: lr(0) = max_lr / warmup_steps and lr(warmup_steps − 1) = max_lr
        if step < warmup_steps:
            ...
        # BUILD END

In the workbook the region becomes its ``# hint:`` lines, a "your code here" comment and
``raise NotWrittenYet("warmup_cosine_by_hand")``; the signature and docstring stay. Cells tagged ``solution``
(exercise solutions) are dropped: the complete edition is the solutions book. ``start_notebook(...,
edition="complete")`` becomes ``edition="workbook"`` so that only the workbook records the learner's progress.
Outputs, execution counts and saved widget state are removed.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path

import translation  # scripts/translation.py (scripts/ is on sys.path when this runs, and in the tests)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
WORKBOOK = NOTEBOOKS / "workbook"
SPANISH = NOTEBOOKS / "es"

BEGIN, END = "# BUILD BEGIN", "# BUILD END"
HINT = re.compile(r"^\s*# hint:", re.IGNORECASE)
DEF = re.compile(r"^(\s*)(?:async\s+)?(def|class)\s+(\w+)")
COMPLETE_EDITION = 'edition="complete"'
REPO_URL_FILE = ROOT / "minillm" / "notebook.py"


class EditionError(ValueError):
    """A complete notebook's build markers cannot be turned into a workbook (the message says where)."""


def _lines(source: str | list[str]) -> list[str]:
    return (source if isinstance(source, str) else "".join(source)).splitlines()


def _owner(lines: list[str], index: int, indent: int) -> str | None:
    """The dotted name (Class.method or function) of the def enclosing line ``index`` at indentation ``indent``."""
    names, limit = [], indent
    for line in reversed(lines[:index]):
        match = DEF.match(line)
        if match and len(match.group(1)) < limit:
            names.append(match.group(3))
            limit = len(match.group(1))
            if limit == 0:
                break
    return ".".join(reversed(names)) if names else None


def stub_source(source: str | list[str], where: str = "cell") -> str:
    """The workbook version of one build cell's source: every marked region replaced by its stub."""
    lines, out, index = _lines(source), [], 0
    found = False
    while index < len(lines):
        line = lines[index]
        if line.strip() == END:
            raise EditionError(f"{where}: {END} without a {BEGIN} (line {index + 1})")
        if line.strip() != BEGIN:
            out.append(line)
            index += 1
            continue
        found = True
        indent = len(line) - len(line.lstrip())
        owner = _owner(lines, index, indent)
        if owner is None or indent == 0:
            raise EditionError(f"{where}: the {BEGIN} on line {index + 1} is not inside a function or method")
        try:
            stop = next(i for i in range(index + 1, len(lines)) if lines[i].strip() in (BEGIN, END))
        except StopIteration:
            raise EditionError(f"{where}: the {BEGIN} on line {index + 1} has no {END}") from None
        if lines[stop].strip() == BEGIN:
            raise EditionError(f"{where}: {BEGIN} on line {stop + 1} inside the region opened on line {index + 1}")
        pad = " " * indent
        out += [pad + h.strip() for h in lines[index + 1 : stop] if HINT.match(h)]
        out += [
            f"{pad}# your code here: write this part, then run this cell and the grading cell below",
            f'{pad}raise NotWrittenYet("{owner}")',
        ]
        index = stop + 1
    if not found:
        raise EditionError(f"{where}: tagged 'build' but has no {BEGIN} … {END} region")
    return "\n".join(out)


def _source_list(text: str) -> list[str]:
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def _repo_url() -> str:
    match = re.search(r'^REPO_URL = "([^"]+)"', REPO_URL_FILE.read_text(encoding="utf-8"), re.MULTILINE)
    if not match:
        raise EditionError(f"{REPO_URL_FILE}: no REPO_URL line")
    return match.group(1)


_BANNERS = {
    "en": (
        "> **Workbook edition.** Here **you** write the builds: each cell that ends in\n"
        "> `raise NotWrittenYet(...)` is yours to complete; the grading cell after it checks your code against the\n"
        "> reference, names the mistake when it recognises one, and otherwise lets the notebook go on with\n"
        "> `minillm`'s version, so you can skip a build and still run everything after it. The last cell lists your\n"
        "> builds ✓/✗. Solutions live in the complete edition,\n"
        "> [`{folder}/{name}`](../{name}) ([open in Colab]({colab}/blob/main/{folder}/{name})).\n"
        ">\n"
        "> {badge}"
    ),
    "es": (
        "> **Edición cuaderno de trabajo.** Aquí las construcciones las escribes **tú**: cada celda que termina en\n"
        "> `raise NotWrittenYet(...)` es tuya para completar; la celda de corrección que la sigue compara tu\n"
        "> código con la referencia, nombra el error cuando lo reconoce y, si no, deja que el cuaderno siga con\n"
        "> la versión de `minillm`, así que puedes saltarte una construcción y ejecutar igualmente todo lo que\n"
        "> viene después. La última celda lista tus construcciones ✓/✗. Las soluciones están en la edición\n"
        "> completa, [`{folder}/{name}`](../{name}) ([abrir en Colab]({colab}/blob/main/{folder}/{name})).\n"
        ">\n"
        "> {badge}"
    ),
}


def banner(name: str, lang: str = "en") -> dict:
    """The markdown cell that opens every workbook: what this edition is and where the solutions are."""
    colab = _repo_url().replace("https://github.com/", "https://colab.research.google.com/github/")
    folder = "notebooks" if lang == "en" else f"notebooks/{lang}"
    badge = f"[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab}/blob/main/{folder}/workbook/{name})"
    text = _BANNERS[lang].format(folder=folder, name=name, colab=colab, badge=badge)
    return {"cell_type": "markdown", "id": "workbook-edition", "metadata": {}, "source": _source_list(text)}


def workbook(notebook: dict, name: str, lang: str = "en") -> dict:
    """The workbook edition of one complete notebook (``name`` is its file name, for messages and links; ``lang``
    the language of its banner: the Spanish workbook is made from the Spanish complete edition)."""
    book = copy.deepcopy(notebook)
    book["metadata"].pop("widgets", None)
    cells, editions = [], 0
    for number, cell in enumerate(book["cells"]):
        tags = cell.get("metadata", {}).get("tags", [])
        if "solution" in tags:
            continue
        cell.get("metadata", {}).pop("execution", None)
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
            text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            if "build" in tags:
                text = stub_source(text, f"{name} cell {number}")
            elif BEGIN in text or END in text:
                raise EditionError(f"{name} cell {number}: has build markers but no 'build' tag")
            if "start_notebook(" in text:
                editions += text.count(COMPLETE_EDITION)
                text = text.replace(COMPLETE_EDITION, 'edition="workbook"')
            cell["source"] = _source_list(text)
        cells.append(cell)
    if any("build" in c.get("metadata", {}).get("tags", []) for c in notebook["cells"]) and editions != 1:
        raise EditionError(f"{name}: a notebook with builds needs exactly one start_notebook(..., {COMPLETE_EDITION})")
    book["cells"] = cells[:1] + [banner(name, lang)] + cells[1:]
    return book


def dumps(notebook: dict) -> str:
    """A notebook as the course commits it (nbformat's layout: one-space indent, UTF-8, final newline)."""
    return json.dumps(notebook, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def complete_notebooks(prefixes: list[str] | None = None) -> list[Path]:
    """The complete notebooks, or those whose file names start with one of ``prefixes``."""
    paths = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if prefixes:
        paths = [p for p in paths if any(p.name.startswith(prefix) for prefix in prefixes)]
        if not paths:
            raise EditionError(f"no notebook in {NOTEBOOKS} starts with {' or '.join(prefixes)}")
    return paths


def generated(prefixes: list[str] | None = None, untranslated: list[str] | None = None) -> dict[Path, str]:
    """Every generated file's path and text (of the notebooks ``prefixes`` selects; all when None). A notebook whose
    Spanish translation is not current gets no Spanish edition; why is appended to ``untranslated`` (the drift
    test, tests/test_translations.py, fails on it — the workbooks are still made)."""
    files = {}
    for path in complete_notebooks(prefixes):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        files[WORKBOOK / path.name] = dumps(workbook(notebook, path.name))
        try:  # the Spanish editions: the complete one with its outputs, and its workbook
            spanish = translation.translate(notebook, translation.read(path.name, "es"), path.name)
        except translation.TranslationError as error:
            if untranslated is not None:
                untranslated.append(str(error))
            continue
        files[SPANISH / path.name] = dumps(spanish)
        files[SPANISH / "workbook" / path.name] = dumps(workbook(spanish, path.name, lang="es"))
    return files


def write_todo(lang: str, prefixes: list[str] | None = None) -> list[Path]:
    """Bring each translation file up to date for a translator: current blocks kept, ``todo`` blocks (holding the
    English) for new or changed cells, stale blocks dropped. Returns the files that changed."""
    changed = []
    for path in complete_notebooks(prefixes):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        target = translation.translation_path(path.name, lang)
        blocks = translation.todo_blocks(notebook, translation.read(path.name, lang))
        text = translation.render(blocks, path.name, lang)
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            changed.append(target)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prefixes", nargs="*", help="notebook name prefixes such as 05 (default: every notebook)")
    parser.add_argument(
        "--check", action="store_true", help="only compare the committed editions with what would be written"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace workbooks even if someone has run and saved them"
    )
    parser.add_argument(
        "--todo", metavar="LANG", help="update notebooks/i18n/LANG/*.md for translators (todo blocks), then stop"
    )
    args = parser.parse_args(argv)
    try:
        if args.todo:
            for path in write_todo(args.todo, args.prefixes):
                print(f"updated {path.relative_to(ROOT)}")
            return 0
        untranslated: list[str] = []
        files = generated(args.prefixes, untranslated)
    except (EditionError, translation.TranslationError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    stale = [p for p, text in files.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
    editions = [WORKBOOK, SPANISH, SPANISH / "workbook"]
    extra = [] if args.prefixes else sorted({p for d in editions for p in d.glob("*.ipynb")} - set(files))
    for reason in untranslated:
        print(f"no Spanish edition: {reason} (python scripts/translation.py es lists every problem)", file=sys.stderr)
    if args.check:
        for path in stale:
            print(f"out of date: {path.relative_to(ROOT)} (run python scripts/make_editions.py)")
        for path in extra:
            print(f"not generated from any notebook: {path.relative_to(ROOT)}")
        return 1 if stale or extra else 0
    workbooks = [p for p in stale if p.parent.name == "workbook"]  # a generated workbook never has outputs
    worked_in = [p for p in workbooks if p.is_file() and _has_outputs(p)] if not args.overwrite else []
    if worked_in:
        for path in worked_in:
            print(
                f"refusing to replace {path.relative_to(ROOT)}: it holds outputs, so someone has worked in it "
                "(save your work elsewhere, or pass --overwrite)",
                file=sys.stderr,
            )
        return 1
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[path], encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    for path in extra:
        print(f"left alone: {path.relative_to(ROOT)} (no complete notebook of that name)")
    print(f"{len(files)} generated notebooks, {len(stale)} updated")
    return 0


def _has_outputs(path: Path) -> bool:
    """A generated workbook has no outputs; one with outputs was run and saved by a learner."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError):
        return True  # unreadable as a notebook: perhaps a learner's half-saved work, so never replace it silently
    return any(c.get("outputs") or c.get("execution_count") for c in cells if c.get("cell_type") == "code")


if __name__ == "__main__":
    sys.exit(main())
