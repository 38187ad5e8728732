"""What produced a precomputed result: the code's hash and the commit, recorded beside the numbers.

Notebooks load results that took minutes to compute. Each such file records the SHA-256 of the module that
wrote it and (``depends_on``) of every ``minillm`` module that module imports, directly or through others — the
experiment modules it builds on and the concept modules it trains with. When any of them changes,
:func:`stale_results` lists the files that no longer match, and a test fails until they are recomputed (or a
record's ``revisions`` say why the change cannot move a number, with the check that showed it).
"""

from __future__ import annotations

import ast
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


_PACKAGE = Path(__file__).resolve().parents[1]  # minillm/


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes().replace(b"\r\n", b"\n")).hexdigest()


def _module_file(name: str) -> Path | None:
    """The source file of package module ``name`` (``minillm.a.b``), or None when it is not one."""
    parts = name.split(".")
    if parts[0] != "minillm":
        return None
    base = _PACKAGE.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path) -> set[str]:
    """The ``minillm`` modules a source file imports anywhere (functions included; ``TYPE_CHECKING`` blocks
    never run, so they do not count)."""
    package = ".".join(path.relative_to(_PACKAGE.parent).with_suffix("").parts)
    if path.name == "__init__.py":
        package = package.rsplit(".", 1)[0] + "._"  # a package's relative imports start from itself
    found: set[str] = set()
    stack: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"))]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: -node.level]
                base = ".".join([*parent, base] if base else parent)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # submodules; names that are not drop out
        stack.extend(ast.iter_child_nodes(node))
    return {name for name in found if _module_file(name) is not None}


def dependency_files(module: ModuleType) -> list[Path]:
    """Every ``minillm`` source file ``module`` imports, directly or through other ``minillm`` modules (and the
    packages those live in, whose ``__init__`` runs on import); the module itself excluded."""
    start = code_path(module)
    seen: set[Path] = set()
    todo = [start]
    while todo:
        path = todo.pop()
        for name in _imports(path):
            parts = name.split(".")
            for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ too
                dependency = _module_file(".".join(parts[:i]))
                if dependency is not None and dependency not in seen:
                    seen.add(dependency)
                    todo.append(dependency)
    seen.discard(start)
    seen.discard(Path(__file__).resolve())  # this module only writes the record; no number depends on it
    return sorted(seen)


def dependency_hashes(module: ModuleType) -> dict[str, str]:
    """``{minillm/...py: SHA-256}`` of :func:`dependency_files` — what a result's numbers also depend on."""
    return {_package_relative(path): _file_sha256(path) for path in dependency_files(module)}


def provenance(module: ModuleType, command: str) -> dict[str, Any]:
    """The record a result carries: the command, the module and its hash, the hashes of every ``minillm``
    module it imports (``depends_on``), and the git commit if there is one.

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
        "depends_on": dependency_hashes(module),
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
    root = _PACKAGE.parent
    why = []
    for r in records:
        command = r.get("command", "?")
        if r.get("code_sha256") != current:
            why.append(
                f"{command} ran code with SHA-256 {str(r.get('code_sha256'))[:12]}…, the code is now {current[:12]}…"
            )
        for name, digest in (r.get("depends_on") or {}).items():
            path = root / name
            now = _file_sha256(path) if path.is_file() else None
            if now != digest:
                state = f"is now {now[:12]}…" if now else "no longer exists"
                why.append(f"{command} ran with {name} at SHA-256 {str(digest)[:12]}…, which {state}")
    return why


def untracked_dependencies(payload: Any) -> list[str]:
    """The commands of ``payload``'s records made before results recorded their dependencies (no ``depends_on``):
    their numbers may rest on library code that has changed since, unseen by :func:`stale_results`."""
    return sorted({r.get("command", "?") for r in _records(payload) if "depends_on" not in r})
