"""Continuous batching refills a slot at the next step, and every request gets its tokens from GPT.generate."""

from __future__ import annotations

import math

import pytest
import torch

from minillm.inference.continuous import Request, SlotKVCache, continuous_batching, static_batching
from minillm.inference.forward import kv_bytes_per_token
from minillm.model import GPT, GPTConfig

ARCHITECTURES = [
    ("gpt2-style", {"n_kv_head": 2}),
    ("llama-style", {"n_kv_head": 2}),
    ("llama-style", {"n_kv_head": 1, "rope_style": "interleaved"}),
]
# (prompt length, new tokens): mixed, so slots free at different steps
SHAPES = [(1, 12), (5, 3), (9, 20), (3, 2), (7, 8), (2, 15), (4, 1)]


def tiny(preset: str, **overrides) -> GPT:
    """Several layers, weights scaled up so continuations are peaked and differ between prompts."""
    torch.manual_seed(0)
    shape = dict(vocab_size=64, context_length=40, n_layer=3, n_head=4, d_model=32)
    model = GPT(GPTConfig.preset(preset, **{**shape, **overrides})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(5.0)
    return model


def mixed_requests() -> list[Request]:
    g = torch.Generator().manual_seed(1)
    return [Request(torch.randint(0, 64, (n,), generator=g).tolist(), m) for n, m in SHAPES]


def alone(model: GPT, r: Request, eos_id: int | None = None) -> list[int]:
    out = model.generate(torch.tensor([r.prompt]), r.max_new_tokens, temperature=0, eos_id=eos_id)
    new = out[0, len(r.prompt) :].tolist()
    return new[: new.index(eos_id) + 1] if eos_id in new else new


@pytest.mark.parametrize(("preset", "overrides"), ARCHITECTURES, ids=str)
@pytest.mark.parametrize("scheduler", [continuous_batching, static_batching], ids=lambda f: f.__name__)
def test_every_request_gets_the_tokens_it_gets_alone(preset, overrides, scheduler) -> None:
    model = tiny(preset, **overrides)
    requests = mixed_requests()
    schedule = scheduler(model, requests, max_batch=3)
    assert schedule.tokens == [alone(model, r) for r in requests]


def test_a_free_slot_is_refilled_at_the_next_step() -> None:
    model = tiny("gpt2-style", n_kv_head=2)
    requests, max_batch = mixed_requests(), 3
    schedule = continuous_batching(model, requests, max_batch)
    started: set[int] = set()
    for step in schedule.slots:
        started.update(r for r in step if r is not None)
        if len(started) < len(requests):  # someone still waits: then no slot idles
            assert None not in step
    # Each request holds one slot for exactly as many consecutive steps as it has tokens.
    for r, tokens in enumerate(schedule.tokens):
        steps = [s for s, step in enumerate(schedule.slots) if r in step]
        assert steps == list(range(steps[0], steps[0] + len(tokens)))
    static = static_batching(model, requests, max_batch)
    groups = [SHAPES[i : i + max_batch] for i in range(0, len(SHAPES), max_batch)]
    assert static.steps == sum(max(m for _, m in g) for g in groups)  # each group waits for its longest
    assert schedule.steps < static.steps and schedule.utilisation > static.utilisation
    assert math.isclose(static.utilisation, sum(m for _, m in SHAPES) / (static.steps * max_batch))


def test_eos_ends_a_request_and_frees_its_slot() -> None:
    model = tiny("llama-style", n_kv_head=2)
    requests = mixed_requests()
    eos = alone(model, requests[2])[3]
    schedule = continuous_batching(model, requests, max_batch=2, eos_id=eos)
    assert schedule.tokens == [alone(model, r, eos_id=eos) for r in requests]
    assert len(schedule.tokens[2]) <= 4


@pytest.mark.parametrize("num_blocks", [None, 8])
def test_paged_cache_gives_the_same_tokens_and_holds_less(num_blocks) -> None:
    """With 8 blocks of 4 positions the pool fits the longest request (29 positions) and little else beside it:
    admission waits for blocks."""
    model = tiny("llama-style", n_kv_head=2)
    requests = mixed_requests()
    paged = continuous_batching(model, requests, 3, kv="paged", block_size=4, num_blocks=num_blocks)
    assert paged.tokens == [alone(model, r) for r in requests]
    contiguous = continuous_batching(model, requests, 3)
    per_block = 4 * kv_bytes_per_token(model.config, 4)
    assert max(paged.kv_bytes) <= (num_blocks or 3 * 10) * per_block
    assert max(paged.kv_bytes) < contiguous.kv_bytes[0] == model.config.kv_cache_bytes(3, 40, 4)
    if num_blocks is not None:
        assert paged.steps > contiguous.steps  # it had to wait for blocks


def test_slot_cache_reserves_the_whole_context_per_slot() -> None:
    model = tiny("gpt2-style")
    cache = SlotKVCache(model.config, 5, torch.device("cpu"), torch.float32)
    assert cache.bytes_held() == model.config.kv_cache_bytes(5, model.config.context_length, 4)


def test_malformed_input_is_refused() -> None:
    model = tiny("gpt2-style")
    with pytest.raises(ValueError, match="requests is empty"):
        continuous_batching(model, [], 2)
    with pytest.raises(ValueError, match="max_batch"):
        continuous_batching(model, mixed_requests(), 0)
    with pytest.raises(TypeError, match="Request"):
        continuous_batching(model, [[1, 2]], 2)
    with pytest.raises(ValueError, match="prompt 0 is empty"):
        continuous_batching(model, [Request([], 3)], 2)
    with pytest.raises(ValueError, match="exceeds the context length"):
        continuous_batching(model, [Request([1] * 30, 11)], 2)
    with pytest.raises(ValueError, match="kv must be"):
        continuous_batching(model, mixed_requests(), 2, kv="disk")
    with pytest.raises(ValueError, match="more than the pool"):
        continuous_batching(model, mixed_requests(), 2, kv="paged", block_size=4, num_blocks=2)
