"""The margin check (scripts/check_margins.py): its machinery, then every registered trajectory claim.

The machinery is tested on small cases written here; the claims themselves are re-run under the perturbations
that mimic another CPU (other seeds, a one-ulp nudge of the initial weights), one notebook per test. A claim that
flips — or a printed figure that would change on another CPU — fails the test with the margin report.
"""

from __future__ import annotations

import copy
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import check_margins as cm  # noqa: E402

#: What the suite re-runs: the committed trajectory is already run by nbval; these are the perturbed ones.
SUITE_PERTURBATIONS = ["seed+1", "seed+2", "ulp"]


def test_asserts_become_claims_with_their_bounds():
    source = (
        "x, y, flag = 3.0, 10.0, True\n"
        "assert x < 4, 'x stays small'\n"
        "assert 0.1 < y / 5 < 10 and flag\n"
        "for k in (1, 2):\n"
        "    assert k * x < y\n"
        "def f():\n"
        "    assert False  # inside a function: not a claim of the cell\n"
    )
    claims, instrumented = cm.instrument(source)
    assert [(c.value, c.op, c.bound) for c in claims] == [
        ("x", "<", "4"),
        ("y / 5", ">", "0.1"),  # a constant on the left is read as the bound
        ("y / 5", "<", "10"),
        ("flag", "true", ""),
        ("k * x", "<", "y"),
    ]
    assert claims[0].label == "x stays small [x < 4]"
    recorder = cm.Recorder(claims)
    exec(compile(instrumented, "<test>", "exec"), {"__claim__": recorder})
    worst = {claims[k].value: recorder.worst[k] for k in recorder.worst}
    assert worst["x"] == (pytest.approx(0.25), 3.0)  # (4 − 3) / 4
    assert worst["y / 5"][1] == 2.0
    assert worst["k * x"] == (pytest.approx(0.4), 6.0)  # the worse of the two passes: (10 − 6) / 10
    assert worst["flag"][0] == math.inf


def test_a_flipped_claim_has_no_margin():
    claims, instrumented = cm.instrument("v = float('nan')\nassert 2 > 3 or True\nassert v < 1\n")
    recorder = cm.Recorder(claims)
    with pytest.raises(AssertionError):
        exec(compile(instrumented, "<test>", "exec"), {"__claim__": recorder})
    assert recorder.worst[0][0] == math.inf  # `2 > 3 or True` is a yes/no claim, and it holds
    assert recorder.worst[1][0] == -math.inf  # NaN never satisfies a bound
    assert cm.margin(5.0, ">", 4.0) == pytest.approx(0.25)
    assert cm.margin(3.0, ">", 4.0) < 0
    assert cm.margin(1.0, "<=", 1.0) > 0 and cm.margin(1.0, "<", 1.0) == 0


def test_printed_figures_are_compared_as_nbval_compares_them(tmp_path, monkeypatch):
    committed = "loss after 10 steps 0.8405, after 300 steps ≈ 0.000117\n✓ a: max |diff| = 1.0e-07 ≤ tol 1e-06\n"
    monkeypatch.setattr(cm, "committed_outputs", lambda notebook: {4: committed, 5: None})
    same = "loss after 10 steps 0.8405, after 300 steps ≈ 0.000999\n✓ a: max |diff| = 3.0e-08 ≤ tol 1e-06\n"
    moved = "loss after 10 steps 0.8406, after 300 steps ≈ 0.000117\n✓ a: max |diff| = 1.0e-07 ≤ tol 1e-06\n"
    assert cm.printed_differences({"notebook": "nb", "printed": {"4": same, "5": "anything"}}) == []
    found = cm.printed_differences({"notebook": "nb", "printed": {"4": moved}})
    assert len(found) == 1 and "0.8406" in found[0]


def test_seed_shift_changes_every_generator():
    code = (
        "import random, numpy as np, torch, sys\n"
        "sys.path.insert(0, sys.argv[1]); import check_margins as cm\n"
        "def draw():\n"
        "    torch.manual_seed(0); a = torch.rand(1).item()\n"
        "    b = torch.rand(1, generator=torch.Generator().manual_seed(0)).item()\n"
        "    random.seed(0); c = random.random()\n"
        "    np.random.seed(0); d = np.random.rand()\n"
        "    e = np.random.default_rng(0).random()\n"
        "    return a, b, c, d, e\n"
        "before = draw(); cm._shift_seeds(1); after = draw()\n"
        "torch.manual_seed(1); expected = torch.rand(1).item()\n"  # seed 1 is now read as seed 2
        "torch.manual_seed(0); assert torch.rand(1).item() == after[0]\n"
        "print(all(x != y for x, y in zip(before, after)), after[0] != expected)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(ROOT / "scripts")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]


def test_ulp_nudge_moves_each_weight_one_ulp_once():
    handles = []
    original = torch.nn.modules.module.register_module_forward_pre_hook

    def register(hook):  # keep the handle, so the global hook is removed after the test
        handles.append(original(hook))
        return handles[-1]

    torch.nn.modules.module.register_module_forward_pre_hook = register
    try:
        cm._nudge_weights_before_first_forward()
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
        torch.nn.init.zeros_(net[1].bias)
        before = [p.detach().clone() for p in net.parameters()]
        net(torch.ones(1, 3))
        twin = copy.deepcopy(net)
        net(torch.ones(1, 3))
        twin(torch.ones(1, 3))
        for b, a, t in zip(before, net.parameters(), twin.parameters(), strict=True):
            expected = torch.where(b == 0, b, torch.nextafter(b, torch.full_like(b, math.inf)))
            assert torch.equal(a.detach(), expected) and torch.equal(t.detach(), expected)
        assert torch.equal(net[1].bias.detach(), torch.zeros(2))  # zeros stay zero
    finally:
        torch.nn.modules.module.register_module_forward_pre_hook = original
        for handle in handles:
            handle.remove()


def test_every_registered_cell_is_found_and_asserts_something():
    for notebook in dict.fromkeys(c.notebook for c in cm.TRAJECTORY_CELLS):
        claims = [c for cs, _ in cm.registered(notebook).values() for c in cs]
        assert claims, notebook


@pytest.mark.slow
@pytest.mark.parametrize("notebook", list(dict.fromkeys(c.notebook for c in cm.TRAJECTORY_CELLS)))
def test_trajectory_claims_hold_under_perturbation(notebook):
    ok, lines = cm.check(notebook, SUITE_PERTURBATIONS, {})
    print("\n".join(lines))
    assert ok, "\n".join(lines)
