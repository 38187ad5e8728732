"""Log-probs, entropy, KL estimators, Bradley–Terry and DPO against hand-worked and closed-form values."""

import math

import pytest
import torch
import torch.nn.functional as F

from minillm.alignment import dpo, kl, logprobs, reward_model

# ---------------------------------------------------------------- masked reductions and log-probs


def test_masked_sum_and_mean_match_hand_values():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 0, 1], [0, 1, 1]])
    assert logprobs.masked_sum(values, mask).item() == 1 + 3 + 5 + 6
    assert logprobs.masked_mean(values, mask).item() == pytest.approx(15 / 4)
    assert logprobs.masked_mean(values, mask, dim=-1).tolist() == [2.0, 5.5]


def test_masked_mean_rejects_empty_rows_and_shape_mismatch():
    with pytest.raises(ValueError, match="selects no element"):
        logprobs.masked_mean(torch.ones(2, 3), torch.tensor([[1, 1, 1], [0, 0, 0]]), dim=-1)
    with pytest.raises(ValueError, match="shape"):
        logprobs.masked_sum(torch.ones(2, 3), torch.ones(3, 2))


def test_token_logprobs_equal_negative_cross_entropy():
    torch.manual_seed(0)
    logits = torch.randn(3, 6, 11, dtype=torch.float64)
    ids = torch.randint(0, 11, (3, 6))
    expected = -F.cross_entropy(logits[:, :-1].reshape(-1, 11), ids[:, 1:].reshape(-1), reduction="none")
    got = logprobs.token_logprobs(logits, ids)
    assert got.shape == (3, 5)
    # token_logprobs computes in float32; the reference is float64.
    torch.testing.assert_close(got.double(), expected.view(3, 5), atol=1e-5, rtol=0)


def test_sequence_logprob_hand_case_counts_only_response_tokens():
    # Vocabulary of 2; uniform logits everywhere except where the response token is predicted.
    ids = torch.tensor([[0, 1, 1, 0]])  # prompt = [0, 1], response = [1], then padding 0
    response_mask = torch.tensor([[0, 0, 1, 0]])
    logits = torch.zeros(1, 4, 2)
    logits[0, 1] = torch.tensor([0.0, math.log(3.0)])  # p(token 1 | prefix) = 3/4
    got = logprobs.sequence_logprobs(logits, ids, response_mask)
    assert got.item() == pytest.approx(math.log(0.75), abs=1e-6)


def test_sequence_logprob_gradient_is_zero_off_the_response():
    torch.manual_seed(1)
    logits = torch.randn(2, 7, 5, requires_grad=True)
    ids = torch.randint(0, 5, (2, 7))
    mask = torch.tensor([[0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 1]])
    logprobs.sequence_logprobs(logits, ids, mask).sum().backward()
    grad_rows = logits.grad.abs().sum(-1)  # position t predicts token t+1
    predicts_response = torch.zeros(2, 7, dtype=torch.bool)
    predicts_response[:, :-1] = mask[:, 1:].bool()
    assert torch.all(grad_rows[~predicts_response] == 0)
    assert torch.all(grad_rows[predicts_response] > 0)


def test_token_entropy_matches_categorical_and_closed_forms():
    torch.manual_seed(2)
    logits = torch.randn(4, 9, dtype=torch.float64)
    expected = torch.distributions.Categorical(logits=logits).entropy()
    torch.testing.assert_close(logprobs.token_entropy(logits).double(), expected, atol=1e-6, rtol=0)
    assert logprobs.token_entropy(torch.zeros(1, 8)).item() == pytest.approx(math.log(8), abs=1e-6)
    assert logprobs.token_entropy(torch.tensor([[100.0, 0.0, 0.0]])).item() == pytest.approx(0.0, abs=1e-6)


# ---------------------------------------------------------------- KL estimators


def test_kl_estimators_hand_values():
    logp, ref_logp = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    # log r = log(0.25 / 0.5) = -log 2
    assert kl.kl_k1(logp, ref_logp).item() == pytest.approx(math.log(2))
    assert kl.kl_k2(logp, ref_logp).item() == pytest.approx(0.5 * math.log(2) ** 2)
    assert kl.kl_k3(logp, ref_logp).item() == pytest.approx(0.5 - 1 + math.log(2))


def test_k1_and_k3_are_unbiased_and_k2_is_not_exact_expectation():
    # Exact expectations over y ~ p (summing over the vocabulary), compared with KL(p||q) in float64.
    torch.manual_seed(3)
    p = torch.softmax(torch.randn(50, dtype=torch.float64), 0)
    q = torch.softmax(torch.randn(50, dtype=torch.float64) * 1.5, 0)
    exact = (p * (p.log() - q.log())).sum()
    expect = {name: (p * kl.kl_estimate(p.log(), q.log(), name)).sum() for name in ("k1", "k2", "k3")}
    assert abs(expect["k1"] - exact) < 1e-12
    assert abs(expect["k3"] - exact) < 1e-12
    assert abs(expect["k2"] - exact) > 1e-3  # biased
    assert torch.all(kl.kl_k3(p.log(), q.log()) >= 0)
    assert torch.any(kl.kl_k1(p.log(), q.log()) < 0)  # single-token k1 can be negative


def test_kl_estimate_rejects_unknown_names():
    with pytest.raises(ValueError, match="k4"):
        kl.kl_estimate(torch.zeros(1), torch.zeros(1), "k4")


# ---------------------------------------------------------------- Bradley–Terry


def test_bradley_terry_at_equal_rewards_is_ln2_with_half_gradients():
    chosen = torch.zeros(4, requires_grad=True)
    rejected = torch.zeros(4, requires_grad=True)
    loss = reward_model.bradley_terry_loss(chosen, rejected)
    loss.backward()
    assert loss.item() == pytest.approx(math.log(2))
    torch.testing.assert_close(chosen.grad, torch.full((4,), -0.5 / 4))
    torch.testing.assert_close(rejected.grad, torch.full((4,), 0.5 / 4))


def test_bradley_terry_hand_value_and_shift_invariance():
    chosen, rejected = torch.tensor([2.0, 0.5]), torch.tensor([1.0, 1.5])
    expected = (math.log1p(math.exp(-1.0)) + math.log1p(math.exp(1.0))) / 2
    assert reward_model.bradley_terry_loss(chosen, rejected).item() == pytest.approx(expected, rel=1e-6)
    shifted = reward_model.bradley_terry_loss(chosen + 7.0, rejected + 7.0)
    assert shifted.item() == pytest.approx(expected, rel=1e-6)
    assert reward_model.pairwise_accuracy(chosen, rejected) == 0.5


def test_bradley_terry_fit_recovers_known_rewards():
    # 8 items with known rewards; exact BT soft labels on all pairs; the fit must recover r up to a shift.
    torch.manual_seed(4)
    true_r = torch.randn(8, dtype=torch.float64)
    i, j = torch.triu_indices(8, 8, 1)
    p_i_wins = torch.sigmoid(true_r[i] - true_r[j])
    r = torch.zeros(8, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS(
        [r], max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-15, line_search_fn="strong_wolfe"
    )

    def closure():
        # Soft labels: each ordering of a pair weighted by its BT probability (one pair per loss call).
        opt.zero_grad()
        loss = sum(
            p * reward_model.bradley_terry_loss(r[a : a + 1], r[b : b + 1])
            + (1 - p) * reward_model.bradley_terry_loss(r[b : b + 1], r[a : a + 1])
            for a, b, p in zip(i.tolist(), j.tolist(), p_i_wins, strict=True)
        )
        loss.backward()
        return loss

    opt.step(closure)
    centred = (r - r.mean()).detach()
    torch.testing.assert_close(centred, true_r - true_r.mean(), atol=1e-5, rtol=0)


class _CumulativeTrunk(torch.nn.Module):
    """A causal toy trunk: hidden state at t = running mean of the embeddings of tokens 0..t."""

    def __init__(self, vocab: int, d: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)

    def hidden_states(self, idx):
        e = self.embed(idx)
        return e.cumsum(1) / torch.arange(1, idx.shape[1] + 1).view(1, -1, 1)


def test_scalar_head_reads_last_response_token_and_ignores_padding():
    torch.manual_seed(5)
    model = reward_model.ScalarHeadModel(_CumulativeTrunk(10, 6), d_model=6)
    torch.nn.init.normal_(model.head.weight)
    ids = torch.tensor([[1, 2, 3, 4, 0, 0], [5, 6, 7, 8, 9, 2]])
    mask = torch.tensor([[0, 0, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1]])
    scores = model(ids, mask)
    per_token = model.token_scores(ids)
    assert scores.tolist() == [per_token[0, 3].item(), per_token[1, 5].item()]
    repadded = ids.clone()
    repadded[0, 4:] = 7
    assert model(repadded, mask)[0].item() == scores[0].item()
    assert torch.all(reward_model.ScalarHeadModel(_CumulativeTrunk(10, 6), 6)(ids, mask) == 0)  # zero head


def test_scalar_head_requires_a_hidden_states_trunk():
    with pytest.raises(TypeError, match="hidden_states"):
        reward_model.ScalarHeadModel(torch.nn.Linear(2, 2), 2)


# ---------------------------------------------------------------- DPO


def test_dpo_at_initialisation_is_ln2_with_closed_form_gradients():
    beta, batch = 0.1, 2
    pc = torch.tensor([-3.0, -7.0], requires_grad=True)
    pr = torch.tensor([-4.0, -2.0], requires_grad=True)
    out = dpo.dpo_loss(pc, pr, pc.detach().clone(), pr.detach().clone(), beta=beta)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(math.log(2), abs=1e-7)
    torch.testing.assert_close(pc.grad, torch.full((batch,), -beta / 2 / batch))
    torch.testing.assert_close(pr.grad, torch.full((batch,), beta / 2 / batch))
    assert out.accuracy == 0.0  # strict >: ties are not wins


def test_dpo_hand_case_loss_rewards_and_accuracy():
    # chosen: log-ratio +1, rejected: log-ratio -1 → margin β·2 = 0.2
    out = dpo.dpo_loss(torch.tensor([-1.0]), torch.tensor([-3.0]), torch.tensor([-2.0]), torch.tensor([-2.0]), 0.1)
    assert out.loss.item() == pytest.approx(math.log1p(math.exp(-0.2)), rel=1e-6)
    assert out.chosen_rewards.item() == pytest.approx(0.1)
    assert out.rejected_rewards.item() == pytest.approx(-0.1)
    assert out.margins.item() == pytest.approx(0.2)
    assert out.accuracy == 1.0


def test_dpo_optimum_is_the_kl_regularised_policy():
    # One prompt, K responses, all pairs with exact BT soft labels from a known reward r: DPO's optimum is
    # pi* ∝ pi_ref·exp(r/beta) (Rafailov et al. Eq. 4).
    torch.manual_seed(6)
    k, beta = 5, 0.5
    r = torch.randn(k, dtype=torch.float64)
    ref_logits = torch.randn(k, dtype=torch.float64)
    ref_logp = torch.log_softmax(ref_logits, 0)
    theta = ref_logits.clone().requires_grad_(True)
    i, j = torch.triu_indices(k, k, 1)
    p_i = torch.sigmoid(r[i] - r[j])
    opt = torch.optim.LBFGS(
        [theta], max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-15, line_search_fn="strong_wolfe"
    )

    def closure():
        # Soft labels: each ordering of a pair weighted by its BT probability (one pair per loss call).
        opt.zero_grad()
        logp = torch.log_softmax(theta, 0)
        loss = sum(
            p * dpo.dpo_loss(logp[a : a + 1], logp[b : b + 1], ref_logp[a : a + 1], ref_logp[b : b + 1], beta).loss
            + (1 - p)
            * dpo.dpo_loss(logp[b : b + 1], logp[a : a + 1], ref_logp[b : b + 1], ref_logp[a : a + 1], beta).loss
            for a, b, p in zip(i.tolist(), j.tolist(), p_i, strict=True)
        )
        loss.backward()
        return loss

    opt.step(closure)
    target = torch.softmax(ref_logp + r / beta, 0)
    torch.testing.assert_close(torch.softmax(theta.detach(), 0), target, atol=1e-6, rtol=0)


def test_dpo_rejects_bad_inputs():
    with pytest.raises(ValueError, match="beta"):
        dpo.dpo_loss(torch.zeros(2), torch.zeros(2), torch.zeros(2), torch.zeros(2), beta=0.0)
    with pytest.raises(ValueError, match="shape"):
        dpo.dpo_loss(torch.zeros(2), torch.zeros(3), torch.zeros(2), torch.zeros(2))
