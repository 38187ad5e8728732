"""The learner's progress through the workbooks: one small JSON file in the user's cache folder.

It lives outside the repository (a learner's ✓ marks are not course content) at
``$MINILLM_CACHE_DIR/progress.json``, by default ``$XDG_CACHE_HOME/minillm`` or ``~/.cache/minillm``. Writes go
through a temporary file and a rename, so an interrupted kernel never leaves half a file; a file that cannot be
read (edited by hand, from another version) is treated as empty, never fatal, and set aside as
``progress.json.unreadable`` on the next write rather than overwritten.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

FORMAT = 1


def progress_file() -> Path:
    """Where progress is kept (the folder need not exist yet)."""
    folder = os.environ.get("MINILLM_CACHE_DIR")
    if folder:
        return Path(folder) / "progress.json"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "minillm" / "progress.json"


def load() -> dict[str, dict[str, bool]]:
    """{notebook: {build: passed}} as last recorded; empty when nothing was recorded or the file is unreadable."""
    return {
        notebook: {name: bool(entry.get("passed")) for name, entry in marks.items() if isinstance(entry, dict)}
        for notebook, marks in _raw().items()
    }


def _stored() -> dict[str, dict[str, dict]] | None:
    """The file's builds table: empty when there is no file, None when it exists but cannot be read as this format."""
    path = progress_file()
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT or not isinstance(data.get("builds"), dict):
            return None
        return {k: dict(v) for k, v in data["builds"].items() if isinstance(v, dict)}
    except (OSError, ValueError, AttributeError):
        return None


def _raw() -> dict[str, dict[str, dict]]:
    return _stored() or {}


def _write(builds: dict[str, dict[str, dict]], unreadable: bool) -> None:
    """Replace the file atomically; an ``unreadable`` one is first set aside, never overwritten."""
    path = progress_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if unreadable:
            os.replace(path, path.with_name(path.name + ".unreadable"))
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".progress.", suffix=".tmp", delete=False) as f:
            json.dump({"format": FORMAT, "builds": builds}, f, indent=1, sort_keys=True)
        os.replace(f.name, path)
    except OSError as error:  # a read-only home must not stop a notebook
        print(f"(progress not saved: {error})", file=sys.stderr)


def record(notebook: str, build: str, passed: bool) -> None:
    """Remember the latest verdict for one build."""
    stored = _stored()
    builds = stored or {}
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    builds.setdefault(notebook, {})[build] = {"passed": bool(passed), "when": when}
    _write(builds, unreadable=stored is None)


def reset(notebook: str | None = None) -> None:
    """Forget the progress of one notebook (e.g. ``"05_optimization"``), or of the whole course."""
    if notebook is None:
        try:
            progress_file().unlink()
        except FileNotFoundError:
            pass
        return
    builds = _raw()  # an unreadable file holds nothing to forget: left as it is
    if builds.pop(notebook, None) is not None:
        _write(builds, unreadable=False)
