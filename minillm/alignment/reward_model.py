"""Reward models: a transformer with a scalar head, trained on preference pairs with the Bradley–Terry loss.

People (here: the course's preference set) say which of two responses is better; they do not give a
number. Bradley–Terry turns scores into preferences, ``P(y_w ≻ y_l) = σ(r(x, y_w) − r(x, y_l))``, and the
reward model is trained to maximise that likelihood: loss ``−log σ(r_w − r_l)`` (InstructGPT Eq. 1). Only
differences matter, so the scale's zero is arbitrary.

The network reads ``prompt + response`` with a pretrained transformer, maps the final hidden state of the
**last response token** (the first position that has seen the whole response) to one number. The same
module with per-token outputs is PPO's value head (:meth:`ScalarHeadModel.token_scores`).
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from minillm.alignment.ppo import last_true_index
from minillm.checkpoint import load_pretrained, save_pretrained
from minillm.tokenizer import BPETokenizer

__all__ = [
    "ScalarHeadModel",
    "bradley_terry_loss",
    "load_reward_model",
    "pairwise_accuracy",
    "save_reward_model",
    "value_model_from",
]

HEAD_FILE = "head.json"


class ScalarHeadModel(nn.Module):
    """A transformer trunk (anything with ``hidden_states(idx) -> [B, T, d]``) plus a linear head to 1 number.

    ``d_model`` is the trunk's hidden width. The head starts at zero so every response first scores 0.
    """

    def __init__(self, trunk: nn.Module, d_model: int) -> None:
        super().__init__()
        if not hasattr(trunk, "hidden_states"):
            raise TypeError(f"trunk {type(trunk).__name__} has no hidden_states(idx) method")
        self.trunk = trunk
        self.head = nn.Linear(d_model, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def token_scores(self, input_ids: torch.Tensor) -> torch.Tensor:
        """A scalar at every position, ``[B, T]`` (the value head's V(s_t))."""
        return self.head(self.trunk.hidden_states(input_ids)).squeeze(-1)

    def forward(self, input_ids: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
        """The reward of each sequence, read at its last response token: ``[B]``."""
        scores = self.token_scores(input_ids)
        last = last_true_index(response_mask)
        return scores[torch.arange(scores.shape[0], device=scores.device), last]


def value_model_from(reward_model: ScalarHeadModel) -> ScalarHeadModel:
    """PPO's value model, started as a copy of the reward model (trunk and head): InstructGPT's recipe.

    Why start there: the reward model already scores how good a partial reply looks, so the value estimates are
    useful from the first step instead of zero everywhere. A copy, so training the values leaves the reward intact.
    """
    value = ScalarHeadModel(copy.deepcopy(reward_model.trunk), reward_model.head.in_features)
    value.head.load_state_dict(reward_model.head.state_dict())
    return value.to(next(reward_model.parameters()).device)


def bradley_terry_loss(
    chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor, margin: torch.Tensor | float = 0.0
) -> torch.Tensor:
    """Mean over pairs of ``−log σ(r_chosen − r_rejected − margin)``; ``logsigmoid`` keeps it finite."""
    if chosen_rewards.shape != rejected_rewards.shape:
        raise ValueError(
            f"chosen and rejected rewards differ in shape: {tuple(chosen_rewards.shape)} vs "
            f"{tuple(rejected_rewards.shape)}"
        )
    return -F.logsigmoid(chosen_rewards - rejected_rewards - margin).mean()


def pairwise_accuracy(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor) -> float:
    """Fraction of pairs the model orders correctly (strictly; ties count as wrong)."""
    if chosen_rewards.shape != rejected_rewards.shape or chosen_rewards.numel() == 0:
        raise ValueError("pairwise_accuracy needs two non-empty tensors of the same shape")
    return (chosen_rewards > rejected_rewards).float().mean().item()


def save_reward_model(
    directory: str | os.PathLike,
    model: ScalarHeadModel,
    tokenizer: BPETokenizer | None = None,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Save a reward model as a :func:`~minillm.checkpoint.save_pretrained` folder (the trunk) plus ``head.json``.

    The trunk stays an ordinary model folder, so any tool that loads a GPT can read it; the head is two
    numbers' worth of JSON beside it, covered by the folder's checksums like the weights.
    """
    head = {"weight": model.head.weight[0].tolist(), "bias": model.head.bias.item()}
    return save_pretrained(
        directory, model.trunk, tokenizer, metadata, extra_files={HEAD_FILE: json.dumps(head) + "\n"}
    )


def load_reward_model(
    directory: str | os.PathLike, device: str | torch.device = "cpu"
) -> tuple[ScalarHeadModel, BPETokenizer | None]:
    """Load a folder written by :func:`save_reward_model`: ``(reward model in eval mode, tokenizer or None)``."""
    directory = Path(directory)
    head_path = directory / HEAD_FILE
    if not head_path.is_file():
        raise FileNotFoundError(f"{head_path}: not found; is {directory} a saved reward model?")
    trunk, tokenizer, _ = load_pretrained(directory, device=device, extra_files=[HEAD_FILE])
    model = ScalarHeadModel(trunk, trunk.config.d_model).to(device)
    head = json.loads(head_path.read_text(encoding="utf-8"))
    with torch.no_grad():
        model.head.weight.copy_(torch.tensor([head["weight"]], device=device))
        model.head.bias.fill_(head["bias"])
    return model.eval(), tokenizer
