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
runs before the tokenizer is trained. ``overwrite`` removes only the files of :func:`run_files`, and only
where ``run.json`` (or a model folder's own record, :func:`is_trained_model_folder`) shows that a minillm
run wrote them.

``run.json`` also records the run's id and the SHA-256 of the working files it trains on (tokenizer and
token files); ``resume=True`` needs that ``run.json``, verifies those files (:func:`check_work_files`)
and refuses a checkpoint of another run (another id, or other settings stored in the checkpoint).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from minillm.batches import encode_file, load_tokens
from minillm.checkpoint import (
    CHECKSUM_FILE,
    CONFIG_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    CheckpointError,
    remove_stale_temp_files,
    save_pretrained,
    verify_checksums,
)
from minillm.data import load_text, split_documents
from minillm.device import run_device
from minillm.model import GPT
from minillm.run_folder import (
    RunFiles,
    RunFolderError,
    check_record,
    differences,
    input_file,
    locked,
    read_record,
    record_problem,
    refuse_foreign_files,
    refuse_to_replace,
    remove_run_files,
    sha256_file,
    write_record,
)
from minillm.seed import seed_everything
from minillm.tokenizer import COURSE_SPECIAL_TOKENS, ENDOFTEXT, BPETokenizer
from minillm.train.config import ConfigError, TrainConfig, location_fields, resumable_fields
from minillm.train.history import write_history
from minillm.train.loop import DataError, DistContext, Trainer, validation_loss
from minillm.train.sharded import shard_name_pattern

CHECKPOINT_FILE = "checkpoint.pt"
RECORD_FILE = "run.json"  # what defines the run: every setting, and the input files' SHA-256
RECORD_KEYS = frozenset({"train_file", "out_dir", "vocab_size", "max_steps"})  # every run.json holds these
WHAT = "a minillm training run"

#: The settings a run continued with ``--resume`` may change (name → why it is safe), as the fields of
#: :class:`TrainConfig` declare them; every other setting and the content of the train and validation files
#: must match the run's ``run.json``. Changes are listed in ``run.json`` under ``"resumed"``.
RESUMABLE_FIELDS: dict[str, str] = resumable_fields()
# Where the run is (a moved run folder is the same run), its resume log, its identity and the digests of its
# working files (checked on their own, :func:`check_work_files`): never compared with the flags given.
_NOT_COMPARED = (*location_fields(), "resumed", "run_id", "work_files")


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


#: What a run writes into ``out_dir``: the model folder, its history and its record.
OUT_FILES = (MODEL_FILE, CONFIG_FILE, TOKENIZER_FILE, CHECKSUM_FILE, "history.json", "history.csv", RECORD_FILE)
#: The files a run trains on, in ``work_dir`` (name → record key): verified against ``run.json`` on ``--resume``.
WORK_INPUTS = {TOKENIZER_FILE: "tokenizer", "train.bin": "train_tokens", "val.bin": "val_tokens"}
_FIX = "choose another --out-dir"


def work_file_names(checkpoint: Path) -> tuple[str, ...]:
    """File-name patterns of everything a run writes into its work folder (the pipeline's pretraining too)."""
    return (*map(re.escape, (checkpoint.name, *WORK_INPUTS)), shard_name_pattern(checkpoint))


def run_files(config: TrainConfig) -> RunFiles:
    """Every file a run of ``config`` writes: what ``--overwrite`` may remove (see :class:`RunFiles`).

    ``out_dir`` is shared (other files there are left alone); the work folder is the run's own, unless it is
    ``out_dir`` itself.
    """
    out_dir, work_dir = _folders(config)
    out_names = tuple(map(re.escape, OUT_FILES))
    work_names = work_file_names(work_dir / CHECKPOINT_FILE)
    shared, owned = {out_dir: out_names}, {work_dir: work_names}
    if work_dir == out_dir:
        shared, owned = {out_dir: (*out_names, *work_names)}, {}
    return RunFiles(out_dir / RECORD_FILE, RECORD_KEYS, shared, owned, WHAT, lambda: is_trained_model_folder(out_dir))


def is_trained_model_folder(folder: Path) -> bool:
    """Whether ``folder`` is a model folder a minillm training run saved, as the course's ``data/base`` is.

    Why: a committed model folder keeps no ``run.json``, but it records its run as well: ``config.json``
    holds the run's settings (``train``) beside the model's, and ``checksums.sha256`` the digest of every
    file saved. A folder exported for another library has neither, so it is never taken for a run.
    """
    try:
        saved = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
        records_a_run = isinstance(saved, dict) and all(isinstance(saved.get(key), dict) for key in ("model", "train"))
        return records_a_run and verify_checksums(folder, (MODEL_FILE, CONFIG_FILE))
    except (OSError, ValueError, CheckpointError):
        return False


def _what_is_there(out_dir: Path, work_dir: Path) -> str:
    try:
        steps = json.loads((out_dir / CONFIG_FILE).read_text(encoding="utf-8"))["metrics"]["steps"]
        return f"a finished run of {steps} steps"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return "an unfinished run" if (work_dir / CHECKPOINT_FILE).is_file() else "a run"


def _remove_stale_temps(work_dir: Path) -> None:
    """Temporary files of checkpoint saves that were killed (the caller holds the folder's lock)."""
    checkpoint = work_dir / CHECKPOINT_FILE
    names = f"{re.escape(checkpoint.name)}|{shard_name_pattern(checkpoint)}"
    stale = remove_stale_temp_files(checkpoint, names)
    if stale:
        print(f"{work_dir}: removed {len(stale)} temporary file(s) of interrupted checkpoint saves", file=sys.stderr)


def prepare_run_folder(config: TrainConfig, resume: bool = False, overwrite: bool = False) -> bool:
    """Check ``config.out_dir`` may be written as asked and record the run; returns whether to resume.

    Raises :class:`~minillm.run_folder.RunFolderError` (naming the folder, the files, or the settings that
    differ, and the flag that would do what the user meant) when the folder holds a run and neither
    ``resume`` nor ``overwrite`` is given, when ``resume`` would continue a run with other settings or
    without its ``run.json``, and when the folder holds files no minillm run wrote (``overwrite`` too:
    it removes only the previous run's own files). Call it while holding the folder's lock.
    """
    if resume and overwrite:
        raise RunFolderError("--resume continues a run and --overwrite replaces it: pass only one")
    out_dir, work_dir = _folders(config)
    record_path, checkpoint = out_dir / RECORD_FILE, work_dir / CHECKPOINT_FILE
    current = run_record(config)  # hashes the inputs: a missing train or validation file fails here
    files = run_files(config)
    found = refuse_foreign_files(files, _FIX)
    what = _what_is_there(out_dir, work_dir)
    if overwrite:
        removed = remove_run_files(files, _FIX)
        if removed:
            names = ", ".join(p.name for p in removed)
            print(f"--overwrite: removed {what} from {out_dir} ({names})", file=sys.stderr)
        write_record(record_path, {**current, "run_id": uuid.uuid4().hex})
        return False
    if resume and checkpoint.is_file():
        _resume_record(record_path, checkpoint, current)
        _remove_stale_temps(work_dir)
        return True
    problem = record_problem(files) if found else None
    fix = (
        f"they were not written by a minillm training run ({problem}), so --resume and --overwrite do not apply; {_FIX}"
        if problem
        else None
    )
    if resume:
        refuse_to_replace(
            out_dir,
            found,
            what=what,
            fix=fix
            or f"--resume found no checkpoint at {checkpoint} to continue from; "
            "pass --overwrite to replace the run, or choose another --out-dir",
        )
        print(f"--resume: no checkpoint at {checkpoint}; starting a new run", file=sys.stderr)
    else:
        refuse_to_replace(
            out_dir,
            found,
            what=what if fix is None else "files",
            fix=fix or "pass --resume to continue it or --overwrite to replace it, or choose another --out-dir",
        )
    write_record(record_path, {**current, "run_id": uuid.uuid4().hex})
    return False


def settings_newer_than(recorded: dict, current: dict) -> tuple[str, ...]:
    """The settings a ``run.json`` written before they existed lacks, where ``current`` holds their default.

    Why they are not compared: every setting added to :class:`TrainConfig` defaults to what runs did before it
    existed (the 2026 switches are off, the optimizer is AdamW), so such a run is continued exactly as it was
    trained; a non-default value is still compared (and refused) like any other change.
    """
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    return tuple(
        name for name, value in current.items() if name not in recorded and name in defaults and value == defaults[name]
    )


def _resume_record(record_path: Path, checkpoint: Path, current: dict) -> None:
    """Check the record of a run ``--resume`` continues against ``current`` and write the merged record."""
    recorded = read_record(record_path)
    if recorded is None:
        raise RunFolderError(
            f"--resume: {record_path} is missing, so nothing shows which settings and input files "
            f"{checkpoint} was trained with, and the flags given cannot be checked against them; restore "
            f"run.json, or delete the run's files yourself to start again (--overwrite needs the run.json that "
            "shows the folder holds a minillm run), or choose another --out-dir"
        )
    allowed = ", ".join(RESUMABLE_FIELDS)
    changed = check_record(
        record_path,
        current,
        changeable=RESUMABLE_FIELDS,
        ignore=(*_NOT_COMPARED, *settings_newer_than(recorded, current)),
        fix=f"--resume continues a run with its own settings; only {allowed} may change. Pass the recorded "
        f"values to continue it, or --overwrite to replace it, or choose another --out-dir.",
    )
    if changed:
        for name, change in changed.items():
            print(f"--resume: {name} {change}", file=sys.stderr)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S %z")
        current["resumed"] = [*recorded.get("resumed", []), {"at": stamp, "changed": changed}]
    elif "resumed" in recorded:
        current["resumed"] = recorded["resumed"]
    for carried in ("run_id", "work_files"):  # the run's identity and the digests of what it trains on
        if carried in recorded:
            current[carried] = recorded[carried]
    current.setdefault("run_id", uuid.uuid4().hex)  # a run recorded before run ids: one from now on
    write_record(record_path, current)


# ------------------------------------------------------------------------------------------ working inputs


def work_inputs(config: TrainConfig, work_dir: Path) -> dict[str, Path]:
    """The working files a run trains on (record key → path): its tokenizer and token files."""
    inputs = {key: work_dir / name for name, key in WORK_INPUTS.items()}
    if config.val_file is None:
        del inputs["val_tokens"]
    return inputs


def check_work_files(record_path: Path, files: dict[str, Path], resuming: bool) -> None:
    """Verify ``files`` against the SHA-256 digests in ``run.json`` (resuming), or record them there.

    Why: ``--resume`` must train on exactly what the checkpoint was trained on; a truncated token file
    would otherwise be read as half the data, and a swapped tokenizer saved with the model, without a word.
    A digest not yet recorded (a new run, or one started before minillm recorded them) is recorded now.
    """
    record = read_record(record_path) or {}
    recorded = record.get("work_files") or {}
    problems, added = [], {}
    for key, path in files.items():
        expected = recorded.get(key, {}).get("sha256") if resuming else None
        if resuming and not path.is_file():
            problems.append(f"{path} is missing" + (f" (sha256 {expected[:12]}… recorded)" if expected else ""))
        elif expected is not None:
            found = sha256_file(path)
            if found != expected:
                problems.append(f"{path} has sha256 {found[:12]}…, not the {expected[:12]}… recorded")
        else:
            if resuming:
                print(f"--resume: {record_path} records no digest of {path}; recording it now", file=sys.stderr)
            added[key] = input_file(path)
    if problems:
        lines = "\n".join(f"  {line}" for line in problems)
        raise RunFolderError(
            f"--resume: the files this run trains on differ from those recorded in {record_path} when it "
            f"started:\n{lines}\nThey were changed (truncated, replaced or damaged) since. Restore them; a token "
            "file (train.bin, val.bin) may also be deleted, to be encoded again from the text with the run's "
            "tokenizer; or pass --overwrite to start the run again."
        )
    if added:
        write_record(record_path, {**record, "work_files": {**recorded, **added}})


def _on_rank_0(ctx: DistContext, check: Callable[[], None]) -> None:
    """Run ``check`` on rank 0 only and raise its refusal on every rank (no rank waits at a barrier alone)."""
    message = None
    if ctx.is_main:
        try:
            check()
        except RunFolderError as error:
            message = str(error)
    message = ctx.broadcast_object(message)
    if message is not None:
        raise RunFolderError(message)


def _check_checkpoint_owner(checkpoint: Path, record_path: Path, trainer: Trainer, config: TrainConfig) -> None:
    """Refuse a checkpoint written by another run (copied in): another run id, or other settings.

    The settings compared are those stored in the checkpoint itself, except where the run is, what
    ``--resume`` may change, and the input files (their digests are checked against ``run.json``).
    """
    loaded = trainer.loaded_run or {}
    saved, current = loaded.get("config") or {}, config.to_dict()
    ignore = {*_NOT_COMPARED, *RESUMABLE_FIELDS, "train_file", "val_file"} | (set(current) - set(saved))
    changed = differences(saved, current, ignore=ignore)
    other_run = loaded.get("run_id") is not None and loaded["run_id"] != trainer.run_id
    if changed or other_run:
        lines = "".join(f"\n  {name}: {change}" for name, change in changed.items())
        settings = f"; its settings differ (checkpoint → this run):{lines}\n" if changed else ". "
        raise RunFolderError(
            f"--resume: {checkpoint} was not written by the run recorded in {record_path} "
            f"(run id {loaded.get('run_id') or 'not recorded'} in the checkpoint, {trainer.run_id} in run.json)"
            f"{settings}It was copied in from another run: put this run's own checkpoint back, or pass "
            "--overwrite to start the run again."
        )


def load_token_file(path: Path, vocab_size: int) -> np.ndarray:
    """:func:`~minillm.batches.load_tokens`, its refusal of a damaged file (odd size, foreign ids) as a
    :class:`~minillm.train.loop.DataError` that names the file, which the command line reports."""
    try:
        return load_tokens(path, vocab_size)
    except ValueError as error:
        message = str(error)
        raise DataError(message if str(path) in message else f"{path}: {message}") from error


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


def encode_tokens(config: TrainConfig, tokenizer: BPETokenizer, work_dir: Path) -> None:
    """Encode the train/val files into ``work_dir/*.bin`` where they are not there yet (one process only).

    A token file that exists is reused: it is only ever written complete (:func:`~minillm.batches.encode_file`),
    and :func:`run` deletes both when it trains a new tokenizer.
    """
    for split, source in {"train": config.train_file, "val": config.val_file}.items():
        target = work_dir / f"{split}.bin"
        if source is not None and not target.exists():
            encode_file(tokenizer, source, target, workers=tokenize_workers(source))


def load_token_files(config: TrainConfig, vocab_size: int, work_dir: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """Memory-map the run's train and validation token files (None: the run has no validation file)."""
    train = load_token_file(work_dir / "train.bin", vocab_size)
    val = load_token_file(work_dir / "val.bin", vocab_size) if config.val_file is not None else None
    return train, val


def prepare_tokens(
    config: TrainConfig, tokenizer: BPETokenizer, work_dir: Path, ctx: DistContext | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Encode the train/val files once (rank 0, :func:`encode_tokens`) and memory-map them (every rank)."""
    ctx = ctx or DistContext()
    if ctx.is_main:
        encode_tokens(config, tokenizer, work_dir)
    ctx.barrier()
    return load_token_files(config, tokenizer.vocab_size, work_dir)


def check_windows(config: TrainConfig, train_tokens: np.ndarray, val_tokens: np.ndarray | None) -> None:
    """Refuse token streams too short for one window (context_length + 1 tokens), naming the text file.

    Why here, before the model is built: a shorter stream would otherwise fail inside the batch sampler or
    the validation loop with a traceback that names no file.
    """
    needed = config.context_length + 1  # one window of inputs and its shifted targets
    for name, path, tokens in (("train", config.train_file, train_tokens), ("val", config.val_file, val_tokens)):
        if tokens is not None and len(tokens) < needed:
            raise ConfigError(
                f"{path}: {len(tokens):,} tokens after tokenisation, fewer than one {name} window needs "
                f"(context_length + 1 = {needed}); use a longer text or a smaller --context-length"
            )


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
        refusal, resuming, run_id = None, False, None
        if ctx.is_main:
            try:
                hold.enter_context(locked(out_dir))
                if not work_dir.resolve().is_relative_to(out_dir.resolve()):
                    hold.enter_context(locked(work_dir))  # a work folder elsewhere may be shared by mistake
                resuming = prepare_run_folder(config, resume=resume, overwrite=overwrite)
                run_id = (read_record(out_dir / RECORD_FILE) or {}).get("run_id")
                work_dir.mkdir(parents=True, exist_ok=True)
            except (RunFolderError, OSError) as error:
                refusal = error
        message, resuming, run_id = ctx.broadcast_object((str(refusal) if refusal else None, resuming, run_id))
        if refusal is not None:
            raise refusal
        if message is not None:
            raise RunFolderError(f"rank 0 stopped the run: {message}")
        return _train(config, ctx, device, out_dir, work_dir, resuming, started, run_id)


def _train(
    config: TrainConfig,
    ctx: DistContext,
    device: torch.device,
    out_dir: Path,
    work_dir: Path,
    resuming: bool,
    started: float,
    run_id: str | None = None,
) -> dict:
    """The run's work once the folder is checked and locked (every rank).

    A new run trains its tokenizer and encodes its token files, and records their digests in ``run.json``; a
    resumed run verifies them against those digests first (:func:`check_work_files`), so it trains on exactly
    what its checkpoint was trained on, with the tokenizer the model will be saved with.
    """
    tokenizer_path, checkpoint_path = work_dir / TOKENIZER_FILE, work_dir / CHECKPOINT_FILE
    record_path = out_dir / RECORD_FILE
    inputs = work_inputs(config, work_dir)
    tokenizer_only = {"tokenizer": inputs["tokenizer"]}
    if resuming:
        _on_rank_0(ctx, lambda: check_work_files(record_path, tokenizer_only, resuming=True))
    elif ctx.is_main:
        for stale in ("train.bin", "val.bin"):  # encoded with an older tokenizer
            (work_dir / stale).unlink(missing_ok=True)
        train_tokenizer(config).save(tokenizer_path)
    ctx.barrier()
    tokenizer = BPETokenizer.load(tokenizer_path)

    def tokens_checked() -> None:
        encode_tokens(config, tokenizer, work_dir)
        check_work_files(record_path, inputs, resuming)

    _on_rank_0(ctx, tokens_checked)
    train_tokens, val_tokens = load_token_files(config, tokenizer.vocab_size, work_dir)
    check_windows(config, train_tokens, val_tokens)

    model = build_model(config, tokenizer.vocab_size)
    data_name = str(work_dir / "train.bin")
    trainer = Trainer(
        model, config, train_tokens, val_tokens, device=device, dist_ctx=ctx, data_name=data_name, run_id=run_id
    )
    if resuming:
        trainer.load(checkpoint_path)
        _check_checkpoint_owner(checkpoint_path, record_path, trainer, config)
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
