"""Forgetting as a curve, 300 steps long: the SFT learning-rate sweep and its two mitigations (notebook 09).

Notebook 09 sweeps the learning rate live for 12 steps and measures the held-out SFT *loss*; the task score
that matters — the gold scorer's — needs longer runs and hundreds of generated replies, minutes each. This
module runs that sweep once, with the loop the notebook validates (:func:`minillm.sft.train_sft`) at the sizes
and with the evaluation of ``posttrain``'s ``sft`` stage (300 steps of 16 conversations from
``data/base_long/``; gold score of greedy and sampled replies to the same 48 prompts; the pretraining
validation loss on the same held-out stories)::

    python -m minillm.experiments.sft_sweep --out data/posttrain --overwrite                     # every run
    python -m minillm.experiments.sft_sweep --out data/posttrain --overwrite --runs full_0.001 lora_0.01
    python -m minillm.experiments.sft_sweep --out /tmp/check --quick                           # tiny sizes

Three families of runs, each at several learning rates, all from the same base weights on the same batches:
``full`` (every weight trains), ``mix`` (full, plus the next-token loss of pretraining windows added to every
step) and ``lora`` (rank-8 adapters on the attention and MLP matrices, everything else frozen). Processes given
disjoint ``--runs`` add their runs to ``sft_sweep.json`` side by side (a file lock serialises the writes), so the
sweep can use every core. The file records this module's SHA-256 (``provenance``); a test fails when it is stale.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from minillm import chat, lora, sft
from minillm.batches import RandomWindows, encode_stories
from minillm.data import load_jsonl, load_stories
from minillm.experiments.arguments import command_line, experiment_parser, parse_experiment_args
from minillm.experiments.posttrain import PosttrainRuns, Sizes, log
from minillm.experiments.provenance import provenance
from minillm.paths import data_dir
from minillm.run_folder import RunFolderError
from minillm.seed import seed_everything

RESULT = "sft_sweep.json"
FULL_LRS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 6e-3, 1e-2)  # up to and above the 3e-3 pretraining peak
MIX_LRS = (1e-3, 3e-3, 1e-2)
LORA_LRS = (1e-3, 3e-3, 1e-2, 3e-2)  # adapters start at zero and move a subspace: they take larger rates
LORA_RANK, LORA_ALPHA = 8, 16
MIX_WINDOWS, MIX_WEIGHT, MIX_STORIES = 4, 1.0, 2000  # pretraining windows (full context) per step, their weight

#: run name -> (family, learning rate)
RUNS: dict[str, tuple[str, float]] = {
    **{f"full_{lr:g}": ("full", lr) for lr in FULL_LRS},
    **{f"mix_{lr:g}": ("mix", lr) for lr in MIX_LRS},
    **{f"lora_{lr:g}": ("lora", lr) for lr in LORA_LRS},
}
#: what a run keeps of posttrain's evaluation (the replies themselves stay in sft.json for its two runs)
KEPT = ("gold", "gold_by_kind", "gold_sampled", "val_loss", "scores")


class SFTSweep(PosttrainRuns):
    """The sweep's runs, written into ``out/sft_sweep.json``; an existing run is replaced only with ``overwrite``."""

    def pretraining_windows(self, tok, context: int) -> RandomWindows:
        """Windows of training stories (the pretraining distribution) for the ``mix`` runs, seeded."""
        ids = encode_stories(tok, load_stories(data_dir() / "stories_train.txt")[:MIX_STORIES])
        return RandomWindows(ids.tolist(), MIX_WINDOWS, context, seed=0)

    def sweep(self, names: list[str]) -> None:
        path = self.out / RESULT
        done = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"runs": {}}
        present = [n for n in names if n in done["runs"]]
        if present and not self.overwrite:
            raise RunFolderError(
                f"{path} already holds {', '.join(present)}; pass --overwrite to replace them, or choose another --out"
            )
        s = self.sizes
        base, tok = self.load_model(self.base)
        context = base.config.context_length
        pad = chat.special_token_id(tok, chat.END)
        rows = load_jsonl(data_dir() / "sft_train.jsonl", required=("messages",))
        examples = sft.fitting_examples(rows, tok, context)
        stream, prompts = self.val_stream(tok), self.eval_set(tok, context)
        base_eval = self.evaluate(base, tok, prompts, stream)
        log(f"base: gold {base_eval['gold']:.3f}, val loss {base_eval['val_loss']:.4f}")
        for name in names:
            family, lr = RUNS[name]
            seed_everything(0)
            model = copy.deepcopy(base)
            mixing: dict[str, Any] = {}
            if family == "lora":
                lora.apply_lora(model, LORA_RANK, LORA_ALPHA, generator=torch.Generator().manual_seed(0))
            elif family == "mix":
                windows = self.pretraining_windows(tok, context)
                mixing = {"pretrain_batches": windows.next_batch, "pretrain_weight": MIX_WEIGHT}
            start = time.time()
            history = sft.train_sft(
                model, examples, pad, s.sft_steps, lr, s.sft_batch, generator=torch.Generator().manual_seed(0), **mixing
            )
            if family == "lora":
                model = lora.merge_lora(model)
            evaluation = self.evaluate(model, tok, prompts, stream)
            run = {key: evaluation[key] for key in KEPT}
            run.update(
                family=family, lr=lr, final_loss=sum(history.loss[-20:]) / len(history.loss[-20:]),
                seconds=round(time.time() - start, 1), provenance=self.provenance,
            )  # fmt: skip
            rise = run["val_loss"] - base_eval["val_loss"]
            log(f"{name}: gold {run['gold']:.3f}, rise of val loss {rise:+.4f} ({run['seconds']} s)")

            def add(latest: dict, name: str = name, run: dict = run) -> None:
                latest["runs"][name] = run
                latest.update(
                    base={key: base_eval[key] for key in KEPT},
                    prompts=prompts,
                    config={
                        "steps": s.sft_steps, "batch_size": s.sft_batch, "lora_rank": LORA_RANK,
                        "lora_alpha": LORA_ALPHA, "mix_windows": MIX_WINDOWS, "mix_weight": MIX_WEIGHT,
                        "mix_stories": MIX_STORIES,
                    },
                )  # fmt: skip

            self.update_json(RESULT, add)


def main(argv: list[str] | None = None) -> None:
    parser = experiment_parser(
        "python -m minillm.experiments.sft_sweep",
        __doc__.split("\n\n")[0],
        "output folder (the course's is data/posttrain)",
    )
    parser.add_argument("--runs", nargs="*", help="runs to (re)do, default all: " + ", ".join(RUNS))
    parser.add_argument("--base", type=Path, help="base model folder (default: data/base_long)")
    args = parse_experiment_args(parser, argv)
    unknown = sorted(set(args.runs or ()) - set(RUNS))
    if unknown:
        parser.error(f"unknown runs {unknown}; choose from {', '.join(RUNS)}")
    command = command_line("sft_sweep", args.quick)
    sweep = SFTSweep(
        args.out,
        args.base or data_dir() / "base_long",
        Sizes.quick() if args.quick else Sizes(),
        args.overwrite,
        command,
    )
    # PosttrainRuns records its own module; the sweep's results must name this one
    sweep.provenance = provenance(sys.modules[__name__], command)
    try:
        sweep.sweep(list(args.runs or RUNS))
    except (RunFolderError, FileNotFoundError) as error:
        raise SystemExit(f"error: {error}") from error


if __name__ == "__main__":
    main()
