"""The phases of ``python -m minillm``, each a function of a :class:`Run` that writes under ``run.folder``.

A phase is complete when its ``done.json`` exists (written last, atomically); rerunning skips it and reads
its metrics back. Pretraining also keeps a resume checkpoint, so an interrupted run continues where it stopped.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from minillm.alignment.kl import kl_k1
from minillm.alignment.logprobs import masked_sum, token_logprobs
from minillm.alignment.loops import dpo_metrics, reward_accuracy, train_dpo, train_reward_model
from minillm.alignment.reward_model import ScalarHeadModel, value_model_from
from minillm.alignment.rlhf import RLHFConfig, sample_rollouts, train_rlhf
from minillm.batches import encode_stories
from minillm.chat import END, encode_preference_pairs, special_token_id
from minillm.checkpoint import load_pretrained, remove_stale_temp_files, save_pretrained
from minillm.data import load_jsonl, load_stories
from minillm.end_to_end.run_size import RunSize
from minillm.evaluation import (
    CORRECT_AT,
    bootstrap_interval,
    greedy_gold,
    mean_and_se,
    paired_difference,
    pass_at_k_mean,
    sampled_gold,
    text_bits_per_byte,
)
from minillm.model import GPT
from minillm.run_folder import write_record
from minillm.seed import seed_everything
from minillm.sft import fitting_examples, train_sft
from minillm.tasks import eval_prompts, gold_score, parse_prompt
from minillm.tokenizer import BPETokenizer
from minillm.train import TrainConfig, Trainer, write_history
from minillm.train.loop import validation_loss
from minillm.train.run import (
    CHECKPOINT_FILE,
    build_model,
    check_windows,
    prepare_tokens,
    sample_stories,
    train_tokenizer,
)

PHASES = ("tokenizer", "pretrain", "sft", "align", "eval")


@dataclass
class Run:
    """Where a run writes, what it reads, and how big it is."""

    folder: Path
    size: RunSize
    train_file: Path
    val_file: Path
    sft_file: Path
    prefs_file: Path
    algorithm: str = "dpo"  # or "ppo"
    device: torch.device = torch.device("cpu")
    seed: int = 0
    progress: bool = True

    def phase_dir(self, phase: str) -> Path:
        return self.folder / phase

    def train_config(self) -> TrainConfig:
        """The pretraining config: the run size's settings with this run's files, seed and progress bars."""
        return self.size.train_config(
            train_file=str(self.train_file),
            val_file=str(self.val_file),
            out_dir=str(self.phase_dir("pretrain") / "model"),
            work_dir=str(self.phase_dir("pretrain") / "work"),
            seed=self.seed,
            progress=self.progress,
        )


def is_done(run: Run, phase: str) -> bool:
    return (run.phase_dir(phase) / "done.json").is_file()


def read_done(run: Run, phase: str) -> dict:
    return json.loads((run.phase_dir(phase) / "done.json").read_text(encoding="utf-8"))


def run_phase(run: Run, phase: str, body: Callable[[Run], dict]) -> dict:
    """Run ``body`` unless the phase is already complete; record its metrics and wall time in done.json."""
    if is_done(run, phase):
        print(f"[{phase}] already complete — skipped")
        return read_done(run, phase)
    print(f"[{phase}] running")
    run.phase_dir(phase).mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    metrics = body(run)
    metrics["seconds"] = round(time.perf_counter() - started, 1)
    write_record(run.phase_dir(phase) / "done.json", metrics)
    return metrics


def _tokenizer(run: Run) -> BPETokenizer:
    return BPETokenizer.load(run.phase_dir("tokenizer") / "tokenizer.json")


def _load_model(run: Run, phase: str) -> GPT:
    model, _, _ = load_pretrained(run.phase_dir(phase) / "model", device=run.device)
    return model


# ------------------------------------------------------------------------------------------- phases


def tokenizer_phase(run: Run) -> dict:
    base = run.size.base_dir()
    tokenizer = train_tokenizer(run.train_config()) if base is None else BPETokenizer.load(base / "tokenizer.json")
    tokenizer.save(run.phase_dir("tokenizer") / "tokenizer.json")
    sample = load_stories(run.val_file)[0]
    return {
        "vocab_size": tokenizer.vocab_size,
        "bytes_per_token": round(len(sample.encode()) / len(tokenizer.encode(sample)), 3),
    }


def _shipped_base(run: Run, base: Path) -> dict:
    """The pretrain phase of a run that starts from a shipped checkpoint: copy it, measure it, sample it."""
    model, _, _ = load_pretrained(base, device=run.device)
    tokenizer = _tokenizer(run)
    ids = encode_stories(tokenizer, load_stories(run.val_file)[:40])  # the first 40 stories
    metrics = {
        "from": str(base),
        "parameters": model.num_parameters(),
        "val_loss": round(validation_loss(model, ids, model.config.context_length), 4),
        "samples": sample_stories(model, tokenizer, n=2, max_new_tokens=120, seed=run.seed),
    }
    save_pretrained(run.phase_dir("pretrain") / "model", model, tokenizer, {"from": str(base), "metrics": metrics})
    return metrics


def pretrain_phase(run: Run) -> dict:
    base = run.size.base_dir()
    if base is not None:
        return _shipped_base(run, base)
    config, tokenizer = run.train_config(), _tokenizer(run)
    work = Path(config.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    train_tokens, val_tokens = prepare_tokens(config, tokenizer, work)
    check_windows(config, train_tokens, val_tokens)  # a named error, not a traceback from the batch sampler
    trainer = Trainer(
        build_model(config, tokenizer.vocab_size),
        config,
        train_tokens,
        val_tokens,
        device=run.device,
        data_name=str(work / "train.bin"),
    )
    checkpoint = work / CHECKPOINT_FILE
    remove_stale_temp_files(checkpoint)  # left by killed saves; the pipeline holds the folder's lock
    if checkpoint.is_file():
        trainer.load(checkpoint)
        print(f"[pretrain] resuming from step {trainer.step}")
    trainer.run(checkpoint_path=checkpoint)
    val_loss = trainer.evaluate()
    samples = sample_stories(trainer.raw_model, tokenizer, n=2, max_new_tokens=120, seed=run.seed)
    metrics = {
        "parameters": trainer.raw_model.num_parameters(),
        "steps": trainer.step,
        "tokens_seen": trainer.step * config.tokens_per_step,
        "final_train_loss": round(trainer.history[-1]["loss"], 4),
        "val_loss": round(val_loss, 4),
        "tokens_per_s": round(sorted(r["tokens_per_s"] for r in trainer.history)[len(trainer.history) // 2], 1),
        "samples": samples,
    }
    save_pretrained(Path(config.out_dir), trainer.raw_model, tokenizer, {"train": config.to_dict(), "metrics": metrics})
    write_history(trainer.history, run.phase_dir("pretrain"))
    return metrics


def sft_phase(run: Run) -> dict:
    seed_everything(run.seed)
    tokenizer, model = _tokenizer(run), _load_model(run, "pretrain")
    context = model.config.context_length
    rows = load_jsonl(run.sft_file, required=("messages",))
    examples = fitting_examples(rows, tokenizer, context)
    p = run.size
    history = train_sft(
        model,
        examples,
        pad_id=special_token_id(tokenizer, END),
        steps=p.sft.steps,
        lr=p.sft.lr,
        batch_size=p.sft.batch_size,
        generator=torch.Generator().manual_seed(run.seed),
        progress=run.progress,
    )
    save_pretrained(run.phase_dir("sft") / "model", model, tokenizer, {"sft": p.to_dict()})
    write_record(run.phase_dir("sft") / "history.json", {"loss": history.loss})
    return {
        "examples": len(examples),
        "dropped_too_long": len(rows) - len(examples),
        "first_loss": round(history.loss[0], 4),
        "last_loss": round(history.loss[-1], 4),
    }


def align_phase(run: Run) -> dict:
    seed_everything(run.seed)
    tokenizer, policy = _tokenizer(run), _load_model(run, "sft")
    reference = copy.deepcopy(policy).eval()
    pad_id, p = special_token_id(tokenizer, END), run.size
    rows = load_jsonl(run.prefs_file, required=("prompt", "chosen", "rejected"))
    pairs, _ = encode_preference_pairs(rows, tokenizer, policy.config.context_length)
    held_out, train_pairs = pairs[: p.align.held_out_pairs], pairs[p.align.held_out_pairs :]
    generator = torch.Generator().manual_seed(run.seed)
    metrics: dict = {"algorithm": run.algorithm, "pairs": len(train_pairs)}
    if run.algorithm == "dpo":
        history = train_dpo(
            policy,
            reference,
            train_pairs,
            pad_id,
            steps=p.align.dpo_steps,
            lr=p.align.dpo_lr,
            beta=p.align.dpo_beta,
            batch_size=p.align.batch_size,
            generator=generator,
            progress=run.progress,
        )
        held = dpo_metrics(policy, reference, held_out, pad_id, beta=p.align.dpo_beta)
        metrics.update(
            {
                "first_loss": round(history.loss[0], 4),
                "last_loss": round(history.loss[-1], 4),
                **{f"held_out_{k}": round(v, 4) for k, v in held.items()},
            }
        )
        write_record(
            run.phase_dir("align") / "history.json",
            {"loss": history.loss, "accuracy": history.accuracy, "margin": history.margin},
        )
    else:
        reward_model = ScalarHeadModel(copy.deepcopy(reference), policy.config.d_model).to(run.device)
        train_reward_model(
            reward_model,
            train_pairs,
            pad_id,
            steps=p.align.reward_model_steps,
            lr=p.align.reward_model_lr,
            batch_size=p.align.batch_size,
            generator=generator,
            progress=run.progress,
        )
        accuracy, _, _ = reward_accuracy(reward_model, held_out, pad_id)
        value_model = value_model_from(reward_model)
        prompts = eval_prompts(256, seed=run.seed + 1)
        config = RLHFConfig(
            advantage="gae",
            steps=p.align.ppo_steps,
            lr=p.align.ppo_lr,
            beta=p.align.ppo_beta,
            max_new_tokens=p.eval.max_new_tokens,
        )
        reward_fn = lambda rollout: reward_model(rollout.ids, rollout.mask)  # noqa: E731  (called under no_grad)
        history = train_rlhf(
            policy,
            reference,
            tokenizer,
            prompts,
            reward_fn,
            config,
            value_model=value_model,
            gold_fn=gold_score,
            generator=generator,
            progress=run.progress,
        )
        metrics.update(
            {
                "reward_model_accuracy": round(accuracy, 4),
                "first_reward": round(history.reward[0], 4),
                "last_reward": round(history.reward[-1], 4),
                "last_kl": round(history.kl[-1], 4),
            }
        )
        write_record(
            run.phase_dir("align") / "history.json", {"reward": history.reward, "gold": history.gold, "kl": history.kl}
        )
    save_pretrained(run.phase_dir("align") / "model", policy, tokenizer, {"align": metrics})
    return metrics


@torch.no_grad()
def kl_to_reference(
    policy: GPT, reference: GPT, tokenizer: BPETokenizer, prompts: list[str], max_new_tokens: int, seed: int
) -> float:
    """Mean over prompts of Σ_t [log π(y_t) − log π_ref(y_t)] on responses sampled from ``policy`` (k1)."""
    generator = torch.Generator(device=next(policy.parameters()).device).manual_seed(seed)
    rollout = sample_rollouts(
        policy, tokenizer, prompts, group_size=1, max_new_tokens=max_new_tokens, generator=generator
    )
    mask = rollout.mask[:, 1:]
    k1 = kl_k1(token_logprobs(policy(rollout.ids), rollout.ids), token_logprobs(reference(rollout.ids), rollout.ids))
    return masked_sum(k1, mask, dim=1).mean().item()


def eval_phase(run: Run) -> dict:
    """Each phase's model on the same prompts: gold score of greedy replies with its standard error and a
    bootstrap interval, pass@k on questions (sampled replies), bits per byte of held-out stories, and the KL
    to the SFT model; the paired gains of SFT over the base model and of alignment over SFT."""
    seed_everything(run.seed)
    tokenizer, p = _tokenizer(run), run.size
    prompts = eval_prompts(p.eval.prompts, seed=10_000 + run.seed)
    questions = [q for q in prompts if parse_prompt(q)["kind"] != "story"][: p.eval.questions]
    stories = load_stories(run.val_file)[: p.eval.stories]
    reference = _load_model(run, "sft")
    n, ks = p.eval.samples, sorted({1, min(2, p.eval.samples), p.eval.samples})
    results: dict = {
        "prompts": prompts[:3],
        "n_prompts": len(prompts),
        "pass_at_k_setting": {"questions": len(questions), "samples": n, "correct_at": CORRECT_AT},
    }
    scores = {}
    for phase in ("pretrain", "sft", "align"):
        model = reference if phase == "sft" else _load_model(run, phase)
        greedy = greedy_gold(model, tokenizer, prompts, p.eval.max_new_tokens)
        gold, se = mean_and_se(greedy.scores)
        low, high = bootstrap_interval(greedy.scores, n_resamples=2000, seed=run.seed)
        samples = sampled_gold(model, tokenizer, questions, n, p.eval.max_new_tokens, seed=run.seed)
        correct = [sum(s >= CORRECT_AT for s in samples.scores[i : i + n]) for i in range(0, len(samples.scores), n)]
        kl = kl_to_reference(model, reference, tokenizer, prompts[:16], p.eval.max_new_tokens, run.seed)
        scores[phase] = greedy.scores
        results[phase] = {
            "gold": round(gold, 4),
            "gold_se": round(se, 4),
            "gold_interval_95": [round(low, 4), round(high, 4)],
            "pass_at_k": {str(k): round(pass_at_k_mean(correct, n, k), 4) for k in ks},
            "bits_per_byte": round(text_bits_per_byte(model, tokenizer, "\n\n".join(stories)), 4),
            "kl_to_sft": round(kl, 3),
            "replies": greedy.replies[:3],
        }
    for later, earlier in (("sft", "pretrain"), ("align", "sft")):
        gain, gain_se = paired_difference(scores[later], scores[earlier])
        results[f"{later}_vs_{earlier}"] = {"gold_gain": round(gain, 4), "se": round(gain_se, 4)}
    return results
