"""Graders for the workbook edition: one small module per notebook (``nb05_optimization``, …) on a shared engine.

A notebook uses them in three places::

    from minillm.grading import NotWrittenYet, start_notebook, show_progress
    start_notebook("05_optimization", edition="complete", builds=nb05.BUILDS)   # near the top
    AdamWByHand = nb05.adamw(AdamWByHand)     # after each build: ✓, or ✗ with the diagnosis and minillm's version
    show_progress()                            # last cell: this notebook's builds, ✓/✗

Only notebooks import this package; concept modules never do.
"""

from __future__ import annotations

import importlib
import pkgutil

from minillm.grading import progress
from minillm.grading.core import Build, NotWrittenYet, current_notebook, start_notebook, summary

__all__ = [
    "NotWrittenYet",
    "course_builds",
    "course_catalogue",
    "reset_progress",
    "show_course_progress",
    "show_progress",
    "start_notebook",
]


def reset_progress(notebook: str | None = None) -> None:
    """Forget the recorded ✓/✗ of one notebook (``"05_optimization"``) or, with no argument, of every workbook."""
    progress.reset(notebook)
    print(f"progress reset for {notebook or 'every notebook'} ({progress.progress_file()})")


def course_builds() -> dict[str, tuple[str, ...]]:
    """{notebook: its graded builds}, from every ``nbNN_topic`` module of this package, in course order."""
    found: dict[str, tuple[str, ...]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("nb") and info.name[2:4].isdigit():
            module = importlib.import_module(f"{__name__}.{info.name}")
            found[info.name[2:]] = tuple(module.BUILDS)
    return found


def course_catalogue() -> dict[str, list[Build]]:
    """{notebook: its graded builds as :class:`Build` objects, in notebook order} — for the README's table."""
    catalogue: dict[str, list[Build]] = {}
    for notebook in course_builds():
        module = importlib.import_module(f"{__name__}.nb{notebook}")
        described = {value.name: value for value in vars(module).values() if isinstance(value, Build)}
        catalogue[notebook] = [described[name] for name in module.BUILDS]
    return catalogue


def _mark(passed: bool | None) -> str:
    return "✓" if passed else ("✗" if passed is False else "·")


def show_progress() -> None:
    """This notebook's builds, ✓ (passed), ✗ (failed or a stub: the notebook used minillm's) or · (not graded)."""
    notebook, edition = current_notebook()
    rows = summary()
    if not rows:
        print("no graded builds in this notebook")
        return
    done = sum(1 for _, passed in rows if passed)
    print(f"{notebook} ({edition} edition): {done} of {len(rows)} builds pass")
    for name, passed in rows:
        print(f"  {_mark(passed)} {name}")
    if edition == "workbook":
        print(f"(kept in {progress.progress_file()}; reset with minillm.grading.reset_progress({notebook!r}))")


def show_course_progress() -> None:
    """Every workbook's builds as last graded on this computer (from the progress file)."""
    recorded = progress.load()
    builds = course_builds()
    total = sum(len(names) for names in builds.values())
    done = sum(1 for nb, names in builds.items() for name in names if recorded.get(nb, {}).get(name))
    print(f"the workbooks: {done} of {total} builds pass (kept in {progress.progress_file()})")
    for notebook, names in builds.items():
        marks = recorded.get(notebook, {})
        passed = sum(1 for name in names if marks.get(name))
        line = " ".join(f"{_mark(marks.get(name))}{name}" for name in names)
        print(f"  {notebook:<28} {passed}/{len(names)}  {line}")
