"""Scaling laws, measured: small GPTs trained at fixed compute budgets on the course corpus (notebook 12).

Each run is one (model, budget) pair: a model of :data:`SHAPES` trained with minillm's own loop
(:class:`minillm.train.Trainer`) for as many steps as spend the FLOP budget (``GPT.flops_per_token`` per
token, forward and backward), with its own warmup and cosine decay ending at that step — so every point is a
properly annealed run, not a snapshot of a longer one. The budgets form isoFLOP profiles (Chinchilla's
approach 2), and the same points feed the fit of L(N, D) (approach 3). Validation loss is measured on every
non-overlapping window of the held-out stories::

    python -m minillm.experiments.scaling_sweep --out data/scaling                       # every run
    python -m minillm.experiments.scaling_sweep --out data/scaling --runs L1-d32@3e+11   # some runs
    python -m minillm.experiments.scaling_sweep --out /tmp/check --quick                 # tiny, for tests

Processes given disjoint ``--runs`` add their runs to ``sweep.json`` side by side (a file lock serialises
the writes), so the sweep can use every core. A run already in the file is replaced only with
``--overwrite`` (``--force``, its old name, still works).
Runs of other settings (``--quick`` ones into the course's sweep) are refused: one file is one sweep.
The file records this module's SHA-256 (``provenance``); a test fails when it is stale.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from minillm.batches import encode_documents
from minillm.data import load_text
from minillm.experiments.arguments import command_line, experiment_parser, parse_experiment_args
from minillm.experiments.provenance import provenance
from minillm.model import GPT, count_parameters
from minillm.paths import data_dir
from minillm.run_folder import differences, update_record
from minillm.scaling import ModelShape, matmul_parameters, non_embedding_parameters, steps_for_budget
from minillm.seed import seed_everything
from minillm.tokenizer import BPETokenizer
from minillm.train import TrainConfig, Trainer
from minillm.train.loop import validation_loss

RESULT = "sweep.json"
CONTEXT, BATCH = 64, 8  # 512 tokens a step: small batches give the smallest budgets enough steps
LR, MIN_LR, WARMUP_FRACTION, WEIGHT_DECAY = 3e-3, 3e-4, 0.05, 0.1
SEED = 0
#: about 13k to 790k non-embedding parameters
SHAPES = (ModelShape(1, 32, 2), ModelShape(2, 48, 2), ModelShape(2, 64, 4), ModelShape(3, 96, 4), ModelShape(4, 128, 4))
#: training FLOPs of each isoFLOP profile (about 3 CPU-seconds per 1e11 at ~40 GFLOP/s on one thread)
BUDGETS = (3e11, 6e11, 1.2e12, 2.4e12)
QUICK_SHAPES = (ModelShape(1, 16, 2), ModelShape(1, 32, 2))
QUICK_BUDGETS = (2e9, 4e9)


def run_name(shape: ModelShape, budget: float) -> str:
    return f"{shape.name}@{budget:.2g}"


def plan(quick: bool = False) -> dict[str, tuple[ModelShape, float]]:
    """run name -> (shape, FLOP budget): every shape at every budget."""
    shapes, budgets = (QUICK_SHAPES, QUICK_BUDGETS) if quick else (SHAPES, BUDGETS)
    return {run_name(s, c): (s, c) for c in budgets for s in shapes}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def corpus(quick: bool) -> tuple[BPETokenizer, np.ndarray, np.ndarray]:
    """The base model's tokenizer and the training and held-out stories as token streams."""
    tokenizer = BPETokenizer.load(data_dir() / "base" / "tokenizer.json")
    train = encode_documents(tokenizer, load_text(data_dir() / "stories_train.txt"))
    val = encode_documents(tokenizer, load_text(data_dir() / "stories_val.txt"))
    if quick:
        val = val[: 16 * CONTEXT + 1]
    return tokenizer, train, val


def train_one(shape: ModelShape, budget: float, vocab_size: int, train: np.ndarray, val: np.ndarray) -> dict[str, Any]:
    """Train ``shape`` for ``budget`` FLOPs with its own annealed schedule; return what the fit needs."""
    seed_everything(SEED)
    model = GPT(shape.config(vocab_size, CONTEXT))
    per_token = model.flops_per_token(CONTEXT)
    steps = steps_for_budget(budget, per_token, BATCH * CONTEXT)
    config = TrainConfig(
        n_layer=shape.n_layer, n_head=shape.n_head, d_model=shape.d_model, context_length=CONTEXT,
        vocab_size=vocab_size, batch_size=BATCH, max_steps=steps, lr=LR, min_lr=MIN_LR, schedule="cosine",
        warmup_steps=max(1, round(WARMUP_FRACTION * steps)), weight_decay=WEIGHT_DECAY, eval_interval=0,
        seed=SEED, progress=False,
    )  # fmt: skip
    start = time.time()
    history = Trainer(model, config, train).run()
    tail = history[-max(1, steps // 20) :]
    tokens = steps * BATCH * CONTEXT
    return {
        "n_layer": shape.n_layer, "d_model": shape.d_model, "n_head": shape.n_head, "budget": budget,
        "params": count_parameters(model.config), "non_embedding_params": non_embedding_parameters(model.config),
        "matmul_params": matmul_parameters(model.config), "flops_per_token": per_token, "steps": steps,
        "tokens": tokens, "flops": per_token * tokens, "epochs": tokens / len(train),
        "val_loss": validation_loss(model, val, CONTEXT, batch_size=32),
        "train_loss_end": sum(r["loss"] for r in tail) / len(tail), "seconds": round(time.time() - start, 1),
    }  # fmt: skip


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"runs": {}}


def _refuse_other_settings(path: Path, settings: dict[str, Any]) -> None:
    """Stop before any training when ``path`` holds runs made with other ``settings`` (``--quick`` ones too).

    Why: one file is one sweep, fitted as a whole; runs of another setting added to it (tiny quick runs into
    the course's ``data/scaling``) would quietly change the fit and relabel the file. Only the settings in
    both are compared, so the data's sizes can be checked once the corpus is loaded.
    """
    recorded = _read(path).get("config") or {}
    shared = [key for key in settings if key in recorded]
    changed = differences({k: recorded[k] for k in shared}, {k: settings[k] for k in shared})
    if changed:
        lines = ", ".join(f"{name}: {change}" for name, change in changed.items())
        raise SystemExit(
            f"error: {path} holds runs made with other settings ({lines}; recorded → now); a sweep file holds "
            "runs of one setting only, so nothing was added: choose another --out (--quick runs go to a folder "
            "of their own, e.g. /tmp/check), or move the file away to start a new sweep"
        )


def sweep(out: Path, names: list[str], quick: bool, overwrite: bool, command: str) -> None:
    """Train the named runs one after another, adding each to ``out/sweep.json`` as soon as it ends."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULT
    runs = plan(quick)
    settings: dict[str, Any] = {
        "context_length": CONTEXT, "batch_size": BATCH, "lr": LR, "min_lr": MIN_LR, "schedule": "cosine",
        "warmup_fraction": WARMUP_FRACTION, "weight_decay": WEIGHT_DECAY, "seed": SEED,
        "budgets": list(QUICK_BUDGETS if quick else BUDGETS), "quick": quick,
    }  # fmt: skip
    _refuse_other_settings(path, settings)
    present = [n for n in names if n in _read(path)["runs"]]
    if present and not overwrite:
        raise SystemExit(f"error: {path} already holds {', '.join(present)}; pass --overwrite to replace them")
    record = provenance(sys.modules[__name__], command)
    tokenizer, train, val = corpus(quick)
    settings.update(vocab_size=tokenizer.vocab_size, train_tokens=len(train), val_tokens=len(val))
    _refuse_other_settings(path, settings)
    for name in names:
        shape, budget = runs[name]
        run = train_one(shape, budget, tokenizer.vocab_size, train, val)
        run["provenance"] = record
        log(f"{name}: N={run['non_embedding_params']:,} D={run['tokens']:,} val loss {run['val_loss']:.4f} "
            f"({run['seconds']} s)")  # fmt: skip

        def add(latest: dict, name: str = name, run: dict = run) -> None:
            latest["runs"][name] = run
            latest["config"] = settings

        update_record(path, add)


def main(argv: list[str] | None = None) -> None:
    parser = experiment_parser(
        "python -m minillm.experiments.scaling_sweep",
        __doc__.split("\n\n")[0],
        "output folder (the course's is data/scaling)",
        legacy_force=True,
    )
    parser.add_argument("--runs", nargs="*", help="runs to do, default all: " + ", ".join(plan()))
    args = parse_experiment_args(parser, argv)
    runs = plan(args.quick)
    unknown = sorted(set(args.runs or ()) - set(runs))
    if unknown:
        parser.error(f"unknown runs {unknown}; choose from {', '.join(runs)}")
    sweep(args.out, list(args.runs or runs), args.quick, args.overwrite, command_line("scaling_sweep", args.quick))


if __name__ == "__main__":
    main()
