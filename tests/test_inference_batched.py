"""Left-padded batched generation gives every prompt the tokens GPT.generate gives it alone."""

from __future__ import annotations

import pytest
import torch

from minillm.checkpoint import load_pretrained
from minillm.data import load_stories
from minillm.inference import batched
from minillm.inference.batched import LeftPaddedKVCache, generate_batch, left_pad
from minillm.model import GPT, GPTConfig
from minillm.paths import data_path

ARCHITECTURES = [
    ("gpt2-style", {"n_kv_head": 2}),  # learned positions: a wrong position changes the embedding added
    ("llama-style", {"n_kv_head": 2}),  # RoPE: a wrong position changes every rotation
    ("llama-style", {"n_kv_head": 1, "rope_style": "interleaved"}),
]


def tiny(preset: str, **overrides) -> GPT:
    """Several layers; weights scaled up so the next-token distributions are peaked and differ from prompt to
    prompt (at the N(0, 0.02²) init every prompt continues with nearly the same flat distribution)."""
    torch.manual_seed(0)
    shape = dict(vocab_size=64, context_length=32, n_layer=3, n_head=4, d_model=32)
    model = GPT(GPTConfig.preset(preset, **{**shape, **overrides})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(5.0)
    return model


def alone(model: GPT, prompt: list[int], n: int, eos_id: int | None = None) -> list[int]:
    new = model.generate(torch.tensor([prompt]), n, temperature=0, eos_id=eos_id)[0, len(prompt) :].tolist()
    return new[: new.index(eos_id) + 1] if eos_id in new else new


def ragged_prompts(lengths=(1, 6, 11, 3), seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 64, (n,), generator=g).tolist() for n in lengths]


@pytest.mark.parametrize(("preset", "overrides"), ARCHITECTURES, ids=str)
def test_greedy_batch_equals_each_prompt_alone(preset, overrides) -> None:
    model = tiny(preset, **overrides)
    prompts = ragged_prompts()
    out = generate_batch(model, prompts, 12)
    assert out == [alone(model, p, 12) for p in prompts]
    assert len({tuple(o) for o in out}) == len(out)  # the prompts really continue differently


def test_per_prompt_budgets_and_eos() -> None:
    model = tiny("llama-style", n_kv_head=2)
    prompts = ragged_prompts()
    budgets = [3, 12, 1, 8]
    assert generate_batch(model, prompts, budgets) == [
        alone(model, p, n) for p, n in zip(prompts, budgets, strict=True)
    ]
    eos = alone(model, prompts[1], 12)[4]  # a token one row produces mid-way
    out = generate_batch(model, prompts, 12, eos_id=eos)
    assert out == [alone(model, p, 12, eos_id=eos) for p in prompts]
    assert out[1][-1] == eos and len(out[1]) <= 5


def test_the_shipped_checkpoint_batched_equals_alone() -> None:
    model, tokenizer, _ = load_pretrained(data_path("base"))
    stories = load_stories(data_path("stories_val.txt"))[:3]
    prompts = [tokenizer.encode(s)[:n] for s, n in zip(stories, (5, 17, 9), strict=True)]
    assert generate_batch(model, prompts, 16) == [alone(model, p, 16) for p in prompts]


def test_without_per_row_positions_the_padded_rows_go_wrong(monkeypatch) -> None:
    """The control that shows the equality above can fail: give every row the column as its position.

    Learned positions, because RoPE's scores depend only on offsets: shifting a whole row by its padding
    leaves them unchanged (up to rounding), so a rotary model barely notices this mistake."""
    model = tiny("gpt2-style", n_kv_head=2)
    prompts = ragged_prompts()

    class ColumnPositions(LeftPaddedKVCache):
        def positions(self, rows, num_new):
            super().positions(rows, num_new)
            return torch.arange(self.length, self.length + num_new).expand(len(self.pad), -1)

    monkeypatch.setattr(batched, "LeftPaddedKVCache", ColumnPositions)
    out = generate_batch(model, prompts, 12)
    longest = max(range(len(prompts)), key=lambda i: len(prompts[i]))
    assert out[longest] == alone(model, prompts[longest], 12)  # the unpadded row is unaffected
    assert any(o != alone(model, p, 12) for o, p in zip(out, prompts, strict=True))


def test_left_pad_aligns_the_ends() -> None:
    ids, pad = left_pad([[5], [1, 2, 3]], pad_id=9)
    assert ids.tolist() == [[9, 9, 5], [1, 2, 3]] and pad.tolist() == [2, 0]


def test_malformed_input_is_refused() -> None:
    model = tiny("gpt2-style")
    with pytest.raises(ValueError, match="prompts is empty"):
        generate_batch(model, [], 4)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        generate_batch(model, [[1], []], 4)
    with pytest.raises(ValueError, match="longer than the context length"):
        generate_batch(model, [[1] * 33], 1)
    with pytest.raises(ValueError, match="temperature"):
        generate_batch(model, [[1]], 4, temperature=-1)
