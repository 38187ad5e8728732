"""Speculative decoding: a small draft model guesses k tokens, the target checks all of them in one forward pass.

Decoding is memory-bound: one target step reads every weight to produce one token. Reading them once for k+1
positions costs about the same, so if a cheap draft guesses well, several tokens come out of one target pass.

Greedy: keep the drafted tokens while they equal the target's argmax, then add the target's own next token
(the correction where they differ, a bonus one when all k agree). The output is the target's greedy output.

Sampling (Leviathan et al. 2023; Chen et al. 2023): draft token x ~ q is accepted with probability
min(1, p(x)/q(x)); at the first rejection the token is redrawn from the residual norm(max(0, p − q)), and if
all k pass, one more is drawn from p. Accepted-or-resampled, each token is distributed exactly as p, so the
output has the target's distribution whatever the draft; a better draft only raises the acceptance rate
(per token Σ_x min(p(x), q(x))).

The random choices go through a :class:`Chooser` (a coin and a categorical draw), so the tests can enumerate
every outcome of the procedure exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from minillm.inference.forward import eval_mode
from minillm.inference.requests import as_budgets, as_token_lists, check_sampling
from minillm.model import GPT

__all__ = ["Chooser", "TorchChooser", "SpeculativeResult", "verify_draft", "speculative_generate"]


class Chooser(Protocol):
    """The two random choices speculative sampling makes."""

    def bernoulli(self, prob: float) -> bool: ...

    def categorical(self, probs: torch.Tensor) -> int: ...


class TorchChooser:
    """Choices drawn from a ``torch.Generator`` (seeded: reproducible)."""

    def __init__(self, generator: torch.Generator | None = None) -> None:
        self.generator = generator

    def bernoulli(self, prob: float) -> bool:
        return bool(torch.rand((), generator=self.generator, dtype=torch.float64) < prob)

    def categorical(self, probs: torch.Tensor) -> int:
        return int(torch.multinomial(probs, 1, generator=self.generator))


@dataclass(frozen=True)
class SpeculativeResult:
    """The new tokens, and how many drafted tokens the target accepted out of those proposed."""

    tokens: list[int]
    accepted: int
    proposed: int
    target_calls: int

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0


def verify_draft(
    p: torch.Tensor, q: torch.Tensor | None, draft: Sequence[int], chooser: Chooser | None
) -> tuple[int, int]:
    """(number of draft tokens accepted, the next token) from target probabilities ``p`` [k+1, V] and draft
    probabilities ``q`` [k, V]. ``chooser`` None is greedy: accept while the draft equals argmax p."""
    if chooser is None:
        best = p.argmax(dim=-1).tolist()
        n = 0
        while n < len(draft) and draft[n] == best[n]:
            n += 1
        return n, best[n]
    for i, x in enumerate(draft):
        if chooser.bernoulli(min(1.0, float(p[i, x] / q[i, x]))):
            continue
        residual = (p[i] - q[i]).clamp(min=0)
        total = residual.sum()
        # A rejection implies p(x) < q(x), hence Σ max(0, p − q) > 0; fall back to p against round-off.
        return i, chooser.categorical(residual / total if total > 0 else p[i])
    return len(draft), chooser.categorical(p[len(draft)])


def _probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.softmax(logits.double() / temperature, dim=-1)


def speculative_generate(
    target: GPT,
    draft: GPT,
    prompt: Sequence[int] | torch.Tensor,
    max_new_tokens: int,
    k: int = 4,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    chooser: Chooser | None = None,
) -> SpeculativeResult:
    """``max_new_tokens`` tokens after ``prompt`` from ``target``, drafted ``k`` at a time by ``draft``.

    ``temperature`` 0: the target's greedy tokens (``GPT.generate``'s). Above 0: samples from the target at that
    temperature, the random choices taken from ``chooser`` (default: a :class:`TorchChooser` on ``generator``).
    Both models keep a KV cache; rejected positions are dropped by rolling the cache's length back.
    """
    for name, model in (("target", target), ("draft", draft)):
        if not isinstance(model, GPT):
            raise TypeError(f"{name} must be a minillm GPT, got {type(model).__name__}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k (tokens drafted per round) must be an int ≥ 1, got {k!r}")
    if draft.config.vocab_size != target.config.vocab_size:
        raise ValueError(
            f"the draft's vocabulary ({draft.config.vocab_size} ids) differs from the target's "
            f"({target.config.vocab_size}): both must share one tokenizer"
        )
    (ids,) = as_token_lists(target, [prompt])
    (budget,) = as_budgets(target, [ids], max_new_tokens)
    if len(ids) + budget > draft.config.context_length:
        raise ValueError(
            f"prompt + max_new_tokens = {len(ids) + budget} exceeds the draft's context {draft.config.context_length}"
        )
    check_sampling(temperature)
    if temperature == 0:
        chooser = None
    elif chooser is None:
        chooser = TorchChooser(generator)
    device = target.tok_emb.weight.device
    seq, accepted, proposed, calls = list(ids), 0, 0, 0
    with eval_mode(target, draft):
        t_cache, d_cache = target.new_kv_cache(1), draft.new_kv_cache(1)
        while len(seq) - len(ids) < budget:
            n_draft = min(k, budget - (len(seq) - len(ids)) - 1)  # never draft past the budget
            drafted: list[int] = []
            q_rows: list[torch.Tensor] = []
            feed = seq[d_cache.length :]
            for _ in range(n_draft):
                logits = draft(torch.tensor([feed], device=device), kv_cache=d_cache)[0, -1]
                if chooser is None:
                    token = int(logits.argmax())
                else:
                    q_rows.append(_probs(logits, temperature))
                    token = chooser.categorical(q_rows[-1])
                drafted.append(token)
                feed = [token]
            # One target pass over the tokens it has not seen plus the draft: rows give p after each prefix.
            window = torch.tensor([seq[t_cache.length :] + drafted], device=device)
            logits = target(window, kv_cache=t_cache)[0, -(n_draft + 1) :]
            calls += 1
            p = logits if chooser is None else _probs(logits, temperature)
            q = torch.stack(q_rows) if q_rows else None
            n, next_token = verify_draft(p, q, drafted, chooser)
            accepted, proposed = accepted + n, proposed + n_draft
            seq += drafted[:n] + [next_token]
            t_cache.length = len(seq) - 1  # the cache keeps every token but the newest, which it has not seen
            d_cache.length = min(d_cache.length, len(seq) - 1)
    return SpeculativeResult(seq[len(ids) :], accepted, proposed, calls)
