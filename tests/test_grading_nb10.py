"""Notebook 10's graders: the reference passes, each named mistake (written here as its own small wrong
implementation) is caught with its name, and a stub, an exception, a wrong shape or NaN get a clear line."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from grading_helpers import assert_fails, assert_passes, stub

from minillm.alignment import kl, logprobs, reward_model
from minillm.grading import nb10_alignment as nb10


# ---------------------------------------------------------------------------------- a response's log-prob
def seq_correct(model, ids, mask):
    logp = torch.log_softmax(model(ids), dim=-1)
    picked = torch.stack([logp[:, t - 1].gather(-1, ids[:, t : t + 1])[:, 0] for t in range(1, ids.shape[1])], 1)
    return (picked * mask[:, 1:]).sum(1)


def seq_no_shift(model, ids, mask):
    logp = torch.log_softmax(model(ids), dim=-1)
    return (logp.gather(-1, ids[..., None])[..., 0] * mask).sum(-1)


def seq_mask_not_shifted(model, ids, mask):
    logp = torch.log_softmax(model(ids), dim=-1)[:, :-1]
    return (logp.gather(-1, ids[:, 1:, None])[..., 0] * mask[:, :-1]).sum(-1)


def seq_every_token(model, ids, mask):
    logp = torch.log_softmax(model(ids), dim=-1)[:, :-1]
    return logp.gather(-1, ids[:, 1:, None])[..., 0].sum(-1)


def seq_mean(model, ids, mask):
    logp = torch.log_softmax(model(ids), dim=-1)[:, :-1]
    m = mask[:, 1:]
    return (logp.gather(-1, ids[:, 1:, None])[..., 0] * m).sum(-1) / m.sum(-1)


def test_sequence_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb10.sequence_logprob, nb10.SEQUENCE.truth, capsys)
    assert_passes(nb10.sequence_logprob, seq_correct, capsys)
    assert_passes(
        nb10.sequence_logprob, lambda model, ids, mask: logprobs.sequence_logprobs(model(ids), ids, mask), capsys
    )


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (seq_no_shift, "no shift: each position scored on its own token"),
        (seq_mask_not_shifted, "the mask not shifted with the tokens"),
        (seq_every_token, "prompt and padding tokens counted"),
        (
            lambda model, ids, mask: (model(ids)[:, :-1].gather(-1, ids[:, 1:, None])[..., 0] * mask[:, 1:]).sum(-1),
            "raw logits instead of log-probabilities",
        ),
        (seq_mean, "a mean over the response instead of a sum"),
    ],
)
def test_sequence_names_the_mistake(wrong, name, capsys):
    assert_fails(nb10.sequence_logprob, wrong, capsys, says=f"Looks like {name}")


def test_sequence_stub_raising_shape_and_dtype(capsys):
    assert_fails(
        nb10.sequence_logprob, stub("my_sequence_logprob"), capsys, says="my_sequence_logprob is not written yet"
    )
    assert_fails(nb10.sequence_logprob, lambda model, ids, mask: model(ids.float()), capsys, says="raised IndexError")
    assert_fails(
        nb10.sequence_logprob,
        lambda model, ids, mask: seq_correct(model, ids, mask).sum(),
        capsys,
        says="returned shape ()",
    )
    assert_fails(
        nb10.sequence_logprob,
        lambda model, ids, mask: seq_correct(model, ids, mask).double(),
        capsys,
        says="returned dtype torch.float64, expected torch.float32",
    )


def test_sequence_fallback_takes_the_model(capsys):
    assert_fails(nb10.sequence_logprob, seq_no_shift, capsys, says="no shift")
    model = torch.nn.Sequential(torch.nn.Embedding(7, 7))  # anything that maps ids [B, T] to logits [B, T, V]
    ids, mask = torch.tensor([[1, 2, 3, 4]]), torch.tensor([[0, 0, 1, 1]])
    with torch.no_grad():
        got = nb10.SEQUENCE.fallback(model, ids, mask)
        assert torch.allclose(got, seq_correct(model, ids, mask)) and got.shape == (1,)
        assert nb10.SEQUENCE.fallback(model.double(), ids, mask.double()).shape == (1,)  # as the float64 check calls it


# ------------------------------------------------------------------------------------------ Bradley–Terry
def bt_correct(r_chosen, r_rejected):
    return torch.nn.functional.softplus(r_rejected - r_chosen).mean()  # −log σ(d) = log(1 + e^(−d))


def bt_swapped(r_chosen, r_rejected):
    return -F.logsigmoid(r_rejected - r_chosen).mean()


def bt_sigmoid(r_chosen, r_rejected):
    return -torch.sigmoid(r_chosen - r_rejected).mean()


def bt_log_sigmoid_by_hand(r_chosen, r_rejected):
    return -torch.log(1 / (1 + torch.exp(-(r_chosen - r_rejected)))).mean()


def bt_summed(r_chosen, r_rejected):
    return sum(-F.logsigmoid(c - r) for c, r in zip(r_chosen, r_rejected, strict=True))


def test_bt_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb10.bt_loss, nb10.BT.truth, capsys)
    assert_passes(nb10.bt_loss, bt_correct, capsys)
    assert_passes(nb10.bt_loss, reward_model.bradley_terry_loss, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (bt_swapped, "chosen and rejected swapped"),
        (bt_sigmoid, "sigmoid instead of logsigmoid"),
        (bt_log_sigmoid_by_hand, "log(sigmoid(·)) instead of logsigmoid"),
        (bt_summed, "the loss summed over the pairs"),
        (lambda c, r: F.logsigmoid(c - r).mean(), "the minus sign left out"),
    ],
)
def test_bt_names_the_mistake(wrong, name, capsys):
    assert_fails(nb10.bt_loss, wrong, capsys, says=f"Looks like {name}")


def test_bt_stub_raising_shape_nan_and_detached(capsys):
    assert_fails(nb10.bt_loss, stub("my_bt_loss"), capsys, says="my_bt_loss is not written yet")
    assert_fails(nb10.bt_loss, lambda c, r: c.view(4, -1), capsys, says="raised RuntimeError")
    assert_fails(nb10.bt_loss, lambda c, r: -F.logsigmoid(c - r), capsys, says="returned shape (6,), expected ()")
    assert_fails(nb10.bt_loss, lambda c, r: (c - r).mean() * math.nan, capsys, says="returned NaN")
    out = assert_fails(
        nb10.bt_loss, lambda c, r: torch.tensor(bt_correct(c, r).item()), capsys, says="not connected to its inputs"
    )
    assert "raised NoGradient" in out


def test_bt_fallback_is_minillms_loss(capsys):
    assert_fails(nb10.bt_loss, bt_swapped, capsys, says="swapped", fallback=reward_model.bradley_terry_loss)


# --------------------------------------------------------------------------------------------------- k3
def k3_correct(logp, ref_logp):
    ratio = torch.exp(ref_logp - logp)
    return ratio - torch.log(ratio) - 1


def k3_log_ratio(logp, ref_logp):
    return torch.log(torch.exp(ref_logp) / torch.exp(logp))


def k3_ratio_minus_one(logp, ref_logp):
    return torch.exp(ref_logp) / torch.exp(logp) - 1


def k3_upside_down(logp, ref_logp):
    r = torch.exp(logp - ref_logp)
    return r - 1 - torch.log(r)


def test_k3_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb10.k3, kl.kl_k3, capsys)
    assert_passes(nb10.k3, k3_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (k3_log_ratio, "k3 written as log r alone"),
        (k3_ratio_minus_one, "k3 written as r − 1 alone"),
        (k3_upside_down, "the ratio upside down (π/π_ref)"),
        (lambda logp, ref_logp: logp - ref_logp, "k1 (−log r) in place of k3"),
        (
            lambda logp, ref_logp: torch.exp(ref_logp - logp) - 1 + (ref_logp - logp),
            "log r added instead of subtracted",
        ),
    ],
)
def test_k3_names_the_mistake(wrong, name, capsys):
    assert_fails(nb10.k3, wrong, capsys, says=f"Looks like {name}")


def test_k3_stub_raising_shape_and_nan(capsys):
    assert_fails(nb10.k3, stub("my_k3"), capsys, says="my_k3 is not written yet", fallback=kl.kl_k3)
    assert_fails(nb10.k3, lambda logp, ref_logp: logp.item(), capsys, says="raised RuntimeError")
    assert_fails(nb10.k3, lambda logp, ref_logp: k3_correct(logp, ref_logp).mean(), capsys, says="returned shape ()")
    assert_fails(nb10.k3, lambda logp, ref_logp: torch.sqrt(logp), capsys, says="returned NaN")


# --------------------------------------------------------------------------------------------------- GAE
def gae_correct(rewards, values, gamma, lam):
    out, future = [], 0.0
    for r, v, v_next in reversed(list(zip(rewards, values, list(values[1:]) + [0.0], strict=True))):
        future = (r + gamma * v_next - v) + gamma * lam * future
        out.insert(0, future)
    return out


def gae_forwards(rewards, values, gamma, lam):
    out, running = [], 0.0
    for t in range(len(rewards)):
        next_v = values[t + 1] if t + 1 < len(rewards) else 0.0
        running = rewards[t] + gamma * next_v - values[t] + gamma * lam * running
        out.append(running)
    return out


def gae_without_lambda(rewards, values, gamma, lam):
    return gae_correct(rewards, values, gamma, 1.0)


def gae_next_value_undiscounted(rewards, values, gamma, lam):
    out, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        next_v = values[t + 1] if t + 1 < len(rewards) else 0.0
        running = rewards[t] + next_v - values[t] + gamma * lam * running
        out[t] = running
    return out


def test_gae_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb10.gae, nb10.GAE.truth, capsys)
    assert_passes(nb10.gae, gae_correct, capsys)
    assert_passes(nb10.gae, lambda *a: torch.tensor(gae_correct(*a), dtype=torch.float64), capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (gae_forwards, "the recursion run forwards"),
        (gae_without_lambda, "λ left out"),
        (gae_next_value_undiscounted, "the next value not discounted"),
        (
            lambda r, v, g, lam: [a + b for a, b in zip(gae_correct(r, v, g, lam), v, strict=True)],
            "the returns (Â + V) instead of the advantages",
        ),
    ],
)
def test_gae_names_the_mistake(wrong, name, capsys):
    assert_fails(nb10.gae, wrong, capsys, says=f"Looks like {name}")


def test_gae_stub_raising_length_and_nan(capsys):
    assert_fails(nb10.gae, stub("my_gae"), capsys, says="my_gae is not written yet")
    assert_fails(nb10.gae, lambda r, v, g, lam: [v[t + 1] for t in range(len(r))], capsys, says="raised IndexError")
    assert_fails(nb10.gae, lambda r, v, g, lam: gae_correct(r, v, g, lam)[1:], capsys, says="returned shape")
    assert_fails(nb10.gae, lambda r, v, g, lam: [math.nan] * len(r), capsys, says="returned NaN")


def test_gae_fallback_returns_the_notebooks_list(capsys):
    assert_fails(nb10.gae, gae_forwards, capsys, says="forwards")
    adv = nb10.GAE.fallback([0.0, 0.0, 1.0], [0.5, 0.2, 0.4], 0.9, 0.8)
    assert isinstance(adv, list) and torch.allclose(torch.tensor(adv), torch.tensor([0.10624, 0.592, 0.6]))


# --------------------------------------------------------------------------------------- GRPO advantages
def grpo_correct(rewards, eps=1e-4):
    r = torch.tensor(rewards, dtype=torch.float64)
    std = math.sqrt(sum((x - sum(rewards) / len(rewards)) ** 2 for x in rewards) / (len(rewards) - 1))
    return (r - r.mean()) / (std + eps)


def grpo_population(rewards, eps=1e-4):
    r = torch.tensor(rewards, dtype=torch.float64)
    return (r - r.mean()) / (((r - r.mean()) ** 2).mean().sqrt() + eps)


def grpo_no_eps(rewards, eps=1e-4):
    r = torch.tensor(rewards, dtype=torch.float64)
    return (r - r.mean()) / r.std()


def grpo_only_centred(rewards, eps=1e-4):
    r = torch.tensor(rewards, dtype=torch.float64)
    return r - r.mean()


def grpo_not_centred(rewards, eps=1e-4):
    r = torch.tensor(rewards, dtype=torch.float64)
    return r / (r.std() + eps)


def test_grpo_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb10.grpo, nb10.GRPO.truth, capsys)
    assert_passes(nb10.grpo, grpo_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (grpo_population, "the population std"),
        (grpo_no_eps, "the std without the ε"),
        (grpo_only_centred, "the rewards centred but not scaled"),
        (grpo_not_centred, "the group mean not subtracted"),
    ],
)
def test_grpo_names_the_mistake(wrong, name, capsys):
    assert_fails(nb10.grpo, wrong, capsys, says=f"Looks like {name}")


def test_grpo_stub_raising_dtype_and_nan(capsys):
    assert_fails(nb10.grpo, stub("my_grpo"), capsys, says="my_grpo is not written yet")
    assert_fails(nb10.grpo, lambda rewards, eps=1e-4: rewards.mean(), capsys, says="raised AttributeError")
    assert_fails(
        nb10.grpo,
        lambda rewards, eps=1e-4: grpo_correct(rewards, eps).float(),
        capsys,
        says="returned dtype torch.float32, expected torch.float64",
    )
    assert_fails(nb10.grpo, lambda rewards, eps=1e-4: grpo_correct(rewards[1:], eps), capsys, says="returned shape")
    out = assert_fails(nb10.grpo, grpo_no_eps, capsys, says="the std without the ε")
    assert "Looks like" in out


def test_grpo_fallback_takes_the_notebooks_list(capsys):
    assert_fails(nb10.grpo, grpo_population, capsys, says="population")
    fallback = nb10.GRPO.fallback
    adv = fallback([1.0, 0.0, 0.0, 1.0])  # the notebook calls it on a list, also on scores[:GROUP].tolist()
    assert adv.dtype == torch.float64 and adv.shape == (4,)
    assert torch.allclose(adv, grpo_correct([1.0, 0.0, 0.0, 1.0]), rtol=1e-12, atol=0)
    assert torch.equal(fallback([1.0, 1.0, 1.0, 1.0]), torch.zeros(4, dtype=torch.float64))


# -------------------------------------------------------------------------------------- clipped objective
def clip_correct(logp, old_logp, adv, eps=0.2):
    ratio = (logp - old_logp).exp()
    return torch.where(adv >= 0, ratio.clamp(max=1 + eps), ratio.clamp(min=1 - eps)) * adv  # min(ρÂ, clip(ρ)Â)


def clip_without_min(logp, old_logp, adv, eps=0.2):
    return (logp - old_logp).exp().clamp(1 - eps, 1 + eps) * adv


def clip_max(logp, old_logp, adv, eps=0.2):
    ratio = (logp - old_logp).exp()
    return torch.max(ratio * adv, ratio.clamp(1 - eps, 1 + eps) * adv)


def clip_none(logp, old_logp, adv, eps=0.2):
    return (logp - old_logp).exp() * adv


def clip_the_product(logp, old_logp, adv, eps=0.2):
    product = (logp - old_logp).exp() * adv
    return torch.min(product, product.clamp(1 - eps, 1 + eps))  # clamps ρ·Â, not ρ


def test_clip_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb10.clip_objective, nb10.CLIP.truth, capsys)
    assert_passes(nb10.clip_objective, clip_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (clip_without_min, "the ratio clipped without the min"),
        (clip_max, "max instead of min (the optimistic bound)"),
        (clip_none, "no clipping at all"),
        (clip_the_product, "ρ·Â clipped instead of ρ"),
        (lambda logp, old, adv, eps=0.2: clip_correct(old, logp, adv, eps), "the ratio upside down"),
        (
            lambda logp, old, adv, eps=0.2: -clip_correct(logp, old, adv, eps),
            "the loss returned instead of the objective",
        ),
    ],
)
def test_clip_names_the_mistake(wrong, name, capsys):
    assert_fails(nb10.clip_objective, wrong, capsys, says=f"Looks like {name}")


def test_clip_stub_raising_shape_and_detached(capsys):
    assert_fails(nb10.clip_objective, stub("my_clip_objective"), capsys, says="my_clip_objective is not written yet")
    assert_fails(nb10.clip_objective, lambda logp, old, adv, eps=0.2: 1 / 0, capsys, says="raised ZeroDivisionError")
    assert_fails(
        nb10.clip_objective,
        lambda logp, old, adv, eps=0.2: clip_correct(logp, old, adv, eps).mean(),
        capsys,
        says="returned shape ()",
    )
    with_no_grad = torch.no_grad()(clip_correct)
    assert_fails(nb10.clip_objective, with_no_grad, capsys, says="not connected to its inputs by autograd")


def test_clip_fallback_is_one_tensor_with_a_gradient(capsys):
    assert_fails(nb10.clip_objective, clip_max, capsys, says="optimistic")
    logp = torch.tensor([[math.log(0.7)]], requires_grad=True)  # as the notebook's table calls it
    objective = nb10.CLIP.fallback(logp, torch.zeros(1, 1), torch.tensor([[1.0]]))
    objective.sum().backward()
    assert isinstance(objective, torch.Tensor) and abs(logp.grad.item() - 0.7) < 1e-6


# ------------------------------------------------------------------------------------------------ GRPO loss
def grpo_loss_correct(logp, old_logp, ref_logp, scores, mask, group_size, beta, eps=0.2, batch=False, per_answer=False):
    s = scores.view(1, -1) if batch else scores.view(-1, group_size)
    adv = ((s - s.mean(1, keepdim=True)) / (s.std(1, keepdim=True) + 1e-4)).reshape(-1, 1)
    per_token = -clip_correct(logp, old_logp, adv, eps) + beta * k3_correct(logp, ref_logp)
    m = mask.to(per_token.dtype)
    if per_answer:
        return ((per_token * m).sum(-1) / m.sum(-1)).mean()
    return (per_token * m).sum() / m.sum()


def test_grpo_loss_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb10.grpo_loss, nb10.GRPO_LOSS.truth, capsys)
    assert_passes(nb10.grpo_loss, grpo_loss_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (lambda *a: grpo_loss_correct(*a, batch=True), "GRPO normalised over the batch instead of the group"),
        (lambda *a: grpo_loss_correct(*a, per_answer=True), "a mean per response first"),
        (
            lambda lp, old, ref, s, m, g, beta, eps=0.2: grpo_loss_correct(lp, old, ref, s, m, g, -beta),
            "the β·k3 term subtracted",
        ),
        (
            lambda lp, old, ref, s, m, g, beta, eps=0.2: grpo_loss_correct(lp, old, ref, s, m, g, 0.0),
            "the β·k3 term left out",
        ),
        (
            lambda lp, old, ref, s, m, g, beta, eps=0.2: grpo_loss_correct(
                lp, old, ref, s, torch.ones_like(m), g, beta
            ),
            "padding tokens counted",
        ),
    ],
)
def test_grpo_loss_names_the_mistake(wrong, name, capsys):
    assert_fails(nb10.grpo_loss, wrong, capsys, says=f"Looks like {name}")


def test_grpo_loss_not_negated_is_named(capsys):
    def ascends(logp, old_logp, ref_logp, scores, mask, group_size, beta, eps=0.2):
        s = scores.view(-1, group_size)
        adv = ((s - s.mean(1, keepdim=True)) / (s.std(1, keepdim=True) + 1e-4)).reshape(-1, 1)
        per_token = clip_correct(logp, old_logp, adv, eps) + beta * k3_correct(logp, ref_logp)
        return (per_token * mask).sum() / mask.sum()

    assert_fails(nb10.grpo_loss, ascends, capsys, says="Looks like the clipped objective not negated")


def test_grpo_loss_stub_raising_shape_and_nan(capsys):
    assert_fails(nb10.grpo_loss, stub("my_grpo_loss"), capsys, says="my_grpo_loss is not written yet")
    assert_fails(
        nb10.grpo_loss, lambda lp, old, ref, s, m, g, beta, eps=0.2: s.view(-1, 5), capsys, says="raised RuntimeError"
    )
    assert_fails(
        nb10.grpo_loss,
        lambda lp, old, ref, s, m, g, beta, eps=0.2: (-clip_correct(lp, old, s[:, None], eps) * m).sum(1),
        capsys,
        says="returned shape",
    )
    assert_fails(
        nb10.grpo_loss,
        lambda lp, old, ref, s, m, g, beta, eps=0.2: grpo_loss_correct(lp, old, ref, s, m * 0, g, beta),
        capsys,
        says="returned NaN",
    )


def test_grpo_loss_fallback_returns_a_loss_to_backpropagate(capsys):
    assert_fails(nb10.grpo_loss, lambda *a: grpo_loss_correct(*a, batch=True), capsys, says="batch")
    logp = torch.randn(4, 3, requires_grad=True)
    loss = nb10.GRPO_LOSS.fallback(
        logp,
        logp.detach(),
        logp.detach(),
        torch.tensor([1.0, 0.0, 0.5, 0.5]),
        torch.ones(4, 3, dtype=torch.long),
        2,
        0.05,
    )
    loss.backward()  # the notebook's loop calls loss.backward() and loss.item()
    assert loss.dim() == 0 and logp.grad is not None and math.isfinite(loss.item())


# --------------------------------------------------------------------------------------------------- DPO
def dpo_correct(pc, pr, rc, rr, beta=0.1):
    chosen_reward, rejected_reward = beta * (pc - rc), beta * (pr - rr)
    return torch.nn.functional.softplus(rejected_reward - chosen_reward).mean()


def dpo_reference_sign_flipped(pc, pr, rc, rr, beta=0.1):
    return -F.logsigmoid(beta * ((pc - pr) + (rc - rr))).mean()  # β·[(pc + rc) − (pr + rr)]


def dpo_without_beta(pc, pr, rc, rr, beta=0.1):
    return -F.logsigmoid((pc - rc) - (pr - rr)).mean()


def dpo_swapped(pc, pr, rc, rr, beta=0.1):
    return -F.logsigmoid(beta * (pr - rr) - beta * (pc - rc)).mean()


def dpo_no_reference(pc, pr, rc, rr, beta=0.1):
    return -F.logsigmoid(beta * pc - beta * pr).mean()


def test_dpo_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb10.dpo_loss, nb10.DPO.truth, capsys)
    assert_passes(nb10.dpo_loss, dpo_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (dpo_reference_sign_flipped, "the reference term's sign flipped"),
        (dpo_without_beta, "β left out"),
        (dpo_swapped, "chosen and rejected swapped"),
        (dpo_no_reference, "the reference model left out"),
        (
            lambda pc, pr, rc, rr, beta=0.1: dpo_correct(pc, pr, rc, rr, beta) * len(pc),
            "the loss summed over the pairs",
        ),
    ],
)
def test_dpo_names_the_mistake(wrong, name, capsys):
    assert_fails(nb10.dpo_loss, wrong, capsys, says=f"Looks like {name}")


def test_dpo_with_the_reference_sign_flipped_is_named_and_minillm_takes_over(capsys):
    """The issue's closing check: a DPO loss whose reference term has the wrong sign is named, never blocks."""
    out = assert_fails(
        nb10.dpo_loss,
        dpo_reference_sign_flipped,
        capsys,
        says="Looks like the reference term's sign flipped",
        fallback=nb10.DPO.fallback,
    )
    assert "uses minillm.alignment.dpo.dpo_loss until yours passes" in out


def test_dpo_stub_raising_shape_and_nan(capsys):
    assert_fails(nb10.dpo_loss, stub("my_dpo_loss"), capsys, says="my_dpo_loss is not written yet")
    assert_fails(nb10.dpo_loss, lambda pc, pr, rc, rr, beta=0.1: pc.loss, capsys, says="raised AttributeError")
    assert_fails(
        nb10.dpo_loss,
        lambda pc, pr, rc, rr, beta=0.1: -F.logsigmoid(beta * ((pc - rc) - (pr - rr))),
        capsys,
        says="returned shape (5,), expected ()",
    )
    assert_fails(
        nb10.dpo_loss,
        lambda pc, pr, rc, rr, beta=0.1: -torch.log(torch.sigmoid(beta * ((pc - rc) - (pr - rr))) - 1).mean(),
        capsys,
        says="returned NaN",
    )


def test_dpo_fallback_returns_the_loss_tensor(capsys):
    assert_fails(nb10.dpo_loss, dpo_without_beta, capsys, says="β left out")
    pc = torch.tensor([-50.0, -60.0], requires_grad=True)
    loss = nb10.DPO.fallback(
        pc, torch.tensor([-40.0, -70.0]), torch.tensor([-50.0, -60.0]), torch.tensor([-40.0, -70.0]), 0.1
    )
    loss.backward()  # the notebook's my_dpo_step backpropagates through it
    assert loss.dim() == 0 and abs(loss.item() - math.log(2)) < 1e-6 and pc.grad is not None


def test_every_build_is_listed_with_three_probes_and_named_mistakes():
    builds = (nb10.SEQUENCE, nb10.BT, nb10.K3, nb10.GAE, nb10.GRPO, nb10.CLIP, nb10.GRPO_LOSS, nb10.DPO)
    assert nb10.BUILDS == tuple(build.name for build in builds)
    for build in builds:
        assert len(build.probes) == 3 and len(build.mistakes) >= 2
