"""Precompute the post-training runs that notebooks 09 (SFT) and 10 (alignment) load.

Each run is minutes of CPU time — too long for a notebook that must finish in under two minutes — so
this script runs them once and writes the numbers (and the few models the notebooks sample from) to
``data/posttrain/``. Every stage is seeded; rerun one with ``--stage``::

    python benchmarks/posttrain_runs.py --stage sft           # base vs SFT; low vs high learning rate
    python benchmarks/posttrain_runs.py --stage rm            # reward model on the preference set
    python benchmarks/posttrain_runs.py --stage rm_onpolicy   # reward model on the SFT model's own samples
    python benchmarks/posttrain_runs.py --stage rlhf          # PPO/GRPO against the reward models; hacking
    python benchmarks/posttrain_runs.py --stage dpo           # DPO on the preference set
    python benchmarks/posttrain_runs.py --stage dpo_onpolicy  # DPO on the on-policy comparisons
    python benchmarks/posttrain_runs.py                       # all of them, in order

Stages after ``sft`` need only what the stages before them wrote, so ``rm`` and ``rm_onpolicy`` (and the
RLHF runs, one ``--runs`` name per process) can run side by side, one thread each.

The runs start from ``data/base_long/``: the course's base model trained three times longer (``python -m
minillm.train --config configs/course_long.json``, about 21 minutes), because the 700-step ``data/base/``
cannot copy a name from the prompt, and that is most of what the gold scorer rewards (see
``data/posttrain/README.md``). ``--base`` picks another folder.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import sys
import time
from pathlib import Path

import torch

from minillm import chat, sft
from minillm.alignment import reward_model, rlhf, training
from minillm.checkpoint import load_pretrained, save_pretrained
from minillm.data import load_jsonl, load_stories
from minillm.paths import data_dir, data_path
from minillm.seed import seed_everything
from minillm.tasks import eval_prompts, gold_score, gold_score_details, parse_prompt

OUT = data_dir() / "posttrain"
BASE: Path | None = None  # --base overrides the choice in base_dir()
CUE = "They were very happy."

# Sizes: chosen so every stage takes a few minutes on a 2-core CPU.
SFT_STEPS, SFT_BATCH, SFT_LR_LOW, SFT_LR_HIGH = 300, 16, 3e-4, 6e-3
RM_PAIRS, RM_STEPS, RM_BATCH, RM_LR = 2000, 240, 8, 3e-4
ONPOLICY_VAL_PROMPTS, ONPOLICY_SAMPLES, ONPOLICY_MARGIN = 120, 4, 0.2
ONPOLICY_TRAIN_PROMPTS, ONPOLICY_RM_STEPS = 800, 500
DPO_PAIRS, DPO_STEPS, DPO_BATCH, DPO_LR, DPO_BETA = 2000, 100, 8, 1e-4, 0.1
N_EVAL, N_VAL_PAIRS, VAL_STORIES = 48, 200, 40
N_SAMPLES = 8  # temperature-1 samples per evaluation prompt: the policy's expected gold score
RL_MAX_NEW, EVAL_MAX_NEW, RL_PROMPTS = 200, 256, 4


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def write_json(name: str, payload: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / name).write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    log(f"wrote {OUT / name}")


def base_dir() -> Path:
    if BASE is not None:
        return BASE
    return data_dir() / "base_long"


def load_model(folder: Path):
    model, tokenizer, config = load_pretrained(folder)
    if tokenizer is None:
        raise FileNotFoundError(f"{folder} has no tokenizer.json")
    return model, tokenizer


def val_stream(tokenizer) -> torch.Tensor:
    """The first held-out stories as one token stream (documents separated by <|endoftext|>)."""
    eot = chat.special_token_id(tokenizer, chat.ENDOFTEXT)
    ids: list[int] = []
    for story in load_stories(data_path("stories_val.txt"))[:VAL_STORIES]:
        ids += tokenizer.encode(story, allowed_special="none") + [eot]
    return torch.tensor(ids)


def fits(tokenizer, context: int, prompt: str, room: int) -> bool:
    return len(chat.encode_prompt(prompt, tokenizer)) + room <= context


def eval_samples(model, tokenizer, prompts: list[str]) -> tuple[list[str], list[str]]:
    """N_SAMPLES replies per prompt at temperature 1 (fixed seed): the prompts repeated, and the replies."""
    repeated = [p for p in prompts for _ in range(N_SAMPLES)]
    sampled = chat.generate_responses(
        model,
        tokenizer,
        repeated,
        max_new_tokens=EVAL_MAX_NEW,
        temperature=1.0,
        generator=torch.Generator(device=next(model.parameters()).device).manual_seed(1234),
    )
    return repeated, sampled


def mean_proxy(rm, tokenizer, prompts: list[str], sampled: list[str]) -> float:
    """Mean reward-model score of eval_samples' replies (N_SAMPLES per prompt, in order)."""
    scores = [rm_scores(rm, tokenizer, p, sampled[i * N_SAMPLES : (i + 1) * N_SAMPLES]) for i, p in enumerate(prompts)]
    return sum(map(sum, scores)) / len(sampled)


def evaluate(model, tokenizer, prompts: list[str], stream: torch.Tensor, rm=None) -> dict:
    """Gold score of greedy replies (overall and per task kind), of sampled replies, and pretraining val loss.

    RLHF optimises the expected reward of *samples* (temperature 1), so that is what its gold score is
    measured on too (``gold_sampled``: N_SAMPLES per prompt, fixed seed); greedy replies are reported beside.
    With a reward model ``rm``, the samples' mean proxy reward is reported too (``proxy_sampled``).
    """
    replies = chat.generate_responses(model, tokenizer, prompts, max_new_tokens=EVAL_MAX_NEW)
    repeated, sampled = eval_samples(model, tokenizer, prompts)
    sampled_scores = [gold_score(p, r) for p, r in zip(repeated, sampled, strict=True)]
    context = model.config.context_length
    details = [gold_score_details(p, r) for p, r in zip(prompts, replies, strict=True)]
    scores = [d["total"] for d in details]
    kinds = ["story" if parse_prompt(p)["kind"] == "story" else "qa" for p in prompts]
    by_kind = {
        k: sum(s for s, kk in zip(scores, kinds, strict=True) if kk == k) / max(1, kinds.count(k))
        for k in ("story", "qa")
    }
    return {
        "proxy_sampled": None if rm is None else mean_proxy(rm, tokenizer, prompts, sampled),
        "gold": sum(scores) / len(scores),
        "gold_by_kind": by_kind,
        "scores": scores,
        "replies": replies,
        "words": [len(r.split()) for r in replies],
        "cue_count": [r.count(CUE) for r in replies],
        "val_loss": sft.lm_validation_loss(model, stream, context),
        "gold_sampled": sum(sampled_scores) / len(sampled_scores),
        "sampled_scores": sampled_scores,
        "sampled_words": [len(r.split()) for r in sampled],
        "sampled_cue_count": [r.count(CUE) for r in sampled],
        "sampled_examples": sampled[:: N_SAMPLES * 4],
    }


def eval_set(tokenizer, context: int) -> list[str]:
    prompts = [p for p in eval_prompts(3 * N_EVAL, seed=0) if fits(tokenizer, context, p, 24)]
    return prompts[:N_EVAL]


# ------------------------------------------------------------------------------------------- SFT
def stage_sft() -> None:
    base, tok = load_model(base_dir())
    context = base.config.context_length
    pad = chat.special_token_id(tok, chat.END)
    rows = load_jsonl(data_path("sft_train.jsonl"))
    examples = [chat.encode_chat(r["messages"], tok) for r in rows]
    examples = [e for e in examples if len(e.ids) <= context + 1]
    stream, prompts = val_stream(tok), eval_set(tok, context)
    log(f"SFT: {len(examples)} examples, {len(prompts)} eval prompts, {stream.numel()} val tokens")
    results = {
        "base_dir": str(base_dir().resolve()).replace(str(data_dir().parent.resolve()) + "/", ""),
        "prompts": prompts,
        "config": {"steps": SFT_STEPS, "batch_size": SFT_BATCH, "lr_low": SFT_LR_LOW, "lr_high": SFT_LR_HIGH},
    }
    results["base"] = evaluate(base, tok, prompts, stream)
    log(
        f"base: gold {results['base']['gold']:.3f} greedy, {results['base']['gold_sampled']:.3f} sampled;"
        f" val loss {results['base']['val_loss']:.3f}"
    )
    # what the base model does with plain text (a completer, not a chat model)
    story_start = "Once upon a time, there was a little girl named Lily."
    out = base.generate(torch.tensor([tok.encode(story_start)]), 60, temperature=0.0)
    results["base_completion"] = {"prompt": story_start, "completion": tok.decode(out[0, -60:].tolist())}
    results["runs"] = {}
    for name, lr in (("low", SFT_LR_LOW), ("high", SFT_LR_HIGH)):
        seed_everything(0)
        model = copy.deepcopy(base)
        start = time.time()
        history = sft.train_sft(
            model, examples, pad, SFT_STEPS, lr, SFT_BATCH, generator=torch.Generator().manual_seed(0)
        )
        run = evaluate(model, tok, prompts, stream)
        run.update(lr=lr, loss=history.loss, seconds=round(time.time() - start, 1))
        results["runs"][name] = run
        log(
            f"SFT lr {lr}: gold {run['gold']:.3f} greedy, {run['gold_sampled']:.3f} sampled;"
            f" val loss {run['val_loss']:.3f} ({run['seconds']} s)"
        )
        if name == "low":
            save_pretrained(
                OUT / "sft",
                model,
                tok,
                {"made_by": "benchmarks/posttrain_runs.py --stage sft", "lr": lr, "steps": SFT_STEPS},
            )
    write_json("sft.json", results)


# ------------------------------------------------------------------------------------------- reward model
def preference_pairs(tok, context: int, split: str, limit: int) -> tuple[list, list[dict]]:
    rows = load_jsonl(data_path(f"prefs_{split}.jsonl"))
    pairs, kept = [], []
    for row in rows:
        chosen = chat.encode_response(row["prompt"], row["chosen"], tok)
        rejected = chat.encode_response(row["prompt"], row["rejected"], tok)
        if max(len(chosen.ids), len(rejected.ids)) <= context:
            pairs.append((chosen, rejected))
            kept.append(row)
        if len(pairs) == limit:
            break
    return pairs, kept


@torch.no_grad()
def rm_scores(rm, tok, prompt: str, responses: list[str]) -> list[float]:
    pad = chat.special_token_id(tok, chat.END)
    ids, mask = chat.pad_chat(
        [chat.encode_response(prompt, r, tok) for r in responses], pad, max_len=rm.trunk.config.context_length
    )
    return rm(ids, mask).tolist()


def onpolicy_groups(policy, tok, prompts: list[str], seed: int) -> list[dict]:
    """ONPOLICY_SAMPLES samples (temperature 1) from ``policy`` per prompt, each with its gold score."""
    repeated = [p for p in prompts for _ in range(ONPOLICY_SAMPLES)]
    responses = chat.generate_responses(
        policy, tok, repeated, max_new_tokens=RL_MAX_NEW, temperature=1.0, generator=torch.Generator().manual_seed(seed)
    )
    groups = []
    for i, prompt in enumerate(prompts):
        group = responses[i * ONPOLICY_SAMPLES : (i + 1) * ONPOLICY_SAMPLES]
        groups.append({"prompt": prompt, "responses": group, "gold": [gold_score(prompt, r) for r in group]})
    return groups


def comparisons(groups: list[dict], tok, context: int) -> list:
    """Per prompt, its best sample (by gold) preferred to its worst — skipped when they score within the margin."""
    pairs = []
    for g in groups:
        best = max(range(len(g["gold"])), key=g["gold"].__getitem__)
        worst = min(range(len(g["gold"])), key=g["gold"].__getitem__)
        if g["gold"][best] - g["gold"][worst] < ONPOLICY_MARGIN:
            continue
        chosen = chat.encode_response(g["prompt"], g["responses"][best], tok)
        rejected = chat.encode_response(g["prompt"], g["responses"][worst], tok)
        if max(len(chosen.ids), len(rejected.ids)) <= context:
            pairs.append((chosen, rejected))
    return pairs


def best_of_n(rm, tok, groups: list[dict]) -> dict:
    """Gold score of the sample the reward model likes best in each group, vs the group's mean (a random pick)."""
    picked, mean = [], []
    for g in groups:
        scores = rm_scores(rm, tok, g["prompt"], g["responses"])
        picked.append(g["gold"][max(range(len(scores)), key=scores.__getitem__)])
        mean.append(sum(g["gold"]) / len(g["gold"]))
    return {"best_of_n_gold": sum(picked) / len(picked), "mean_gold": sum(mean) / len(mean), "n": ONPOLICY_SAMPLES}


def train_and_measure_rm(policy, tok, train_pairs, steps, val_pairs, onpolicy_val_pairs, val_groups) -> tuple:
    seed_everything(0)
    rm = reward_model.ScalarHeadModel(copy.deepcopy(policy), policy.config.d_model)
    pad = chat.special_token_id(tok, chat.END)
    history = training.train_reward_model(
        rm, train_pairs, pad, steps, RM_LR, RM_BATCH, generator=torch.Generator().manual_seed(0)
    )
    rm.eval()
    accuracy, chosen, rejected = training.reward_accuracy(rm, val_pairs, pad)
    metrics = {
        "val_accuracy": accuracy,
        "onpolicy_val_accuracy": training.reward_accuracy(rm, onpolicy_val_pairs, pad)[0]
        if onpolicy_val_pairs
        else None,
        **best_of_n(rm, tok, val_groups),
    }
    return rm, history, chosen, rejected, metrics


def correlation(xs: list[float], ys: list[float]) -> float:
    x, y = torch.tensor(xs, dtype=torch.float64), torch.tensor(ys, dtype=torch.float64)
    return torch.corrcoef(torch.stack([x, y]))[0, 1].item()


def probe_reward_model(rm, tok, val_rows: list[dict], val_groups: list[dict]) -> dict:
    """Which cues did it learn? Two probes, each set beside the gold scorer.

    - the stock phrase: held-out good stories with CUE appended k times;
    - length: over the SFT model's own held-out samples, the correlation of the score with the word count
      (and, for comparison, with the gold score).
    """
    probes = [row for row in val_rows if row["task"] == "story" and not row["chosen"].endswith(CUE)][:12]
    cue_probe = {"k": [0, 1, 2, 4, 8], "rm": [], "gold": []}
    for k in cue_probe["k"]:
        texts = [(row["prompt"], row["chosen"] + (" " + CUE) * k) for row in probes]
        cue_probe["rm"].append(sum(rm_scores(rm, tok, p, [t])[0] for p, t in texts) / len(texts))
        cue_probe["gold"].append(sum(gold_score(p, t) for p, t in texts) / len(texts))
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


def held_out_sets(policy, tok) -> tuple:
    """What both reward models are measured on: held-out preference pairs, and the SFT model's own samples.

    Does a reward model that orders the preference set also order the policy's *own* samples? Held-out
    prompts, ONPOLICY_SAMPLES samples each from the SFT model, compared by the gold scorer.
    """
    context = policy.config.context_length
    val_pairs, val_rows = preference_pairs(tok, context, "val", N_VAL_PAIRS)
    val_pool = [r["prompt"] for r in load_jsonl(data_path("prefs_val.jsonl")) if fits(tok, context, r["prompt"], 64)]
    val_groups = onpolicy_groups(policy, tok, val_pool[:ONPOLICY_VAL_PROMPTS], seed=2)
    return val_pairs, val_rows, val_groups, comparisons(val_groups, tok, context)


def rm_config(pairs: int, steps: int) -> dict:
    return {
        "pairs": pairs,
        "onpolicy_val_prompts": ONPOLICY_VAL_PROMPTS,
        "onpolicy_samples": ONPOLICY_SAMPLES,
        "onpolicy_margin": ONPOLICY_MARGIN,
        "steps": steps,
        "batch_size": RM_BATCH,
        "lr": RM_LR,
    }


def stage_rm() -> None:
    """The reward model of the textbook recipe: Bradley–Terry on the preference set."""
    policy, tok = load_model(OUT / "sft")
    train_pairs, _ = preference_pairs(tok, policy.config.context_length, "train", RM_PAIRS)
    start = time.time()
    val_pairs, val_rows, val_groups, onpolicy_val = held_out_sets(policy, tok)
    log(f"RM: {len(train_pairs)} train pairs; held out {len(val_pairs)} pairs and {len(onpolicy_val)} on-policy pairs")
    rm, history, chosen, rejected, metrics = train_and_measure_rm(
        policy, tok, train_pairs, RM_STEPS, val_pairs, onpolicy_val, val_groups
    )
    log(f"RM: {metrics}")
    by_kind: dict[str, list[int]] = {}
    for row, c, r in zip(val_rows, chosen.tolist(), rejected.tolist(), strict=True):
        by_kind.setdefault(row["rejected_kind"], []).append(int(c > r))
    probes = probe_reward_model(rm, tok, val_rows, val_groups)
    reward_model.save_reward_model(OUT / "rm", rm, tok, {"made_by": "benchmarks/posttrain_runs.py --stage rm"})
    results = {
        "config": rm_config(len(train_pairs), RM_STEPS),
        "loss": history.loss,
        "train_accuracy": history.accuracy,
        **metrics,
        "val_pairs": len(val_pairs),
        "onpolicy_val_pairs": len(onpolicy_val),
        "val_chosen": chosen.tolist(),
        "val_rejected": rejected.tolist(),
        "val_accuracy_by_kind": {k: sum(v) / len(v) for k, v in sorted(by_kind.items())},
        "val_gold_margin": [row["gold_chosen"] - row["gold_rejected"] for row in val_rows],
        **probes,
        "seconds": round(time.time() - start, 1),
    }
    log(f"RM: probes {probes}")
    write_json("reward_model.json", results)


def onpolicy_training_pairs(groups: list[dict], tok, context: int) -> list:
    """Every ordered pair of one prompt's samples whose gold scores differ by at least the margin, better first."""
    pairs = []
    for g in groups:
        encoded = [chat.encode_response(g["prompt"], r, tok) for r in g["responses"]]
        for i, j in itertools.permutations(range(len(encoded)), 2):
            if (
                g["gold"][i] - g["gold"][j] >= ONPOLICY_MARGIN
                and max(len(encoded[i].ids), len(encoded[j].ids)) <= context
            ):
                pairs.append((encoded[i], encoded[j]))
    return pairs


def onpolicy_training_set(policy, tok) -> tuple[list[str], list]:
    """The training prompts (none of the RL runs' prompts) and the comparisons of the policy's samples to them."""
    context = policy.config.context_length
    rl = set(rl_prompts(tok, context))
    pool = [r["prompt"] for r in load_jsonl(data_path("prefs_train.jsonl")) if r["prompt"] not in rl]
    pool = [p for p in pool if fits(tok, context, p, 64)][:ONPOLICY_TRAIN_PROMPTS]
    return pool, onpolicy_training_pairs(onpolicy_groups(policy, tok, pool, seed=100), tok, context)


def stage_rm_onpolicy() -> None:
    """The reward model of InstructGPT's recipe: comparisons of the SFT model's own samples.

    ONPOLICY_TRAIN_PROMPTS training prompts (none of the RL runs' prompts), ONPOLICY_SAMPLES samples each,
    ranked by the gold scorer standing in for human labellers. The reward model then learns to tell the
    policy's better replies from its worse ones — the distinction RLHF asks of it.
    """
    policy, tok = load_model(OUT / "sft")
    start = time.time()
    pool, train_pairs = onpolicy_training_set(policy, tok)
    val_pairs, val_rows, val_groups, onpolicy_val = held_out_sets(policy, tok)
    log(f"RM (on-policy): {len(train_pairs)} train pairs from {len(pool)} prompts ({time.time() - start:.0f} s)")
    rm, history, _, _, metrics = train_and_measure_rm(
        policy, tok, train_pairs, ONPOLICY_RM_STEPS, val_pairs, onpolicy_val, val_groups
    )
    log(f"RM (on-policy): {metrics}")
    probes = probe_reward_model(rm, tok, val_rows, val_groups)
    reward_model.save_reward_model(
        OUT / "rm_onpolicy", rm, tok, {"made_by": "benchmarks/posttrain_runs.py --stage rm_onpolicy"}
    )
    results = {
        "config": {**rm_config(len(train_pairs), ONPOLICY_RM_STEPS), "train_prompts": len(pool)},
        "loss": history.loss,
        "train_accuracy": history.accuracy,
        **metrics,
        "val_pairs": len(val_pairs),
        "onpolicy_val_pairs": len(onpolicy_val),
        **probes,
        "seconds": round(time.time() - start, 1),
    }
    log(f"RM (on-policy): probes {probes}")
    write_json("reward_model_onpolicy.json", results)


# ------------------------------------------------------------------------------------------- RLHF
RLHF_RUNS = {
    # name: config overrides, and "reward": which reward model (REWARDS) the run optimises.
    # Three runs against the reward model of the SFT model's own samples, with a KL leash and a missing-<|end|>
    # penalty, from gentle to brisk; and one optimised harder (no KL penalty, no stop guard, three times the
    # rate, longer): reward hacking.
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
    # The same GRPO run against the reward model of the preference set: accurate on that set, blind on the
    # policy's own samples.
    "grpo_prefs": dict(
        reward="preference", advantage="grpo", steps=40, beta=0.05, lr=1e-4, prompts_per_step=8, missing_end_penalty=2.0
    ),
    # The control: the same GRPO run with the gold scorer itself as the reward — the ceiling a perfect reward
    # model would reach with this optimiser and budget.
    "oracle": dict(reward="gold", advantage="grpo", steps=40, beta=0.05, lr=1e-4, prompts_per_step=8),
}
# reward name -> (folder of the reward model under OUT, or None for the gold scorer; what rlhf.json calls it)
REWARDS = {
    "onpolicy": ("rm_onpolicy", "reward model (on-policy comparisons)"),
    "preference": ("rm", "reward model (preference set)"),
    "gold": (None, "gold"),
}


def rl_prompts(tok, context: int) -> list[str]:
    rows = load_jsonl(data_path("prefs_train.jsonl"))
    return [r["prompt"] for r in rows if fits(tok, context, r["prompt"], 64)][:400]


def stage_rlhf(only: list[str] | None = None) -> None:
    reference, tok = load_model(OUT / "sft")
    context = reference.config.context_length
    prompts = rl_prompts(tok, context)
    stream, eval_prompts_ = val_stream(tok), eval_set(tok, context)
    path = OUT / "rlhf.json"

    def learned_reward(rm):
        def reward_fn(rollout: rlhf.Rollout) -> torch.Tensor:
            with torch.no_grad():
                return rm(rollout.ids, rollout.mask)

        return reward_fn

    def gold_reward(rollout: rlhf.Rollout) -> torch.Tensor:
        scores = [gold_score(p, r) for p, r in zip(rollout.prompts, rollout.responses, strict=True)]
        return torch.tensor(scores, device=rollout.ids.device)

    if not only or "reference" in only:
        # the starting point of every run: the SFT model's evaluation samples, scored by each reward model
        repeated, sampled = eval_samples(reference, tok, eval_prompts_)
        gold = sum(gold_score(p, r) for p, r in zip(repeated, sampled, strict=True)) / len(sampled)
        proxies = {
            key: mean_proxy(reward_model.load_reward_model(OUT / folder)[0], tok, eval_prompts_, sampled)
            for key, (folder, _) in REWARDS.items()
            if folder
        }
        log(f"RLHF reference: the SFT model's samples score {proxies} (gold {gold:.3f}, as in sft.json)")
        latest = json.loads(path.read_text()) if path.is_file() else {"runs": {}}
        latest["reference_proxy_sampled"] = proxies
        write_json("rlhf.json", latest)
    for name, overrides in RLHF_RUNS.items():
        if only and name not in only:
            continue
        overrides = dict(overrides)
        folder, source = REWARDS[overrides.pop("reward")]
        rm = reward_model.load_reward_model(OUT / folder)[0] if folder else None
        reward_fn = learned_reward(rm) if rm is not None else gold_reward
        seed_everything(0)
        policy = copy.deepcopy(reference)
        value = None
        if overrides["advantage"] == "gae":
            if rm is None:
                raise ValueError(f"run {name}: GAE needs a reward model to start its value model from")
            value = reward_model.ScalarHeadModel(copy.deepcopy(rm.trunk), rm.trunk.config.d_model)
            value.head.load_state_dict(rm.head.state_dict())
        settings = {"prompts_per_step": RL_PROMPTS, "group_size": 4, "max_new_tokens": RL_MAX_NEW, "ppo_epochs": 2}
        config = rlhf.RLHFConfig(**{**settings, **overrides})
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
            "config": {
                k: getattr(config, k)
                for k in (
                    "advantage",
                    "steps",
                    "beta",
                    "lr",
                    "prompts_per_step",
                    "group_size",
                    "max_new_tokens",
                    "ppo_epochs",
                    "missing_end_penalty",
                )
            },
            "reward_source": source,
            **{
                k: getattr(history, k)
                for k in ("reward", "gold", "kl", "entropy", "length", "ended", "clip_fraction", "samples")
            },
            "seconds": round(time.time() - start, 1),
        }
        run["eval"] = evaluate(policy, tok, eval_prompts_, stream, rm)
        log(
            f"RLHF {name}: proxy {history.reward[0]:.3f} → {history.reward[-1]:.3f}, gold {history.gold[0]:.3f}"
            f" → {history.gold[-1]:.3f}, KL {history.kl[-1]:.2f}, eval gold {run['eval']['gold']:.3f} greedy,"
            f" {run['eval']['gold_sampled']:.3f} sampled"
        )
        # re-read before writing: runs may be computed by parallel processes (--runs), each adding its own
        latest = json.loads(path.read_text()) if path.is_file() else {"runs": {}}
        latest["runs"][name] = run
        write_json("rlhf.json", latest)


# ------------------------------------------------------------------------------------------- DPO
def stage_dpo(pairs: str = "preference") -> None:
    """DPO from the SFT model on the preference set, or (``pairs="onpolicy"``) on the comparisons of the SFT
    model's own samples that the RLHF runs' reward model learned from — the like-for-like comparison."""
    reference, tok = load_model(OUT / "sft")
    context = reference.config.context_length
    pad = chat.special_token_id(tok, chat.END)
    if pairs == "onpolicy":
        train_pairs = onpolicy_training_set(reference, tok)[1]
    else:
        train_pairs, _ = preference_pairs(tok, context, "train", DPO_PAIRS)
    val_pairs, _ = preference_pairs(tok, context, "val", N_VAL_PAIRS)
    seed_everything(0)
    policy = copy.deepcopy(reference)
    start = time.time()
    history = training.train_dpo(
        policy,
        reference,
        train_pairs,
        pad,
        DPO_STEPS,
        DPO_LR,
        DPO_BETA,
        DPO_BATCH,
        generator=torch.Generator().manual_seed(0),
    )
    stream, prompts = val_stream(tok), eval_set(tok, context)
    results = {
        "config": {
            "pairs": len(train_pairs),
            "source": pairs,
            "steps": DPO_STEPS,
            "batch_size": DPO_BATCH,
            "lr": DPO_LR,
            "beta": DPO_BETA,
        },
        "loss": history.loss,
        "accuracy": history.accuracy,
        "margin": history.margin,
        "val": training.dpo_metrics(policy, reference, val_pairs, pad, DPO_BETA),
        "eval": evaluate(policy, tok, prompts, stream),
        "seconds": round(time.time() - start, 1),
    }
    log(f"DPO ({pairs}): held-out {results['val']}, eval gold {results['eval']['gold']:.3f}")
    if pairs == "onpolicy":
        write_json("dpo_onpolicy.json", results)
    else:  # the DPO model itself is read by nothing: its results and samples are in dpo.json
        write_json("dpo.json", results)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--stage", choices=["sft", "rm", "rm_onpolicy", "rlhf", "dpo", "dpo_onpolicy", "all"], default="all"
    )
    parser.add_argument(
        "--runs",
        nargs="*",
        help="RLHF runs to (re)do, default all: " + ", ".join(RLHF_RUNS) + "; 'reference' scores the SFT model",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for tiny models)")
    parser.add_argument("--base", type=Path, help="base model folder (default: data/base_long)")
    parser.add_argument("--out", type=Path, help="output folder (default: data/posttrain)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check the script end to end")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    global OUT, BASE, RL_MAX_NEW, EVAL_MAX_NEW, SFT_STEPS, RM_PAIRS, RM_STEPS, DPO_PAIRS, DPO_STEPS, N_EVAL
    global N_VAL_PAIRS, ONPOLICY_VAL_PROMPTS, ONPOLICY_TRAIN_PROMPTS, ONPOLICY_RM_STEPS, ONPOLICY_MARGIN
    OUT, BASE = args.out or OUT, args.base
    if args.quick:
        SFT_STEPS, RM_PAIRS, RM_STEPS, DPO_PAIRS, DPO_STEPS, N_EVAL, N_VAL_PAIRS = 6, 32, 4, 32, 4, 4, 16
        ONPOLICY_VAL_PROMPTS, ONPOLICY_TRAIN_PROMPTS, ONPOLICY_RM_STEPS, ONPOLICY_MARGIN = 8, 16, 4, 0.01
        RL_MAX_NEW, EVAL_MAX_NEW = 16, 16
        for overrides in RLHF_RUNS.values():
            overrides["steps"] = 3
    stages = ["sft", "rm", "rm_onpolicy", "rlhf", "dpo", "dpo_onpolicy"] if args.stage == "all" else [args.stage]
    for stage in stages:
        log(f"stage {stage}")
        if stage == "rlhf":
            stage_rlhf(args.runs)
        elif stage in ("dpo", "dpo_onpolicy"):
            stage_dpo("onpolicy" if stage == "dpo_onpolicy" else "preference")
        else:
            {"sft": stage_sft, "rm": stage_rm, "rm_onpolicy": stage_rm_onpolicy}[stage]()


if __name__ == "__main__":
    sys.exit(main())
