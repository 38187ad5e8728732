"""Re-execute notebooks top to bottom on a fresh kernel and save them with their outputs (for committing).

    python scripts/run_notebooks.py                       # every notebook
    python scripts/run_notebooks.py 03 06                 # the notebooks whose names start with 03 or 06

Each notebook runs as nbval runs it under the README's test command: a fresh kernel started in ``notebooks/``
with one torch thread (``OMP_NUM_THREADS=1`` unless the environment already sets it). Widget state is saved
so the progress bars render in a trusted notebook. Afterwards check the outputs on other float paths with
``python scripts/check_portability.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


def select(prefixes: list[str]) -> list[Path]:
    """The course notebooks whose file names start with one of ``prefixes`` (all of them when empty)."""
    paths = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if prefixes:
        paths = [p for p in paths if any(p.name.startswith(prefix) for prefix in prefixes)]
        if not paths:
            raise SystemExit(f"no notebook in {NOTEBOOKS} starts with {' or '.join(prefixes)}")
    return paths


def hide_solution_outputs(notebook) -> None:
    """Save exercise solutions without their outputs, so the answer shows only once the learner runs the cell.

    JupyterLab also honours ``outputs_hidden``, but Colab shows committed outputs of a form cell. The cells are
    tagged ``nbval-ignore-output``: nbval still runs them (their asserts check the answer), it just has no
    committed output to compare.
    """
    for cell in notebook["cells"]:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell["cell_type"] == "code" and "solution" in tags:
            cell["outputs"] = []
            if "nbval-ignore-output" not in tags:
                tags.append("nbval-ignore-output")


def execute(path: Path, timeout_s: int = 900) -> float:
    """Run one notebook in place; return its wall time in seconds."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=timeout_s, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    start = time.perf_counter()
    client.execute()
    hide_solution_outputs(notebook)
    nbformat.write(notebook, path)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prefixes", nargs="*", help="notebook name prefixes such as 03 (default: all notebooks)")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # the kernel inherits it, as under the test command
    for path in select(args.prefixes):
        print(f"{path.name}: running ...", flush=True)
        seconds = execute(path)
        print(f"{path.name}: saved after {seconds:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
