"""Where the course's files live: the repository root and its ``data/`` folder."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def repo_root() -> Path:
    """The course repository's root (the folder holding ``data/`` and ``notebooks/``).

    ``MINILLM_ROOT`` overrides it; otherwise the folder above the package (an editable install or a
    clone), then the current folder and its parents.
    """
    env = os.environ.get("MINILLM_ROOT")
    if env:
        return Path(env).resolve()
    for candidate in (_PACKAGE_DIR.parent, Path.cwd(), *Path.cwd().parents):
        if (candidate / "data" / "README.md").is_file() and (candidate / "notebooks").is_dir():
            return candidate
    raise FileNotFoundError(
        "could not find the course repository (a folder with data/README.md and notebooks/); "
        "run from inside the clone or set MINILLM_ROOT"
    )


def data_dir() -> Path:
    """The course's ``data/``: the repository's, or — for an installed package outside a clone — a cache folder.

    Outside a clone the folder (``$MINILLM_DATA``, default ``~/.cache/minillm/data-<version>``) is filled on
    first use: the text files by the package's deterministic generator (``minillm.datagen``, a few seconds; the
    same bytes as the repository's ``data/``), and the base checkpoints the wheel carries (``minillm/_data``).
    """
    try:
        return repo_root() / "data"
    except FileNotFoundError:
        return _installed_data()


def _installed_data() -> Path:
    from minillm import __version__, datagen

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = Path(os.environ.get("MINILLM_DATA") or cache / "minillm" / f"data-{__version__}")
    if not (folder / datagen.MANIFEST).is_file():
        print(f"minillm: not inside the course repository: writing the course data to {folder}", file=sys.stderr)
        staging = folder.with_name(f".{folder.name}.{os.getpid()}")  # complete before it appears
        datagen.write_files(staging, datagen.generate_files())
        shipped = _PACKAGE_DIR / "_data"
        for checkpoint in sorted(shipped.iterdir()) if shipped.is_dir() else []:
            shutil.copytree(checkpoint, staging / checkpoint.name)
        try:
            staging.rename(folder)
        except OSError:  # another process finished first: use its folder
            shutil.rmtree(staging, ignore_errors=True)
    return folder


def data_path(name: str) -> Path:
    """Path of a file under ``data/``, with a clear error if it is missing: the error names what makes it."""
    path = data_dir() / name
    if not path.exists():
        if "/" not in name and Path(name).suffix in (".txt", ".jsonl"):  # the generated stories and tasks
            how = "regenerate it with `python -m minillm.datagen --out data` (repository root)"
        else:  # a model or a precomputed result: each is made by its own command
            how = "data/README.md names the command that makes it"
        raise FileNotFoundError(f"{path}: not found; {how}")
    return path
