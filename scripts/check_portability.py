"""Re-run every notebook under other floating-point paths and compare with the committed outputs (nbval).

    python scripts/check_portability.py                   # both non-native settings (about 4-6 min on 2 cores)
    python scripts/check_portability.py --setting avx2    # one of them (what CI runs)
    python scripts/check_portability.py --setting native default avx2 threads

The committed outputs were written on one CPU; a learner's CPU picks other kernels and gets other low-order
digits. The same noise can be produced on one machine by telling PyTorch (``ATEN_CPU_CAPABILITY``) and MKL
(``MKL_CBWR``, ``MKL_ENABLE_INSTRUCTIONS``) to use other instruction sets. Under every setting the notebooks
must still compare equal: that is the course's output policy (README, "How the course is tested").

Each setting runs the README's test command restricted to ``notebooks/`` and prints each notebook's cell time
(the sum of its cells' durations) against the course budget — a budget for real kernels (native, AVX2);
``default`` switches SIMD off and is slower by design. The exit status is nonzero when nbval fails under any
setting; time is reported, never enforced (machines are noisy).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: name -> (environment overrides, what it changes)
SETTINGS: dict[str, tuple[dict[str, str], str]] = {
    "native": ({}, "the kernels torch and MKL pick for this CPU"),
    "default": (
        {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
        "no SIMD kernels in torch, MKL's conditional-reproducibility path",
    ),
    "avx2": (
        {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
        "torch and MKL limited to AVX2",
    ),
    "threads": ({"OMP_NUM_THREADS": "2"}, "two torch threads per kernel (as JupyterLab on a 2-core laptop)"),
}
NON_NATIVE = ["default", "avx2"]
NOTEBOOK_BUDGET_S = 60.0
CORE_BUDGET_S = 240.0  # notebooks 00-10 together
TOTAL_BUDGET_S = 540.0  # every notebook together


def notebook_times(junit_xml: Path) -> dict[str, float]:
    """Sum the durations of each notebook's cells from a pytest JUnit report."""
    times: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        name = case.get("classname", "") + "::" + case.get("name", "")
        if ".ipynb" in name:
            notebook = name.split(".ipynb")[0].rsplit("/", 1)[-1].rsplit(".", 1)[-1] + ".ipynb"
            times[notebook] += float(case.get("time", 0.0))
    return dict(sorted(times.items()))


def run_setting(name: str, workers: int, extra: list[str]) -> tuple[int, dict[str, float], float]:
    """Run nbval on every notebook under one setting; return (pytest exit status, cell times, wall time)."""
    overrides, _ = SETTINGS[name]
    env = {**os.environ, **overrides}
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.xml"
        command = [
            sys.executable,
            "-m",
            "pytest",
            "notebooks",
            "--ignore=notebooks/workbook",
            "--ignore=notebooks/es",
            "-n",
            str(workers),
            "--dist",
            "loadfile",
            "-q",
        ]
        command += [f"--junitxml={report}", *extra]
        start = time.perf_counter()
        status = subprocess.run(command, cwd=ROOT, env=env).returncode
        wall = time.perf_counter() - start
        times = notebook_times(report) if report.is_file() else {}
    return status, times, wall


def cpu_description() -> str:
    """This CPU's model name and the vector/matrix extensions that decide torch's kernels (from /proc/cpuinfo)."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and name == (platform.processor() or platform.machine()):
                name = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    shown = [f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16") if f in flags]
    return f"{name}, {os.cpu_count()} logical CPUs" + (f" ({', '.join(shown)})" if shown else "")


def capability(overrides: dict[str, str]) -> str:
    """The CPU capability torch reports under these environment overrides."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    result = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **overrides}, capture_output=True, text=True, check=False
    )
    return result.stdout.strip() or "unknown"


def torch_version() -> str:
    code = "import torch; print(torch.__version__)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setting", nargs="+", choices=sorted(SETTINGS), default=NON_NATIVE)
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (the README uses 2)")
    parser.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --), e.g. -k 03_attention")
    args = parser.parse_args(argv)

    failed = []
    cpu = cpu_description()
    print(f"== CPU: {cpu}; torch {torch_version()}", flush=True)
    for name in args.setting:
        overrides, what = SETTINGS[name]
        shown = " ".join(f"{k}={v}" for k, v in overrides.items()) or "(no overrides)"
        print(f"== {name}: {shown} — {what}; torch reports CPU capability {capability(overrides)}", flush=True)
        status, times, wall = run_setting(name, args.workers, args.pytest_args)
        # The budget is for the native kernels; "default" turns SIMD off and is expected to be slower.
        budgeted = name in ("native", "avx2")
        for notebook, seconds in times.items():
            mark = ("✓" if seconds <= NOTEBOOK_BUDGET_S else "over budget") if budgeted else "no budget here"
            print(f"   {notebook:<40} {seconds:6.1f} s cell time   {mark} (budget {NOTEBOOK_BUDGET_S:.0f} s)")
        total = sum(times.values())
        core = sum(t for notebook, t in times.items() if notebook[:2].isdigit() and int(notebook[:2]) <= 10)
        print(
            f"   notebooks 00-10: {core:.0f} s cell time (budget {CORE_BUDGET_S:.0f} s); "
            f"all notebooks: {total:.0f} s (budget {TOTAL_BUDGET_S:.0f} s), {wall:.0f} s wall"
        )
        print(f"== {name}: {'passed' if status == 0 else f'FAILED (pytest exit {status})'}", flush=True)
        if status != 0:
            failed.append(name)
    if failed:
        print(f"notebook outputs differ under: {', '.join(failed)} (on {cpu})")
        return 1
    print(f"notebook outputs compare equal under: {', '.join(args.setting)} (on {cpu})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
