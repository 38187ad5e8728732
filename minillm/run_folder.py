"""A run folder's safety rules: one writer at a time, a record of what defines the run, no silent replacing.

``python -m minillm.train`` and ``python -m minillm`` write hours of work into one folder. Three things keep
that work from being destroyed or misreported, and both command lines use them from here:

* **A lock** (:func:`locked`): ``run.lock`` is created with ``O_CREAT | O_EXCL`` — the operating system
  lets exactly one process create it — and holds the writer's pid, host, start time and command. It is
  removed when the run ends, also on an error or Ctrl-C. A second run into a locked folder stops with the
  holder's pid. A lock left by a process that no longer exists (killed, out of memory, power cut) is
  *stale*: the next run reports it on stderr and takes it over, so ``--resume`` after a crash needs no
  extra step. A lock from another host, or one whose pid we cannot check, is never taken over.
* **A record** of what defines the run (:func:`input_file`, :func:`write_record`): every setting, and for
  each input file its path and SHA-256, so a rerun with another text, seed or setting is recognised as a
  different run. :func:`check_record` names the fields that differ; only fields a caller declares
  changeable (e.g. ``max_steps`` on ``--resume``) may differ.
* **No silent replacing** (:func:`refuse_to_replace`, :func:`remove_outputs`): a folder that already holds a
  run's outputs is only replaced when asked (``--overwrite``), and the message says what is there and how
  to continue or replace it.

Every refusal raises :class:`RunFolderError` before any long work starts; the command lines turn it into
``error: ...`` and exit status 1.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "LOCK_FILE",
    "RunFolderError",
    "RunFolderLocked",
    "check_record",
    "differences",
    "input_file",
    "locked",
    "read_record",
    "refuse_to_replace",
    "remove_outputs",
    "sha256_file",
    "write_record",
]

LOCK_FILE = "run.lock"


class RunFolderError(RuntimeError):
    """A run folder that cannot be used as asked; the message names the folder and suggests the fix."""


class RunFolderLocked(RunFolderError):
    """Another live process is writing to the run folder."""


# ------------------------------------------------------------------------------------------ the record


def sha256_file(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB chunks (a corpus need not fit in memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def input_file(path: str | os.PathLike | None) -> dict[str, str] | None:
    """How a record names an input file: its absolute path and the SHA-256 of its content (``None``: no file).

    The hash, not the path, is what identifies the input: the same text moved elsewhere is the same run,
    and a file edited in place is not.
    """
    if path is None:
        return None
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: {'is a folder, not a file' if path.is_dir() else 'not found'}")
    return {"path": str(path.resolve()), "sha256": sha256_file(path)}


def read_record(path: str | os.PathLike) -> dict[str, Any] | None:
    """The JSON record at ``path``, or ``None`` when there is none."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RunFolderError(
            f"{path} is not a readable run record ({error}); pass --overwrite to replace the run in {path.parent}"
        ) from error
    if not isinstance(record, dict):
        raise RunFolderError(f"{path} is not a run record (a JSON object); pass --overwrite to replace it")
    return record


def write_record(path: str | os.PathLike, record: dict[str, Any] | list, indent: int = 2) -> None:
    """Write ``record`` as JSON atomically: a uniquely named temporary file renamed over ``path``.

    Why unique: two processes (or a crashed earlier one) must never share a temporary file; why a rename:
    a run stopped half way leaves either the old record or the new one, never a truncated file.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        tmp.write_text(json.dumps(record, indent=indent, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


_MISSING = object()  # a field one of two records lacks


def _is_file_entry(value: object) -> bool:
    return isinstance(value, dict) and "sha256" in value


def _show(value: object) -> str:
    if value is _MISSING:
        return "(not recorded)"
    if _is_file_entry(value):
        return f"{value['path']} (sha256 {value['sha256'][:12]}…)"
    return json.dumps(value)


def differences(recorded: dict[str, Any], current: dict[str, Any], ignore: Collection[str] = ()) -> dict[str, str]:
    """Field → ``"old → new"`` for every field whose value differs, nested dicts named ``outer.inner``.

    Input files (dicts with a ``sha256``) are compared by content only: a moved file is the same input.
    """
    found: dict[str, str] = {}

    def walk(old: Any, new: Any, name: str) -> None:
        if name in ignore:
            return
        if _is_file_entry(old) and _is_file_entry(new):
            if old["sha256"] != new["sha256"]:
                found[name] = f"{_show(old)} → {_show(new)}"
        elif isinstance(old, dict) and isinstance(new, dict) and not (_is_file_entry(old) or _is_file_entry(new)):
            for key in sorted(set(old) | set(new)):
                walk(old.get(key, _MISSING), new.get(key, _MISSING), f"{name}.{key}" if name else key)
        elif old != new:
            found[name] = f"{_show(old)} → {_show(new)}"

    walk(recorded, current, "")
    return found


def check_record(
    record_path: str | os.PathLike,
    current: dict[str, Any],
    *,
    changeable: Collection[str] = (),
    ignore: Collection[str] = (),
    fix: str,
) -> dict[str, str]:
    """Compare the run's saved record with ``current``; raise naming the fields that may not change.

    ``changeable`` fields may differ (they are returned, so the caller can report and record them);
    ``ignore`` fields are not compared at all (where the folder is, how verbose the run is). ``fix`` ends
    the message: what the user can do instead. No saved record: nothing to compare, ``{}``.
    """
    record_path = Path(record_path)
    recorded = read_record(record_path)
    if recorded is None:
        return {}
    changed = differences(recorded, current, ignore=ignore)
    refused = {name: change for name, change in changed.items() if name.split(".")[0] not in changeable}
    if refused:
        lines = "\n".join(f"  {name}: {change}" for name, change in refused.items())
        raise RunFolderError(
            f"{record_path.parent} holds a run with other settings (recorded in {record_path}); "
            f"these differ (recorded → now):\n{lines}\n{fix}"
        )
    return changed


# ------------------------------------------------------------------------------------------ replacing


def refuse_to_replace(
    folder: str | os.PathLike, found: Iterable[str | os.PathLike], fix: str, what: str = "a run"
) -> None:
    """Raise naming ``folder``, ``what`` it holds and the outputs ``found`` in it, unless there are none.

    Why a function of its own: every writer must give the same kind of message — the folder, what is in
    it, and the flags that continue (``--resume``) or replace (``--overwrite``) it.
    """
    names = []
    for path in map(Path, found):
        try:
            names.append(str(path.relative_to(folder)))
        except ValueError:
            names.append(str(path))
    if names:
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        raise RunFolderError(f"{folder} already holds {what} ({shown}); {fix}")


def remove_outputs(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Delete the given files and folders (what ``--overwrite`` replaces); returns those that existed.

    Only the outputs a run is known to write are removed, never the whole folder: a run folder given by
    mistake (a home folder, a data folder) keeps everything else.
    """
    removed = []
    for path in map(Path, paths):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        removed.append(path)
    return removed


# ------------------------------------------------------------------------------------------ the lock


def _pid_alive(pid: int) -> bool | None:
    """True if ``pid`` runs on this machine, False if it does not, None if we cannot tell."""
    if os.name != "posix":
        return None  # os.kill(pid, 0) would send CTRL_C_EVENT on Windows
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by another user
    except OSError:
        return None
    return True


def _read_holder(path: Path) -> dict[str, Any] | None:
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _describe(holder: dict[str, Any]) -> str:
    return f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}, started {holder.get('started', '?')}"


def _create_lock(path: Path) -> bool:
    """Create the lock file atomically with our identity; False if it exists already."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "command": " ".join(getattr(sys, "orig_argv", sys.argv)),
    }
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(holder) + "\n")
    return True


def _take_over(path: Path, stale: dict[str, Any]) -> None:
    """Remove a stale lock, unless another process got there first.

    Two runs may find the same stale lock; a second ``O_EXCL`` file, ``run.lock.takeover``, lets only one
    of them re-read and remove it, so neither can delete a lock the other has just created.
    """
    claim = path.with_name(path.name + ".takeover")
    try:
        fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError as error:
        raise RunFolderLocked(
            f"{path.parent} is locked: another process is taking over the stale lock {path}; "
            f"if no run is using the folder, delete {claim} and {path}"
        ) from error
    try:
        os.close(fd)
        if _read_holder(path) == stale:
            path.unlink(missing_ok=True)
    finally:
        claim.unlink(missing_ok=True)


def _acquire(folder: Path) -> Path:
    path = folder / LOCK_FILE
    for _ in range(3):
        if _create_lock(path):
            return path
        holder = _read_holder(path)
        if holder is None:
            continue  # released between our two looks: try again
        if not holder or "pid" not in holder:
            raise RunFolderLocked(
                f"{folder} is locked by {path}, which names no process (a run may be starting); "
                f"if no run is using the folder, delete {path}"
            )
        same_host = holder.get("host") == socket.gethostname()
        alive = _pid_alive(int(holder["pid"])) if same_host else None
        if alive is False:
            print(f"{folder}: taking over a stale lock of {_describe(holder)}, which no longer runs", file=sys.stderr)
            _take_over(path, holder)
            continue
        if alive is None:
            raise RunFolderLocked(
                f"{folder} is locked by {_describe(holder)} ({path}), which cannot be checked from here; "
                f"if that run has ended, delete {path}"
            )
        raise RunFolderLocked(
            f"{folder} is locked by a running process: {_describe(holder)}, command {holder.get('command', '?')!r}; "
            f"wait for it to finish or stop it (kill {holder['pid']}), or choose another folder"
        )
    raise RunFolderLocked(f"{folder}: could not take the lock {path}; try again")


@contextlib.contextmanager
def locked(folder: str | os.PathLike) -> Iterator[Path]:
    """Hold ``folder``'s exclusive lock for the ``with`` block; yields the lock file's path.

    The folder is created if needed (and removed again if it is still empty when the block ends, so a refused
    run leaves nothing behind). The lock is removed when the block ends, however it ends (an exception,
    Ctrl-C); only a killed process leaves it behind, and the next run takes such a stale lock over (see the
    module docstring).
    """
    folder = Path(folder)
    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunFolderError(f"run folder {folder} is not writable: {error}") from error
    try:
        path = _acquire(folder)
    except PermissionError as error:
        raise RunFolderError(f"run folder {folder} is not writable: {error}") from error
    try:
        yield path
    finally:
        holder = _read_holder(path)
        if holder and holder.get("pid") == os.getpid():
            path.unlink(missing_ok=True)
        if created:
            with contextlib.suppress(OSError):  # not empty (the run wrote files) or already gone: keep it
                folder.rmdir()
