"""The notebooks' setup helper: one call at the top of every notebook.

In Colab the first cell clones the course and installs ``minillm`` (keeping Colab's own torch); then it
calls :func:`setup`, which seeds everything, chooses the device and sets plotting defaults. Locally the
same cell only imports and seeds. This module is for notebooks; concept modules never import it.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import time
from pathlib import Path

import torch

from minillm.device import pick_device
from minillm.seed import seed_everything

#: The one place the repository's address is written (README badges and notebook setup cells use it).
REPO_URL = "https://github.com/minillm-course/minillm"


#: The course's time budget for one notebook's cells under the README's test command (one thread per kernel).
CELL_TIME_BUDGET_S = 60.0


class CellTimer:
    """Adds up the time the kernel spends running cells, from the setup cell on.

    Wall time since the first cell would count a learner's reading time; this counts only execution, which is
    what the course's per-notebook budget is about. It hooks IPython's ``pre_run_cell``/``post_run_cell``.
    """

    def __init__(self) -> None:
        self.total_s = 0.0
        self.cells = 0
        self._started: float | None = time.perf_counter()  # the setup cell is already running when we start

    def pre_run_cell(self, *_: object) -> None:
        self._started = time.perf_counter()

    def post_run_cell(self, *_: object) -> None:
        if self._started is not None:
            self.total_s += time.perf_counter() - self._started
            self.cells += 1
            self._started = None

    def elapsed_s(self) -> float:
        """Seconds of cell execution so far, including the cell that is running now."""
        running = time.perf_counter() - self._started if self._started is not None else 0.0
        return self.total_s + running


_timer: CellTimer | None = None


def _start_cell_timer() -> None:
    """Register one :class:`CellTimer` with the running IPython kernel (a no-op outside IPython)."""
    global _timer
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or _timer is not None:  # not IPython, or setup() run again: keep counting with the same timer
        return
    _timer = CellTimer()
    shell.events.register("pre_run_cell", _timer.pre_run_cell)
    shell.events.register("post_run_cell", _timer.post_run_cell)


def cell_time_s() -> float | None:
    """Seconds this kernel has spent running cells since :func:`setup` (None outside IPython)."""
    return None if _timer is None else _timer.elapsed_s()


def print_run_time(budget_s: float = CELL_TIME_BUDGET_S) -> None:
    """Print how long this notebook's cells have run in total, against the course's budget.

    The last cell of every notebook calls it. The number depends on the machine, so that cell is not
    compared by nbval.
    """
    seconds = cell_time_s()
    if seconds is None:
        print("cell time not measured (setup() was not run in an IPython kernel)")
        return
    print(
        f"this notebook's cells ran for {seconds:.0f} s in total "
        f"(course budget: {budget_s:.0f} s on a 2-core CPU with one torch thread, as the test command runs it)"
    )


def max_abs_diff(got: torch.Tensor | float, want: torch.Tensor | float) -> float:
    """Largest ``|got - want|``, computed in float64 so the comparison adds no rounding of its own."""
    got_t, want_t = (x.double() if torch.is_tensor(x) else torch.as_tensor(x, dtype=torch.float64) for x in (got, want))
    return (got_t - want_t).abs().max().item()


def check(what: str, diff: float, tol: float) -> None:
    """Assert a measured difference is within ``tol``, then print the notebook's verdict line.

    The assert comes first, so a failing check never prints a ✓. The line has the form the output policy
    expects (README, "How the course is tested"): the value after ``|diff| =`` varies with the CPU and is
    masked by nbval, the verdict after it is compared. Returns nothing, so a cell that ends with a check
    shows only its line.
    """
    assert diff <= tol, f"{what}: max |diff| = {diff:.1e} > tol {tol:.0e}"
    print(f"✓ {what}: max |diff| = {diff:.1e} ≤ tol {tol:.0e}")


def check_close(what: str, got: torch.Tensor | float, want: torch.Tensor | float, tol: float) -> None:
    """:func:`check` on the largest elementwise difference of two tensors (or numbers)."""
    check(what, max_abs_diff(got, want), tol)


def setup(seed: int = 0, threads: int | None = None, use_gpu: bool = True) -> torch.device:
    """Seed every generator, pick the device (a GPU when present) and set matplotlib defaults.

    ``threads`` fixes torch's CPU thread count (same count → bit-identical results); by default torch's
    own choice is kept. Also starts adding up cell time for :func:`print_run_time`. Returns the device
    notebooks should compute on.
    """
    _start_cell_timer()
    seed_everything(seed)
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        import matplotlib

        matplotlib.rcParams.update(
            {"figure.figsize": (7.0, 3.8), "figure.dpi": 90, "axes.grid": True, "grid.alpha": 0.3}
        )
    except ImportError:  # plotting is optional for the library
        pass
    return pick_device() if use_gpu else torch.device("cpu")


def _declared_requirements() -> tuple[tuple[str, str], ...]:
    """``(import name, minimum version)`` of every runtime dependency, as ``pyproject.toml`` declares them.

    Read from the installed package's metadata, so the list is written once (in ``pyproject.toml``); a
    source checkout that was never installed falls back to reading that file.
    """
    try:
        specs = importlib.metadata.requires("minillm") or []
    except importlib.metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        block = re.search(r"^dependencies = \[(.*?)^\]", pyproject.read_text(encoding="utf-8"), re.S | re.M)
        specs = re.findall(r'"([^"]+)"', block.group(1)) if block else []
    found = (re.match(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)", spec) for spec in specs if "extra ==" not in spec)
    return tuple((m.group(1), m.group(2)) for m in found if m)


#: What the course needs, as (import name, minimum version); the distribution and import names coincide.
REQUIREMENTS: tuple[tuple[str, str], ...] = _declared_requirements()


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = re.match(r"\d*", piece).group(0)  # "0rc1" → "0": pre-release tags don't count
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def check_environment() -> list[tuple[str, bool, str]]:
    """Check what the course needs; returns ``(requirement, ok, detail)`` rows.

    Covers the Python version, each package's minimum version, ``minillm`` itself, the data files and the
    compute device (a GPU is optional, so the device row is always OK).
    """
    rows: list[tuple[str, bool, str]] = []
    python = ".".join(map(str, sys.version_info[:3]))
    rows.append(("python >= 3.10", sys.version_info >= (3, 10), python))
    for name, minimum in REQUIREMENTS:
        try:
            module = importlib.import_module(name)
        except ImportError as error:
            rows.append((f"{name} >= {minimum}", False, f"not importable: {error}"))
            continue
        version = getattr(module, "__version__", "0")
        rows.append((f"{name} >= {minimum}", _version_tuple(version) >= _version_tuple(minimum), version))
    import minillm
    from minillm import paths

    rows.append(("minillm importable", True, f"{minillm.__version__} at {Path(minillm.__file__).parent}"))
    try:
        data = paths.data_dir()
        missing = [n for n in ("stories_train.txt", "sft_train.jsonl", "prefs_train.jsonl") if not (data / n).is_file()]
        rows.append(("course data in data/", not missing, "missing: " + ", ".join(missing) if missing else str(data)))
    except FileNotFoundError as error:
        rows.append(("course data in data/", False, str(error)))
    device = pick_device()
    threads = torch.get_num_threads()
    detail = torch.cuda.get_device_name(0) if device.type == "cuda" else f"{threads} CPU thread{'s' * (threads != 1)}"
    rows.append(("compute device", True, f"{device.type} ({detail})"))
    return rows


def print_environment_check() -> bool:
    """Print one ``[OK]``/``[FAIL]`` line per requirement; return True when everything is OK."""
    rows = check_environment()
    width = max(len(name) for name, _, _ in rows)
    for name, ok, detail in rows:
        print(f"[{'OK' if ok else 'FAIL'}] {name:<{width}}  {detail}")
    return all(ok for _, ok, _ in rows)
