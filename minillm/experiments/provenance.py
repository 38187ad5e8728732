"""What produced a precomputed result: the code's hash and the commit, recorded beside the numbers.

Notebooks load results that took minutes to compute. Each such file records the SHA-256 of the module that
wrote it; when that module changes, :func:`stale_results` lists the files that no longer match, and a test
fails until they are recomputed. The library code the module calls is covered by its own tests, so a change
there does not by itself invalidate the results.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any


def code_path(module: ModuleType) -> Path:
    """The source file of ``module``."""
    if module.__file__ is None:
        raise ValueError(f"module {module.__name__} has no source file")
    return Path(module.__file__).resolve()


def code_sha256(module: ModuleType) -> str:
    """SHA-256 of the module's source, line endings normalised (a Windows checkout hashes the same)."""
    return hashlib.sha256(code_path(module).read_bytes().replace(b"\r\n", b"\n")).hexdigest()


def _package_relative(path: Path) -> str:
    """``minillm/experiments/x.py`` for the module's file, also when it runs as ``python -m`` (``__main__``)."""
    root = Path(__file__).resolve().parents[2]  # the folder holding the minillm package
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def provenance(module: ModuleType, command: str) -> dict[str, Any]:
    """The record a result carries: the command, the module and its hash, and the git commit if there is one.

    ``code_committed`` says whether the module's source at that commit is what ran (False: it had local edits).
    """
    path = code_path(module)
    commit = _git(["rev-parse", "HEAD"], path.parent)
    committed = None
    if commit is not None:
        committed = _git(["status", "--porcelain", "--", path.name], path.parent) == ""
    return {
        "command": command,
        "code": _package_relative(path),
        "code_sha256": code_sha256(module),
        "commit": commit,
        "code_committed": committed,
    }


def _records(value: Any) -> Iterator[dict]:
    """Every ``provenance`` record inside a JSON value (a file may hold several runs, each with its own)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if (key == "provenance" or key.endswith("_provenance")) and isinstance(item, dict):
                yield item
            else:
                yield from _records(item)
    elif isinstance(value, list):
        for item in value:
            yield from _records(item)


def stale_results(payload: Any, module: ModuleType) -> list[str]:
    """Why ``payload`` (a loaded results file) does not match ``module`` as it is now; empty when it does."""
    records = list(_records(payload))
    if not records:
        return ["it records no provenance"]
    current = code_sha256(module)
    return [
        f"{r.get('command', '?')} ran code with SHA-256 {str(r.get('code_sha256'))[:12]}…, "
        f"the code is now {current[:12]}…"
        for r in records
        if r.get("code_sha256") != current
    ]
