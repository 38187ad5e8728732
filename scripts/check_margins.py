"""Re-run the notebooks' training-trajectory claims under perturbations that mimic another CPU; report each margin.

    python scripts/check_margins.py                       # every claim, every perturbation (a few minutes)
    python scripts/check_margins.py --notebook 05_optimization --perturbation seed+1 ulp
    python scripts/check_margins.py --list                # the claims and what each asserts

Why: another CPU family rounds differently, and a chaotic training run amplifies that into another trajectory. A
claim the notebook asserts about such a run (warmup keeps the loss down, clipping absorbs a spike, forgetting grows
with the learning rate, …) must hold on every CPU, so it has to hold by a margin, not for one lucky trajectory.
This script cannot borrow another CPU, but it can do what another CPU does to a trajectory, only harder:

- ``seed+1``, ``seed+2``: every seed the notebook (and ``minillm``) sets is shifted — other initial weights, other
  batches, other samples. A claim that survives another seed survives another CPU's low digits.
- ``ulp``: every floating-point parameter of every module is moved by one unit in the last place (towards +inf)
  just before the module's first forward pass — the smallest change a CPU can make, at the very start.
- ``committed``: no perturbation, the trajectory the committed outputs show (its margin is the reference).

Float paths (``ATEN_CPU_CAPABILITY`` …) are the portability check's job (``scripts/check_portability.py``); pass
``--env ATEN_CPU_CAPABILITY=avx2`` here to run the claims under one as well.

Each run executes the notebook's code cells in order, in a fresh Python process (plots to a non-interactive
backend, widgets skipped), up to its last registered claim; after a claim's cell it evaluates the claim's
inequality in the notebook's namespace. The notebook's own ``assert``s run too, so any of them that flips is
caught as well. The margin of ``value < bound`` is the relative slack ``(bound − value) / |bound|`` (for ``>``:
``(value − bound) / |bound|``): 0.25 means the value could move 25 % of the bound's size before the claim flips.
Exit status 1 when a claim flips (margin ≤ 0) or a cell fails under any perturbation.
"""

from __future__ import annotations

import argparse
import ast
import configparser
import contextlib
import functools
import io
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


@dataclass(frozen=True)
class TrajectoryCell:
    """A notebook cell whose top-level ``assert``s are claims about a training trajectory (or a sampled statistic).

    ``marker`` is a piece of text found in exactly one code cell of ``notebook``. Each top-level assert of that cell
    becomes one or more claims: ``a < b`` (also ``<=``, ``>``, ``>=``, chained, or joined by ``and``) is measured
    with a margin; anything else (``assert flag``, ``==``) is a yes/no claim. Asserts nested in loops still run with
    the cell, so a flip there fails the cell.
    """

    notebook: str
    marker: str
    what: str


TRAJECTORY_CELLS: list[TrajectoryCell] = [
    TrajectoryCell("02_embeddings_and_positions", "accuracy = {pos: r[2]", "order task, 250 AdamW steps per scheme"),
    TrajectoryCell("03_attention", "assert val_loss < 2.5", "a byte-level GPT, 240 steps"),
    TrajectoryCell("05_optimization", 'curves["AdamW (lr 0.01)"][-1] < curves["SGD', "three optimisers, 300 steps"),
    TrajectoryCell("05_optimization", "stacks = {", "per-layer gradient norms of three 24-layer stacks at init"),
    TrajectoryCell("05_optimization", "spike_steps, spike_scale", "AdamW hit by three 100x gradient spikes"),
    TrajectoryCell("05_optimization", "def warmup_run(", "warmup vs none at lr 0.05 on a 12-layer ReLU MLP"),
    TrajectoryCell("05_optimization", "n_clipped = sum(", "60 float64 steps of a GPT with clipping"),
    TrajectoryCell("06_pretraining", 'val_points = [(r["step"] + 1', "a live pretraining run, 150 steps"),
    TrajectoryCell(
        "06_pretraining", "# our own measurement of the base model", "the shipped base model vs the live run"
    ),
    TrajectoryCell("06_pretraining", "verbatim = sum(story in set(stories)", "memorisation: seen vs unseen, copies"),
    TrajectoryCell("08_mixed_precision", "positions = y.numel()", "fp16 logit gradients of a model at init"),
    TrajectoryCell("08_mixed_precision", "scales = [2.0**k for k in range(0, 33, 2)]", "underflow vs loss scale"),
    TrajectoryCell("08_mixed_precision", "runs = {mode: precision.train_regression", "pure fp16 vs fp32 masters, SGD"),
    TrajectoryCell("08_mixed_precision", "def would_vanish_in_fp16", "60 mixed-precision steps: overflow skips"),
    TrajectoryCell("08_mixed_precision", "pure = fresh_mp().half()", "pure fp16 AdamW diverges"),
    TrajectoryCell("08_mixed_precision", "state = [pure_opt.state[p]", "why pure fp16 diverged"),
    TrajectoryCell("08_mixed_precision", "underflow, lost = np.nanmean", "what loss scale and masters save per step"),
    TrajectoryCell("08_mixed_precision", "train_batches = batches(24, seed=3)", "float32 training of the exercises"),
    TrajectoryCell("09_sft", "print(f\"{'run':14s} {'task loss'", "a live 6-rate SFT sweep: forgetting"),
    TrajectoryCell("09_sft", "full3, mix3, lora3 = results", "mixing and LoRA against forgetting, live"),
    TrajectoryCell("10_alignment", "live_rm_acc, _, _ = loops.reward_accuracy", "a reward model, 20 live steps"),
    TrajectoryCell("10_alignment", "samples = torch.multinomial(p_sft, 20000", "KL estimators on samples"),
    TrajectoryCell("10_alignment", "live_reward, live_kl, live_k3 = grpo_log", "the learner's GRPO loop, live"),
    TrajectoryCell("10_alignment", "late_acc, late_loss = sum(dpo_acc", "16 live DPO steps"),
    TrajectoryCell("12_scaling_laws", "for s in mini_shapes:", "a live mini-sweep: twice the compute, lower loss"),
    TrajectoryCell("14_evaluation", "boot = my_bootstrap_means(d, 20_000", "bootstrap vs closed form"),
    TrajectoryCell("14_evaluation", "endings, ending_scores = [], []", "next sentence by likelihood"),
    TrajectoryCell("14_evaluation", "report = {}", "two judges"),
    TrajectoryCell("14_evaluation", "gap = np.mean(half(after.scores, leaked))", "contamination: 60 SFT steps"),
    TrajectoryCell("15_inference", "p_spec, dof = chi2_p_value(tokens, p_real)", "speculative sampling: a χ² test"),
    TrajectoryCell("16_modern_llm", "z_runs[0.1, seed][-1][1] < z_runs[0.0, seed]", "z-loss, 40 live steps"),
]


@dataclass(frozen=True)
class Claim:
    """One asserted statement: ``value op bound`` (op one of < <= > >=), or a yes/no ``value`` (op "true")."""

    label: str
    value: str
    op: str
    bound: str = ""


_OPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _is_constant(node: ast.expr) -> bool:
    return all(
        isinstance(n, ast.Constant | ast.BinOp | ast.UnaryOp | ast.operator | ast.unaryop) for n in ast.walk(node)
    )


def _claims_of_assert(node: ast.Assert) -> list[tuple[Claim, ast.expr]]:
    """Split one assert into claims, each with the expression that measures it (a (value, bound) tuple or a flag)."""
    message = node.msg.value if isinstance(node.msg, ast.Constant) and isinstance(node.msg.value, str) else ""
    joined = isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.And)
    out = []
    for part in node.test.values if joined else [node.test]:
        if not (isinstance(part, ast.Compare) and all(type(op) in _OPS for op in part.ops)):
            text = ast.unparse(part)
            out.append((Claim(f"{message} [{text}]" if message else text, text, "true"), part))
            continue
        operands = [part.left, *part.comparators]
        for left, compare, right in zip(operands, part.ops, operands[1:], strict=False):
            op = _OPS[type(compare)]
            if _is_constant(left) and not _is_constant(right):  # 0.1 < x: read as x > 0.1, the bound on the right
                left, op, right = right, _FLIPPED[op], left
            text = f"{ast.unparse(left)} {op} {ast.unparse(right)}"
            claim = Claim(f"{message} [{text}]" if message else text, ast.unparse(left), op, ast.unparse(right))
            out.append((claim, ast.Tuple([left, right], ast.Load())))
    return out


def instrument(source: str) -> tuple[list[Claim], str]:
    """The claims of a cell's asserts (outside function bodies) and the cell rewritten to measure each one.

    Before each such assert the rewritten cell calls ``__claim__(k, [lambda: measure, ...])``, so an assert inside
    a loop is measured on every pass (its margin is the smallest); the assert itself still runs, as in the notebook.
    """
    tree = ast.parse(source)
    claims: list[Claim] = []

    def rewrite(body: list[ast.stmt]) -> list[ast.stmt]:
        new = []
        for stmt in body:
            if isinstance(stmt, ast.Assert):
                parts = _claims_of_assert(stmt)
                first = len(claims)
                claims.extend(c for c, _ in parts)
                lambdas = [ast.Lambda(ast.arguments([], [], None, [], [], None, []), e) for _, e in parts]
                call = ast.Call(
                    ast.Name("__claim__", ast.Load()), [ast.Constant(first), ast.List(lambdas, ast.Load())], []
                )
                new.append(ast.Expr(call))
            elif not isinstance(stmt, _SCOPES):
                for field in ("body", "orelse", "finalbody"):
                    if isinstance(getattr(stmt, field, None), list):
                        setattr(stmt, field, rewrite(getattr(stmt, field)))
            new.append(stmt)
        return new

    tree.body = rewrite(tree.body)
    return claims, ast.unparse(ast.fix_missing_locations(tree))


PERTURBATIONS = ("committed", "seed+1", "seed+2", "ulp")
#: Where the printed figures of the claim cells must also equal the committed ones (after nbval's sanitizing): the
#: perturbations that act like another CPU. Another seed legitimately prints other numbers; only its claims count.
COMPARE_PRINTED = ("committed", "ulp")


# --------------------------------------------------------------------------------------------------------------
# One run: execute a notebook's cells in this process, under one perturbation.


def _shift_seeds(offset: int) -> None:
    """Make every seeding call in torch, NumPy and Python's random set seed + offset instead of seed."""
    import random

    import numpy as np
    import torch

    manual_seed = torch.manual_seed
    torch.manual_seed = lambda seed: manual_seed(int(seed) + offset)
    torch.random.manual_seed = torch.manual_seed

    class ShiftedGenerator(torch.Generator):
        def manual_seed(self, seed):  # noqa: D102 - same as torch.Generator's
            return super().manual_seed(int(seed) + offset)

    torch.Generator = ShiftedGenerator
    random_seed = random.seed
    random.seed = lambda seed=None, *a, **k: random_seed(seed if seed is None else _plus(seed, offset), *a, **k)

    class ShiftedRandom(random.Random):
        def seed(self, seed=None, *a, **k):  # noqa: D102
            return super().seed(seed if seed is None else _plus(seed, offset), *a, **k)

    random.Random = ShiftedRandom
    np_seed, default_rng = np.random.seed, np.random.default_rng
    np.random.seed = lambda seed=None: np_seed(seed if seed is None else (int(seed) + offset) % 2**32)
    np.random.default_rng = lambda seed=None: default_rng(seed if seed is None else _plus(seed, offset))


def _plus(seed, offset: int):
    return seed + offset if isinstance(seed, int) else f"{seed}+{offset}"


def _nudge_weights_before_first_forward() -> None:
    """Move every non-zero floating parameter one ulp towards +inf the first time its module (or a parent) runs.

    Each module is nudged once, and a copy of a module already nudged (``copy.deepcopy``) is not nudged again, so
    that the notebook's own exact comparisons between a model and its copies still compare like with like. Zeros
    stay zero: an initialisation to exactly 0 comes out 0 on every CPU.
    """
    import torch

    def hook(module, _inputs):
        for m in module.modules():
            if getattr(m, "_margin_nudged", False):
                continue
            with torch.no_grad():
                for p in m.parameters(recurse=False):
                    if p.is_floating_point():
                        p.copy_(torch.where(p == 0, p, torch.nextafter(p, torch.full_like(p, math.inf))))
            m._margin_nudged = True

    torch.nn.modules.module.register_module_forward_pre_hook(hook)


def code_cells(notebook: str) -> list[str]:
    cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def cell_index(sources: list[str], cell: TrajectoryCell) -> int:
    hits = [i for i, s in enumerate(sources) if cell.marker in s]
    if len(hits) != 1:
        raise LookupError(f"{cell.notebook}: {cell.marker!r} is in {len(hits)} code cells, expected exactly 1")
    return hits[0]


def registered(notebook: str) -> dict[int, tuple[list[Claim], str]]:
    """The claims of ``notebook`` and the instrumented source, by the index of the code cell they are asserted in."""
    sources = code_cells(notebook)
    at = {}
    for cell in (c for c in TRAJECTORY_CELLS if c.notebook == notebook):
        index = cell_index(sources, cell)
        claims, source = instrument(sources[index])
        if not claims:
            raise LookupError(f"{notebook}: the cell with {cell.marker!r} asserts nothing outside function bodies")
        at[index] = (claims, source)
    return at


def margin(value: float, op: str, bound: float) -> float:
    """Relative slack of ``value op bound``: > 0 when the claim holds, ≤ 0 (or -inf for NaN) when it flips."""
    if math.isnan(value) or math.isnan(bound):
        return -math.inf
    if math.isinf(value) or math.isinf(bound):
        holds = value < bound if op in ("<", "<=") else value > bound
        return math.inf if holds else -math.inf
    slack = (bound - value) if op in ("<", "<=") else (value - bound)
    if slack == 0 and op in ("<=", ">="):
        return math.ulp(1.0)  # holds, with no room at all
    return slack / (abs(bound) if bound != 0 else 1.0)


class Recorder:
    """``__claim__`` for the instrumented cells: keeps each claim's smallest margin and the value that gave it."""

    def __init__(self, claims: list[Claim]) -> None:
        self.claims = claims
        self.worst: dict[int, tuple[float, float]] = {}  # claim index -> (margin, value)

    def __call__(self, first: int, measures: list) -> None:
        for k, measure in enumerate(measures, start=first):
            claim = self.claims[k]
            try:
                measured = measure()
                if claim.op == "true":
                    value = float(bool(measured))
                    found = (math.inf if value else -math.inf, value)
                else:
                    value, bound = float(measured[0]), float(measured[1])
                    found = (margin(value, claim.op, bound), value)
            except Exception:  # noqa: BLE001 - e.g. a later part of `a and b` that needs a to hold
                found = (-math.inf, math.nan)
            if k not in self.worst or found[0] < self.worst[k][0]:
                self.worst[k] = found


def run_notebook(notebook: str, perturbation: str) -> dict:
    """Execute ``notebook`` up to its last claim under ``perturbation``; return each claim's value and margin."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    if perturbation.startswith("seed+"):
        _shift_seeds(int(perturbation.removeprefix("seed+")))
    elif perturbation == "ulp":
        _nudge_weights_before_first_forward()
    elif perturbation != "committed":
        raise ValueError(f"unknown perturbation {perturbation!r}; choose from {', '.join(PERTURBATIONS)}")
    at = registered(notebook)
    sources = code_cells(notebook)
    namespace: dict = {"__name__": "__main__"}
    os.chdir(NOTEBOOKS)  # notebooks run from their own folder
    results, error, outputs = [], None, {}
    import matplotlib.pyplot as plt

    for index, source in enumerate(sources[: max(at) + 1]):
        if "ipywidgets" in source:  # a widget needs a live front end; its static figure is in another cell
            continue
        claims, source = at.get(index, ([], source))
        recorder = namespace["__claim__"] = Recorder(claims)
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(source, f"<{notebook} code cell {index}>", "exec"), namespace)
        except Exception as exc:  # noqa: BLE001 - any failure of a cell is a finding, reported with its cell
            error = f"code cell {index} raised {type(exc).__name__}: {str(exc)[:300]}"
        plt.close("all")
        for k, claim in enumerate(claims):
            worst, value = recorder.worst.get(k, (-math.inf, math.nan))
            results.append({"label": claim.label, "value": value, "margin": worst})
        if claims:
            outputs[index] = printed.getvalue()
        if error:
            break
    return {"notebook": notebook, "perturbation": perturbation, "claims": results, "error": error, "printed": outputs}


# --------------------------------------------------------------------------------------------------------------
# The check: every notebook under every perturbation, each run in its own process.


@functools.cache
def _sanitizers() -> list[tuple[re.Pattern[str], str]]:
    """The test suite's nbval sanitizers (tests/nbval_sanitize.cfg), read once."""
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "tests" / "nbval_sanitize.cfg", encoding="utf-8")
    return [(re.compile(config[s]["regex"]), config[s]["replace"]) for s in config.sections()]


def sanitize(text: str) -> str:
    """Apply the nbval sanitizers to ``text``, as nbval does before comparing."""
    for pattern, replace in _sanitizers():
        text = pattern.sub(replace, text)
    return text


def committed_outputs(notebook: str) -> dict[int, str | None]:
    """Each code cell's committed stdout, by code-cell index; None where nbval does not compare the cell's output."""
    cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text(encoding="utf-8"))["cells"]
    out = {}
    for index, cell in enumerate(c for c in cells if c["cell_type"] == "code"):
        source, tags = "".join(cell["source"]), cell.get("metadata", {}).get("tags", [])
        ignored = "NBVAL_IGNORE_OUTPUT" in source or "nbval-ignore-output" in tags
        streams = [o for o in cell.get("outputs", []) if o.get("output_type") == "stream" and o["name"] == "stdout"]
        out[index] = None if ignored else "".join("".join(o["text"]) for o in streams)
    return out


def printed_differences(run: dict) -> list[str]:
    """The claim cells whose printed figures (sanitized, as nbval compares them) differ from the committed ones."""
    committed = committed_outputs(run["notebook"])
    found = []
    for index, printed in run.get("printed", {}).items():
        expected = committed.get(int(index))
        if expected is None:
            continue
        ours, theirs = sanitize(printed).splitlines(), sanitize(expected).splitlines()
        for line_no, (a, b) in enumerate(zip(ours, theirs, strict=False)):
            if a != b:
                found.append(f"code cell {index}, line {line_no + 1}: printed {a!r}, committed {b!r}")
                break
        else:
            if len(ours) != len(theirs):
                found.append(f"code cell {index}: printed {len(ours)} lines, committed {len(theirs)}")
    return found


def run_in_subprocess(notebook: str, perturbation: str, env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        command = [sys.executable, __file__, "--one", notebook, perturbation, str(out)]
        done = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True)
        if not out.is_file():
            tail = (done.stderr or done.stdout)[-1500:]
            return {
                "notebook": notebook,
                "perturbation": perturbation,
                "claims": [],
                "error": f"the run exited {done.returncode} without a result: {tail}",
            }
        return json.loads(out.read_text(encoding="utf-8"))


def _shown(value: float) -> str:
    return f"{value:+.0%}" if math.isfinite(value) else ("yes" if value > 0 else "NO")


def check(notebook: str, perturbations: list[str], env: dict[str, str]) -> tuple[bool, list[str]]:
    """Run one notebook under every perturbation; return (all its claims held, report lines)."""
    runs = [run_in_subprocess(notebook, p, env) for p in perturbations]
    ok, lines = True, [f"{notebook}:"]
    for claim in (c for claims, _ in registered(notebook).values() for c in claims):
        worst, cells = math.inf, []
        for run in runs:
            found = next((r for r in run["claims"] if r["label"] == claim.label), None)
            if found is None:
                worst = -math.inf
                cells.append(f"{run['perturbation']} not reached")
                continue
            worst = min(worst, found["margin"])
            shown = (
                f"{found['value']:.3g} ({_shown(found['margin'])})" if claim.op != "true" else _shown(found["margin"])
            )
            cells.append(f"{run['perturbation']} {shown}")
        ok &= worst > 0
        lines.append(f"  {'holds' if worst > 0 else 'FLIPS':5s}  min margin {_shown(worst):>6s}  {claim.label}")
        lines.append("         " + "; ".join(cells))
    for run in runs:
        if run["error"]:
            ok = False
            lines.append(f"  FAILED under {run['perturbation']}: {run['error']}")
        if run["perturbation"] in COMPARE_PRINTED:
            for difference in printed_differences(run):
                ok = False
                lines.append(f"  PRINTED FIGURE FLIPS under {run['perturbation']}: {difference}")
    return ok, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notebook", nargs="+", help="notebook names without .ipynb (default: every one with claims)")
    parser.add_argument("--perturbation", nargs="+", choices=PERTURBATIONS, default=list(PERTURBATIONS))
    parser.add_argument("--env", nargs="*", default=[], metavar="NAME=VALUE", help="environment for every run")
    parser.add_argument("--list", action="store_true", help="list the claims and exit")
    parser.add_argument("--one", nargs=3, metavar=("NOTEBOOK", "PERTURBATION", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        notebook, perturbation, out = args.one
        Path(out).write_text(json.dumps(run_notebook(notebook, perturbation)), encoding="utf-8")
        return 0
    known = list(dict.fromkeys(c.notebook for c in TRAJECTORY_CELLS))
    if args.list:
        for notebook in known:
            for claims, _ in registered(notebook).values():
                for c in claims:
                    print(f"{notebook}: {c.label}")
        return 0
    notebooks = args.notebook or known
    unknown = sorted(set(notebooks) - set(known))
    if unknown:
        parser.error(f"no claims registered for {', '.join(unknown)}; notebooks with claims: {', '.join(known)}")
    env = dict(item.split("=", 1) for item in args.env)
    all_ok = True
    for notebook in notebooks:
        ok, lines = check(notebook, args.perturbation, env)
        print("\n".join(lines), flush=True)
        all_ok &= ok
    print("every claim holds under every perturbation" if all_ok else "some claim flips (or a cell failed): see above")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
