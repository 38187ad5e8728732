"""Colab, simulated: a fresh venv holding only what Colab preinstalls of our dependencies runs the notebooks'
setup cell against a local clone; minillm installs, torch is left exactly as it was, and notebook 00's
environment check passes. (Slow: it builds a virtual environment, about two minutes.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from minillm.notebook import REPO_URL

ROOT = Path(__file__).resolve().parents[1]
#: What Colab ships of minillm's dependencies (safetensors comes with transformers there, but we let pip add it).
COLAB_PREINSTALLED = ["numpy", "matplotlib", "ipywidgets", "tokenizers", "tqdm"]

PROBE = r"""
import json, sys, types
from pathlib import Path
sys.modules["google.colab"] = types.ModuleType("google.colab")   # what the setup cell looks for
exec(compile(Path(sys.argv[1]).read_text(), "setup_cell", "exec"))
from minillm.notebook import check_environment
import torch
after = {"version": torch.__version__, "file": torch.__file__, "mtime": Path(torch.__file__).stat().st_mtime}
print("RESULT " + json.dumps({"after": after, "device": str(device),
                               "checks": check_environment()}))
"""


def _setup_cell() -> str:
    cells = json.loads((ROOT / "notebooks" / "00_start_here.ipynb").read_text())["cells"]
    return "".join(next(c for c in cells if c["cell_type"] == "code")["source"])


@pytest.mark.slow
def test_setup_cell_installs_minillm_in_a_colab_like_env_without_touching_torch(tmp_path) -> None:
    clone = tmp_path / "origin"
    subprocess.run(["git", "clone", "--quiet", f"file://{ROOT}", str(clone)], check=True)
    venv = tmp_path / "colab"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, f"torch=={torch.__version__}", *COLAB_PREINSTALLED], check=True)

    torch_state = (
        "import json, torch; from pathlib import Path; "
        "print(json.dumps({'version': torch.__version__, 'file': torch.__file__, "
        "'mtime': Path(torch.__file__).stat().st_mtime}))"
    )
    before = json.loads(subprocess.run([str(python), "-c", torch_state], capture_output=True, text=True).stdout)

    dest = tmp_path / "content" / "minillm"
    cell = _setup_cell()
    assert REPO_URL in cell and "/content/minillm" in cell
    (tmp_path / "cell.py").write_text(cell.replace(REPO_URL, str(clone)).replace("/content/minillm", str(dest)))
    (tmp_path / "probe.py").write_text(PROBE)
    env = {
        **os.environ,
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    env.pop("MINILLM_ROOT", None)
    env.pop("PYTHONPATH", None)
    run = subprocess.run(
        [str(python), str(tmp_path / "probe.py"), str(tmp_path / "cell.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    result = json.loads(run.stdout.split("RESULT ", 1)[1])
    assert result["after"] == before, "the setup cell changed the preinstalled torch"
    assert str(venv) in result["after"]["file"]
    failed = [row for row in result["checks"] if not row[1]]
    assert not failed, failed
    minillm_row = next(row for row in result["checks"] if row[0] == "minillm importable")
    assert str(dest) in minillm_row[2]
    assert (dest / "pyproject.toml").is_file()
