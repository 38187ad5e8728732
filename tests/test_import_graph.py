"""The package's import graph has no cycle, counting imports made inside functions too.

A cycle hidden by a function-level import still means two modules that cannot be understood (or moved) one
without the other; the course's layering (COURSE.md, "Which way the imports run") forbids them. Imports under
``if TYPE_CHECKING:`` are for annotations only and never run, so they do not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "minillm"


def module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imported_modules(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package modules ``name`` imports anywhere in its source, except under ``if TYPE_CHECKING:``."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package holding this module
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join([*package, base] if base else package)
            submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
            found.update(submodules)
            if len(submodules) < len(node.names):  # a name defined in `base` itself
                found.add(base)
    return {m for m in found if m in known and m != name}


def _runtime_nodes(tree: ast.AST):
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle_and_only_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"b"}}) == []


def test_function_level_and_relative_imports_are_seen(tmp_path):
    (tmp_path / "pkg").mkdir()
    module = tmp_path / "pkg" / "one.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import three\n"
        "def f():\n    from pkg.two import g\n    from . import four\n"
    )
    known = {name: tmp_path for name in ("pkg", "pkg.one", "pkg.two", "pkg.three", "pkg.four")}
    assert imported_modules("pkg.one", module, known) == {"pkg.two", "pkg.four"}


def test_minillm_has_no_import_cycle():
    known = module_names()
    graph = {name: imported_modules(name, path, known) for name, path in known.items()}
    assert sum(len(v) for v in graph.values()) > 100  # the graph was really read
    assert cycles(graph) == []


def test_the_tokenizer_and_the_chat_format_import_without_torch() -> None:
    """A tokenizer is text in, ids out: a user who only tokenizes need not install torch."""
    import subprocess
    import sys

    code = "import sys; sys.modules['torch'] = None; import minillm.tokenizer, minillm.chat; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
