"""Where the course's files live: the repository root and its ``data/`` folder."""

from __future__ import annotations

import os
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
    candidates = [_PACKAGE_DIR.parent, Path.cwd(), *Path.cwd().parents]
    for candidate in candidates:
        if (candidate / "data" / "README.md").is_file() and (candidate / "notebooks").is_dir():
            return candidate
    raise FileNotFoundError(
        "could not find the course repository (a folder with data/README.md and notebooks/); "
        "run from inside the clone or set MINILLM_ROOT"
    )


def data_dir() -> Path:
    """The committed ``data/`` folder."""
    return repo_root() / "data"


def data_path(name: str) -> Path:
    """Path of a file under ``data/``, with a clear error if it is missing."""
    path = data_dir() / name
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: not found; regenerate it with `python -m minillm.datagen --out data` (repository root)"
        )
    return path
