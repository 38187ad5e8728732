"""The notebooks' setup helper: one call at the top of every notebook.

In Colab the first cell clones the course and installs ``minillm`` (keeping Colab's own torch); then it
calls :func:`setup`, which seeds everything, chooses the device and sets plotting defaults. Locally the
same cell only imports and seeds. This module is for notebooks; concept modules never import it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from minillm.device import pick_device
from minillm.seed import seed_everything

#: The one place the repository's address is written (README badges and notebook setup cells use it).
REPO_URL = "https://github.com/minillm-course/minillm"


def in_colab() -> bool:
    """True inside Google Colab."""
    return "google.colab" in sys.modules


def setup(seed: int = 0, threads: int | None = None, use_gpu: bool = True) -> torch.device:
    """Seed every generator, pick the device (a GPU when present) and set matplotlib defaults.

    ``threads`` fixes torch's CPU thread count (same count → bit-identical results); by default torch's
    own choice is kept. Returns the device notebooks should compute on.
    """
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


def colab_install(repo: str = REPO_URL, dest: str | os.PathLike = "/content/minillm") -> Path:
    """Clone the course into ``dest`` (if not there yet) and ``pip install -e`` it without touching torch.

    ``repo`` may be a URL or a local path (the Colab simulation test uses a local clone). The package's
    dependencies carry lower bounds only, so pip leaves a preinstalled torch as it is.
    """
    dest = Path(dest)
    if not (dest / "pyproject.toml").is_file():
        subprocess.run(["git", "clone", "--quiet", "--depth", "1", str(repo), str(dest)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "-e", str(dest)], check=True)
    if str(dest) not in sys.path:  # an editable install is seen by new processes; this kernel needs the path
        sys.path.insert(0, str(dest))
    return dest
