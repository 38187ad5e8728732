"""What does each cleaning step buy? A tiny GPT trained on five curations of one messy crawl (notebook 13).

The five arms differ only in the text: the ``raw`` crawl of :func:`minillm.textdata.messy_corpus` as it comes;
``normalise`` (Unicode and whitespace normalisation only); ``dedup`` (normalise + exact and near dedup, no
filters); ``filter`` (normalise + quality and language filters, no dedup); ``clean`` (all of it). Normalisation
has an arm of its own because every other step runs on normalised text: without it, what dedup or the filters buy
could not be told from what normalising buys. The language step *routes*: Spanish pages are another language, not
junk, so the filtered arms set them aside as a Spanish corpus of their own (counted, not trained on here)
instead of mixing them into the English training text.

Fair comparison: every arm trains on a stream of exactly the same number of tokens (``tokens_per_arm``, taken
from the start of its curated text, in crawl order) for the same number of steps, so every arm sees the same
tokens in all and each of its tokens the same number of times (``epochs``) — only the curation differs. The
price of curation shows elsewhere: to fill the same stream a cleaner arm reads more of the crawl
(``crawl_docs``). Each run is scored every ``eval_every`` steps on held-out clean English course stories
(``data/stories_val.txt``) and on held-out Spanish stories from the generator's Spanish grammar (a seed the
crawl does not use), for several seeds (initialisation and batch order; the crawl is the same)::

    python -m minillm.experiments.clean_vs_raw --out data/textdata --overwrite     # about 15 CPU-minutes
    python -m minillm.experiments.clean_vs_raw --out /tmp/check --quick            # tiny sizes, seconds

The file records this module's SHA-256 (``provenance``); ``tests/test_textdata.py`` fails when it is stale.
"""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from minillm.batches import RandomWindows, encode_documents
from minillm.data import load_stories
from minillm.experiments.arguments import run_one_file_experiment
from minillm.experiments.provenance import provenance
from minillm.model import GPT, GPTConfig
from minillm.optim import warmup_cosine
from minillm.paths import data_path
from minillm.textdata import MessyDocument, Pipeline, messy_corpus
from minillm.textdata.messy import spanish_story
from minillm.tokenizer import BPETokenizer
from minillm.train.loop import lm_loss, validation_loss

RESULT = "clean_vs_raw.json"

#: The arms, in the order tables list them, and the pipeline steps each runs (raw runs none).
ARMS: dict[str, str] = {
    "raw": "nothing: the crawl as it comes",
    "normalise": "normalise",
    "dedup": "normalise, exact dedup, near dedup",
    "filter": "normalise, quality filter, language routing",
    "clean": "normalise, exact dedup, near dedup, quality filter, language routing",
}


@dataclass(frozen=True)
class Settings:
    """Everything that fixes the experiment (recorded in the result file)."""

    n_docs: int = 14500  # messy documents: enough that the cleanest arm still fills tokens_per_arm
    corpus_seed: int = 0
    val_stories: int = 100  # the first stories of data/stories_val.txt
    val_spanish: int = 40  # held-out Spanish stories (seeded apart from the crawl)
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    context: int = 64
    batch_size: int = 16
    steps: int = 960
    epochs: int = 1  # each arm's stream is steps·batch·context / epochs tokens
    max_lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 50
    eval_every: int = 80
    seeds: tuple[int, ...] = (0, 1, 2)

    @property
    def tokens_per_arm(self) -> int:
        """The length of every arm's training stream: the tokens a run sees, divided by ``epochs``."""
        return self.steps * self.batch_size * self.context // self.epochs


QUICK = Settings(n_docs=400, val_stories=10, val_spanish=4, steps=20, warmup_steps=5, eval_every=10, seeds=(0,))


def arm_pipeline(arm: str) -> Pipeline | None:
    """The pipeline an arm runs (None for ``raw``); the filtered arms keep Spanish apart, by language."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; expected one of {list(ARMS)}")
    if arm == "raw":
        return None
    return Pipeline(languages=("en", "es"), dedup=arm in ("dedup", "clean"), filters=arm in ("filter", "clean"))


def curate(arm: str, docs: list[MessyDocument]) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """``(English-bound documents, Spanish documents set aside)`` for one arm, each as (crawl index, text)."""
    pipeline = arm_pipeline(arm)
    if pipeline is None:
        return [(i, d.text) for i, d in enumerate(docs)], []
    kept, spanish = [], []
    for i, d in enumerate(docs):
        text, where = pipeline.route(d.text)
        if text is not None:
            (spanish if where == "es" else kept).append((i, text))
    return kept, spanish


def arm_stream(
    tokenizer: BPETokenizer, kept: list[tuple[int, str]], docs: list[MessyDocument], n_tokens: int
) -> tuple[np.ndarray, dict[str, Any]]:
    """The first ``n_tokens`` of an arm's text (each document then ``<|endoftext|>``) and what it is made of."""
    parts, total, composition, used = [], 0, Counter(), 0
    for i, text in kept:
        ids = encode_documents(tokenizer, text + "\n")
        take = min(len(ids), n_tokens - total)
        parts.append(ids[:take])
        composition[docs[i].kind] += int(take)
        total += take
        used = i + 1
        if total == n_tokens:
            break
    if total < n_tokens:
        raise ValueError(f"the crawl holds only {total:,} tokens for this arm, {n_tokens:,} needed: raise n_docs")
    info = {"crawl_docs": used, "documents": len(parts), "tokens_by_kind": dict(sorted(composition.items()))}
    return np.concatenate(parts), info


def validation_sets(settings: Settings, tokenizer: BPETokenizer) -> dict[str, np.ndarray]:
    """Held-out token streams: clean English course stories (``en``) and Spanish stories (``es``)."""
    english = load_stories(data_path("stories_val.txt"))[: settings.val_stories]
    rng = random.Random(f"spanish-validation-{settings.corpus_seed}")  # messy_corpus seeds "messy-<seed>"
    spanish = [spanish_story(rng) for _ in range(settings.val_spanish)]
    return {
        "en": encode_documents(tokenizer, "\n\n".join(english)),
        "es": encode_documents(tokenizer, "\n\n".join(spanish)),
    }


def token_streams(
    settings: Settings,
) -> tuple[dict[str, np.ndarray], dict[str, Any], dict[str, np.ndarray], BPETokenizer]:
    """Every arm's training stream, what each holds (crawl documents read, tokens by kind, Spanish set aside),
    the validation streams and the course tokenizer."""
    tokenizer = BPETokenizer.load(data_path("base/tokenizer.json"))
    docs = messy_corpus(load_stories(data_path("stories_train.txt")), settings.n_docs, settings.corpus_seed)
    streams, info = {}, {}
    for arm in ARMS:
        kept, spanish = curate(arm, docs)
        streams[arm], info[arm] = arm_stream(tokenizer, kept, docs, settings.tokens_per_arm)
        info[arm]["steps"] = ARMS[arm]
        read = [text for i, text in spanish if i < info[arm]["crawl_docs"]]  # in the part of the crawl it read
        info[arm]["spanish_set_aside"] = {
            "documents": len(read),
            "tokens": int(sum(len(encode_documents(tokenizer, text + "\n")) for text in read)),
        }
    return streams, info, validation_sets(settings, tokenizer), tokenizer


def make_model(settings: Settings, vocab_size: int, seed: int) -> GPT:
    """The tiny GPT every arm trains, initialised from ``seed`` (the same weights for every arm)."""
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
    settings: Settings, tokens: np.ndarray, val_sets: dict[str, np.ndarray], vocab_size: int, seed: int
) -> dict[str, Any]:
    """One run: AdamW with warmup + cosine on random windows of ``tokens``; each validation loss every
    ``eval_every`` steps (``val_loss[name]``, one list per validation set)."""
    model = make_model(settings, vocab_size, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.max_lr, weight_decay=0.1)
    batches = RandomWindows(tokens, settings.batch_size, settings.context, seed=seed)
    steps, train_losses = [], []
    val_losses: dict[str, list[float]] = {name: [] for name in val_sets}
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
            for name, val_tokens in val_sets.items():
                val_losses[name].append(validation_loss(model, val_tokens, settings.context))
    return {"steps": steps, "val_loss": val_losses, "train_loss": train_losses}


def run(settings: Settings, command: str) -> dict[str, Any]:
    """Every arm and seed; the JSON payload of the result file (the caller sets torch's threads: one thread is
    bit-identical to the notebook's and the tests' kernels on the same CPU)."""
    streams, info, val_sets, tokenizer = token_streams(settings)
    tokens_seen = settings.steps * settings.batch_size * settings.context
    payload: dict[str, Any] = {
        "settings": asdict(settings),
        "tokens_per_arm": settings.tokens_per_arm,
        "tokens_seen": tokens_seen,
        "arms": {
            arm: {**info[arm], "tokens": int(len(streams[arm])), "epochs": tokens_seen / len(streams[arm])}
            for arm in ARMS
        },
        "val_tokens": {name: int(len(ids)) for name, ids in val_sets.items()},
        "runs": {},
        "provenance": provenance(sys.modules[__name__], command),
    }
    for seed in settings.seeds:
        for arm, ids in streams.items():
            started = time.perf_counter()
            result = train_arm(settings, ids, val_sets, tokenizer.vocab_size, seed)
            payload["runs"][f"{arm}_seed{seed}"] = {"arm": arm, "seed": seed, **result}
            finals = ", ".join(f"{name} {losses[-1]:.3f}" for name, losses in result["val_loss"].items())
            print(
                f"{arm} seed {seed}: val loss {finals} after {settings.steps} steps "
                f"({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
    return payload


def main(argv: list[str] | None = None) -> None:
    run_one_file_experiment(
        "clean_vs_raw",
        __doc__,
        RESULT,
        "folder for clean_vs_raw.json (the course's is data/textdata)",
        lambda quick, command: run(QUICK if quick else Settings(), command),
        argv,
    )


if __name__ == "__main__":
    main()
