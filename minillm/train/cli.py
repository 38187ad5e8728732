"""``python -m minillm.train``: tokenizer training + pretraining on any UTF-8 text file.

    python -m minillm.train --config configs/course.json              # the course's base checkpoint
    python -m minillm.train --train-file my.txt --val-file my_val.txt --max-steps 300 --out-dir runs/mine
    torchrun --nproc_per_node=2 -m minillm.train --config configs/course.json   # data parallel

Every :class:`~minillm.train.config.TrainConfig` field is a flag (``--max-steps``, ``--lr`` ...); flags
override the config file. The run writes to ``out_dir``: ``model.safetensors``, ``config.json`` (model
and training config, final metrics, samples), ``tokenizer.json``, ``history.json`` and ``history.csv``.
Token caches and the resumable ``checkpoint.pt`` go to ``work_dir``; ``--resume`` continues from it.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from minillm.batches import load_tokens, save_tokens
from minillm.checkpoint import save_pretrained
from minillm.device import pick_device
from minillm.model import GPT, GPTConfig
from minillm.seed import seed_everything
from minillm.tokenizer import COURSE_SPECIAL_TOKENS, ENDOFTEXT, BPETokenizer
from minillm.train.config import TrainConfig
from minillm.train.loop import DistContext, Trainer

TOKENIZER_FILE = "tokenizer.json"
CHECKPOINT_FILE = "checkpoint.pt"


def split_documents(text: str) -> list[str]:
    """Documents are paragraphs: blocks of text separated by one or more empty lines."""
    return [doc.strip() for doc in re.split(r"\n\s*\n", text) if doc.strip()]


def _read_text(path: str | Path) -> str:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: text file not found")
    return path.read_text(encoding="utf-8")


def train_tokenizer(config: TrainConfig) -> BPETokenizer:
    """Byte-level BPE with the course's special tokens, trained on the start of the training text."""
    text = _read_text(config.train_file)
    if config.tokenizer_train_chars is not None:
        text = text[: config.tokenizer_train_chars]
    documents = split_documents(text)
    return BPETokenizer.train(documents, config.vocab_size, special_tokens=COURSE_SPECIAL_TOKENS)


def encode_documents(tokenizer: BPETokenizer, text: str) -> np.ndarray:
    """One token stream: every document followed by ``<|endoftext|>``, so the model learns where stories end."""
    eot = tokenizer.special_tokens[ENDOFTEXT]
    ids: list[int] = []
    for document in split_documents(text):
        ids.extend(tokenizer.encode(document, allowed_special="none"))
        ids.append(eot)
    return np.asarray(ids, dtype=np.int64)


def prepare_tokens(
    config: TrainConfig, tokenizer: BPETokenizer, work_dir: Path, ctx: DistContext | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Encode the train/val files once (rank 0) into ``work_dir/*.bin`` and memory-map them."""
    ctx = ctx or DistContext()
    files = {"train": config.train_file, "val": config.val_file}
    if ctx.is_main:
        for split, source in files.items():
            target = work_dir / f"{split}.bin"
            if source is not None and not target.exists():
                save_tokens(encode_documents(tokenizer, _read_text(source)), target, tokenizer.vocab_size)
    ctx.barrier()
    train = load_tokens(work_dir / "train.bin", tokenizer.vocab_size)
    val = load_tokens(work_dir / "val.bin", tokenizer.vocab_size) if config.val_file is not None else None
    return train, val


def build_model(config: TrainConfig, vocab_size: int) -> GPT:
    """The GPT of ``config.preset`` with the run's sizes, initialised from ``config.seed``."""
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


def write_history(history: list[dict], out_dir: Path) -> None:
    """``history.json`` (a list of records) and ``history.csv`` (one row per step, blanks where absent)."""
    (out_dir / "history.json").write_text(json.dumps(history, indent=1) + "\n", encoding="utf-8")
    columns = ["step", "loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "seconds", "skipped"]
    with open(out_dir / "history.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for record in history:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in record.items()})


def sample_stories(model: GPT, tokenizer: BPETokenizer, n: int, max_new_tokens: int, seed: int = 0) -> list[str]:
    """``n`` samples started from ``<|endoftext|>`` (the start of a new document), stopping at the next one."""
    eot = tokenizer.special_tokens[ENDOFTEXT]
    device = next(model.parameters()).device
    prompt = torch.full((n, 1), eot, dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(seed)
    max_new = min(max_new_tokens, model.config.context_length - 1)
    out = model.generate(prompt, max_new, temperature=0.8, top_k=50, generator=generator, eos_id=eot)
    return [tokenizer.decode([i for i in row.tolist()[1:] if i != eot]).strip() for row in out]


# ------------------------------------------------------------------------------------------ arguments


def _parse_value(kind: str):
    def parse(text: str):
        if "None" in kind and text.lower() in ("none", "null"):
            return None
        if kind.startswith("int"):
            return int(text)
        if kind.startswith("float"):
            return float(text)
        return text

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m minillm.train",
        description="Train a BPE tokenizer and pretrain a GPT on a text file (documents = paragraphs).",
    )
    parser.add_argument("--config", help="JSON file with TrainConfig fields (flags override it)")
    parser.add_argument("--resume", action="store_true", help="continue from <work_dir>/checkpoint.pt")
    for field in dataclasses.fields(TrainConfig):
        flag = "--" + field.name.replace("_", "-")
        if field.type == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None)
        else:
            parser.add_argument(flag, type=_parse_value(str(field.type)), default=None, metavar=field.name.upper())
    return parser


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    values = TrainConfig.from_json(args.config).to_dict() if args.config else {}
    for field in dataclasses.fields(TrainConfig):
        given = getattr(args, field.name)
        if given is not None:
            values[field.name] = given
    return TrainConfig.from_dict(values)


def _device(config: TrainConfig, ctx: DistContext) -> torch.device:
    if config.device != "auto":
        return torch.device(config.device)
    if ctx.enabled:  # one device per rank: the local GPU, else the CPU
        return torch.device(f"cuda:{ctx.local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    return pick_device()


# ------------------------------------------------------------------------------------------ the run


def run(config: TrainConfig, resume: bool = False) -> dict:
    """Tokenizer → tokens → model → training → saved model folder. Returns the final metrics (rank 0)."""
    started = time.perf_counter()
    ctx = DistContext.from_env()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    device = _device(config, ctx)
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


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m minillm.train`` and the ``minillm-train`` console script."""
    args = build_parser().parse_args(argv)
    run(config_from_args(args), resume=args.resume)
