"""The foundation: seeding, device choice, paths, packaging rules and the README quickstart."""

from __future__ import annotations

import ast
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from minillm import paths
from minillm.device import DeviceError, pick_device, run_device
from minillm.notebook import REPO_URL, setup
from minillm.seed import seed_everything

ROOT = Path(__file__).resolve().parents[1]


def _draws() -> tuple[float, float, list[float]]:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_seed_everything_repeats_every_generator() -> None:
    seed_everything(123)
    first = _draws()
    seed_everything(123)
    assert _draws() == first
    seed_everything(124)
    assert _draws() != first


def test_seed_everything_returns_a_generator_seeded_alike() -> None:
    gen = seed_everything(7)
    a = torch.rand(4, generator=gen)
    b = torch.rand(4, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", None])
def test_seed_everything_rejects_bad_seeds(bad) -> None:
    with pytest.raises(ValueError, match="seed"):
        seed_everything(bad)


def test_pick_device_defaults_and_errors() -> None:
    expected = "cuda" if torch.cuda.is_available() else None
    device = pick_device()
    if expected:
        assert device.type == expected
    assert pick_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="cuda"):
            pick_device("cuda")


def test_run_device_names_win_and_ranks_get_their_own_gpu(monkeypatch) -> None:
    assert run_device("cpu") == run_device("cpu", local_rank=1) == torch.device("cpu")
    assert run_device() == pick_device()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert run_device("cuda:3") == torch.device("cuda:3")  # a name is taken as given when the GPU is there
    with pytest.raises(DeviceError, match=r"'cuda:4' was requested but this machine has 4 CUDA GPU"):
        run_device("cuda:4")
    assert run_device("auto", local_rank=1) == torch.device("cuda:1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert run_device("auto", local_rank=1) == torch.device("cpu")
    with pytest.raises(DeviceError, match=r"'cuda' was requested but torch sees no CUDA GPU here.*use --device cpu"):
        run_device("cuda")


def test_setup_seeds_and_returns_a_device() -> None:
    device = setup(seed=5, use_gpu=False)
    assert device == torch.device("cpu")
    x = torch.rand(2)
    setup(seed=5, use_gpu=False)
    assert torch.equal(torch.rand(2), x)


def test_paths_find_the_repository_and_name_missing_files() -> None:
    assert paths.repo_root() == ROOT
    assert paths.data_dir() == ROOT / "data"
    with pytest.raises(FileNotFoundError, match="no_such_file.txt"):
        paths.data_path("no_such_file.txt")


def test_runtime_dependencies_have_lower_bounds_only() -> None:
    """Colab keeps its own torch only if minillm never caps or pins a dependency."""
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
    deps = re.findall(r'"([^"]+)"', block)
    assert any(d.startswith("torch") for d in deps)
    for dep in deps:
        assert ">=" in dep and "<" not in dep.replace(">=", "") and "==" not in dep, dep


def test_requirements_pin_torch_below_the_next_release() -> None:
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    torch_lines = [line for line in lines if line.startswith("torch")]
    assert torch_lines == ["torch>=2.2,<2.14"]
    # the rest is declared once, in pyproject.toml; `-e .` brings it, JupyterLab is only for learners
    assert [line for line in lines if line] == ["torch>=2.2,<2.14", "jupyterlab>=4.0", "-e ."]


def test_the_environment_check_reads_the_one_dependency_list(monkeypatch) -> None:
    """notebook.REQUIREMENTS comes from pyproject.toml (installed metadata, or the file itself)."""
    import importlib.metadata

    from minillm import notebook

    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
    declared = {tuple(d.split(">=")) for d in re.findall(r'"([^"]+)"', block)}
    assert set(notebook.REQUIREMENTS) == declared

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "requires", not_installed)
    assert set(notebook._declared_requirements()) == declared


def test_readme_quickstart_is_exactly_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- quickstart -->\s*```bash\n(.*?)```", readme, re.S).group(1)
    commands = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert len(commands) == 2
    assert "notebooks/00_start_here.ipynb" in commands[0] and "requirements.txt" in commands[0]
    assert "[test]" in commands[1] and "pytest" in commands[1]


def test_repository_url_is_written_once_in_readme_badges() -> None:
    """Forks change the address in one place: README badges are built from the same URL as the code."""
    readme = (ROOT / "README.md").read_text()
    assert REPO_URL.split("github.com/")[1] in readme


def test_environment_check_passes_here_and_catches_an_old_version(monkeypatch) -> None:
    from minillm import notebook

    rows = notebook.check_environment()
    assert all(ok for _, ok, _ in rows), rows
    assert rows[0][0].startswith("python") and rows[-1][0] == "compute device"
    monkeypatch.setattr(notebook, "REQUIREMENTS", (("numpy", "999.0"), ("no_such_package_xyz", "1.0")))
    failed = {name for name, ok, _ in notebook.check_environment() if not ok}
    assert failed == {"numpy >= 999.0", "no_such_package_xyz >= 1.0"}


@pytest.mark.parametrize(
    ("version", "expected"), [("2.13.0+cpu", (2, 13, 0)), ("1.26.4", (1, 26, 4)), ("8.1.0rc1", (8, 1, 0))]
)
def test_version_tuples_ignore_local_and_pre_release_suffixes(version, expected) -> None:
    from minillm.notebook import _version_tuple

    assert _version_tuple(version) == expected


def test_readme_has_a_colab_badge_built_from_repo_url_for_every_notebook() -> None:
    readme = (ROOT / "README.md").read_text()
    slug = REPO_URL.split("github.com/")[1]
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        url = f"https://colab.research.google.com/github/{slug}/blob/main/notebooks/{notebook.name}"
        assert f"]({url})" in readme, notebook.name


def test_set_repo_url_rewrites_every_copy(tmp_path, monkeypatch) -> None:
    import shutil
    import subprocess
    import sys

    for part in ("minillm/notebook.py", "README.md", "notebooks", "scripts"):
        source = ROOT / part
        if source.is_dir():
            shutil.copytree(source, tmp_path / part)
        else:
            (tmp_path / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, tmp_path / part)
    new = "https://github.com/someone/fork-of-minillm"
    subprocess.run(
        [sys.executable, str(tmp_path / "scripts" / "set_repo_url.py"), new], check=True, capture_output=True
    )
    everything = "".join(
        p.read_text() for p in tmp_path.rglob("*") if p.is_file() and p.suffix in {".py", ".md", ".ipynb"}
    )
    old_slug = REPO_URL.split("github.com/")[1]
    assert f"/{old_slug}" not in everything.replace("scripts/set_repo_url.py", "")
    assert f'REPO_URL = "{new}"' in (tmp_path / "minillm" / "notebook.py").read_text()
    assert (
        "github/someone/fork-of-minillm/blob/main/notebooks/00_start_here.ipynb" in (tmp_path / "README.md").read_text()
    )


# --------------------------------------------------------------- command-line modules sit on top, alone

CLI_MODULES = {"minillm.train.cli", "minillm.end_to_end.cli"}


def _is_cli(module: str) -> bool:
    return module in CLI_MODULES or module == "__main__" or module.endswith(".__main__")


def _cli_imports(source: str, module: str) -> list[str]:
    """The command-line modules that ``source`` (the code of ``module``) imports, relative imports resolved."""
    package = module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if _is_cli(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]  # `from minillm.train import cli`
            found += [name for name in names if _is_cli(name)]
    return found


def test_the_import_checker_sees_every_spelling() -> None:
    spellings = [
        "import minillm.train.cli",
        "from minillm.train.cli import run",
        "from minillm.train import cli",
        "from .cli import main",
        "from . import cli",
        "from minillm import __main__",
        "import minillm.end_to_end.cli as pipeline_cli",
    ]
    for line in spellings:
        assert _cli_imports(line, "minillm.train.run"), line
    assert not _cli_imports("from minillm.train.run import run\nimport minillm.client", "minillm.train.x")


def test_library_modules_never_import_command_line_modules() -> None:
    """Command-line modules only parse arguments; the library must work without them (COURSE.md)."""
    offenders = {}
    for path in sorted((ROOT / "minillm").rglob("*.py")):
        if path.name == "__main__.py":  # an entry point's one job is to call a command line
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if path.name == "__init__.py":
            module += ".__init__"  # so that relative imports resolve inside the package itself
        imported = _cli_imports(path.read_text(encoding="utf-8"), module)
        if imported:
            offenders[str(path.relative_to(ROOT))] = imported
    assert not offenders, f"library modules import command-line modules: {offenders}"


def test_max_abs_diff_keeps_float64_precision_for_plain_numbers() -> None:
    """Python floats are float64: the notebooks' difference helper must not round them to float32 first."""
    from minillm.notebook import max_abs_diff

    a, b = 0.1, 0.1 + 3e-12
    assert max_abs_diff(a, b) == pytest.approx(abs(a - b), rel=1e-6)  # float64 reference: Python arithmetic
    assert max_abs_diff([1.0, 2.0], torch.tensor([1.0, 2.5], dtype=torch.float32)) == 0.5
