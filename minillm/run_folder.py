"""A run folder's safety rules: one writer at a time, a record of what defines the run, no silent replacing.

``python -m minillm.train`` and ``python -m minillm`` write hours of work into one folder. Four things keep
that work from being destroyed or misreported, and both command lines use them from here:

* **A lock** (:func:`locked`): ``run.lock`` is created with ``O_CREAT | O_EXCL`` — the operating system
  lets exactly one process create it — and holds the writer's pid, host, start time and command. It is
  removed when the run ends, also on an error or Ctrl-C. A second run into a locked folder stops with the
  holder's pid. A lock left by a process that no longer exists (killed, out of memory, power cut) is
  *stale*: the next run reports it on stderr and takes it over, so ``--resume`` after a crash needs no
  extra step. The lock also records when its process started (Linux), so a pid reused by another process
  is recognised as stale too; a lock from another host, or one whose pid we cannot check, is never taken
  over, and only a lock that proves its writer still runs suggests ``kill PID``.
* **A record** of what defines the run (:func:`input_file`, :func:`write_record`): every setting, and for
  each input file its path and SHA-256, so a rerun with another text, seed or setting is recognised as a
  different run. :func:`check_record` names the fields that differ; only fields a caller declares
  changeable (e.g. ``max_steps`` on ``--resume``) may differ.
* **No silent replacing** (:func:`refuse_to_replace`, :class:`RunFiles`, :func:`remove_run_files`): a folder
  that already holds a run's outputs is only replaced when asked (``--overwrite``), and the message says what
  is there and how to continue or replace it. ``--overwrite`` removes only files a run writes, named by its
  :class:`RunFiles` layout, and only where the run's record (``settings.json``, ``run.json``) shows that a
  minillm run wrote them; a folder with files of anyone else in the folders a run writes to is refused.
* **No half-written files** (:func:`write_atomically`, :func:`write_all_atomically`): a file appears whole
  or not at all, and a full disk is reported as :class:`DiskFullError` naming the file.

Every refusal raises :class:`RunFolderError` before any long work starts; the command lines turn it into
``error: ...`` and exit status 1.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import socket
import sys
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "LOCK_FILE",
    "DiskFullError",
    "RunFiles",
    "RunFolderError",
    "RunFolderLocked",
    "check_record",
    "differences",
    "input_file",
    "is_disk_full",
    "locked",
    "read_record",
    "record_problem",
    "refuse_foreign_files",
    "refuse_to_replace",
    "remove_run_files",
    "sha256_file",
    "write_all_atomically",
    "write_atomically",
    "write_record",
]

LOCK_FILE = "run.lock"


class RunFolderError(RuntimeError):
    """A run folder that cannot be used as asked; the message names the folder and suggests the fix."""


class RunFolderLocked(RunFolderError):
    """Another live process is writing to the run folder."""


class DiskFullError(OSError):
    """A write that ran out of space; the message names the file and what was kept (nothing half-written)."""


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error``, or an error it was raised from, is "no space left" (or over quota).

    Why the chain: torch reports a failed write of its file object as a ``RuntimeError`` whose context is
    the ``OSError`` the file raised.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        current = current.__cause__ or current.__context__
    return False


# ------------------------------------------------------------------------------------------ atomic writes


def _temp_path(path: Path) -> Path:
    """A temporary name beside ``path``, unique to this process and call (``.NAME.PID.HEX.tmp``)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")


def _sync_folder(folder: Path) -> None:
    """Make renames in ``folder`` durable (best effort: not every platform can open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_all_atomically(files: Mapping[Path, bytes]) -> None:
    """Write every file to a temporary file beside it first, then rename them all into place.

    Why: a run that stops half way (killed, disk full) leaves each file either as it was or complete, never
    truncated; and since the renames only start once every byte is on disk, a full disk replaces none of
    them. A full disk raises :class:`DiskFullError` naming the file.
    """
    staged: dict[Path, Path] = {}
    try:
        for path, data in files.items():
            path = Path(path)
            staged[path] = _temp_path(path)
            try:
                with open(staged[path], "xb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
            except OSError as error:
                if is_disk_full(error):
                    raise DiskFullError(
                        f"disk full while writing {path}: no file was replaced (a half-written copy was removed); "
                        "free some space and run again"
                    ) from error
                raise
        for path, tmp in staged.items():
            os.replace(tmp, path)
        for folder in {path.parent for path in staged}:
            _sync_folder(folder)
    finally:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)


def write_atomically(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (see :func:`write_all_atomically`)."""
    write_all_atomically({Path(path): data})


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
    write_atomically(path, (json.dumps(record, indent=indent, ensure_ascii=False) + "\n").encode("utf-8"))


def update_record(path: str | os.PathLike, update: Callable[[dict[str, Any]], None], indent: int = 1) -> dict[str, Any]:
    """Read the JSON record at ``path`` (``{"runs": {}}`` when absent), apply ``update`` to it, write it back.

    Why a lock: experiments split over processes (``--runs``) each add their own runs to one results file; an
    exclusive ``flock`` on a sibling ``.name.lock`` file makes each read-modify-write whole, so no process
    overwrites another's runs. Returns the record as written.
    """
    import fcntl  # POSIX only, like the experiments that share a results file

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(f".{target.name}.lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            latest = json.loads(target.read_text(encoding="utf-8")) if target.is_file() else {"runs": {}}
            update(latest)
            write_record(target, latest, indent=indent)
            return latest
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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


#: What any run folder may hold that is no output: the lock and its take-over claim (never removed here).
_LOCK_NAMES = frozenset({"run.lock", "run.lock.takeover"})
#: The temporary names minillm's writers use beside a file NAME: ``.NAME.tmp-PID`` (checkpoints, model
#: folders) and ``.NAME.PID.HEX.tmp`` (records, token files); left behind only by a killed process.
_TEMP_FORMS = (r"\.(?:{0})\.tmp-\d+", r"\.(?:{0})\.\d+\.[0-9a-f]{{12}}\.tmp")


def _name_pattern(names: Iterable[str]) -> re.Pattern[str]:
    """One pattern for the given file-name patterns (regular expressions) and their temporary files."""
    alternatives = [f"(?:{name})" for name in names]
    alternatives += [form.format(name) for name in names for form in _TEMP_FORMS]
    return re.compile("|".join(alternatives) or "(?!)")


@dataclass(frozen=True)
class RunFiles:
    """Every file a kind of run writes, folder by folder: what ``--overwrite`` may remove, and nothing else.

    ``shared`` folders (the run folder itself) may hold other files too, which are left alone; ``owned``
    folders are the run's own (``pretrain/``, ``work/``): a file there that the run does not write is
    someone else's, and the run is refused rather than mixed with it. Names are regular expressions of file
    names (``re.escape`` plain ones); each also covers the temporary files of a killed write. ``record`` is
    the run's record, written before anything else: a folder whose record is missing or lacks
    ``record_keys`` holds no minillm run, so nothing in it is removed.
    """

    record: Path
    record_keys: frozenset[str]
    shared: Mapping[Path, tuple[str, ...]]
    owned: Mapping[Path, tuple[str, ...]] = field(default_factory=dict)
    what: str = "a minillm run"
    #: another proof that such a run wrote the folder, where its record was not kept (a model folder committed
    #: without its run.json): True when the folder's own files show it
    recognise: Callable[[], bool] | None = None


@dataclass
class _Survey:
    written: list[Path]  # files of the run's layout that are there
    foreign: list[Path]  # anything else inside the run's own folders
    folders: list[Path]  # the run's own folders that exist, deepest first


def _is_plain_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _survey(files: RunFiles) -> _Survey:
    """What of ``files``' layout is on disk, and what in its own folders is not the run's (not followed into)."""
    written: list[Path] = []
    foreign: list[Path] = []
    folders: list[Path] = []
    for folder, names in files.shared.items():
        pattern = _name_pattern(names)
        if folder.is_dir():
            for entry in sorted(folder.iterdir()):
                if pattern.fullmatch(entry.name) and entry not in files.owned:
                    (written if _is_plain_file(entry) else foreign).append(entry)
    for folder, names in files.owned.items():
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            foreign.append(folder)  # never followed: a link may lead into anyone's files
            continue
        if not folder.is_dir():
            continue
        folders.append(folder)
        pattern = _name_pattern(names)
        for entry in sorted(folder.iterdir()):
            if entry.name in _LOCK_NAMES or (entry in files.owned and not entry.is_symlink()):
                continue
            (written if _is_plain_file(entry) and pattern.fullmatch(entry.name) else foreign).append(entry)
    folders.sort(key=lambda path: len(path.parts), reverse=True)
    return _Survey(written, foreign, folders)


def _shown(paths: Iterable[Path], root: Path) -> str:
    names = []
    for path in paths:
        try:
            names.append(path.relative_to(root).as_posix())
        except ValueError:
            names.append(str(path))
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def _record_problem(files: RunFiles) -> str | None:
    """Why ``files.record`` does not show a run of this kind (None: it does)."""
    if not files.record.is_file():
        return f"no {files.record.name}"
    try:
        record = read_record(files.record)
    except RunFolderError:
        return f"{files.record.name} is not a readable run record"
    missing = sorted(files.record_keys - set(record or {}))
    return f"{files.record.name} lacks {', '.join(missing)}" if missing else None


def record_problem(files: RunFiles) -> str | None:
    """Why nothing shows that a run of ``files``' kind wrote its folder (None: its record, or ``recognise``, does)."""
    problem = _record_problem(files)
    if problem is not None and files.recognise is not None and files.recognise():
        return None
    return problem


def refuse_foreign_files(files: RunFiles, fix: str) -> list[Path]:
    """Raise naming anything in the run's own folders that it does not write; return the run's files found.

    Why before every run, not only ``--overwrite``: a run would mix its files with someone else's (and a
    user's ``eval/done.json`` would pass for a finished phase).
    """
    return _survey_without_foreign_files(files, fix).written


def _survey_without_foreign_files(files: RunFiles, fix: str) -> _Survey:
    survey = _survey(files)
    if survey.foreign:
        root = files.record.parent
        raise RunFolderError(
            f"{root} holds files that {files.what} does not write, in the folders a run writes to: "
            f"{_shown(survey.foreign, root)}; nothing was removed or written. Move them out, or {fix}"
        )
    return survey


def remove_run_files(files: RunFiles, fix: str) -> list[Path]:
    """Delete the files of ``files``' layout that are on disk, then its own folders left empty (``--overwrite``).

    Refused, with nothing removed, when the run's folders hold anything the run does not write, or when
    there is something to remove but no record shows a minillm run wrote it (a home folder, a clone's
    root, a model exported for another library). ``fix`` ends the messages: what to do instead. Returns the
    files removed; the record is among them.
    """
    survey = _survey_without_foreign_files(files, fix)
    written = survey.written
    existing = [folder for folder in files.owned if folder.is_dir()]
    problem = record_problem(files) if written or existing else None
    if problem is not None:
        root = files.record.parent
        there = _shown(written, root) or _shown(existing, root)
        raise RunFolderError(
            f"{root} holds {there} but {problem}, so it does not hold {files.what}; --overwrite removes only "
            f"the files a run recorded there, and nothing was removed. Remove them yourself if they are "
            f"yours to delete, or {fix}"
        )
    for path in written:
        path.unlink()
    for folder in survey.folders:  # deepest first, so a folder emptied by its children goes too
        with contextlib.suppress(OSError):  # not empty: it still holds the lock of a separate work folder
            folder.rmdir()
    return written


# ------------------------------------------------------------------------------------------ the lock


#: pid_t is a signed 32-bit number; 0 and negative numbers name process groups (``kill 0`` signals our own)
_MAX_PID = 2**31 - 1
#: A live writer fills its lock within microseconds of creating it; an empty lock this old was left by a
#: process that could not (a full disk, before minillm removed such locks) or was killed in between.
_EMPTY_LOCK_GRACE_S = 60.0


def _valid_pid(value: object) -> int | None:
    """``value`` if it can be the pid of a single process, else None (a lock minillm did not write)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= _MAX_PID:
        return None
    return value


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
    except (OSError, OverflowError):
        return None
    return True


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started: this boot's id and the start time in clock ticks (Linux); None elsewhere.

    Why: a pid is reused once its process has ended, so a live pid alone does not prove that the process is
    the run that wrote the lock; the pair (boot, start time) of one process is never reused.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces and parentheses
    return f"{boot}/{fields[19]}" if len(fields) > 19 else None  # field 22 of proc(5): starttime


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
    """Create the lock file atomically with our identity; False if it exists already.

    A lock that cannot be written in full (a full disk) is removed again: an empty lock would refuse every
    later run until someone deleted it by hand.
    """
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "process_start": _process_start(os.getpid()),
        "command": " ".join(getattr(sys, "orig_argv", sys.argv)),
    }
    try:
        with open(fd, "wb") as handle:
            handle.write((json.dumps(holder) + "\n").encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException as error:
        path.unlink(missing_ok=True)
        if is_disk_full(error):
            raise DiskFullError(
                f"disk full while writing the lock {path}: the run did not start, and the lock was removed "
                "again, so it blocks no later run; free some space and run again"
            ) from error
        raise
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


def _why_stale(path: Path, holder: dict[str, Any]) -> str:
    """Why the lock ``holder`` (read from ``path``) is stale; raises :class:`RunFolderLocked` when it is not.

    Only a lock whose pid is alive *and* started when the lock says (:func:`_process_start`) proves that its
    writer still runs, and only then does the message suggest stopping that process; a lock that proves
    neither is left for the user to delete.
    """
    folder = path.parent
    if "pid" not in holder:
        age = time.time() - path.stat().st_mtime
        if age > _EMPTY_LOCK_GRACE_S:
            return f"which names no process and is {age:.0f} s old (its writer could not fill it: disk full, or killed)"
        raise RunFolderLocked(
            f"{folder} is locked by {path}, which names no process (a run may be starting); "
            f"if no run is using the folder, delete {path}"
        )
    pid = _valid_pid(holder["pid"])
    if pid is None:
        raise RunFolderLocked(
            f"{folder} is locked by {path}, which names {holder['pid']!r}, not the id of a process: a minillm run did "
            f"not write it, or it is damaged; if no run is using the folder, delete {path}"
        )
    alive = _pid_alive(pid) if holder.get("host") == socket.gethostname() else None
    if alive is False:
        return "which no longer runs"
    if alive is None:
        raise RunFolderLocked(
            f"{folder} is locked by {_describe(holder)} ({path}), which cannot be checked from here; "
            f"if that run has ended, delete {path}"
        )
    recorded, now = holder.get("process_start"), _process_start(pid)
    if recorded and now and recorded != now:
        return f"which has ended: pid {pid} now belongs to another process, started later"
    if recorded and now:
        raise RunFolderLocked(
            f"{folder} is locked by a running process: {_describe(holder)}, command {holder.get('command', '?')!r}; "
            f"wait for it to finish or stop it (kill {pid}), or choose another folder"
        )
    raise RunFolderLocked(
        f"{folder} is locked by {_describe(holder)}, command {holder.get('command', '?')!r} ({path}); a process "
        f"with that pid is running, but the lock cannot prove it is that run (it records no start time to compare), "
        f"so it may be another program that got the same pid: if no run is using the folder, delete {path}"
    )


def _acquire(folder: Path) -> Path:
    path = folder / LOCK_FILE
    for _ in range(3):
        if _create_lock(path):
            return path
        holder = _read_holder(path)
        if holder is None:
            continue  # released between our two looks: try again
        try:
            reason = _why_stale(path, holder)
        except FileNotFoundError:
            continue  # released while we looked at its age
        print(f"{folder}: taking over a stale lock of {_describe(holder)}, {reason}", file=sys.stderr)
        _take_over(path, holder)
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
    except BaseException as error:
        if created:
            with contextlib.suppress(OSError):
                folder.rmdir()
        if isinstance(error, PermissionError):
            raise RunFolderError(f"run folder {folder} is not writable: {error}") from error
        raise
    try:
        yield path
    finally:
        holder = _read_holder(path)
        if holder and holder.get("pid") == os.getpid():
            path.unlink(missing_ok=True)
        if created:
            with contextlib.suppress(OSError):  # not empty (the run wrote files) or already gone: keep it
                folder.rmdir()
