"""Does cleaning pay? A tiny GPT trained on the raw messy corpus vs on its cleaned text (notebook 13).

Both arms see the same number of steps and tokens, the same model, initialisation, learning-rate schedule and
batch draws; only the text differs: the raw crawl of :func:`minillm.textdata.messy_corpus` (junk, copies and
all) or what :func:`minillm.textdata.clean_documents` keeps. Each is scored on the same clean held-out course
stories (``data/stories_val.txt``) every ``eval_every`` steps, for several seeds. A few hundred steps are not
enough to tell the arms apart reliably (which run leaves the early loss plateau first is close to chance), so
the curves are computed once, longer, here::

    python -m minillm.experiments.clean_vs_raw --out data/textdata --overwrite     # about 10 CPU-minutes
    python -m minillm.experiments.clean_vs_raw --out /tmp/check --quick            # tiny sizes, seconds

The file records this module's SHA-256 (``provenance``); ``tests/test_textdata.py`` fails when it is stale.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from minillm.batches import RandomWindows, encode_documents
from minillm.data import load_stories
from minillm.experiments.provenance import provenance
from minillm.model import GPT, GPTConfig
from minillm.optim import warmup_cosine
from minillm.paths import data_path
from minillm.textdata import clean_documents, corpus_text, messy_corpus
from minillm.tokenizer import BPETokenizer
from minillm.train.loop import lm_loss, validation_loss

RESULT = "clean_vs_raw.json"


@dataclass(frozen=True)
class Settings:
    """Everything that fixes the experiment (recorded in the result file)."""

    n_docs: int = 2000  # messy documents (about half of them are new course stories)
    corpus_seed: int = 0
    val_stories: int = 100  # the first stories of data/stories_val.txt
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    context: int = 64
    batch_size: int = 16
    steps: int = 1500
    max_lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 50
    eval_every: int = 100
    seeds: tuple[int, ...] = (0, 1, 2)


QUICK = Settings(n_docs=200, val_stories=10, steps=20, warmup_steps=5, eval_every=10, seeds=(0,))


def token_streams(settings: Settings) -> tuple[dict[str, np.ndarray], np.ndarray, BPETokenizer]:
    """The two training streams (``raw``, ``clean``), the validation stream and the course tokenizer."""
    tokenizer = BPETokenizer.load(data_path("base/tokenizer.json"))
    docs = messy_corpus(load_stories(data_path("stories_train.txt")), settings.n_docs, settings.corpus_seed)
    kept, _ = clean_documents([d.text for d in docs])
    streams = {
        "raw": encode_documents(tokenizer, corpus_text(docs)),
        "clean": encode_documents(tokenizer, corpus_text(kept)),
    }
    val_text = "\n\n".join(load_stories(data_path("stories_val.txt"))[: settings.val_stories])
    return streams, encode_documents(tokenizer, val_text), tokenizer


def make_model(settings: Settings, vocab_size: int, seed: int) -> GPT:
    """The tiny GPT both arms train, initialised from ``seed`` (the same weights for both)."""
    torch.manual_seed(seed)
    config = GPTConfig(
        vocab_size=vocab_size,
        context_length=settings.context,
        n_layer=settings.n_layer,
        n_head=settings.n_head,
        d_model=settings.d_model,
    )
    return GPT(config)


def train_arm(
    settings: Settings, tokens: np.ndarray, val_tokens: np.ndarray, vocab_size: int, seed: int
) -> dict[str, list]:
    """One run: AdamW with warmup + cosine on random windows of ``tokens``; validation loss every ``eval_every``."""
    model = make_model(settings, vocab_size, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.max_lr, weight_decay=0.1)
    batches = RandomWindows(tokens, settings.batch_size, settings.context, seed=seed)
    steps, val_losses, train_losses = [], [], []
    for step in range(settings.steps):
        for group in optimizer.param_groups:
            group["lr"] = warmup_cosine(
                step,
                max_lr=settings.max_lr,
                warmup_steps=settings.warmup_steps,
                total_steps=settings.steps,
                min_lr=settings.min_lr,
            )
        loss = lm_loss(model, batches.next_batch())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        train_losses.append(round(loss.item(), 4))
        if (step + 1) % settings.eval_every == 0:
            steps.append(step + 1)
            val_losses.append(validation_loss(model, val_tokens, settings.context))
    return {"steps": steps, "val_loss": val_losses, "train_loss": train_losses}


def run(settings: Settings, command: str) -> dict[str, Any]:
    """Every arm and seed; the JSON payload of the result file."""
    torch.set_num_threads(1)  # bit-identical to the notebook's and the tests' kernels on the same CPU
    streams, val_tokens, tokenizer = token_streams(settings)
    payload: dict[str, Any] = {
        "settings": asdict(settings),
        "tokens": {name: int(len(ids)) for name, ids in streams.items()} | {"val": int(len(val_tokens))},
        "runs": {},
        "provenance": provenance(sys.modules[__name__], command),
    }
    for seed in settings.seeds:
        for name, ids in streams.items():
            started = time.perf_counter()
            result = train_arm(settings, ids, val_tokens, tokenizer.vocab_size, seed)
            payload["runs"][f"{name}_seed{seed}"] = {"arm": name, "seed": seed, **result}
            print(
                f"{name} seed {seed}: val loss {result['val_loss'][-1]:.3f} after {settings.steps} steps "
                f"({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
    return payload


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for clean_vs_raw.json (the course's is data/textdata)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing result file")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check the code path in seconds")
    args = parser.parse_args(argv)
    path = Path(args.out) / RESULT
    if path.exists() and not args.overwrite:
        parser.error(f"{path} exists; pass --overwrite to replace it")
    command = "python -m minillm.experiments.clean_vs_raw " + " ".join(argv if argv is not None else sys.argv[1:])
    payload = run(QUICK if args.quick else Settings(), command)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
