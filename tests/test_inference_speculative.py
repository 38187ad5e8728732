"""Speculative decoding: greedy output is the target's; sampled output has the target's distribution exactly,
shown by enumerating every random choice the procedure can make on a tiny vocabulary."""

from __future__ import annotations

import itertools

import pytest
import torch

from minillm.inference import speculative
from minillm.inference.speculative import TorchChooser, speculative_generate, verify_draft
from minillm.model import GPT, GPTConfig

EXACT_TOL = 1e-12  # float64 sums of a few thousand products


def make(preset: str = "llama-style", seed: int = 0, scale: float = 5.0, **overrides) -> GPT:
    """Weights scaled up so the distributions are peaked (and target and draft disagree visibly)."""
    torch.manual_seed(seed)
    shape = dict(vocab_size=64, context_length=40, n_layer=3, n_head=4, d_model=32, n_kv_head=2)
    model = GPT(GPTConfig.preset(preset, **{**shape, **overrides})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model


@pytest.mark.parametrize("preset", ["llama-style", "gpt2-style"])
@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_output_is_the_targets_greedy_output(preset, k) -> None:
    target = make(preset)
    prompt = [3, 5, 7, 11]
    expected = target.generate(torch.tensor([prompt]), 24, temperature=0)[0, 4:].tolist()
    # A draft that shares the target's first layers is right some of the time; another seed almost never.
    good = make(preset, n_layer=2)
    good.load_state_dict({name: t for name, t in target.state_dict().items() if name in good.state_dict()})
    for draft in (good, make(preset, seed=1, n_layer=1)):
        result = speculative_generate(target, draft, prompt, 24, k=k)
        assert result.tokens == expected
        assert result.proposed > 0 and 0 <= result.accepted <= result.proposed
        if draft is good:  # partly accepted rounds: the caches really are rolled back mid-draft
            assert 0 < result.accepted < result.proposed


def test_the_target_as_its_own_draft_accepts_everything() -> None:
    target = make()
    result = speculative_generate(target, target, [1, 2], 20, k=4)
    assert result.acceptance_rate == 1.0
    assert result.target_calls == 4  # rounds of 5 tokens (4 drafted + 1 bonus), the last drafting 4 of its 5


class Enumerator:
    """A chooser that follows a script of branch indices and multiplies the probabilities of the branches it
    takes; past the script it takes branch 0 and records how many branches each choice had."""

    def __init__(self, script: list[int]) -> None:
        self.script, self.prob, self.widths = script, 1.0, []

    def _choose(self, options):
        options = [(value, p) for value, p in options if p > 0]
        depth = len(self.widths)
        self.widths.append(len(options))
        value, p = options[self.script[depth] if depth < len(self.script) else 0]
        self.prob *= p
        return value

    def bernoulli(self, prob: float) -> bool:
        prob = min(prob, 1.0)
        return self._choose([(True, prob), (False, 1.0 - prob)])

    def categorical(self, probs: torch.Tensor) -> int:
        return self._choose(list(enumerate(probs.tolist())))


def enumerate_outcomes(run) -> tuple[dict[tuple[int, ...], float], float]:
    """Every path of ``run(chooser)``: (probability of each output, expected accepted / proposed)."""
    outcomes: dict[tuple[int, ...], float] = {}
    rate = 0.0
    stack: list[list[int]] = [[]]
    while stack:
        script = stack.pop()
        chooser = Enumerator(script)
        result = run(chooser)
        outcomes[tuple(result.tokens)] = outcomes.get(tuple(result.tokens), 0.0) + chooser.prob
        rate += chooser.prob * result.accepted / result.proposed
        for depth in range(len(script), len(chooser.widths)):
            for branch in range(1, chooser.widths[depth]):
                stack.append(script + [0] * (depth - len(script)) + [branch])
    return outcomes, rate


def target_distribution(target: GPT, prompt: list[int], n: int, temperature: float) -> dict[tuple[int, ...], float]:
    """P(sequence) = Π p(token | prefix) from full forward passes (no cache), every sequence of length n."""
    vocab = target.config.vocab_size
    out = {}
    with torch.no_grad():
        for seq in itertools.product(range(vocab), repeat=n):
            logits = target(torch.tensor([prompt + list(seq)]))[0, len(prompt) - 1 : -1]
            probs = torch.softmax(logits.double() / temperature, dim=-1)
            out[seq] = float(probs[torch.arange(n), torch.tensor(seq)].prod())
    return out


TINY = dict(vocab_size=3, context_length=8, d_model=16, n_head=2, n_kv_head=1)


@pytest.mark.parametrize(("k", "n", "temperature"), [(1, 3, 1.0), (2, 3, 0.7), (3, 3, 1.0)])
def test_sampling_keeps_the_targets_distribution_exactly(k, n, temperature) -> None:
    target = make(**TINY, n_layer=2).double()
    draft = make(seed=1, **TINY, n_layer=1).double()
    prompt = [1, 0]

    def run(chooser):
        return speculative_generate(target, draft, prompt, n, k=k, temperature=temperature, chooser=chooser)

    got, _ = enumerate_outcomes(run)
    expected = target_distribution(target, prompt, n, temperature)
    assert abs(sum(got.values()) - 1.0) <= EXACT_TOL
    assert max(abs(got.get(seq, 0.0) - p) for seq, p in expected.items()) <= EXACT_TOL
    draft_alone = target_distribution(draft, prompt, n, temperature)
    assert max(abs(draft_alone[s] - p) for s, p in expected.items()) > 0.05  # the draft's own is far from it


def test_acceptance_rate_is_the_overlap_of_the_two_distributions() -> None:
    """One drafted token: accepted with probability Σ_x min(p(x), q(x)) (Leviathan et al., closed form)."""
    target = make(**TINY, n_layer=2).double()
    draft = make(seed=1, **TINY, n_layer=1).double()
    prompt = [2]
    _, rate = enumerate_outcomes(
        lambda chooser: speculative_generate(target, draft, prompt, 2, k=1, temperature=1.0, chooser=chooser)
    )
    with torch.no_grad():
        p = torch.softmax(target(torch.tensor([prompt]))[0, -1].double(), -1)
        q = torch.softmax(draft(torch.tensor([prompt]))[0, -1].double(), -1)
    assert abs(rate - float(torch.minimum(p, q).sum())) <= EXACT_TOL
    assert 0.05 < rate < 0.95


def test_the_enumeration_catches_a_wrong_rule(monkeypatch) -> None:
    """The control: resampling a rejected token from p instead of max(0, p − q) biases the output."""

    def resample_from_p(p, q, draft, chooser):
        for i, x in enumerate(draft):
            if not chooser.bernoulli(min(1.0, float(p[i, x] / q[i, x]))):
                return i, chooser.categorical(p[i])
        return len(draft), chooser.categorical(p[len(draft)])

    monkeypatch.setattr(speculative, "verify_draft", resample_from_p)
    target = make(**TINY, n_layer=2).double()
    draft = make(seed=1, **TINY, n_layer=1).double()
    got, _ = enumerate_outcomes(
        lambda chooser: speculative_generate(target, draft, [1, 0], 2, k=1, temperature=1.0, chooser=chooser)
    )
    expected = target_distribution(target, [1, 0], 2, 1.0)
    assert max(abs(got.get(seq, 0.0) - p) for seq, p in expected.items()) > 1e-3


def test_verify_draft_greedy() -> None:
    p = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
    assert verify_draft(p, None, [1, 0], None) == (2, 1)  # both match, bonus argmax of the last row
    assert verify_draft(p, None, [1, 1], None) == (1, 0)  # second differs: the target's token instead


def test_seeded_sampling_is_reproducible() -> None:
    target, draft = make(), make(seed=1, n_layer=1)
    runs = [
        speculative_generate(
            target, draft, [1, 2], 12, k=3, temperature=1.0, generator=torch.Generator().manual_seed(5)
        )
        for _ in range(2)
    ]
    assert runs[0] == runs[1] and len(runs[0].tokens) == 12
    assert isinstance(TorchChooser().categorical(torch.tensor([0.0, 1.0])), int)


def test_malformed_input_is_refused() -> None:
    target, draft = make(), make(seed=1, n_layer=1)
    with pytest.raises(ValueError, match="k .* must be an int ≥ 1"):
        speculative_generate(target, draft, [1], 4, k=0)
    with pytest.raises(ValueError, match="vocabulary"):
        speculative_generate(target, make(vocab_size=65), [1], 4)
    with pytest.raises(ValueError, match="empty"):
        speculative_generate(target, draft, [], 4)
    with pytest.raises(ValueError, match="longer than the context length"):
        speculative_generate(target, draft, [1] * 41, 1)
    with pytest.raises(ValueError, match="draft's context"):
        speculative_generate(target, make(context_length=8), [1] * 4, 8)
    with pytest.raises(TypeError, match="minillm GPT"):
        speculative_generate(target, torch.nn.Linear(2, 2), [1], 4)
