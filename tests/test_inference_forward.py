"""The per-row forward of minillm.inference equals the model's own forward on each sequence alone."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from minillm.inference.batched import LeftPaddedKVCache, left_pad
from minillm.inference.forward import check_supported, eval_mode, forward_rows, kv_bytes_per_token
from minillm.model import GPT, GPTConfig

# float64 models: the padded batch and the lone sequence differ only by summation order (≈ 1e-16).
TOL = 1e-10

ARCHITECTURES = [
    ("gpt2-style", {"n_kv_head": 2}),  # learned positions, grouped-query attention
    ("gpt2-style", {"pos": "sinusoidal", "attn_impl": "manual"}),
    ("llama-style", {"n_kv_head": 2}),  # RoPE (half-split), GQA
    ("llama-style", {"n_kv_head": 1, "rope_style": "interleaved"}),  # multi-query
]


def tiny(preset: str, **overrides) -> GPT:
    torch.manual_seed(0)
    shape = dict(vocab_size=64, context_length=24, n_layer=3, n_head=4, d_model=32)
    return GPT(GPTConfig.preset(preset, **{**shape, **overrides})).double().eval()


@pytest.mark.parametrize(("preset", "overrides"), ARCHITECTURES, ids=str)
def test_left_padded_rows_get_the_logits_of_each_prompt_alone(preset, overrides) -> None:
    model = tiny(preset, **overrides)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 64, (n,), generator=g).tolist() for n in (7, 2, 5)]
    ids, pad = left_pad(prompts)
    cache = LeftPaddedKVCache(model.config, pad, ids.shape[1] + 2, "cpu", torch.float64)
    with eval_mode(model):
        logits = forward_rows(model, ids, cache)
        step = forward_rows(model, torch.tensor([[3], [4], [5]]), cache)  # one cached decode step
    for row, prompt in enumerate(prompts):
        with torch.no_grad():
            alone = model(torch.tensor([prompt + [3 + row]]))[0]
        n = len(prompt)
        assert (logits[row, -n:] - alone[:n]).abs().max().item() <= TOL
        assert (step[row, 0] - alone[n]).abs().max().item() <= TOL


def test_a_config_switch_it_does_not_know_is_refused() -> None:
    @dataclasses.dataclass
    class WindowedConfig(GPTConfig):  # a switch added after this package was written
        sliding_window: int | None = None

    model = tiny("gpt2-style")
    check_supported(model)
    model.config = WindowedConfig(**{**model.config.to_dict(), "sliding_window": 8})
    with pytest.raises(NotImplementedError, match="sliding_window=8"):
        check_supported(model)
    with pytest.raises(TypeError, match="minillm GPT"):
        check_supported(torch.nn.Linear(2, 2))


def test_eval_mode_restores_the_training_mode() -> None:
    model = tiny("gpt2-style").train()
    with eval_mode(model):
        assert not model.training and not torch.is_grad_enabled()
    assert model.training


def test_kv_bytes_per_token_is_twice_layers_kv_heads_head_dim() -> None:
    config = GPTConfig.preset("llama-style", n_layer=3, n_head=8, n_kv_head=2, d_model=64)
    assert kv_bytes_per_token(config, 2) == 2 * 3 * 2 * 8 * 2
    assert kv_bytes_per_token(config, 4) * 10 == config.kv_cache_bytes(1, 10, 4)
