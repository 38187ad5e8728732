"""Graders for notebook 10: a response's log-probability, the Bradley–Terry loss, the k3 KL estimator, GAE, GRPO's
group advantages, PPO's clipped objective, the GRPO loss and the DPO loss.

Each grader takes what the learner defined in the notebook and returns what the rest of the notebook should
use: the learner's own version when it passes, ``minillm``'s otherwise. Where a loss feeds a training loop the
probes look at its gradient too, so a result cut off from autograd does not pass. The wrong variants below are
the mistakes the graders recognise by their results; they are written here only to be recognised.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from minillm.alignment import advantages, dpo, kl, logprobs, ppo, reward_model, rlhf
from minillm.grading.core import Build, Mistake, Probe, grade

BUILDS = (
    "my_sequence_logprob",
    "my_bt_loss",
    "my_k3",
    "my_gae",
    "my_grpo",
    "my_clip_objective",
    "my_grpo_loss",
    "my_dpo_loss",
)

F64 = torch.float64


class NoGradient(Exception):
    """The learner's result does not depend on its inputs through autograd."""


def _value_and_grads(value: Any, inputs: dict[str, torch.Tensor], what: str) -> Any:
    """{what: value, "gradient w.r.t. <name>": …}; a non-tensor value is handed on for the engine to describe."""
    if not isinstance(value, torch.Tensor):
        return {what: value}
    if value.grad_fn is None:
        raise NoGradient(
            f"the {what} is not connected to its inputs by autograd (computed under torch.no_grad, "
            "or through .item(), .detach() or a new tensor?): a training loop could not backpropagate through it"
        )
    total = value if value.dim() == 0 else value.sum()
    grads = torch.autograd.grad(total, list(inputs.values()), allow_unused=True)
    observed = {what: value.detach()}
    for (name, tensor), grad in zip(inputs.items(), grads, strict=True):
        observed[f"gradient w.r.t. {name}"] = torch.zeros_like(tensor) if grad is None else grad
    return observed


def _bce_at_one(logits: torch.Tensor) -> torch.Tensor:
    """−log σ(x) averaged, as PyTorch's binary cross-entropy with logits at label 1 computes it."""
    return F.binary_cross_entropy_with_logits(logits, torch.ones_like(logits))


# ---------------------------------------------------------------------------------- a response's log-prob
class _TinyLM:
    """A stand-in model: float32 logits from a table of the current token plus one of the position."""

    def __init__(self, seed: int, vocab: int, length: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.table = torch.randn(vocab, vocab, generator=g) * 2
        self.position = torch.randn(length, vocab, generator=g)

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table[ids] + self.position[: ids.shape[1]]


def _sequence_case(seed: int, prompts: Sequence[int], responses: Sequence[int], length: int, name: str) -> Probe:
    """Rows of prompt tokens (mask 0), then response tokens (mask 1), then padding (mask 0)."""

    def run(sequence_logprob: Any) -> Any:
        g = torch.Generator().manual_seed(seed)
        vocab = 11
        ids = torch.randint(vocab, (len(prompts), length), generator=g)
        mask = torch.zeros(len(prompts), length, dtype=torch.long)
        for row, (p, r) in enumerate(zip(prompts, responses, strict=True)):
            mask[row, p : p + r] = 1
        return sequence_logprob(_TinyLM(seed, vocab, length), ids, mask)

    return Probe(name, run)


def _sequence_reference(model, ids, mask):
    """Σ over response tokens of log softmax(logits at t − 1)[token t], token by token in float64."""
    logits = model(ids).double()
    rows = []
    for b in range(ids.shape[0]):
        total = torch.zeros((), dtype=F64)
        for t in range(1, ids.shape[1]):
            if mask[b, t]:
                total = total + logits[b, t - 1, ids[b, t]] - torch.logsumexp(logits[b, t - 1], -1)
        rows.append(total)
    return torch.stack(rows).float()


def _sequence_from_minillm(model, ids, mask):
    """minillm's sequence log-probs with the notebook's interface (the model, not its logits)."""
    return logprobs.sequence_logprobs(model(ids), ids, mask)


def _sequence_variant(model, ids, mask, *, shift=True, mask_shift=True, use_mask=True, normalise=True, mean=False):
    logits = model(ids).float()
    logp = F.log_softmax(logits, -1) if normalise else logits
    if shift:
        token_logp = logp[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
        m = mask[:, 1:] if mask_shift else mask[:, :-1]
    else:
        token_logp = logp.gather(-1, ids[..., None])[..., 0]
        m = mask
    m = torch.ones_like(m) if not use_mask else m
    total = (token_logp * m).sum(-1)
    return total / m.sum(-1) if mean else total


def _sequence_no_shift(model, ids, mask):
    return _sequence_variant(model, ids, mask, shift=False)


def _sequence_mask_unshifted(model, ids, mask):
    return _sequence_variant(model, ids, mask, mask_shift=False)


def _sequence_no_mask(model, ids, mask):
    return _sequence_variant(model, ids, mask, use_mask=False)


def _sequence_raw_logits(model, ids, mask):
    return _sequence_variant(model, ids, mask, normalise=False)


def _sequence_mean(model, ids, mask):
    return _sequence_variant(model, ids, mask, mean=True)


SEQUENCE = Build(
    name="my_sequence_logprob",
    what="a response's log-probability",
    truth=_sequence_reference,
    truth_name="a token-by-token float64 sum of logit − logsumexp",
    fallback=_sequence_from_minillm,
    fallback_name="minillm.alignment.logprobs.sequence_logprobs",
    probes=(
        _sequence_case(1, (3, 2, 5), (4, 6, 2), 10, "3 rows of 10 tokens: prompt, response, padding"),
        _sequence_case(2, (1, 4), (6, 2), 7, "2 rows of 7 tokens, a one-token prompt"),
        _sequence_case(3, (2, 2, 3, 1), (3, 1, 2, 5), 8, "4 rows of 8 tokens, a one-token response"),
    ),
    mistakes=(
        Mistake(
            "no shift: each position scored on its own token",
            "position t predicts token t + 1: take log_softmax(...)[:, :-1] and gather ids[:, 1:].",
            _sequence_no_shift,
        ),
        Mistake(
            "the mask not shifted with the tokens",
            "the log-probs score ids[:, 1:], so the mask that goes with them is mask[:, 1:].",
            _sequence_mask_unshifted,
        ),
        Mistake(
            "prompt and padding tokens counted",
            "multiply by the response mask (shifted: mask[:, 1:]) before summing.",
            _sequence_no_mask,
        ),
        Mistake(
            "raw logits instead of log-probabilities",
            "apply F.log_softmax over the vocabulary before gathering.",
            _sequence_raw_logits,
        ),
        Mistake(
            "a mean over the response instead of a sum",
            "log π(y | x) is the SUM of the token log-probs: a sequence's probability is the product of its tokens'.",
            _sequence_mean,
        ),
    ),
    rtol=1e-5,
    atol=1e-5,
    what_is_compared="summed log-probabilities",
)


def sequence_logprob(learner: Any) -> Any:
    """Grade ``my_sequence_logprob(model, ids, mask) -> float32 tensor [B]`` (summed response log-probs)."""
    return grade(SEQUENCE, learner)


# ------------------------------------------------------------------------------------------ Bradley–Terry
def _bt_case(seed: int, pairs: int, scale: float, shift: float, name: str, grads: bool = True) -> Probe:
    def run(loss_fn: Any) -> Any:
        g = torch.Generator().manual_seed(seed)
        chosen = (torch.randn(pairs, generator=g, dtype=F64) * scale + shift).requires_grad_()
        rejected = (torch.randn(pairs, generator=g, dtype=F64) * scale + shift).requires_grad_()
        out = loss_fn(chosen, rejected)
        if not grads:  # huge margins: only the loss is compared (a naive log σ is inf here)
            return {"loss": out.detach() if isinstance(out, torch.Tensor) else out}
        return _value_and_grads(out, {"r_chosen": chosen, "r_rejected": rejected}, "loss")

    return Probe(name, run)


def _bt_reference(r_chosen, r_rejected):
    return _bce_at_one(r_chosen - r_rejected)


def _bt_swapped(r_chosen, r_rejected):
    return -F.logsigmoid(r_rejected - r_chosen).mean()


def _bt_sigmoid(r_chosen, r_rejected):
    return -torch.sigmoid(r_chosen - r_rejected).mean()


def _bt_log_of_sigmoid(r_chosen, r_rejected):
    return -torch.log(torch.sigmoid(r_chosen - r_rejected)).mean()


def _bt_summed(r_chosen, r_rejected):
    return -F.logsigmoid(r_chosen - r_rejected).sum()


def _bt_no_minus(r_chosen, r_rejected):
    return F.logsigmoid(r_chosen - r_rejected).mean()


BT = Build(
    name="my_bt_loss",
    what="the Bradley–Terry loss",
    truth=_bt_reference,
    truth_name="F.binary_cross_entropy_with_logits at label 1 (= −log σ) in float64",
    fallback=reward_model.bradley_terry_loss,
    fallback_name="minillm.alignment.reward_model.bradley_terry_loss",
    probes=(
        _bt_case(1, 6, 1.0, 0.0, "6 pairs of rewards around 0"),
        _bt_case(2, 5, 3.0, 5.0, "5 pairs of rewards around +5 (only differences count)"),
        _bt_case(3, 8, 600.0, 0.0, "8 pairs with margins of hundreds (a naive log σ overflows)", grads=False),
    ),
    mistakes=(
        Mistake(
            "chosen and rejected swapped",
            "the loss is −log σ(r_chosen − r_rejected): the chosen reply's reward comes first.",
            _bt_swapped,
        ),
        Mistake(
            "sigmoid instead of logsigmoid",
            "the likelihood of a comparison is σ(d); its negative LOG is the loss: −F.logsigmoid(d).mean().",
            _bt_sigmoid,
        ),
        Mistake(
            "log(sigmoid(·)) instead of logsigmoid",
            "σ(d) rounds to 0 for a margin of −800 and its log is −inf; F.logsigmoid(d) stays finite.",
            _bt_log_of_sigmoid,
        ),
        Mistake(
            "the loss summed over the pairs",
            "average over the pairs (.mean()), so the loss does not grow with the batch size.",
            _bt_summed,
        ),
        Mistake(
            "the minus sign left out",
            "log σ(d) is ≤ 0 and is to be maximised; the loss is its negative, −log σ(d).",
            _bt_no_minus,
        ),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="loss and its gradient",
)


def bt_loss(learner: Any) -> Any:
    """Grade ``my_bt_loss(r_chosen, r_rejected) -> 0-dim tensor`` (the mean over pairs of −log σ(r_w − r_l))."""
    return grade(BT, learner)


# --------------------------------------------------------------------------------------------------- k3
def _k3_case(seed: int, shape: tuple[int, ...], spread: float, name: str) -> Probe:
    """Log-probs of sampled tokens under π and π_ref: ``spread`` is how far π_ref's logits are moved from π's."""

    def run(k3: Any) -> Any:
        g = torch.Generator().manual_seed(seed)
        logits = torch.randn(*shape, generator=g, dtype=F64) * 2
        logp = F.log_softmax(logits, -1).requires_grad_()
        ref_logp = F.log_softmax(logits + spread * torch.randn(*shape, generator=g, dtype=F64), -1)
        return _value_and_grads(k3(logp, ref_logp), {"logp": logp}, "k3 per token")

    return Probe(name, run)


def _k3_log_r(logp, ref_logp):
    return ref_logp - logp


def _k3_k1(logp, ref_logp):
    return logp - ref_logp


def _k3_r_minus_one(logp, ref_logp):
    return torch.exp(ref_logp - logp) - 1


def _k3_upside_down(logp, ref_logp):
    log_r = logp - ref_logp
    return torch.exp(log_r) - 1 - log_r


def _k3_log_added(logp, ref_logp):
    log_r = ref_logp - logp
    return torch.exp(log_r) - 1 + log_r


K3 = Build(
    name="my_k3",
    what="the k3 estimator of the KL",
    truth=kl.kl_k3,
    truth_name="minillm.alignment.kl.kl_k3 in float64",
    fallback=kl.kl_k3,
    fallback_name="minillm.alignment.kl.kl_k3",
    probes=(
        _k3_case(1, (3, 8), 1.0, "log-probs of 3 × 8 tokens, π_ref well away from π"),
        _k3_case(2, (2, 3, 5), 0.05, "2 × 3 × 5 tokens with π_ref close to π"),
        _k3_case(3, (4, 6), 3.0, "4 × 6 tokens, π_ref far from π"),
    ),
    mistakes=(
        Mistake(
            "k3 written as log r alone",
            "log r = ref_logp − logp is only a part: k3 = (r − 1) − log r with r = exp(log r).",
            _k3_log_r,
        ),
        Mistake(
            "k1 (−log r) in place of k3",
            "logp − ref_logp is k1, which can be negative; k3 = (r − 1) − log r, with log r = ref_logp − logp.",
            _k3_k1,
        ),
        Mistake(
            "k3 written as r − 1 alone",
            "subtract log r too: k3 = (r − 1) − log r, which is never negative.",
            _k3_r_minus_one,
        ),
        Mistake(
            "the ratio upside down (π/π_ref)",
            "r = π_ref(y)/π(y), so log r = ref_logp − logp: tokens are sampled from π, the ratio is the reference's.",
            _k3_upside_down,
        ),
        Mistake(
            "log r added instead of subtracted",
            "k3 = (r − 1) − log r; with + log r it is no longer ≥ 0 nor an estimate of the KL.",
            _k3_log_added,
        ),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="k3 values and their gradient",
)


def k3(learner: Any) -> Any:
    """Grade ``my_k3(logp, ref_logp) -> tensor`` (element-wise, the shape of its inputs)."""
    return grade(K3, learner)


# --------------------------------------------------------------------------------------------------- GAE
def _gae_case(rewards: Sequence[float], values: Sequence[float], gamma: float, lam: float, name: str) -> Probe:
    def run(gae: Any) -> Any:
        out = gae(list(rewards), list(values), gamma, lam)
        if isinstance(out, list | tuple):  # a list of floats (or of 0-dim tensors), as the notebook's returns
            return torch.tensor([float(v) for v in out], dtype=F64)
        return out

    return Probe(name, run)


def _gae_reference(rewards, values, gamma, lam):
    """The closed form Â_t = Σ_k (γλ)^k δ_{t+k}, δ_t = r_t + γ·V_{t+1} − V_t with V after the last step 0."""
    n = len(rewards)
    v = list(values) + [0.0]
    deltas = [rewards[t] + gamma * v[t + 1] - v[t] for t in range(n)]
    return torch.tensor([sum((gamma * lam) ** k * deltas[t + k] for k in range(n - t)) for t in range(n)], dtype=F64)


def _gae_from_minillm(rewards, values, gamma, lam):
    """minillm's GAE with the notebook's interface: one episode's lists in, a list of advantages out."""
    r, v = torch.tensor([rewards], dtype=F64), torch.tensor([values], dtype=F64)
    return advantages.gae(r, v, torch.ones_like(r), gamma, lam)[0][0].tolist()


def _gae_variant(rewards, values, gamma, lam, *, forwards=False, use_lam=True, discount_next=True, returns=False):
    n, adv, running = len(rewards), [0.0] * len(rewards), 0.0
    for t in range(n) if forwards else reversed(range(n)):
        next_v = values[t + 1] if t + 1 < n else 0.0
        delta = rewards[t] + (gamma if discount_next else 1.0) * next_v - values[t]
        running = delta + gamma * (lam if use_lam else 1.0) * running
        adv[t] = running + (values[t] if returns else 0.0)
    return adv


def _gae_forwards(rewards, values, gamma, lam):
    return _gae_variant(rewards, values, gamma, lam, forwards=True)


def _gae_no_lam(rewards, values, gamma, lam):
    return _gae_variant(rewards, values, gamma, lam, use_lam=False)


def _gae_next_undiscounted(rewards, values, gamma, lam):
    return _gae_variant(rewards, values, gamma, lam, discount_next=False)


def _gae_returns(rewards, values, gamma, lam):
    return _gae_variant(rewards, values, gamma, lam, returns=True)


GAE = Build(
    name="my_gae",
    what="generalised advantage estimation",
    truth=_gae_reference,
    truth_name="the closed form Σ_k (γλ)^k δ_{t+k} in float64",
    fallback=_gae_from_minillm,
    fallback_name="minillm.alignment.advantages.gae",
    probes=(
        _gae_case((0.0, 0.0, 1.0), (0.5, 0.2, 0.4), 0.9, 0.8, "r = [0, 0, 1], V = [0.5, 0.2, 0.4], γ 0.9, λ 0.8"),
        _gae_case((0.1, -0.3, 0.0, 0.7, 0.2), (0.3, 0.1, 0.6, 0.2, 0.5), 0.99, 0.95, "5 steps, γ 0.99, λ 0.95"),
        _gae_case((1.0, 0.5, -0.5, 0.0, 0.0, 2.0), (0.2, 0.9, 0.4, 0.4, 1.1, 0.3), 0.8, 0.5, "6 steps, γ 0.8, λ 0.5"),
    ),
    mistakes=(
        Mistake(
            "the recursion run forwards",
            "Â_t needs the future: loop t from the last step back to 0, Â_t = δ_t + γλ·Â_{t+1}.",
            _gae_forwards,
        ),
        Mistake(
            "λ left out",
            "the running sum decays by γ·λ per step: Â_t = δ_t + γλ·Â_{t+1}.",
            _gae_no_lam,
        ),
        Mistake(
            "the next value not discounted",
            "δ_t = r_t + γ·V_{t+1} − V_t: the next state's value is discounted too.",
            _gae_next_undiscounted,
        ),
        Mistake(
            "the returns (Â + V) instead of the advantages",
            "return Â_t itself; Â_t + V_t is the value model's regression target.",
            _gae_returns,
        ),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="advantages",
)


def gae(learner: Any) -> Any:
    """Grade ``my_gae(rewards, values, gamma, lam) -> list of floats`` (one episode, V after the last step 0)."""
    return grade(GAE, learner)


# --------------------------------------------------------------------------------------- GRPO advantages
def _grpo_case(rewards: Sequence[float], eps: float | None, name: str) -> Probe:
    def run(grpo: Any) -> Any:
        return grpo(list(rewards)) if eps is None else grpo(list(rewards), eps=eps)

    return Probe(name, run)


def _grpo_reference(rewards, eps=1e-4):
    mean, std = statistics.fmean(rewards), statistics.stdev(rewards)  # stdev: the unbiased std (G − 1)
    return torch.tensor([(r - mean) / (std + eps) for r in rewards], dtype=F64)


def _grpo_from_minillm(rewards, eps=1e-4):
    """minillm's group advantages with the notebook's interface: one group's rewards (a list) → float64 [G]."""
    r = torch.as_tensor(rewards, dtype=F64)
    return advantages.grpo_advantages(r, group_size=r.numel(), eps=eps)


def _grpo_population(rewards, eps=1e-4):
    r = torch.tensor(rewards, dtype=F64)
    return (r - r.mean()) / (r.std(unbiased=False) + eps)


def _grpo_no_eps(rewards, eps=1e-4):
    r = torch.tensor(rewards, dtype=F64)
    return (r - r.mean()) / r.std()


def _grpo_centred_only(rewards, eps=1e-4):
    r = torch.tensor(rewards, dtype=F64)
    return r - r.mean()


def _grpo_not_centred(rewards, eps=1e-4):
    r = torch.tensor(rewards, dtype=F64)
    return r / (r.std() + eps)


GRPO = Build(
    name="my_grpo",
    what="each answer's group advantage (GRPO)",
    truth=_grpo_reference,
    truth_name="Python's statistics.fmean and statistics.stdev in float64",
    fallback=_grpo_from_minillm,
    fallback_name="minillm.alignment.advantages.grpo_advantages",
    probes=(
        _grpo_case((0.2, 0.9, 0.4, 0.7, 0.1), None, "a group of 5 rewards, the default ε"),
        _grpo_case((1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0), 1e-2, "one success in a group of 8, ε = 0.01"),
        _grpo_case((0.5, 0.5, 0.5, 0.5), None, "a group whose 4 rewards are all equal"),
    ),
    mistakes=(
        Mistake(
            "the population std",
            "the course (like TRL) divides by the unbiased std, r.std() with G − 1, not r.std(unbiased=False).",
            _grpo_population,
        ),
        Mistake(
            "the std without the ε",
            "divide by (std + eps): a group whose rewards are all equal has std 0, and 0/0 is NaN.",
            _grpo_no_eps,
        ),
        Mistake(
            "the rewards centred but not scaled",
            "after subtracting the group mean, divide by (std + eps) as well.",
            _grpo_centred_only,
        ),
        Mistake(
            "the group mean not subtracted",
            "an advantage says how much better than the group: (r − mean(r)) / (std(r) + eps).",
            _grpo_not_centred,
        ),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="advantages",
)


def grpo(learner: Any) -> Any:
    """Grade ``my_grpo(rewards, eps=1e-4) -> float64 tensor [G]`` (one group's rewards, a list of floats)."""
    return grade(GRPO, learner)


# -------------------------------------------------------------------------------------- clipped objective
def _clip_case(seed: int, rows: int, cols: int, per_response: bool, eps: float | None, name: str) -> Probe:
    def run(objective: Any) -> Any:
        g = torch.Generator().manual_seed(seed)
        logp = (-3 * torch.rand(rows, cols, generator=g, dtype=F64)).requires_grad_()
        old_logp = logp.detach() + 0.4 * torch.randn(rows, cols, generator=g, dtype=F64)  # ratios off 1 both ways
        adv = torch.randn(rows, 1 if per_response else cols, generator=g, dtype=F64)
        out = objective(logp, old_logp, adv) if eps is None else objective(logp, old_logp, adv, eps=eps)
        return _value_and_grads(out, {"logp": logp}, "objective")

    return Probe(name, run)


def _clip_hand_case() -> Probe:
    """The notebook's four cases: Â = ±1 with ρ = 1.3 and 0.7."""

    def run(objective: Any) -> Any:
        logp = torch.log(torch.tensor([[1.3, 0.7, 0.7, 1.3]], dtype=F64)).requires_grad_()
        adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]], dtype=F64)
        return _value_and_grads(objective(logp, torch.zeros(1, 4, dtype=F64), adv), {"logp": logp}, "objective")

    return Probe("Â = ±1 with ρ = 1.3 and 0.7 (the table above)", run)


def _clip_reference(logp, old_logp, adv, eps=0.2):
    """The case form of PPO's objective: min(ρÂ, (1 + ε)Â) for Â ≥ 0, min(ρÂ, (1 − ε)Â) for Â < 0."""
    ratio = torch.exp(logp - old_logp)
    return torch.minimum(ratio * adv, torch.where(adv >= 0, (1 + eps) * adv, (1 - eps) * adv))


def _clip_from_minillm(logp, old_logp, adv, eps=0.2):
    """minillm's per-token clipped objective with the notebook's interface (no was-clipped mask)."""
    return ppo.clipped_surrogate(logp, old_logp, adv, eps)[0]


def _clip_no_min(logp, old_logp, adv, eps=0.2):
    return torch.clamp(torch.exp(logp - old_logp), 1 - eps, 1 + eps) * adv


def _clip_max(logp, old_logp, adv, eps=0.2):
    ratio = torch.exp(logp - old_logp)
    return torch.maximum(ratio * adv, torch.clamp(ratio, 1 - eps, 1 + eps) * adv)


def _clip_none(logp, old_logp, adv, eps=0.2):
    return torch.exp(logp - old_logp) * adv


def _clip_upside_down(logp, old_logp, adv, eps=0.2):
    ratio = torch.exp(old_logp - logp)
    return torch.minimum(ratio * adv, torch.clamp(ratio, 1 - eps, 1 + eps) * adv)


def _clip_product(logp, old_logp, adv, eps=0.2):
    surrogate = torch.exp(logp - old_logp) * adv
    return torch.minimum(surrogate, torch.clamp(surrogate, 1 - eps, 1 + eps))


def _clip_negated(logp, old_logp, adv, eps=0.2):
    ratio = torch.exp(logp - old_logp)
    return -torch.minimum(ratio * adv, torch.clamp(ratio, 1 - eps, 1 + eps) * adv)


CLIP = Build(
    name="my_clip_objective",
    what="PPO's clipped objective",
    truth=_clip_reference,
    truth_name="the case form min(ρÂ, (1 ± ε)Â) in float64",
    fallback=_clip_from_minillm,
    fallback_name="minillm.alignment.ppo.clipped_surrogate",
    probes=(
        _clip_case(1, 4, 6, False, None, "4 × 6 tokens, one advantage per token, ε = 0.2"),
        _clip_case(2, 3, 5, True, 0.1, "3 responses × 5 tokens, one advantage per response, ε = 0.1"),
        _clip_hand_case(),
    ),
    mistakes=(
        Mistake(
            "the ratio clipped without the min",
            "take min(ρÂ, clip(ρ, 1 − ε, 1 + ε)Â), the pessimistic bound: clipping alone also rewards moving too far.",
            _clip_no_min,
        ),
        Mistake(
            "max instead of min (the optimistic bound)",
            "the objective is the SMALLER of ρÂ and clip(ρ, 1 − ε, 1 + ε)Â.",
            _clip_max,
        ),
        Mistake(
            "no clipping at all",
            "clip the ratio to [1 − ε, 1 + ε] and take the min with the unclipped ρÂ.",
            _clip_none,
        ),
        Mistake(
            "the ratio upside down",
            "ρ = π_θ/π_old = exp(logp − old_logp).",
            _clip_upside_down,
        ),
        Mistake(
            "ρ·Â clipped instead of ρ",
            "clip the ratio, then multiply: clip(ρ, 1 − ε, 1 + ε)·Â.",
            _clip_product,
        ),
        Mistake(
            "the loss returned instead of the objective",
            "return the objective min(ρÂ, clip(ρ)Â) itself; the loss (its negative) is taken where it is averaged.",
            _clip_negated,
        ),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="objective and its gradient",
)


def clip_objective(learner: Any) -> Any:
    """Grade ``my_clip_objective(logp, old_logp, adv, eps=0.2) -> tensor`` (per token, not yet averaged)."""
    return grade(CLIP, learner)


# ------------------------------------------------------------------------------------------------ GRPO loss
def _grpo_loss_case(seed: int, groups: int, group_size: int, length: int, beta: float, name: str) -> Probe:
    def run(loss_fn: Any) -> Any:
        g = torch.Generator().manual_seed(seed)
        n = groups * group_size
        logp = (-2 * torch.rand(n, length, generator=g, dtype=F64)).requires_grad_()
        old_logp = logp.detach() + 0.3 * torch.randn(n, length, generator=g, dtype=F64)  # the clip acts
        ref_logp = logp.detach() + 0.5 * torch.randn(n, length, generator=g, dtype=F64)
        scores = torch.rand(n, generator=g, dtype=F64) + torch.arange(groups, dtype=F64).repeat_interleave(group_size)
        lengths = torch.randint(1, length + 1, (n,), generator=g)  # ragged responses, right-padded
        mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
        out = loss_fn(logp, old_logp, ref_logp, scores, mask, group_size, beta)
        return _value_and_grads(out, {"logp": logp}, "loss")

    return Probe(name, run)


def _grpo_loss_from_minillm(logp, old_logp, ref_logp, scores, mask, group_size, beta, eps=0.2):
    """minillm's GRPO loss with the notebook's interface (the loss only, no statistics)."""
    return rlhf.grpo_loss(logp, old_logp, ref_logp, scores, mask, group_size, beta, eps)[0]


def _grpo_loss_variant(
    logp,
    old_logp,
    ref_logp,
    scores,
    mask,
    group_size,
    beta,
    eps=0.2,
    *,
    over_batch=False,
    kl_sign=1.0,
    sign=-1.0,
    per_response=False,
    use_mask=True,
):
    if over_batch:
        adv = (scores - scores.mean()) / (scores.std() + 1e-4)
    else:
        grouped = scores.view(-1, group_size)
        adv = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).reshape(-1)
    ratio = torch.exp(logp - old_logp)
    objective = torch.minimum(ratio * adv[:, None], torch.clamp(ratio, 1 - eps, 1 + eps) * adv[:, None])
    per_token = sign * objective + kl_sign * beta * kl.kl_k3(logp, ref_logp)
    if not use_mask:
        return per_token.mean()
    if per_response:
        return ((per_token * mask).sum(1) / mask.sum(1)).mean()
    return (per_token * mask).sum() / mask.sum()


def _grpo_over_batch(*args, **kwargs):
    return _grpo_loss_variant(*args, over_batch=True, **kwargs)


def _grpo_kl_subtracted(*args, **kwargs):
    return _grpo_loss_variant(*args, kl_sign=-1.0, **kwargs)


def _grpo_not_negated(*args, **kwargs):
    return _grpo_loss_variant(*args, sign=1.0, **kwargs)


def _grpo_no_kl(logp, old_logp, ref_logp, scores, mask, group_size, beta, eps=0.2):
    return _grpo_loss_variant(logp, old_logp, ref_logp, scores, mask, group_size, 0.0, eps)


def _grpo_per_response(*args, **kwargs):
    return _grpo_loss_variant(*args, per_response=True, **kwargs)


def _grpo_no_mask(*args, **kwargs):
    return _grpo_loss_variant(*args, use_mask=False, **kwargs)


GRPO_LOSS = Build(
    name="my_grpo_loss",
    what="the GRPO loss",
    truth=_grpo_loss_from_minillm,
    truth_name="minillm.alignment.rlhf.grpo_loss in float64",
    fallback=_grpo_loss_from_minillm,
    fallback_name="minillm.alignment.rlhf.grpo_loss",
    probes=(
        _grpo_loss_case(1, 3, 4, 6, 0.05, "3 groups of 4 ragged responses, β = 0.05"),
        _grpo_loss_case(2, 2, 3, 5, 0.2, "2 groups of 3 ragged responses, β = 0.2"),
        _grpo_loss_case(3, 4, 2, 4, 0.0, "4 groups of 2, β = 0 (no KL term)"),
    ),
    mistakes=(
        Mistake(
            "GRPO normalised over the batch instead of the group",
            "each response is compared with the other answers to ITS prompt: mean and std over scores.view(-1, G), "
            "row by row (dim 1).",
            _grpo_over_batch,
        ),
        Mistake(
            "the β·k3 term subtracted",
            "the KL is a penalty: loss = −objective + β·k3, so a policy moving away from π_ref pays.",
            _grpo_kl_subtracted,
        ),
        Mistake(
            "the clipped objective not negated",
            "the optimiser minimises: the loss is −objective (+ β·k3).",
            _grpo_not_negated,
        ),
        Mistake("the β·k3 term left out", "add β·k3(logp, ref_logp) to every token's loss.", _grpo_no_kl),
        Mistake(
            "a mean per response first",
            "every answer token in the batch counts once: (per_token · mask).sum() / mask.sum().",
            _grpo_per_response,
        ),
        Mistake(
            "padding tokens counted",
            "multiply by the mask and divide by mask.sum(): padding is not part of any answer.",
            _grpo_no_mask,
        ),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="loss and its gradient",
)


def grpo_loss(learner: Any) -> Any:
    """Grade ``my_grpo_loss(logp, old_logp, ref_logp, scores, mask, group_size, beta, eps=0.2) -> 0-dim tensor``."""
    return grade(GRPO_LOSS, learner)


# --------------------------------------------------------------------------------------------------- DPO
def _dpo_case(seed: int, pairs: int, beta: float, name: str) -> Probe:
    """Summed log-probs of chosen and rejected replies: the reference's, and the policy's a few nats off them."""

    def run(loss_fn: Any) -> Any:
        g = torch.Generator().manual_seed(seed)
        ref_chosen = -20 - 100 * torch.rand(pairs, generator=g, dtype=F64)
        ref_rejected = -20 - 100 * torch.rand(pairs, generator=g, dtype=F64)
        chosen = (ref_chosen + 3 * torch.randn(pairs, generator=g, dtype=F64)).requires_grad_()
        rejected = (ref_rejected + 3 * torch.randn(pairs, generator=g, dtype=F64)).requires_grad_()
        out = loss_fn(chosen, rejected, ref_chosen, ref_rejected, beta)
        return _value_and_grads(out, {"log π(y_w)": chosen, "log π(y_l)": rejected}, "loss")

    return Probe(name, run)


def _dpo_reference(pc, pr, rc, rr, beta=0.1):
    return _bce_at_one(beta * ((pc - rc) - (pr - rr)))


def _dpo_from_minillm(pc, pr, rc, rr, beta=0.1):
    """minillm's DPO loss with the notebook's interface (the loss only)."""
    return dpo.dpo_loss(pc, pr, rc, rr, beta).loss


def _dpo_ref_sign_flipped(pc, pr, rc, rr, beta=0.1):
    return -F.logsigmoid(beta * ((pc + rc) - (pr + rr))).mean()


def _dpo_no_beta(pc, pr, rc, rr, beta=0.1):
    return -F.logsigmoid((pc - rc) - (pr - rr)).mean()


def _dpo_swapped(pc, pr, rc, rr, beta=0.1):
    return -F.logsigmoid(beta * ((pr - rr) - (pc - rc))).mean()


def _dpo_no_reference(pc, pr, rc, rr, beta=0.1):
    return -F.logsigmoid(beta * (pc - pr)).mean()


def _dpo_summed(pc, pr, rc, rr, beta=0.1):
    return -F.logsigmoid(beta * ((pc - rc) - (pr - rr))).sum()


DPO = Build(
    name="my_dpo_loss",
    what="the DPO loss",
    truth=_dpo_reference,
    truth_name="F.binary_cross_entropy_with_logits at label 1 (= −log σ) in float64",
    fallback=_dpo_from_minillm,
    fallback_name="minillm.alignment.dpo.dpo_loss",
    probes=(
        _dpo_case(1, 5, 0.1, "5 pairs, β = 0.1"),
        _dpo_case(2, 3, 0.5, "3 pairs, β = 0.5"),
        _dpo_case(3, 8, 0.05, "8 pairs, β = 0.05"),
    ),
    mistakes=(
        Mistake(
            "the reference term's sign flipped",
            "each implicit reward is β·(log π(y) − log π_ref(y)): the reference log-prob is SUBTRACTED, "
            "β·[(pc − rc) − (pr − rr)].",
            _dpo_ref_sign_flipped,
        ),
        Mistake(
            "β left out",
            "multiply the log-ratio gap by β before the log σ: −log σ(β·[(pc − rc) − (pr − rr)]).",
            _dpo_no_beta,
        ),
        Mistake(
            "chosen and rejected swapped",
            "the chosen reply's log-ratio comes first: β·[(pc − rc) − (pr − rr)].",
            _dpo_swapped,
        ),
        Mistake(
            "the reference model left out",
            "DPO compares log-RATIOS to the reference, log π(y) − log π_ref(y), not the policy's log-probs alone.",
            _dpo_no_reference,
        ),
        Mistake(
            "the loss summed over the pairs",
            "average over the pairs (.mean()), so the loss does not grow with the batch size.",
            _dpo_summed,
        ),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="loss and its gradient",
)


def dpo_loss(learner: Any) -> Any:
    """Grade ``my_dpo_loss(pc, pr, rc, rr, beta=0.1) -> 0-dim tensor`` (summed log-probs [B] of π and π_ref)."""
    return grade(DPO, learner)
