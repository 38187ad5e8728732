"""Training loops for the reward model and DPO: small, explicit, and logging what the course plots.

Both read preference pairs ``(prompt, chosen, rejected)`` already encoded with
:func:`minillm.chat.encode_response` as ``(chosen: ChatTokens, rejected: ChatTokens)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from tqdm.auto import tqdm

from minillm.alignment.dpo import dpo_loss
from minillm.alignment.logprobs import sequence_logprobs
from minillm.alignment.reward_model import ScalarHeadModel, bradley_terry_loss, pairwise_accuracy
from minillm.batches import pad_chat
from minillm.chat import ChatTokens

__all__ = ["PreferenceHistory", "train_reward_model", "reward_accuracy", "train_dpo", "dpo_metrics"]

Pair = tuple[ChatTokens, ChatTokens]


@dataclass
class PreferenceHistory:
    """Per-step logs: loss and pairwise accuracy; for DPO also the implicit reward margin."""

    loss: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    margin: list[float] = field(default_factory=list)


def _pair_batch(pairs: Sequence[Pair], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Chosen then rejected sequences in one padded batch (one forward pass for both)."""
    ids, mask = pad_chat([c for c, _ in pairs] + [r for _, r in pairs], pad_id)
    return ids.to(device), mask.to(device), len(pairs)


def _check_training_args(pairs: Sequence[Pair], steps: int, lr: float, batch_size: int) -> None:
    if not pairs:
        raise ValueError("no preference pairs to train on")
    if steps < 1 or lr <= 0 or batch_size < 1:
        raise ValueError(f"need steps ≥ 1, lr > 0, batch_size ≥ 1; got {steps}, {lr}, {batch_size}")


def _random_pair_batches(
    model: nn.Module,
    pairs: Sequence[Pair],
    pad_id: int,
    steps: int,
    lr: float,
    batch_size: int,
    generator: torch.Generator | None,
    progress: bool,
    desc: str,
) -> Iterator[tuple[torch.Tensor, torch.Tensor, int]]:
    """What both preference loops share: the checks, then ``steps`` random mini-batches of pairs (chosen rows
    first, then rejected: ``ids, mask, n``) on the model's device, with ``model`` in train mode until the end."""
    _check_training_args(pairs, steps, lr, batch_size)  # now, not at the first batch: before any optimizer exists
    device = next(model.parameters()).device

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor, int]]:
        model.train()
        for _ in tqdm(range(steps), disable=not progress, desc=desc):
            picks = torch.randint(len(pairs), (batch_size,), generator=generator).tolist()
            yield _pair_batch([pairs[i] for i in picks], pad_id, device)
        model.eval()

    return batches()


def _clipped_step(optimizer: torch.optim.Optimizer, loss: torch.Tensor, model: nn.Module) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def train_reward_model(
    reward_model: ScalarHeadModel,
    pairs: Sequence[Pair],
    pad_id: int,
    steps: int,
    lr: float,
    batch_size: int = 16,
    generator: torch.Generator | None = None,
    progress: bool = False,
) -> PreferenceHistory:
    """Fit ``reward_model`` with the Bradley–Terry loss on random mini-batches of pairs (AdamW)."""
    batches = _random_pair_batches(
        reward_model, pairs, pad_id, steps, lr, batch_size, generator, progress, "reward model"
    )
    opt = torch.optim.AdamW(reward_model.parameters(), lr=lr, weight_decay=0.0)
    history = PreferenceHistory()
    for ids, mask, n in batches:
        rewards = reward_model(ids, mask)
        loss = bradley_terry_loss(rewards[:n], rewards[n:])
        _clipped_step(opt, loss, reward_model)
        history.loss.append(loss.item())
        history.accuracy.append(pairwise_accuracy(rewards[:n].detach(), rewards[n:].detach()))
    return history


@torch.no_grad()
def reward_accuracy(
    reward_model: ScalarHeadModel, pairs: Sequence[Pair], pad_id: int, batch_size: int = 64
) -> tuple[float, torch.Tensor, torch.Tensor]:
    """Held-out pairwise accuracy, and the chosen and rejected rewards."""
    device = next(reward_model.parameters()).device
    reward_model.eval()
    chosen, rejected = [], []
    for i in range(0, len(pairs), batch_size):
        ids, mask, n = _pair_batch(pairs[i : i + batch_size], pad_id, device)
        rewards = reward_model(ids, mask).float().cpu()
        chosen.append(rewards[:n])
        rejected.append(rewards[n:])
    chosen_t, rejected_t = torch.cat(chosen), torch.cat(rejected)
    return pairwise_accuracy(chosen_t, rejected_t), chosen_t, rejected_t


def _pair_logprobs(
    model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    logps = sequence_logprobs(model(ids), ids, mask)
    return logps[:n], logps[n:]


def train_dpo(
    policy: nn.Module,
    reference: nn.Module,
    pairs: Sequence[Pair],
    pad_id: int,
    steps: int,
    lr: float,
    beta: float = 0.1,
    batch_size: int = 16,
    generator: torch.Generator | None = None,
    progress: bool = False,
) -> PreferenceHistory:
    """Direct preference optimisation of ``policy`` against the frozen ``reference`` (AdamW).

    Logs the loss (ln 2 at the first step when policy == reference), the implicit-reward accuracy and
    the mean implicit-reward margin β·[log π/π_ref (chosen) − log π/π_ref (rejected)].
    """
    batches = _random_pair_batches(policy, pairs, pad_id, steps, lr, batch_size, generator, progress, "DPO")
    reference.eval()  # frozen: only ever run under no_grad (its parameters are left as the caller set them)
    opt = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    history = PreferenceHistory()
    for ids, mask, n in batches:
        with torch.no_grad():
            ref_c, ref_r = _pair_logprobs(reference, ids, mask, n)
        pol_c, pol_r = _pair_logprobs(policy, ids, mask, n)
        out = dpo_loss(pol_c, pol_r, ref_c, ref_r, beta)
        _clipped_step(opt, out.loss, policy)
        history.loss.append(out.loss.item())
        history.accuracy.append(out.accuracy)
        history.margin.append(out.margins.mean().item())
    return history


@torch.no_grad()
def dpo_metrics(
    policy: nn.Module, reference: nn.Module, pairs: Sequence[Pair], pad_id: int, beta: float = 0.1, batch_size: int = 64
) -> dict[str, float]:
    """Held-out DPO loss, implicit-reward accuracy and mean margin."""
    device = next(policy.parameters()).device
    policy.eval()
    reference.eval()
    logps = {"pc": [], "pr": [], "rc": [], "rr": []}
    for i in range(0, len(pairs), batch_size):
        ids, mask, n = _pair_batch(pairs[i : i + batch_size], pad_id, device)
        pc, pr = _pair_logprobs(policy, ids, mask, n)
        rc, rr = _pair_logprobs(reference, ids, mask, n)
        for key, value in zip(("pc", "pr", "rc", "rr"), (pc, pr, rc, rr), strict=True):
            logps[key].append(value.cpu())
    out = dpo_loss(*(torch.cat(logps[k]) for k in ("pc", "pr", "rc", "rr")), beta=beta)
    return {"loss": out.loss.item(), "accuracy": out.accuracy, "margin": out.margins.mean().item()}
