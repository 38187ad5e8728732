"""Every notebook computes on the device ``setup()`` picks: a GPU when present, the CPU otherwise.

Static checks on the notebooks' code (nothing is executed): the setup cell binds ``device``, and a
notebook that builds or loads a model also moves work to ``device`` somewhere after it. The committed
outputs come from the CPU, where ``.to(device)`` changes nothing; these tests keep the GPU path from
being forgotten when a notebook changes. Code is read with ``ast``, so comments and strings that
merely mention ``device`` or ``GPT(`` do not count.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

#: Calls that build or load a model (or train one) and so should run on ``device``.
MODEL_CALLS = frozenset({"GPT", "load_pretrained", "Trainer"})


def _code_cells(notebook: dict) -> list[str]:
    """Sources of the non-empty code cells, in order."""
    sources = ("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
    return [s for s in sources if s.strip()]


def _parse(source: str) -> ast.Module:
    """Parse a cell; IPython magics and shell lines (``%...``, ``!...``) are dropped first."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    return ast.parse("\n".join(lines))


def _call_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _is_nn_module(base: ast.expr) -> bool:
    """``nn.Module`` or ``torch.nn.Module`` as a class base."""
    return isinstance(base, ast.Attribute) and base.attr == "Module" and ast.unparse(base.value) in ("nn", "torch.nn")


def builds_a_model(tree: ast.Module) -> bool:
    """True if the code calls ``GPT(``, ``load_pretrained(`` or ``Trainer(``, or subclasses ``nn.Module``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) in MODEL_CALLS:
            return True
        if isinstance(node, ast.ClassDef) and any(_is_nn_module(b) for b in node.bases):
            return True
    return False


def uses_device(tree: ast.Module) -> bool:
    """True if the code calls ``<x>.to(device, ...)`` / ``.to(device=device)`` or passes ``device=device``."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if any(k.arg == "device" and _is_name(k.value, "device") for k in node.keywords):
            return True
        if isinstance(node.func, ast.Attribute) and node.func.attr == "to" and node.args:
            if _is_name(node.args[0], "device"):
                return True
    return False


def assigns_device_from_setup(tree: ast.Module) -> bool:
    """True if the cell has the statement ``device = setup(...)``."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            targets_device = any(_is_name(t, "device") for t in node.targets)
            if targets_device and _call_name(node.value) == "setup":
                return True
    return False


def device_problems(notebook: dict) -> list[str]:
    """What keeps a notebook from following the device convention (empty when it does)."""
    cells = _code_cells(notebook)
    if not cells:
        return ["the notebook has no code cells"]
    problems = []
    if not assigns_device_from_setup(_parse(cells[0])):
        problems.append("the first code cell does not assign `device = setup(...)`")
    later = [_parse(source) for source in cells[1:]]
    if any(builds_a_model(tree) for tree in later) and not any(uses_device(tree) for tree in later):
        problems.append("it builds or loads a model but never uses `.to(device)` or `device=device`")
    return problems


# ------------------------------------------------------------------------------------------ the notebooks


def test_every_course_notebook_is_checked() -> None:
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(17)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_follows_the_device_convention(path: Path) -> None:
    problems = device_problems(json.loads(path.read_text(encoding="utf-8")))
    assert not problems, f"{path.name}: " + "; ".join(problems)


# ------------------------------------------------------------------- the checker itself, on made-up notebooks

SETUP_CELL = "from minillm.notebook import setup\ndevice = setup(seed=0)\n"


def _notebook(*sources: str) -> dict:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# Title\n"]}]
    cells += [{"cell_type": "code", "metadata": {}, "source": s.splitlines(keepends=True)} for s in sources]
    return {"cells": cells}


def test_a_model_that_never_meets_the_device_is_reported() -> None:
    problems = device_problems(_notebook(SETUP_CELL, "model = GPT(config)\nloss = model(ids).mean()\n"))
    assert problems == ["it builds or loads a model but never uses `.to(device)` or `device=device`"]


@pytest.mark.parametrize(
    "builder",
    [
        "base, tok, meta = load_pretrained(folder)\n",
        "trainer = Trainer(model, config, train_ids)\n",
        "class Net(nn.Module):\n    pass\n",
        "class Net(torch.nn.Module):\n    pass\n",
    ],
)
def test_every_kind_of_model_building_counts(builder: str) -> None:
    assert device_problems(_notebook(SETUP_CELL, builder))
    assert not device_problems(_notebook(SETUP_CELL, builder, "x = x.to(device)\n"))


def test_device_named_only_in_a_comment_or_a_string_does_not_count() -> None:
    cell = 'model = GPT(config)  # model.to(device) would go here\nprint("Trainer(..., device=device)")\n'
    assert device_problems(_notebook(SETUP_CELL, cell))


def test_model_named_only_in_a_comment_or_a_string_needs_no_device() -> None:
    assert not device_problems(_notebook(SETUP_CELL, '# a GPT(config) comes later\nprint("Trainer(")\n'))


@pytest.mark.parametrize(
    "use",
    [
        "model = GPT(config).to(device)\n",
        "model = GPT(config)\nx = x.to(device, non_blocking=True)\n",
        "model = GPT(config)\nmodel.to(device=device)\n",
        "trainer = Trainer(GPT(config), config, ids, device=device)\n",
        "base, tok, meta = load_pretrained(folder, device=device)\n",
        "model = GPT(config)\ng = torch.Generator(device=device)\n",
    ],
)
def test_each_form_of_using_the_device_is_accepted(use: str) -> None:
    assert not device_problems(_notebook(SETUP_CELL, use))


def test_other_devices_do_not_count() -> None:
    for use in ("model = GPT(config).to('cuda')\n", "model = GPT(config).cpu()\n", "m = GPT(c).to(dev)\n"):
        assert device_problems(_notebook(SETUP_CELL, use)), use


def test_the_device_must_come_from_setup_in_the_first_code_cell() -> None:
    moved = "model = GPT(config).to(device)\n"
    for first in ("device = torch.device('cpu')\n", "setup(seed=0)\n", "import torch\n"):
        problems = device_problems(_notebook(first, SETUP_CELL, moved))
        assert problems == ["the first code cell does not assign `device = setup(...)`"], first


def test_using_the_device_only_in_the_setup_cell_is_not_enough() -> None:
    assert device_problems(_notebook(SETUP_CELL + "x = torch.zeros(2).to(device)\n", "model = GPT(config)\n"))


def test_a_notebook_without_models_needs_no_device() -> None:
    assert not device_problems(_notebook(SETUP_CELL, "x = torch.randn(4, 8)\nprint(x.shape)\n"))


def test_magics_do_not_break_the_parser() -> None:
    assert not device_problems(_notebook(SETUP_CELL, "%time model = 1\n!ls\nmodel = GPT(config).to(device)\n"))
