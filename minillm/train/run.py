"""A whole pretraining run, step by step: tokenizer → token files → model → training → saved model folder.

:func:`run` is what ``python -m minillm.train`` does (the command line only parses flags into a
:class:`~minillm.train.config.TrainConfig`); the pipeline (``python -m minillm``) calls the same steps one
by one: :func:`train_tokenizer`, :func:`prepare_tokens`, :func:`build_model`, the
:class:`~minillm.train.loop.Trainer`, :func:`sample_stories` and
:func:`~minillm.train.history.write_history`.

The run writes to ``out_dir``: ``model.safetensors``, ``config.json`` (model and training config, final
metrics, samples), ``tokenizer.json``, ``history.json`` and ``history.csv``. Token files and the resumable
``checkpoint.pt`` go to ``work_dir``; ``resume=True`` continues from it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from minillm.batches import encode_file, load_tokens
from minillm.checkpoint import TOKENIZER_FILE, save_pretrained
from minillm.data import load_text, split_documents
from minillm.device import run_device
from minillm.model import GPT, GPTConfig
from minillm.seed import seed_everything
from minillm.tokenizer import COURSE_SPECIAL_TOKENS, ENDOFTEXT, BPETokenizer
from minillm.train.config import TrainConfig
from minillm.train.history import write_history
from minillm.train.loop import DistContext, Trainer

CHECKPOINT_FILE = "checkpoint.pt"


def train_tokenizer(config: TrainConfig) -> BPETokenizer:
    """Byte-level BPE with the course's special tokens, trained on the start of the training text.

    Only the first ``config.tokenizer_train_chars`` characters are read: merges learned from a couple of
    million characters are nearly those of the whole corpus, at a fraction of the time and memory.
    """
    documents = split_documents(load_text(config.train_file, max_chars=config.tokenizer_train_chars))
    return BPETokenizer.train(documents, config.vocab_size, special_tokens=COURSE_SPECIAL_TOKENS)


def prepare_tokens(
    config: TrainConfig, tokenizer: BPETokenizer, work_dir: Path, ctx: DistContext | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Encode the train/val files once (rank 0) into ``work_dir/*.bin`` and memory-map them.

    A token file that exists is reused: it is only ever written complete (:func:`~minillm.batches.encode_file`),
    and :func:`run` deletes both when it trains a new tokenizer. Other ranks wait at the barrier, then map
    the same files.
    """
    ctx = ctx or DistContext()
    files = {"train": config.train_file, "val": config.val_file}
    if ctx.is_main:
        for split, source in files.items():
            target = work_dir / f"{split}.bin"
            if source is not None and not target.exists():
                encode_file(tokenizer, source, target)
    ctx.barrier()
    train = load_tokens(work_dir / "train.bin", tokenizer.vocab_size)
    val = load_tokens(work_dir / "val.bin", tokenizer.vocab_size) if config.val_file is not None else None
    return train, val


def build_model(config: TrainConfig, vocab_size: int) -> GPT:
    """The GPT of ``config.preset`` with the run's sizes, initialised from ``config.seed``.

    Seeding here, right before the weights are drawn, makes the initial model depend on the seed alone,
    not on whatever random numbers the tokenizer or the data used before.
    """
    seed_everything(config.seed)
    model_config = GPTConfig.preset(
        config.preset,
        vocab_size=vocab_size,
        context_length=config.context_length,
        n_layer=config.n_layer,
        n_head=config.n_head,
        d_model=config.d_model,
        dropout=config.dropout,
    )
    return GPT(model_config)


def sample_stories(model: GPT, tokenizer: BPETokenizer, n: int, max_new_tokens: int, seed: int = 0) -> list[str]:
    """``n`` samples started from ``<|endoftext|>`` (the start of a new document), stopping at the next one.

    Starting from the document separator asks the model for a whole new story, the way it saw stories
    begin in training; a fixed ``seed`` makes the samples of two checkpoints comparable.
    """
    eot = tokenizer.special_tokens[ENDOFTEXT]
    device = next(model.parameters()).device
    prompt = torch.full((n, 1), eot, dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(seed)
    max_new = min(max_new_tokens, model.config.context_length - 1)
    out = model.generate(prompt, max_new, temperature=0.8, top_k=50, generator=generator, eos_id=eot)
    return [tokenizer.decode([i for i in row.tolist()[1:] if i != eot]).strip() for row in out]


def run(config: TrainConfig, resume: bool = False) -> dict:
    """Tokenizer → tokens → model → training → saved model folder. Returns the final metrics (rank 0).

    Under ``torchrun`` every rank calls this; rank 0 alone trains the tokenizer, writes the token files
    and saves the results, the others wait at barriers and train their share of each batch.
    """
    started = time.perf_counter()
    ctx = DistContext.from_env()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    device = run_device(config.device, ctx.local_rank if ctx.enabled else None)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    out_dir = Path(config.out_dir)
    work_dir = Path(config.work_dir) if config.work_dir else out_dir / "work"
    if ctx.is_main:
        work_dir.mkdir(parents=True, exist_ok=True)
        out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_path, checkpoint_path = work_dir / TOKENIZER_FILE, work_dir / CHECKPOINT_FILE
    resuming = resume and checkpoint_path.is_file()
    if resume and not resuming and ctx.is_main:
        print(f"--resume: no checkpoint at {checkpoint_path}; starting a new run", file=sys.stderr)
    if ctx.is_main and not (resuming and tokenizer_path.is_file()):
        for stale in ("train.bin", "val.bin"):  # encoded with an older tokenizer
            (work_dir / stale).unlink(missing_ok=True)
        train_tokenizer(config).save(tokenizer_path)
    ctx.barrier()
    tokenizer = BPETokenizer.load(tokenizer_path)
    train_tokens, val_tokens = prepare_tokens(config, tokenizer, work_dir, ctx)

    model = build_model(config, tokenizer.vocab_size)
    trainer = Trainer(model, config, train_tokens, val_tokens, device=device, dist_ctx=ctx)
    if resuming:
        trainer.load(checkpoint_path)
    trainer.run(checkpoint_path=checkpoint_path)

    metrics: dict = {}
    if ctx.is_main:
        history = trainer.history
        val_loss = trainer.evaluate() if val_tokens is not None else None
        metrics = {
            "parameters": model.num_parameters(),
            "steps": trainer.step,
            "tokens_seen": trainer.step * config.tokens_per_step,
            "train_tokens": int(len(train_tokens)),
            "final_train_loss": history[-1]["loss"] if history else None,
            "val_loss": val_loss,
            # time spent in training steps (all resumed segments; evaluation excluded)
            "train_seconds": round(sum(r.get("seconds", 0.0) for r in history), 1),
            "total_seconds_this_session": round(time.perf_counter() - started, 1),
            "tokens_per_s": round(float(np.median([r["tokens_per_s"] for r in history])), 1) if history else None,
            "world_size": ctx.world_size,
        }
        samples = sample_stories(trainer.raw_model, tokenizer, n=3, max_new_tokens=config.sample_tokens, seed=0)
        metadata = {"train": config.to_dict(), "metrics": metrics, "samples": samples}
        save_pretrained(out_dir, trainer.raw_model, tokenizer, metadata)
        write_history(history, out_dir)
        print(json.dumps(metrics, indent=2))
        for i, text in enumerate(samples):
            print(f"--- sample {i} ---\n{text}")
    ctx.barrier()
    if ctx.enabled:
        dist.destroy_process_group()
    return metrics
