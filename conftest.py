"""Settings every test run shares, for tests/ and for the notebooks nbval executes.

- The workbook edition is committed without outputs, so nbval runs its cells (an error still fails) without
  comparing outputs; the complete edition's outputs are compared as always.
- The Spanish edition (``notebooks/es/``) is not executed: its code cells and outputs are the English notebooks'
  (tests/test_translations.py checks they are identical), so running them again would only double the time.
- Graders write the learner's progress to the user's cache folder; a test run must not touch a real learner's
  progress, so kernels and tests get a temporary ``MINILLM_CACHE_DIR`` of their own.
- The suite runs on two pytest-xdist workers, and nbval starts a Jupyter kernel per notebook. A kernel's torch
  would use every core, so two kernels on a 2-core machine ask for four threads and spend their time handing
  work back and forth (a notebook cell measured 6x slower that way). Child processes inherit the environment,
  so one thread per kernel is set here before any worker starts; ``OMP_NUM_THREADS`` already set wins.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

WORKBOOK = Path(__file__).resolve().parent / "notebooks" / "workbook"
collect_ignore = ["notebooks/es"]
_progress_dir: str | None = None


def pytest_configure(config) -> None:
    global _progress_dir
    _progress_dir = tempfile.mkdtemp(prefix="minillm-progress-")
    os.environ["MINILLM_CACHE_DIR"] = _progress_dir  # kernels started later inherit it


def pytest_unconfigure(config) -> None:
    if _progress_dir:
        shutil.rmtree(_progress_dir, ignore_errors=True)


def pytest_collection_modifyitems(session, config, items) -> None:
    for item in items:
        path = Path(str(getattr(item, "fspath", "")))
        if WORKBOOK in path.parents and hasattr(item, "options"):
            item.options["check"] = False
