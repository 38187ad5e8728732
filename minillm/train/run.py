"""A whole pretraining run, step by step: tokenizer → token files → model → training → saved model folder.

:func:`run` is what ``python -m minillm.train`` does (the command line only parses flags into a
:class:`~minillm.train.config.TrainConfig`); the pipeline (``python -m minillm``) calls the same steps one
by one: :func:`train_tokenizer`, :func:`prepare_tokens`, :func:`build_model`, the
:class:`~minillm.train.loop.Trainer`, :func:`sample_stories` and
:func:`~minillm.train.history.write_history`.

The run writes to ``out_dir``: ``model.safetensors``, ``config.json`` (model and training config, final
metrics, samples), ``tokenizer.json``, ``history.json`` and ``history.csv``. Token files and the resumable
``checkpoint.pt`` go to ``work_dir``; ``resume=True`` continues from it.

A run never silently replaces another (:mod:`minillm.run_folder`): ``out_dir`` is locked while the run
writes (``run.lock``), ``run.json`` records every setting and the SHA-256 of the train and validation
files, a folder that already holds a run is only continued (``resume=True``, where only
:data:`RESUMABLE_FIELDS` may change) or replaced (``overwrite=True``) when asked, and every such check
runs before the tokenizer is trained.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from minillm.batches import encode_file, load_tokens
from minillm.checkpoint import CHECKSUM_FILE, CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE, save_pretrained
from minillm.data import load_text, split_documents
from minillm.device import run_device
from minillm.model import GPT
from minillm.run_folder import (
    RunFolderError,
    check_record,
    input_file,
    locked,
    read_record,
    refuse_to_replace,
    remove_outputs,
    write_record,
)
from minillm.seed import seed_everything
from minillm.tokenizer import COURSE_SPECIAL_TOKENS, ENDOFTEXT, BPETokenizer
from minillm.train.config import ConfigError, TrainConfig
from minillm.train.history import write_history
from minillm.train.loop import DistContext, Trainer, validation_loss
from minillm.train.sharded import shard_files_of

CHECKPOINT_FILE = "checkpoint.pt"
RECORD_FILE = "run.json"  # what defines the run: every setting, and the input files' SHA-256

#: The settings a run continued with ``--resume`` may change (name → why it is safe); every other setting
#: and the content of the train and validation files must match the run's ``run.json``. Changes are
#: listed in ``run.json`` under ``"resumed"``.
RESUMABLE_FIELDS: dict[str, str] = {
    "max_steps": "train longer or stop sooner; the learning-rate schedule is laid out for the new length, "
    "so the rate continues from where the new schedule is at the current step",
    "eval_interval": "how often validation runs; it does not change the training steps",
    "eval_batches": "how many batches validation reads",
    "checkpoint_interval": "how often checkpoints are written",
    "sample_tokens": "the length of the samples printed at the end",
    "device": "where the steps run (low-order float digits may differ)",
    "threads": "CPU threads",
    "progress": "the progress bar",
}
# Where the run is (a moved run folder is the same run) and its resume log: never compared.
_NOT_COMPARED = ("out_dir", "work_dir", "resumed")


def run_record(config: TrainConfig) -> dict:
    """What defines a run: every setting, with the train and validation files as path + SHA-256."""
    record = config.to_dict()
    record["train_file"] = input_file(config.train_file)
    record["val_file"] = input_file(config.val_file)
    return record


def _folders(config: TrainConfig) -> tuple[Path, Path]:
    """The run's ``out_dir`` and ``work_dir`` (by default ``<out_dir>/work``)."""
    out_dir = Path(config.out_dir)
    return out_dir, Path(config.work_dir) if config.work_dir else out_dir / "work"


def _outputs(out_dir: Path, work_dir: Path) -> list[Path]:
    """Every file a run writes (what ``--overwrite`` removes); the lock is not one of them."""
    written = (MODEL_FILE, CONFIG_FILE, TOKENIZER_FILE, CHECKSUM_FILE, "history.json", "history.csv", RECORD_FILE)
    working = (CHECKPOINT_FILE, TOKENIZER_FILE, "train.bin", "val.bin")
    shards = shard_files_of(work_dir / CHECKPOINT_FILE)  # an FSDP run's per-rank checkpoint files
    return [out_dir / name for name in written] + [work_dir / name for name in working] + shards


def _what_is_there(out_dir: Path, work_dir: Path) -> str:
    try:
        steps = json.loads((out_dir / CONFIG_FILE).read_text(encoding="utf-8"))["metrics"]["steps"]
        return f"a finished run of {steps} steps"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return "an unfinished run" if (work_dir / CHECKPOINT_FILE).is_file() else "a run"


def prepare_run_folder(config: TrainConfig, resume: bool = False, overwrite: bool = False) -> bool:
    """Check ``config.out_dir`` may be written as asked and record the run; returns whether to resume.

    Raises :class:`~minillm.run_folder.RunFolderError` (naming the folder, the files, or the settings that
    differ, and the flag that would do what the user meant) when the folder holds a run and neither
    ``resume`` nor ``overwrite`` is given, or when ``resume`` would continue a run with other settings.
    ``overwrite`` removes the previous run's files first. Call it while holding the folder's lock.
    """
    if resume and overwrite:
        raise RunFolderError("--resume continues a run and --overwrite replaces it: pass only one")
    out_dir, work_dir = _folders(config)
    record_path, checkpoint = out_dir / RECORD_FILE, work_dir / CHECKPOINT_FILE
    current = run_record(config)  # hashes the inputs: a missing train or validation file fails here
    found = [p for p in _outputs(out_dir, work_dir) if p.exists()]
    what = _what_is_there(out_dir, work_dir)
    if overwrite:
        removed = remove_outputs(found)
        if removed:
            names = ", ".join(p.name for p in removed)
            print(f"--overwrite: removed {what} from {out_dir} ({names})", file=sys.stderr)
        write_record(record_path, current)
        return False
    if resume and checkpoint.is_file():
        allowed = ", ".join(RESUMABLE_FIELDS)
        changed = check_record(
            record_path,
            current,
            changeable=RESUMABLE_FIELDS,
            ignore=_NOT_COMPARED,
            fix=f"--resume continues a run with its own settings; only {allowed} may change. Pass the recorded "
            f"values to continue it, or --overwrite to replace it, or choose another --out-dir.",
        )
        recorded = read_record(record_path) or {}
        if changed:
            for name, change in changed.items():
                print(f"--resume: {name} {change}", file=sys.stderr)
            stamp = time.strftime("%Y-%m-%d %H:%M:%S %z")
            current["resumed"] = [*recorded.get("resumed", []), {"at": stamp, "changed": changed}]
        elif "resumed" in recorded:
            current["resumed"] = recorded["resumed"]
        write_record(record_path, current)
        return True
    if resume:
        refuse_to_replace(
            out_dir,
            found,
            what=what,
            fix=f"--resume found no checkpoint at {checkpoint} to continue from; "
            "pass --overwrite to replace the run, or choose another --out-dir",
        )
        print(f"--resume: no checkpoint at {checkpoint}; starting a new run", file=sys.stderr)
    else:
        refuse_to_replace(
            out_dir,
            found,
            what=what,
            fix="pass --resume to continue it or --overwrite to replace it, or choose another --out-dir",
        )
    write_record(record_path, current)
    return False


def train_tokenizer(config: TrainConfig) -> BPETokenizer:
    """Byte-level BPE with the course's special tokens, trained on the start of the training text.

    Only the first ``config.tokenizer_train_chars`` characters are read: merges learned from a couple of
    million characters are nearly those of the whole corpus, at a fraction of the time and memory.
    """
    documents = split_documents(load_text(config.train_file, max_chars=config.tokenizer_train_chars))
    return BPETokenizer.train(documents, config.vocab_size, special_tokens=COURSE_SPECIAL_TOKENS)


def tokenize_workers(path: str | os.PathLike, min_bytes: int = 64 << 20) -> int:
    """Processes to tokenise ``path`` with: one for a small file (starting workers costs seconds), every core
    (up to 8) from ``min_bytes`` on (``benchmarks/bench_tokenize_file.py`` measures the gain)."""
    return 1 if Path(path).stat().st_size < min_bytes else min(os.cpu_count() or 1, 8)


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
                encode_file(tokenizer, source, target, workers=tokenize_workers(source))
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
    return GPT(config.model_config(vocab_size))


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


def run(config: TrainConfig, resume: bool = False, overwrite: bool = False) -> dict:
    """Tokenizer → tokens → model → training → saved model folder. Returns the final metrics (rank 0).

    Under ``torchrun`` every rank calls this; rank 0 alone holds the folder's lock, checks and records
    the run (:func:`prepare_run_folder`), trains the tokenizer, writes the token files and saves the
    results; the others wait at barriers, stop with rank 0's message when it refuses, and train their
    share of each batch.
    """
    started = time.perf_counter()
    ctx = DistContext.from_env()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    device = run_device(config.device, ctx.local_rank if ctx.enabled else None)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    out_dir, work_dir = _folders(config)
    with contextlib.ExitStack() as hold:
        refusal, resuming = None, False
        if ctx.is_main:
            try:
                hold.enter_context(locked(out_dir))
                if not work_dir.resolve().is_relative_to(out_dir.resolve()):
                    hold.enter_context(locked(work_dir))  # a work folder elsewhere may be shared by mistake
                resuming = prepare_run_folder(config, resume=resume, overwrite=overwrite)
                work_dir.mkdir(parents=True, exist_ok=True)
            except (RunFolderError, OSError) as error:
                refusal = error
        message, resuming = ctx.broadcast_object((str(refusal) if refusal else None, resuming))
        if refusal is not None:
            raise refusal
        if message is not None:
            raise RunFolderError(f"rank 0 stopped the run: {message}")
        return _train(config, ctx, device, out_dir, work_dir, resuming, started)


def _train(
    config: TrainConfig,
    ctx: DistContext,
    device: torch.device,
    out_dir: Path,
    work_dir: Path,
    resuming: bool,
    started: float,
) -> dict:
    """The run's work once the folder is checked and locked (every rank)."""
    tokenizer_path, checkpoint_path = work_dir / TOKENIZER_FILE, work_dir / CHECKPOINT_FILE
    if ctx.is_main and not (resuming and tokenizer_path.is_file()):
        for stale in ("train.bin", "val.bin"):  # encoded with an older tokenizer
            (work_dir / stale).unlink(missing_ok=True)
        train_tokenizer(config).save(tokenizer_path)
    ctx.barrier()
    tokenizer = BPETokenizer.load(tokenizer_path)
    train_tokens, val_tokens = prepare_tokens(config, tokenizer, work_dir, ctx)
    needed = config.context_length + 1  # one window of inputs and its shifted targets
    for name, path, tokens in (("train", config.train_file, train_tokens), ("val", config.val_file, val_tokens)):
        if tokens is not None and len(tokens) < needed:
            raise ConfigError(
                f"{path}: {len(tokens):,} tokens after tokenisation, fewer than one {name} window needs "
                f"(context_length + 1 = {needed}); use a longer text or a smaller --context-length"
            )

    model = build_model(config, tokenizer.vocab_size)
    trainer = Trainer(model, config, train_tokens, val_tokens, device=device, dist_ctx=ctx)
    if resuming:
        trainer.load(checkpoint_path)
    trainer.run(checkpoint_path=checkpoint_path)

    metrics: dict = {}
    final = trainer.full_model()  # under FSDP every rank helps gather the shards; rank 0 gets the whole model
    if ctx.is_main:
        history = trainer.history
        val_loss = None
        if val_tokens is not None:  # what Trainer.evaluate measures, on the gathered model
            val_loss = validation_loss(final, val_tokens, config.context_length, config.batch_size, config.eval_batches)
        metrics = {
            "parameters": final.num_parameters(),
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
        samples = sample_stories(final, tokenizer, n=3, max_new_tokens=config.sample_tokens, seed=0)
        metadata = {"train": config.to_dict(), "metrics": metrics, "samples": samples}
        save_pretrained(out_dir, final, tokenizer, metadata)
        write_history(history, out_dir)
        print(json.dumps(metrics, indent=2))
        for i, text in enumerate(samples):
            print(f"--- sample {i} ---\n{text}")
    ctx.barrier()
    if ctx.enabled:
        dist.destroy_process_group()
    return metrics
