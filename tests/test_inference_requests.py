"""Malformed serving input gets one clear error at the door."""

from __future__ import annotations

import pytest
import torch

from minillm.inference.requests import as_budgets, as_token_lists, check_eos, check_sampling
from minillm.model import GPT, GPTConfig


@pytest.fixture(scope="module")
def model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=50, context_length=16, n_layer=1, n_head=2, d_model=16))


def test_prompts_become_lists_of_ints(model) -> None:
    assert as_token_lists(model, [[1, 2], torch.tensor([3]), (4, 5, 6)]) == [[1, 2], [3], [4, 5, 6]]
    assert as_token_lists(model, torch.tensor([[1, 2], [3, 4]])) == [[1, 2], [3, 4]]


@pytest.mark.parametrize(
    ("prompts", "error", "message"),
    [
        ([], ValueError, "prompts is empty"),
        ([[1], []], ValueError, "prompt 1 is empty"),
        ([[1, 50]], ValueError, r"not a token id in \[0, 50\)"),
        ([[1, -1]], ValueError, "not a token id"),
        ([[1.0]], ValueError, "not a token id"),
        ([[True]], ValueError, "not a token id"),
        (["hello"], TypeError, "encode text first"),
        ("hello", TypeError, "list of token-id lists"),
        ([torch.zeros(2, 2, dtype=torch.long)], ValueError, "1-D tensor"),
    ],
)
def test_malformed_prompts_are_refused(model, prompts, error, message) -> None:
    with pytest.raises(error, match=message):
        as_token_lists(model, prompts)


def test_budgets_must_be_positive_and_fit_the_context(model) -> None:
    assert as_budgets(model, [[1], [1, 2]], 3) == [3, 3]
    assert as_budgets(model, [[1], [1, 2]], [3, 14]) == [3, 14]
    with pytest.raises(ValueError, match="longer than the context length 16"):
        as_budgets(model, [[1] * 17], 1)
    with pytest.raises(ValueError, match="exceeds the context length 16"):
        as_budgets(model, [[1] * 10], 7)
    with pytest.raises(ValueError, match="positive int"):
        as_budgets(model, [[1]], 0)
    with pytest.raises(ValueError, match="2 entries for 1 prompts"):
        as_budgets(model, [[1]], [1, 2])


def test_eos_and_sampling_settings_are_checked(model) -> None:
    check_eos(model, None)
    check_eos(model, 49)
    with pytest.raises(ValueError, match="eos_id"):
        check_eos(model, 50)
    check_sampling(0.0)
    check_sampling(0.7, top_k=5, top_p=0.9)
    for bad in (dict(temperature=-1.0), dict(temperature=float("nan")), dict(temperature=1.0, top_k=0),
                dict(temperature=1.0, top_p=0.0)):  # fmt: skip
        with pytest.raises(ValueError):
            check_sampling(**bad)
