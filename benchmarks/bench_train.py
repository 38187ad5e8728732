"""Training throughput of ``minillm.train`` vs a minimal plain-PyTorch loop, and the pretraining result.

    python benchmarks/bench_train.py                     # overhead ratio (course model, a few rounds)
    python benchmarks/bench_train.py --dtype bf16        # the same with the forward pass under bf16 autocast
    python benchmarks/bench_train.py --minutes 2         # also: validation loss after 2 minutes of training

Both loops train the same course-sized GPT (configs/course.json) on the same random windows; the plain loop
uses ``torch.optim.AdamW``, ``F.cross_entropy`` and ``clip_grad_norm_`` and nothing else (under ``--dtype bf16``
both run the forward pass in ``torch.autocast``). Rounds alternate
between the two so that a busy machine slows both alike; the printed numbers are ratios measured in this
run (target: the library's loop as fast as the plain one, a ratio >= 1.0 within the rounds' noise).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from minillm.batches import RandomWindows, encode_documents
from minillm.checkpoint import load_pretrained
from minillm.model import GPT
from minillm.train import TrainConfig, Trainer, build_model

ROOT = Path(__file__).resolve().parents[1]


def course_config(**overrides) -> TrainConfig:
    values = TrainConfig.json_settings(ROOT / "configs" / "course.json")
    values.update(progress=False, eval_interval=0, **overrides)
    return TrainConfig.from_dict(values)


class PlainLoop:
    """The minimal loop the library's Trainer is compared with."""

    def __init__(self, model: GPT, config: TrainConfig, tokens: np.ndarray) -> None:
        self.model, self.config = model, config
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=config.lr, betas=(config.beta1, config.beta2), weight_decay=config.weight_decay
        )
        self.batches = RandomWindows(tokens, config.batch_size, config.context_length, seed=config.seed)

    def train_step(self) -> float:
        x, y = self.batches.next_batch()
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.config.dtype == "bf16"):
            logits = self.model(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.optimizer.step()
        return loss.item()


def tokens_per_second(loop, steps: int, tokens_per_step: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        loop.train_step()
    return steps * tokens_per_step / (time.perf_counter() - start)


def overhead(rounds: int, steps: int, threads: int, dtype: str) -> None:
    torch.set_num_threads(threads)
    config = course_config(dtype=dtype)
    vocab = config.vocab_size
    tokens = np.random.default_rng(0).integers(0, vocab, 500_000)
    library = Trainer(build_model(config, vocab), config, tokens)
    plain = PlainLoop(build_model(config, vocab), config, tokens)
    for loop in (library, plain):  # warm-up: allocator, first-call overheads
        loop.train_step()
    ratios, lib_speeds, plain_speeds = [], [], []
    for r in range(rounds):
        order = (library, plain) if r % 2 == 0 else (plain, library)
        speeds = {id(loop): tokens_per_second(loop, steps, config.tokens_per_step) for loop in order}
        lib_speeds.append(speeds[id(library)])
        plain_speeds.append(speeds[id(plain)])
        ratios.append(speeds[id(library)] / speeds[id(plain)])
        print(
            f"round {r}: minillm.train {lib_speeds[-1]:8.0f} tok/s   plain PyTorch {plain_speeds[-1]:8.0f} tok/s   "
            f"ratio {ratios[-1]:.3f}"
        )
    ratio = statistics.median(ratios)
    params = library.raw_model.num_parameters()
    print(
        f"\ncourse model: {params:,} parameters, {config.tokens_per_step:,} tokens per step, {threads} threads, {dtype}"
    )
    print(
        f"median speed: minillm.train {statistics.median(lib_speeds):.0f} tok/s, "
        f"plain loop {statistics.median(plain_speeds):.0f} tok/s"
    )
    print(
        f"median ratio minillm.train / plain = {ratio:.3f}  (target >= 1.0) {'OK' if ratio >= 1.0 else 'BELOW TARGET'}"
    )


def timed_run(minutes: float, threads: int) -> None:
    """Train the course model on the course corpus for ``minutes`` and report the validation loss."""
    torch.set_num_threads(threads)
    _, tokenizer, _ = load_pretrained(ROOT / "data" / "base")
    train = encode_documents(tokenizer, (ROOT / "data" / "stories_train.txt").read_text(encoding="utf-8"))
    val = encode_documents(tokenizer, (ROOT / "data" / "stories_val.txt").read_text(encoding="utf-8"))
    config = course_config(schedule="constant", eval_batches=20)
    trainer = Trainer(build_model(config, tokenizer.vocab_size), config, train, val)
    start = time.perf_counter()
    while time.perf_counter() - start < minutes * 60:
        trainer.train_step()
    print(
        f"\nafter {minutes:g} min: {trainer.step} steps, {trainer.step * config.tokens_per_step:,} tokens, "
        f"validation loss {trainer.evaluate():.3f} (constant lr {config.lr}; the course run adds warmup and decay)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=3, help="training steps per loop per round")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=0.0, help="also train for this long and report val loss")
    parser.add_argument(
        "--dtype", choices=("fp32", "bf16"), default="fp32", help="forward-pass precision of both loops"
    )
    args = parser.parse_args()
    overhead(args.rounds, args.steps, args.threads, args.dtype)
    base = ROOT / "data" / "base" / "config.json"
    if base.is_file():
        m = json.loads(base.read_text())["metrics"]
        print(
            f"committed base checkpoint: validation loss {m['val_loss']:.3f} after {m['steps']} steps, "
            f"{m['tokens_seen']:,} tokens, {m['train_seconds'] / 60:.1f} min of training on the machine that made it"
        )
    if args.minutes > 0:
        timed_run(args.minutes, args.threads)


if __name__ == "__main__":
    main()
