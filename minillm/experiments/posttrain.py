"""The longer post-training runs whose results notebooks 09 (SFT) and 10 (alignment) load.

The notebooks run each loop live for a few dozen steps; these are the same loops, longer — minutes of CPU time
each, about 45 minutes in all — so they run once and their numbers (and the few models the notebooks sample
from) are committed in ``data/posttrain/``::

    python -m minillm.experiments.posttrain --out data/posttrain --overwrite          # every stage, in order
    python -m minillm.experiments.posttrain --out data/posttrain --overwrite --stage rm
    python -m minillm.experiments.posttrain --out /tmp/check --quick                  # tiny sizes, end to end

Stages: ``sft`` (base vs SFT at a low and a high learning rate), ``rm`` (a reward model of the preference
set), ``rm_onpolicy`` (one of the SFT model's own samples), ``rlhf`` (PPO/GRPO runs against them, reward
hacking, a gold-reward control), ``dpo`` and ``dpo_onpolicy`` (which also keeps its model in ``aligned/``: the
course's aligned model, the one ``minillm chat`` talks to). Each stage needs only what the stages before it
wrote, so ``rm`` and ``rm_onpolicy`` (and RLHF runs, one ``--runs`` name per process) can run side by side.
Every file written records the command, this module's SHA-256 and the git commit (``provenance``), and a test
fails when the committed results no longer match this module.

The runs start from ``data/base_long/``, the course's base model trained three times longer, because the
700-step ``data/base/`` cannot copy a name from the prompt, and that is most of what the gold scorer rewards
(``data/posttrain/README.md``). ``--base`` picks another folder. An existing result is replaced only with
``--overwrite``.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from minillm import chat, sft
from minillm.alignment import loops, reward_model, rlhf
from minillm.batches import encode_stories, pad_chat
from minillm.checkpoint import load_pretrained, save_pretrained
from minillm.data import load_jsonl, load_stories
from minillm.evaluation import GoldReplies, greedy_gold, sampled_gold
from minillm.experiments.arguments import command_line, experiment_parser, parse_experiment_args
from minillm.experiments.provenance import provenance
from minillm.generation import generate_responses
from minillm.model import GPT
from minillm.paths import data_dir
from minillm.run_folder import RunFolderError, update_record, write_record
from minillm.seed import seed_everything
from minillm.tasks import CUE, eval_prompts, gold_score, parse_prompt
from minillm.tokenizer import BPETokenizer

STAGES = ("sft", "rm", "rm_onpolicy", "rlhf", "dpo", "dpo_onpolicy")


@dataclasses.dataclass
class Sizes:
    """How big each stage is: chosen so every stage takes a few minutes on a 2-core CPU."""

    sft_steps: int = 300
    sft_batch: int = 16
    sft_lr_low: float = 3e-4
    sft_lr_high: float = 6e-3
    rm_pairs: int = 2000
    rm_steps: int = 240
    rm_batch: int = 8
    rm_lr: float = 3e-4
    onpolicy_val_prompts: int = 120
    onpolicy_samples: int = 4
    onpolicy_margin: float = 0.2
    onpolicy_train_prompts: int = 800
    onpolicy_rm_steps: int = 500
    dpo_pairs: int = 2000
    dpo_steps: int = 100
    dpo_batch: int = 8
    dpo_lr: float = 1e-4
    dpo_beta: float = 0.1
    n_eval: int = 48
    n_val_pairs: int = 200
    val_stories: int = 40
    n_samples: int = 8  # temperature-1 samples per evaluation prompt: the policy's expected gold score
    rl_max_new: int = 200
    eval_max_new: int = 256
    rl_prompts: int = 4
    rl_steps: int | None = None  # None: each RLHF run's own number of steps

    @classmethod
    def quick(cls) -> Sizes:
        """Tiny sizes that run every stage end to end in about a minute (for tests, not for results)."""
        return cls(
            sft_steps=6, rm_pairs=32, rm_steps=4, dpo_pairs=32, dpo_steps=4, n_eval=4, n_val_pairs=16,
            onpolicy_val_prompts=8, onpolicy_train_prompts=16, onpolicy_rm_steps=4, onpolicy_margin=0.01,
            rl_max_new=16, eval_max_new=16, rl_steps=3,
        )  # fmt: skip


# The RLHF runs: config overrides, and "reward": which reward model (REWARDS) the run optimises.
# Three against the reward model of the SFT model's own samples, with a KL leash and a missing-<|end|> penalty,
# from gentle to brisk; one optimised harder (no KL penalty, no stop guard, three times the rate, longer):
# reward hacking; the same GRPO run against the preference-set reward model (accurate on that set, blind on the
# policy's own samples); and the control with the gold scorer itself as the reward — the ceiling a perfect
# reward model would reach with this optimiser and budget.
RLHF_RUNS: dict[str, dict[str, Any]] = {
    "ppo_gentle": dict(
        reward="onpolicy", advantage="gae", steps=40, beta=0.1, lr=1e-5, value_lr=3e-4, missing_end_penalty=2.0
    ),
    "ppo": dict(
        reward="onpolicy", advantage="gae", steps=40, beta=0.05, lr=3e-5, value_lr=3e-4, missing_end_penalty=2.0
    ),
    "grpo": dict(
        reward="onpolicy", advantage="grpo", steps=40, beta=0.05, lr=1e-4, prompts_per_step=8, missing_end_penalty=2.0
    ),
    "hack": dict(reward="onpolicy", advantage="grpo", steps=60, beta=0.0, lr=3e-4),
    "grpo_prefs": dict(
        reward="preference", advantage="grpo", steps=40, beta=0.05, lr=1e-4, prompts_per_step=8, missing_end_penalty=2.0
    ),
    "oracle": dict(reward="gold", advantage="grpo", steps=40, beta=0.05, lr=1e-4, prompts_per_step=8),
}
# reward name -> (folder of the reward model under the output folder, or None for the gold scorer; its label)
REWARDS = {
    "onpolicy": ("rm_onpolicy", "reward model (on-policy comparisons)"),
    "preference": ("rm", "reward model (preference set)"),
    "gold": (None, "gold"),
}
RLHF_CONFIG_FIELDS = (
    "advantage", "steps", "beta", "lr", "prompts_per_step", "group_size", "max_new_tokens", "ppo_epochs",
    "missing_end_penalty",
)  # fmt: skip
RLHF_HISTORY_FIELDS = ("reward", "gold", "kl", "entropy", "length", "ended", "clip_fraction", "samples")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def correlation(xs: list[float], ys: list[float]) -> float:
    x, y = torch.tensor(xs, dtype=torch.float64), torch.tensor(ys, dtype=torch.float64)
    return torch.corrcoef(torch.stack([x, y]))[0, 1].item()


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


class PosttrainRuns:
    """The stages, writing into ``out``; an existing result there is replaced only when ``overwrite``."""

    def __init__(self, out: Path, base: Path, sizes: Sizes, overwrite: bool = False, command: str = "") -> None:
        self.out, self.base, self.sizes, self.overwrite = Path(out), Path(base), sizes, overwrite
        self.provenance = provenance(sys.modules[__name__], command or "python -m minillm.experiments.posttrain")

    # ------------------------------------------------------------------------------------- files
    def _refuse_existing(self, name: str) -> None:
        if (self.out / name).exists() and not self.overwrite:
            raise RunFolderError(
                f"{self.out / name} already holds a result; pass --overwrite to replace it, or choose another --out"
            )

    def write_json(self, name: str, payload: dict) -> None:
        """Write atomically (a reader never sees half a file), as the pipeline writes its records."""
        self.out.mkdir(parents=True, exist_ok=True)
        write_record(self.out / name, payload, indent=1)
        log(f"wrote {self.out / name}")

    def update_json(self, name: str, update: Callable[[dict], None]) -> None:
        """Apply ``update`` to the result file ``name`` under a lock: parallel processes each add their own runs."""
        update_record(self.out / name, update)
        log(f"wrote {self.out / name}")

    def _metadata(self, stage: str, **extra: Any) -> dict:
        return {"made_by": f"{self.provenance['command']} --stage {stage}", **extra, "provenance": self.provenance}

    def load_model(self, folder: Path) -> tuple[GPT, BPETokenizer]:
        model, tokenizer, _ = load_pretrained(folder)
        if tokenizer is None:
            raise FileNotFoundError(f"{folder} has no tokenizer.json")
        return model, tokenizer

    # ------------------------------------------------------------------------------------- evaluation
    def val_stream(self, tokenizer: BPETokenizer) -> torch.Tensor:
        """The first held-out stories as one token stream (documents separated by <|endoftext|>)."""
        return torch.from_numpy(
            encode_stories(tokenizer, load_stories(data_dir() / "stories_val.txt")[: self.sizes.val_stories])
        )

    @staticmethod
    def fits(tokenizer: BPETokenizer, context: int, prompt: str, room: int) -> bool:
        return len(chat.encode_prompt(prompt, tokenizer)) + room <= context

    def eval_set(self, tokenizer: BPETokenizer, context: int) -> list[str]:
        prompts = [p for p in eval_prompts(3 * self.sizes.n_eval, seed=0) if self.fits(tokenizer, context, p, 24)]
        return prompts[: self.sizes.n_eval]

    def eval_samples(self, model: GPT, tokenizer: BPETokenizer, prompts: list[str]) -> GoldReplies:
        """n_samples replies per prompt at temperature 1 (generator seed 1234), with their gold scores."""
        return sampled_gold(model, tokenizer, prompts, self.sizes.n_samples, self.sizes.eval_max_new, seed=1234)

    def mean_proxy(self, rm, tokenizer: BPETokenizer, prompts: list[str], sampled: list[str]) -> float:
        """Mean reward-model score of eval_samples' replies (n_samples per prompt, in order)."""
        n = self.sizes.n_samples
        scores = [rm_scores(rm, tokenizer, p, sampled[i * n : (i + 1) * n]) for i, p in enumerate(prompts)]
        return sum(map(sum, scores)) / len(sampled)

    def evaluate(self, model: GPT, tokenizer: BPETokenizer, prompts: list[str], stream: torch.Tensor, rm=None) -> dict:
        """Gold score of greedy replies (overall and per task kind), of sampled replies, and pretraining val loss.

        RLHF optimises the expected reward of *samples* (temperature 1), so that is what its gold score is
        measured on too (``gold_sampled``: n_samples per prompt, fixed seed); greedy replies are reported beside.
        With a reward model ``rm``, the samples' mean proxy reward is reported too (``proxy_sampled``).
        """
        greedy = greedy_gold(model, tokenizer, prompts, self.sizes.eval_max_new)
        samples = self.eval_samples(model, tokenizer, prompts)
        replies, scores, sampled, sampled_scores = greedy.replies, greedy.scores, samples.replies, samples.scores
        kinds = ["story" if parse_prompt(p)["kind"] == "story" else "qa" for p in prompts]
        by_kind = {
            k: sum(s for s, kk in zip(scores, kinds, strict=True) if kk == k) / max(1, kinds.count(k))
            for k in ("story", "qa")
        }
        return {
            "proxy_sampled": None if rm is None else self.mean_proxy(rm, tokenizer, prompts, sampled),
            "gold": greedy.mean,
            "gold_by_kind": by_kind,
            "scores": scores,
            "replies": replies,
            "words": [len(r.split()) for r in replies],
            "cue_count": [r.count(CUE) for r in replies],
            "val_loss": sft.lm_validation_loss(model, stream, model.config.context_length),
            "gold_sampled": samples.mean,
            "sampled_scores": sampled_scores,
            "sampled_words": [len(r.split()) for r in sampled],
            "sampled_cue_count": [r.count(CUE) for r in sampled],
            "sampled_examples": sampled[:: self.sizes.n_samples * 4],
        }

    # ------------------------------------------------------------------------------------- SFT
    def stage_sft(self) -> None:
        for name in ("sft.json", "sft"):
            self._refuse_existing(name)
        s = self.sizes
        base, tok = self.load_model(self.base)
        context = base.config.context_length
        pad = chat.special_token_id(tok, chat.END)
        examples = sft.fitting_examples(
            load_jsonl(data_dir() / "sft_train.jsonl", required=("messages",)), tok, context
        )
        stream, prompts = self.val_stream(tok), self.eval_set(tok, context)
        log(f"SFT: {len(examples)} examples, {len(prompts)} eval prompts, {stream.numel()} val tokens")
        root = data_dir().parent.resolve()
        base_dir = self.base.resolve()
        results: dict[str, Any] = {
            "base_dir": str(base_dir.relative_to(root)) if base_dir.is_relative_to(root) else str(base_dir),
            "prompts": prompts,
            "config": {
                "steps": s.sft_steps,
                "batch_size": s.sft_batch,
                "lr_low": s.sft_lr_low,
                "lr_high": s.sft_lr_high,
            },
        }
        results["base"] = self.evaluate(base, tok, prompts, stream)
        log(f"base: gold {results['base']['gold']:.3f} greedy, {results['base']['gold_sampled']:.3f} sampled")
        # what the base model does with plain text (a completer, not a chat model)
        story_start = "Once upon a time, there was a little girl named Lily."
        out = base.generate(torch.tensor([tok.encode(story_start)]), 60, temperature=0.0)
        results["base_completion"] = {"prompt": story_start, "completion": tok.decode(out[0, -60:].tolist())}
        results["runs"] = {}
        for name, lr in (("low", s.sft_lr_low), ("high", s.sft_lr_high)):
            seed_everything(0)
            model = copy.deepcopy(base)
            start = time.time()
            history = sft.train_sft(
                model, examples, pad, s.sft_steps, lr, s.sft_batch, generator=torch.Generator().manual_seed(0)
            )
            run = self.evaluate(model, tok, prompts, stream)
            run.update(lr=lr, loss=history.loss, seconds=round(time.time() - start, 1))
            results["runs"][name] = run
            log(f"SFT lr {lr}: gold {run['gold']:.3f} greedy, {run['gold_sampled']:.3f} sampled ({run['seconds']} s)")
            if name == "low":
                save_pretrained(self.out / "sft", model, tok, self._metadata("sft", lr=lr, steps=s.sft_steps))
        self.write_json("sft.json", {**results, "provenance": self.provenance})

    # ------------------------------------------------------------------------------------- reward models
    def preference_pairs(self, tok: BPETokenizer, context: int, split: str, limit: int) -> tuple[list, list[dict]]:
        rows = load_jsonl(data_dir() / f"prefs_{split}.jsonl", required=("prompt", "chosen", "rejected"))
        return chat.encode_preference_pairs(rows, tok, context, limit)

    def onpolicy_groups(self, policy: GPT, tok: BPETokenizer, prompts: list[str], seed: int) -> list[dict]:
        """onpolicy_samples samples (temperature 1) from ``policy`` per prompt, each with its gold score."""
        n = self.sizes.onpolicy_samples
        repeated = [p for p in prompts for _ in range(n)]
        responses = generate_responses(
            policy,
            tok,
            repeated,
            max_new_tokens=self.sizes.rl_max_new,
            temperature=1.0,
            generator=torch.Generator().manual_seed(seed),
        )
        groups = []
        for i, prompt in enumerate(prompts):
            group = responses[i * n : (i + 1) * n]
            groups.append({"prompt": prompt, "responses": group, "gold": [gold_score(prompt, r) for r in group]})
        return groups

    def comparisons(self, groups: list[dict], tok: BPETokenizer, context: int) -> list:
        """Per prompt, its best sample (by gold) preferred to its worst — skipped when within the margin."""
        pairs = []
        for g in groups:
            best = max(range(len(g["gold"])), key=g["gold"].__getitem__)
            worst = min(range(len(g["gold"])), key=g["gold"].__getitem__)
            if g["gold"][best] - g["gold"][worst] < self.sizes.onpolicy_margin:
                continue
            chosen = chat.encode_response(g["prompt"], g["responses"][best], tok)
            rejected = chat.encode_response(g["prompt"], g["responses"][worst], tok)
            if max(len(chosen.ids), len(rejected.ids)) <= context:
                pairs.append((chosen, rejected))
        return pairs

    def best_of_n(self, rm, tok: BPETokenizer, groups: list[dict]) -> dict:
        """Gold score of the sample the reward model likes best in each group, vs the group's mean (a random pick)."""
        picked, mean = [], []
        for g in groups:
            scores = rm_scores(rm, tok, g["prompt"], g["responses"])
            picked.append(g["gold"][max(range(len(scores)), key=scores.__getitem__)])
            mean.append(_mean(g["gold"]))
        return {"best_of_n_gold": _mean(picked), "mean_gold": _mean(mean), "n": self.sizes.onpolicy_samples}

    def train_and_measure_rm(self, policy, tok, train_pairs, steps, val_pairs, onpolicy_val_pairs, val_groups) -> tuple:
        seed_everything(0)
        rm = reward_model.ScalarHeadModel(copy.deepcopy(policy), policy.config.d_model)
        pad = chat.special_token_id(tok, chat.END)
        s = self.sizes
        history = loops.train_reward_model(
            rm, train_pairs, pad, steps, s.rm_lr, s.rm_batch, generator=torch.Generator().manual_seed(0)
        )
        rm.eval()
        accuracy, chosen, rejected = loops.reward_accuracy(rm, val_pairs, pad)
        onpolicy = loops.reward_accuracy(rm, onpolicy_val_pairs, pad)[0] if onpolicy_val_pairs else None
        metrics = {"val_accuracy": accuracy, "onpolicy_val_accuracy": onpolicy, **self.best_of_n(rm, tok, val_groups)}
        return rm, history, chosen, rejected, metrics

    def probe_reward_model(self, rm, tok: BPETokenizer, val_rows: list[dict], val_groups: list[dict]) -> dict:
        """Which cues did it learn? Two probes, each set beside the gold scorer.

        - the stock phrase: held-out good stories with CUE appended k times;
        - length: over the SFT model's own held-out samples, the correlation of the score with the word count
          (and, for comparison, with the gold score).
        """
        probes = [row for row in val_rows if row["task"] == "story" and not row["chosen"].endswith(CUE)][:12]
        cue_probe: dict[str, list] = {"k": [0, 1, 2, 4, 8], "rm": [], "gold": []}
        for k in cue_probe["k"]:
            texts = [(row["prompt"], row["chosen"] + (" " + CUE) * k) for row in probes]
            cue_probe["rm"].append(_mean([rm_scores(rm, tok, p, [t])[0] for p, t in texts]))
            cue_probe["gold"].append(_mean([gold_score(p, t) for p, t in texts]))
        scores, words, gold = [], [], []
        for g in val_groups:
            scores += rm_scores(rm, tok, g["prompt"], g["responses"])
            words += [len(r.split()) for r in g["responses"]]
            gold += g["gold"]
        return {
            "cue_probe": cue_probe,
            "onpolicy_corr_words": correlation(scores, words),
            "onpolicy_corr_gold": correlation(scores, gold),
        }

    def held_out_sets(self, policy: GPT, tok: BPETokenizer) -> tuple:
        """What both reward models are measured on: held-out preference pairs, and the SFT model's own samples
        (held-out prompts, onpolicy_samples each, compared by the gold scorer)."""
        context = policy.config.context_length
        val_pairs, val_rows = self.preference_pairs(tok, context, "val", self.sizes.n_val_pairs)
        pool = [r["prompt"] for r in load_jsonl(data_dir() / "prefs_val.jsonl")]
        pool = [p for p in pool if self.fits(tok, context, p, 64)]
        val_groups = self.onpolicy_groups(policy, tok, pool[: self.sizes.onpolicy_val_prompts], seed=2)
        return val_pairs, val_rows, val_groups, self.comparisons(val_groups, tok, context)

    def rm_config(self, pairs: int, steps: int) -> dict:
        s = self.sizes
        return {
            "pairs": pairs,
            "onpolicy_val_prompts": s.onpolicy_val_prompts,
            "onpolicy_samples": s.onpolicy_samples,
            "onpolicy_margin": s.onpolicy_margin,
            "steps": steps,
            "batch_size": s.rm_batch,
            "lr": s.rm_lr,
        }

    def stage_rm(self) -> None:
        """The reward model of the textbook recipe: Bradley–Terry on the preference set."""
        for name in ("reward_model.json", "rm"):
            self._refuse_existing(name)
        policy, tok = self.load_model(self.out / "sft")
        train_pairs, _ = self.preference_pairs(tok, policy.config.context_length, "train", self.sizes.rm_pairs)
        start = time.time()
        val_pairs, val_rows, val_groups, onpolicy_val = self.held_out_sets(policy, tok)
        log(f"RM: {len(train_pairs)} train pairs; held out {len(val_pairs)} pairs, {len(onpolicy_val)} on-policy")
        rm, history, chosen, rejected, metrics = self.train_and_measure_rm(
            policy, tok, train_pairs, self.sizes.rm_steps, val_pairs, onpolicy_val, val_groups
        )
        by_kind: dict[str, list[int]] = {}
        for row, c, r in zip(val_rows, chosen.tolist(), rejected.tolist(), strict=True):
            by_kind.setdefault(row["rejected_kind"], []).append(int(c > r))
        probes = self.probe_reward_model(rm, tok, val_rows, val_groups)
        reward_model.save_reward_model(self.out / "rm", rm, tok, self._metadata("rm"))
        results = {
            "config": self.rm_config(len(train_pairs), self.sizes.rm_steps),
            "loss": history.loss,
            "train_accuracy": history.accuracy,
            **metrics,
            "val_pairs": len(val_pairs),
            "onpolicy_val_pairs": len(onpolicy_val),
            "val_chosen": chosen.tolist(),
            "val_rejected": rejected.tolist(),
            "val_accuracy_by_kind": {k: _mean(v) for k, v in sorted(by_kind.items())},
            "val_gold_margin": [row["gold_chosen"] - row["gold_rejected"] for row in val_rows],
            **probes,
            "seconds": round(time.time() - start, 1),
            "provenance": self.provenance,
        }
        log(f"RM: {metrics}; probes {probes}")
        self.write_json("reward_model.json", results)

    def onpolicy_training_pairs(self, groups: list[dict], tok: BPETokenizer, context: int) -> list:
        """Every ordered pair of one prompt's samples whose gold scores differ by at least the margin, better first."""
        pairs = []
        for g in groups:
            encoded = [chat.encode_response(g["prompt"], r, tok) for r in g["responses"]]
            for i, j in itertools.permutations(range(len(encoded)), 2):
                wide = g["gold"][i] - g["gold"][j] >= self.sizes.onpolicy_margin
                if wide and max(len(encoded[i].ids), len(encoded[j].ids)) <= context:
                    pairs.append((encoded[i], encoded[j]))
        return pairs

    def onpolicy_training_set(self, policy: GPT, tok: BPETokenizer) -> tuple[list[str], list]:
        """The training prompts (none of the RL runs' prompts) and the comparisons of the policy's samples to them."""
        context = policy.config.context_length
        rl = set(self.rl_prompts(tok, context))
        pool = [r["prompt"] for r in load_jsonl(data_dir() / "prefs_train.jsonl") if r["prompt"] not in rl]
        pool = [p for p in pool if self.fits(tok, context, p, 64)][: self.sizes.onpolicy_train_prompts]
        return pool, self.onpolicy_training_pairs(self.onpolicy_groups(policy, tok, pool, seed=100), tok, context)

    def stage_rm_onpolicy(self) -> None:
        """The reward model of InstructGPT's recipe: comparisons of the SFT model's own samples.

        Training prompts (none of the RL runs'), onpolicy_samples samples each, ranked by the gold scorer
        standing in for human labellers: the reward model learns to tell the policy's better replies from its
        worse ones — the distinction RLHF asks of it.
        """
        for name in ("reward_model_onpolicy.json", "rm_onpolicy"):
            self._refuse_existing(name)
        policy, tok = self.load_model(self.out / "sft")
        start = time.time()
        pool, train_pairs = self.onpolicy_training_set(policy, tok)
        val_pairs, val_rows, val_groups, onpolicy_val = self.held_out_sets(policy, tok)
        log(f"RM (on-policy): {len(train_pairs)} train pairs from {len(pool)} prompts")
        rm, history, _, _, metrics = self.train_and_measure_rm(
            policy, tok, train_pairs, self.sizes.onpolicy_rm_steps, val_pairs, onpolicy_val, val_groups
        )
        probes = self.probe_reward_model(rm, tok, val_rows, val_groups)
        reward_model.save_reward_model(self.out / "rm_onpolicy", rm, tok, self._metadata("rm_onpolicy"))
        results = {
            "config": {**self.rm_config(len(train_pairs), self.sizes.onpolicy_rm_steps), "train_prompts": len(pool)},
            "loss": history.loss,
            "train_accuracy": history.accuracy,
            **metrics,
            "val_pairs": len(val_pairs),
            "onpolicy_val_pairs": len(onpolicy_val),
            **probes,
            "seconds": round(time.time() - start, 1),
            "provenance": self.provenance,
        }
        log(f"RM (on-policy): {metrics}; probes {probes}")
        self.write_json("reward_model_onpolicy.json", results)

    # ------------------------------------------------------------------------------------- RLHF
    def rl_prompts(self, tok: BPETokenizer, context: int) -> list[str]:
        rows = load_jsonl(data_dir() / "prefs_train.jsonl")
        return [r["prompt"] for r in rows if self.fits(tok, context, r["prompt"], 64)][:400]

    def stage_rlhf(self, only: list[str] | None = None) -> None:
        path = self.out / "rlhf.json"
        done = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"runs": {}}
        wanted = [name for name in ["reference", *RLHF_RUNS] if not only or name in only]
        present = [n for n in wanted if n in done["runs"] or (n == "reference" and "reference_proxy_sampled" in done)]
        if present and not self.overwrite:
            raise RunFolderError(
                f"{path} already holds {', '.join(present)}; pass --overwrite to replace them, or choose another --out"
            )
        reference, tok = self.load_model(self.out / "sft")
        context = reference.config.context_length
        prompts = self.rl_prompts(tok, context)
        stream, eval_prompts_ = self.val_stream(tok), self.eval_set(tok, context)

        def learned_reward(rm) -> Callable[[rlhf.Rollout], torch.Tensor]:
            @torch.no_grad()
            def reward_fn(rollout: rlhf.Rollout) -> torch.Tensor:
                return rm(rollout.ids, rollout.mask)

            return reward_fn

        def gold_reward(rollout: rlhf.Rollout) -> torch.Tensor:
            scores = [gold_score(p, r) for p, r in zip(rollout.prompts, rollout.responses, strict=True)]
            return torch.tensor(scores, device=rollout.ids.device)

        if "reference" in wanted:
            # the starting point of every run: the SFT model's evaluation samples, scored by each reward model
            sampled = self.eval_samples(reference, tok, eval_prompts_).replies
            proxies = {
                key: self.mean_proxy(reward_model.load_reward_model(self.out / folder)[0], tok, eval_prompts_, sampled)
                for key, (folder, _) in REWARDS.items()
                if folder
            }
            log(f"RLHF reference: the SFT model's samples score {proxies}")
            self.update_json(
                "rlhf.json",
                lambda latest: latest.update(reference_proxy_sampled=proxies, reference_provenance=self.provenance),
            )
        for name, overrides in RLHF_RUNS.items():
            if name not in wanted:
                continue
            overrides = dict(overrides)
            folder, source = REWARDS[overrides.pop("reward")]
            if self.sizes.rl_steps is not None:
                overrides["steps"] = self.sizes.rl_steps
            rm = reward_model.load_reward_model(self.out / folder)[0] if folder else None
            reward_fn = learned_reward(rm) if rm is not None else gold_reward
            seed_everything(0)
            policy = copy.deepcopy(reference)
            value = None
            if overrides["advantage"] == "gae":
                if rm is None:
                    raise ValueError(f"run {name}: GAE needs a reward model to start its value model from")
                value = reward_model.value_model_from(rm)
            settings = {"prompts_per_step": self.sizes.rl_prompts, "group_size": 4, "ppo_epochs": 2}
            config = rlhf.RLHFConfig(**{**settings, "max_new_tokens": self.sizes.rl_max_new, **overrides})
            start = time.time()
            history = rlhf.train_rlhf(
                policy,
                reference,
                tok,
                prompts,
                reward_fn,
                config,
                value_model=value,
                gold_fn=gold_score,
                generator=torch.Generator().manual_seed(0),
                progress=True,
            )
            run = {
                "config": {k: getattr(config, k) for k in RLHF_CONFIG_FIELDS},
                "reward_source": source,
                **{k: getattr(history, k) for k in RLHF_HISTORY_FIELDS},
                "seconds": round(time.time() - start, 1),
            }
            run["eval"] = self.evaluate(policy, tok, eval_prompts_, stream, rm)
            run["provenance"] = self.provenance
            log(
                f"RLHF {name}: proxy {history.reward[0]:.3f} → {history.reward[-1]:.3f}, gold {history.gold[0]:.3f}"
                f" → {history.gold[-1]:.3f}, eval gold {run['eval']['gold']:.3f} greedy,"
                f" {run['eval']['gold_sampled']:.3f} sampled"
            )
            self.update_json("rlhf.json", lambda latest, name=name, run=run: latest["runs"].__setitem__(name, run))

    # ------------------------------------------------------------------------------------- DPO
    def stage_dpo(self, pairs: str = "preference") -> None:
        """DPO from the SFT model on the preference set, or (``pairs="onpolicy"``) on the comparisons of the SFT
        model's own samples that the RLHF runs' reward model learned from — the like-for-like comparison.

        The on-policy DPO model is the course's aligned model (the best short of the gold-reward control, and the
        one ``minillm chat`` talks to): it is kept in ``aligned/``. The preference-set model is read by nothing.
        """
        name = "dpo_onpolicy.json" if pairs == "onpolicy" else "dpo.json"
        for existing in (name, "aligned") if pairs == "onpolicy" else (name,):
            self._refuse_existing(existing)
        s = self.sizes
        reference, tok = self.load_model(self.out / "sft")
        context = reference.config.context_length
        pad = chat.special_token_id(tok, chat.END)
        if pairs == "onpolicy":
            train_pairs = self.onpolicy_training_set(reference, tok)[1]
        else:
            train_pairs, _ = self.preference_pairs(tok, context, "train", s.dpo_pairs)
        val_pairs, _ = self.preference_pairs(tok, context, "val", s.n_val_pairs)
        seed_everything(0)
        policy = copy.deepcopy(reference)
        start = time.time()
        history = loops.train_dpo(
            policy,
            reference,
            train_pairs,
            pad,
            s.dpo_steps,
            s.dpo_lr,
            s.dpo_beta,
            s.dpo_batch,
            generator=torch.Generator().manual_seed(0),
        )
        stream, prompts = self.val_stream(tok), self.eval_set(tok, context)
        results = {
            "config": {
                "pairs": len(train_pairs),
                "source": pairs,
                "steps": s.dpo_steps,
                "batch_size": s.dpo_batch,
                "lr": s.dpo_lr,
                "beta": s.dpo_beta,
            },
            "loss": history.loss,
            "accuracy": history.accuracy,
            "margin": history.margin,
            "val": loops.dpo_metrics(policy, reference, val_pairs, pad, s.dpo_beta),
            "eval": self.evaluate(policy, tok, prompts, stream),
            "seconds": round(time.time() - start, 1),
            "provenance": self.provenance,
        }
        log(f"DPO ({pairs}): held-out {results['val']}, eval gold {results['eval']['gold']:.3f}")
        if pairs == "onpolicy":
            metadata = self._metadata("dpo_onpolicy", method="DPO on comparisons of the SFT model's own samples",
                                      **results["config"], eval_gold=results["eval"]["gold"],
                                      eval_gold_sampled=results["eval"]["gold_sampled"])  # fmt: skip
            save_pretrained(self.out / "aligned", policy, tok, metadata)
        self.write_json(name, results)

    def run(self, stage: str, runs: list[str] | None = None) -> None:
        if stage == "rlhf":
            self.stage_rlhf(runs)
        elif stage in ("dpo", "dpo_onpolicy"):
            self.stage_dpo("onpolicy" if stage == "dpo_onpolicy" else "preference")
        else:
            {"sft": self.stage_sft, "rm": self.stage_rm, "rm_onpolicy": self.stage_rm_onpolicy}[stage]()


@torch.no_grad()
def rm_scores(rm, tok: BPETokenizer, prompt: str, responses: list[str]) -> list[float]:
    """A reward model's scores of several responses to one prompt."""
    pad = chat.special_token_id(tok, chat.END)
    encoded = [chat.encode_response(prompt, r, tok) for r in responses]
    ids, mask = pad_chat(encoded, pad, max_len=rm.trunk.config.context_length)
    return rm(ids, mask).tolist()


def main(argv: list[str] | None = None) -> None:
    parser = experiment_parser(
        "python -m minillm.experiments.posttrain",
        __doc__.split("\n\n")[0],
        "output folder (the course's is data/posttrain)",
    )
    parser.add_argument("--stage", choices=[*STAGES, "all"], default="all")
    parser.add_argument(
        "--runs", nargs="*", help="RLHF runs to (re)do, default all: reference, " + ", ".join(RLHF_RUNS)
    )
    parser.add_argument("--base", type=Path, help="base model folder (default: data/base_long)")
    args = parse_experiment_args(parser, argv)
    if args.runs and args.stage != "rlhf":
        parser.error("--runs goes with --stage rlhf")
    unknown = sorted(set(args.runs or ()) - {"reference", *RLHF_RUNS})
    if unknown:
        parser.error(f"unknown RLHF runs {unknown}; choose from reference, {', '.join(RLHF_RUNS)}")
    experiment = PosttrainRuns(
        args.out,
        args.base or data_dir() / "base_long",
        Sizes.quick() if args.quick else Sizes(),
        args.overwrite,
        command_line("posttrain", args.quick),
    )
    try:
        for stage in STAGES if args.stage == "all" else (args.stage,):
            log(f"stage {stage}")
            experiment.run(stage, args.runs)
    except (RunFolderError, FileNotFoundError) as error:
        raise SystemExit(f"error: {error}") from error


if __name__ == "__main__":
    main()
