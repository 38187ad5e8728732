"""The package outside the course's clone, as a practitioner installs it: built as a wheel, installed on its own
and run from an empty folder, ``python -m minillm --size demo`` works — the course data is regenerated into a
cache folder and the base checkpoint comes with the wheel — and what truly needs the clone says so in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_built_wheel_runs_the_demo_from_an_empty_folder(tmp_path) -> None:
    dist, site, empty = tmp_path / "dist", tmp_path / "site", tmp_path / "empty"
    build = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(dist),
        str(ROOT),
    ]
    subprocess.run(build, check=True, capture_output=True, timeout=600)
    (wheel,) = dist.glob("minillm-*.whl")
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=600)
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MINILLM_ROOT", "MINILLM_DATA")}
    env |= {"PYTHONPATH": str(site), "XDG_CACHE_HOME": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}

    def minillm(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=empty, env=env, capture_output=True, text=True, timeout=900)

    where = minillm("-c", "import minillm; print(minillm.__file__)")
    assert where.stdout.strip().startswith(str(site)), where.stdout + where.stderr  # the wheel, not the clone

    demo = minillm("-m", "minillm", "--size", "demo", "--run-dir", "run", "--no-progress", "--threads", "1")
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "writing the course data to" in demo.stderr
    data = tmp_path / "cache" / "minillm"
    (folder,) = data.glob("data-*")
    committed = (ROOT / "data" / "MANIFEST.sha256").read_text()
    assert (folder / "MANIFEST.sha256").read_text() == committed  # the same bytes as the repository's data/
    evaluation = json.loads((empty / "run" / "eval" / "done.json").read_text())
    assert evaluation["sft"]["gold"] > evaluation["pretrain"]["gold"] + 0.2
    assert (empty / "run" / "report.md").is_file()

    def chat(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "minillm", "chat", "--temperature", "0", "--max-new-tokens", "20", *args]
        story = "Tell me a story about Tom and a ball.\n"
        return subprocess.run(command, input=story, cwd=empty, env=env, capture_output=True, text=True, timeout=600)

    shipped, own = chat(), chat("--model", "run/sft")  # the wheel's aligned model, and the SFT model the demo trained
    assert shipped.returncode == 0 and shipped.stdout.startswith("minillm chat with aligned ("), shipped.stderr[-2000:]
    assert own.returncode == 0 and own.stdout.startswith(f"minillm chat with sft ({empty / 'run' / 'sft' / 'model'}")

    course = minillm("-m", "minillm", "--size", "course", "--run-dir", "run2")
    assert course.returncode != 0 and "Traceback" not in course.stderr
    assert course.stderr.strip().splitlines()[-1].startswith("error: --size course: could not find the course")
