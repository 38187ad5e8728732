"""RLHF: sample from the policy, score with a reward, and update with PPO — GAE or GRPO advantages.

One step of the loop:

1. **Sample** ``group_size`` responses to each of a few prompts from the current policy (temperature 1:
   the policy being optimised must be the one that produced the samples).
2. **Score** each whole response with ``reward_fn`` (the learned reward model, or any scorer). With
   ``missing_end_penalty`` a response that ran out of budget before ``<|end|>`` loses that much score (a
   common guard: a learned reward that likes length otherwise teaches the policy never to stop).
3. **Advantages**, one switch apart (``RLHFConfig.advantage``):

   - ``"gae"`` — PPO as in InstructGPT: per-token reward ``−β·k1_t`` plus the score on the last token
     (:func:`~minillm.alignment.ppo.kl_penalised_rewards`), a value model V(s_t), GAE.
   - ``"grpo"`` — DeepSeekMath: the group of responses to one prompt is the baseline,
     ``Â = (r − mean)/(std + ε)`` on every token; no value model; the KL to the reference enters the
     loss as ``β·k3`` averaged over tokens, not the reward (:func:`grpo_loss`).
4. **Update** the policy a few epochs on the same samples with the clipped surrogate, its per-token terms
   reduced as ``RLHFConfig.reduction`` says (:mod:`~minillm.alignment.pg_losses`): ``"token"`` (the default:
   every response token in the batch weighs the same), ``"sequence"`` (a mean per response first, GRPO as
   first written) or ``"constant"`` (the token sum over N × the response budget, Dr. GRPO).

The KL we report (and plot the hacking curve against) is the sequence-level ``KL(π ‖ π_ref)``
estimated by the sum of k1 over response tokens, averaged over samples (an unbiased estimate).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from tqdm.auto import tqdm

from minillm.alignment.advantages import gae, grpo_advantages, whiten
from minillm.alignment.kl import kl_k1, kl_k3
from minillm.alignment.logprobs import masked_mean, masked_sum, token_entropy, token_logprobs
from minillm.alignment.pg_losses import reduce_token_losses
from minillm.alignment.ppo import clip_statistics, clipped_surrogate, clipped_value_loss, kl_penalised_rewards
from minillm.alignment.reward_model import ScalarHeadModel
from minillm.batches import right_pad
from minillm.chat import END, encode_prompt, special_token_id

__all__ = ["RLHFConfig", "Rollout", "RLHFHistory", "policy_loss", "grpo_loss", "sample_rollouts", "train_rlhf"]

#: How :func:`train_rlhf` may turn per-token losses into one number (see :mod:`minillm.alignment.pg_losses`).
LOSS_REDUCTIONS = ("token", "sequence", "constant")


@dataclass
class RLHFConfig:
    """Settings of :func:`train_rlhf` (defaults sized for a ~1 M parameter model on a CPU)."""

    advantage: str = "gae"  # "gae" (value model) or "grpo" (group baseline)
    steps: int = 40
    prompts_per_step: int = 8
    group_size: int = 4  # samples per prompt; GRPO needs at least 2
    max_new_tokens: int = 48
    beta: float = 0.05  # KL coefficient
    kl_estimator: str = "k1"  # per-token KL in the PPO reward
    lr: float = 1e-5
    value_lr: float = 1e-4
    ppo_epochs: int = 2
    missing_end_penalty: float = 0.0  # subtracted from the score of a response without <|end|>
    clip_eps: float = 0.2
    value_clip: float = 0.2
    gamma: float = 1.0
    lam: float = 0.95
    reduction: str = "token"  # per-token losses → one number: "token", "sequence" or "constant" (pg_losses)

    def __post_init__(self) -> None:
        if self.advantage not in ("gae", "grpo"):
            raise ValueError(f"advantage must be 'gae' or 'grpo', got {self.advantage!r}")
        if self.advantage == "grpo" and self.group_size < 2:
            raise ValueError(f"GRPO needs group_size ≥ 2, got {self.group_size}")
        if self.reduction not in LOSS_REDUCTIONS:
            raise ValueError(f"reduction must be one of {LOSS_REDUCTIONS}, got {self.reduction!r}")
        if self.missing_end_penalty < 0:
            raise ValueError(f"missing_end_penalty must be >= 0, got {self.missing_end_penalty}")
        if self.beta < 0 or self.lr <= 0 or self.steps < 1 or self.ppo_epochs < 1:
            raise ValueError(
                f"invalid config: beta={self.beta}, lr={self.lr}, steps={self.steps}, ppo_epochs={self.ppo_epochs}"
            )


@dataclass
class Rollout:
    """Sampled sequences: ``ids`` ``[N, T]`` (prompt, response, right padding), the response mask, and
    ``ended`` ``[N]``: whether the response closed with ``<|end|>`` (False: it ran out of budget)."""

    prompts: list[str]
    responses: list[str]
    ids: torch.Tensor
    mask: torch.Tensor
    ended: torch.Tensor | None = None


@dataclass
class RLHFHistory:
    """Per-step means: the optimised reward, the gold score (if given), KL to the reference, and more."""

    reward: list[float] = field(default_factory=list)
    gold: list[float] = field(default_factory=list)
    kl: list[float] = field(default_factory=list)
    entropy: list[float] = field(default_factory=list)
    length: list[float] = field(default_factory=list)
    ended: list[float] = field(default_factory=list)  # share of responses that closed with <|end|>
    clip_fraction: list[float] = field(default_factory=list)
    samples: list[tuple[str, str]] = field(default_factory=list)  # one (prompt, response) per step


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
    reduction: str = "token",
    max_len: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate loss over the ``[N, L]`` tokens where ``mask`` is 1, reduced as ``reduction``
    says (:func:`~minillm.alignment.pg_losses.reduce_token_losses`), and its diagnostics
    (:func:`~minillm.alignment.ppo.clip_statistics`). ``"token"`` is
    :func:`~minillm.alignment.ppo.clipped_policy_loss`, to the bit; ``max_len`` is ``"constant"``'s length
    (:func:`train_rlhf` passes the response budget, ``max_new_tokens``; default: L).
    """
    objective, was_clipped = clipped_surrogate(logp, old_logp, advantages, clip_eps)
    loss = reduce_token_losses(-objective, mask, reduction, max_len)
    return loss, clip_statistics(logp, old_logp, was_clipped, mask)


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    scores: torch.Tensor,
    mask: torch.Tensor,
    group_size: int,
    beta: float,
    clip_eps: float = 0.2,
    reduction: str = "token",
    max_len: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO loss of one batch of sampled groups, as :func:`train_rlhf` minimises it.

    ``logp``, ``old_logp``, ``ref_logp`` and ``mask`` are ``[N, L]`` (log-probs of the sampled tokens under
    the policy being updated, the policy that sampled them and the frozen reference; the response mask
    aligned with them); ``scores`` is ``[N]``, ``group_size`` consecutive rows per prompt. The loss is the
    clipped surrogate with the group-normalised advantage on every token of a response, plus
    ``β·k3`` over the same tokens (DeepSeekMath Eq. 3 and 4), both reduced as ``reduction`` says: by default
    every response token in the batch weighs the same, ``"sequence"`` takes a mean per response first, as
    the paper writes it. Written out once here so the notebook can check a hand-written GRPO step against
    the one the precomputed runs took.
    """
    if beta < 0:
        raise ValueError(f"beta must be non-negative, got {beta}")
    advantages = grpo_advantages(scores.detach(), group_size)[:, None] * mask
    loss, stats = policy_loss(logp, old_logp, advantages, mask, clip_eps, reduction, max_len)
    if beta > 0:
        loss = loss + beta * reduce_token_losses(kl_k3(logp, ref_logp.detach()), mask, reduction, max_len)
    return loss, stats


@torch.no_grad()
def sample_rollouts(
    policy: nn.Module,
    tokenizer,
    prompts: Sequence[str],
    group_size: int,
    max_new_tokens: int,
    generator: torch.Generator | None = None,
) -> Rollout:
    """``group_size`` samples (temperature 1) per prompt, stopping at ``<|end|>``, right-padded together.

    The response mask covers the sampled tokens up to and including the first ``<|end|>`` (all of them
    if the budget ran out first).
    """
    end_id = special_token_id(tokenizer, END)
    device = next(policy.parameters()).device
    rows, masks, texts, row_prompts, ended = [], [], [], [], []
    for prompt in prompts:
        prompt_ids = encode_prompt(prompt, tokenizer)
        budget = min(max_new_tokens, policy.config.context_length - len(prompt_ids))
        if budget < 1:
            raise ValueError(f"prompt {prompt!r} ({len(prompt_ids)} tokens) leaves no room in the context")
        idx = torch.tensor([prompt_ids] * group_size, device=device)
        out = policy.generate(idx, budget, temperature=1.0, generator=generator, eos_id=end_id).cpu()
        for row in out:
            new = row[len(prompt_ids) :].tolist()
            closed = end_id in new
            n_resp = new.index(end_id) + 1 if closed else len(new)
            rows.append(prompt_ids + new[:n_resp])
            masks.append([0] * len(prompt_ids) + [1] * n_resp)
            texts.append(tokenizer.decode(new[: n_resp - 1] if closed else new))
            row_prompts.append(prompt)
            ended.append(closed)
    ids, mask = right_pad(rows, end_id), right_pad(masks, 0)
    return Rollout(row_prompts, texts, ids.to(device), mask.to(device), torch.tensor(ended, device=device))


def train_rlhf(
    policy: nn.Module,
    reference: nn.Module,
    tokenizer,
    prompts: Sequence[str],
    reward_fn: Callable[[Rollout], torch.Tensor],
    config: RLHFConfig,
    value_model: ScalarHeadModel | None = None,
    gold_fn: Callable[[str, str], float] | None = None,
    generator: torch.Generator | None = None,
    progress: bool = False,
) -> RLHFHistory:
    """Optimise ``policy`` for ``reward_fn`` with a KL leash to the frozen ``reference``.

    ``reward_fn(rollout)`` returns one score per sampled sequence (``[N]``). ``value_model`` is needed
    for ``advantage="gae"`` (initialise it from the reward model, as InstructGPT does). ``gold_fn`` is
    only logged, never optimised: it is how the course sees reward hacking.
    """
    if config.advantage == "gae" and value_model is None:
        raise ValueError("advantage='gae' needs a value_model")
    if not prompts:
        raise ValueError("no prompts to sample from")
    reference.eval()  # frozen: only ever run under no_grad (its parameters are left as the caller set them)
    opt = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=0.0)
    value_opt = None
    if config.advantage == "gae":
        value_opt = torch.optim.AdamW(value_model.parameters(), lr=config.value_lr, weight_decay=0.0)
    history = RLHFHistory()
    order = torch.randperm(len(prompts), generator=generator).tolist()
    cursor = 0
    for _ in tqdm(range(config.steps), disable=not progress, desc=f"RLHF ({config.advantage})"):
        batch_prompts = []
        for _ in range(config.prompts_per_step):
            if cursor == len(order):
                order, cursor = torch.randperm(len(prompts), generator=generator).tolist(), 0
            batch_prompts.append(prompts[order[cursor]])
            cursor += 1
        policy.eval()
        rollout = sample_rollouts(policy, tokenizer, batch_prompts, config.group_size, config.max_new_tokens, generator)
        ids, m = rollout.ids, rollout.mask[:, 1:]
        with torch.no_grad():
            old_logits = policy(ids)
            old_logp = token_logprobs(old_logits, ids)
            ref_logp = token_logprobs(reference(ids), ids)
            proxy = reward_fn(rollout).detach().float().to(ids.device)
            if proxy.shape != (ids.shape[0],):
                raise ValueError(f"reward_fn must return shape ({ids.shape[0]},), got {tuple(proxy.shape)}")
            scores = proxy - config.missing_end_penalty * (~rollout.ended).float()
            if config.advantage == "gae":
                old_values = value_model.token_scores(ids)[:, :-1]
                rewards, _ = kl_penalised_rewards(scores, old_logp, ref_logp, m, config.beta, config.kl_estimator)
                advantages, returns = gae(rewards, old_values, m, config.gamma, config.lam)
                advantages = whiten(advantages, m)
        policy.train()
        stats = {}
        for _ in range(config.ppo_epochs):
            logp = token_logprobs(policy(ids), ids)
            if config.advantage == "grpo":
                loss, stats = grpo_loss(
                    logp,
                    old_logp,
                    ref_logp,
                    scores,
                    m,
                    config.group_size,
                    config.beta,
                    config.clip_eps,
                    config.reduction,
                    config.max_new_tokens,
                )
            else:
                loss, stats = policy_loss(
                    logp, old_logp, advantages, m, config.clip_eps, config.reduction, config.max_new_tokens
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            opt.step()
            if value_opt is not None:
                value_model.train()
                values = value_model.token_scores(ids)[:, :-1]
                value_loss = clipped_value_loss(values, old_values, returns, m, config.value_clip)
                value_opt.zero_grad(set_to_none=True)
                value_loss.backward()
                torch.nn.utils.clip_grad_norm_(value_model.parameters(), 1.0)
                value_opt.step()
        policy.eval()
        history.reward.append(proxy.mean().item())  # the learned reward itself, before any penalty
        history.ended.append(rollout.ended.float().mean().item())
        history.kl.append(masked_sum(kl_k1(old_logp, ref_logp), m, dim=-1).mean().item())
        history.entropy.append(masked_mean(token_entropy(old_logits[:, :-1]), m).item())
        history.length.append(m.sum(-1).float().mean().item())
        history.clip_fraction.append(stats.get("clip_fraction", 0.0))
        history.samples.append((rollout.prompts[0], rollout.responses[0]))
        if gold_fn is not None:
            gold = [gold_fn(p, r) for p, r in zip(rollout.prompts, rollout.responses, strict=True)]
            history.gold.append(sum(gold) / len(gold))
    return history
