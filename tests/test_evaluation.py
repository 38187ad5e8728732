"""minillm.evaluation: likelihood, stats and judge, each against an independent computation."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from minillm.chat import encode_prompt
from minillm.evaluation import judge, likelihood, stats
from minillm.model import GPT, GPTConfig
from minillm.tokenizer import BPETokenizer


@pytest.fixture(scope="module")
def tiny():
    tok = BPETokenizer.train("Lily went to the park. Tom felt happy. The dog ran to the lake. " * 20, 300)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, context_length=64, n_layer=1, n_head=2, d_model=16)).eval()
    return model, tok


# ------------------------------------------------------------------------------------------------ likelihood
def test_bits_per_byte_is_nats_over_ln2_bytes_and_refuses_bad_input():
    text = "Él vio 🥘."
    assert likelihood.utf8_bytes(text) == 13 and len(text) == 9  # É: 2 bytes, the emoji: 4
    nll = [0.5, 1.25, 2.0]
    assert likelihood.bits_per_byte(sum(nll), 13) == pytest.approx(-sum(math.log2(math.exp(-x)) for x in nll) / 13)
    assert likelihood.perplexity(math.log(7.0)) == pytest.approx(7.0)
    for bad in ((1.0, 0), (1.0, 2.5), (-1.0, 3), (math.nan, 3), (1.0, True)):
        with pytest.raises(ValueError):
            likelihood.bits_per_byte(*bad)
    with pytest.raises(TypeError):
        likelihood.utf8_bytes(b"bytes")
    with pytest.raises(ValueError):
        likelihood.perplexity(-0.1)


def test_text_nll_equals_a_float64_cross_entropy_over_the_windows(tiny):
    model, tok = tiny
    ids = tok.encode("Lily went to the park and Tom felt happy at the lake. " * 6, allowed_special="none")
    total, predicted = likelihood.text_nll(model, ids, 64, batch_size=2)
    n = (len(ids) - 1) // 64
    x = torch.tensor(ids)
    inputs, targets = x[: n * 64].view(n, 64), x[1 : n * 64 + 1].view(n, 64)
    with torch.no_grad():
        want = F.cross_entropy(model(inputs).double().flatten(0, 1), targets.flatten(), reduction="sum").item()
    assert total == pytest.approx(want, rel=1e-6) and predicted == targets.flatten().tolist()


def test_choice_logprobs_equal_each_choice_scored_alone(tiny):
    model, tok = tiny
    prompt, choices = "Where did Lily go?", [" the park.", " the lake with the dog.", " home"]
    scores = likelihood.choice_logprobs(model, tok, prompt, choices, prefix="She went to")
    context = encode_prompt(prompt, tok) + tok.encode("She went to", allowed_special="none")
    for choice, got, n in zip(choices, scores.logprob, scores.n_tokens, strict=True):
        ids = tok.encode(choice, allowed_special="none")
        with torch.no_grad():
            logits = model(torch.tensor([context + ids])).double()[0]
        want = sum(torch.log_softmax(logits[len(context) - 1 + i], -1)[t].item() for i, t in enumerate(ids))
        assert got == pytest.approx(want, abs=1e-4) and n == len(ids)
    per_token = scores.normalised("token")
    assert likelihood.choose(scores, "token") == max(range(3), key=per_token.__getitem__)
    assert likelihood.choose(scores, "sum") == max(range(3), key=scores.logprob.__getitem__)
    plain = likelihood.choice_logprobs(model, tok, prompt, choices, chat=False)
    assert plain.logprob != scores.logprob
    with pytest.raises(ValueError):
        scores.normalised("byte")
    with pytest.raises(ValueError):
        likelihood.choice_logprobs(model, tok, prompt, [])
    with pytest.raises(ValueError):
        likelihood.choice_logprobs(model, tok, prompt, ["x" * 400])  # longer than the context


def test_length_normalisation_can_change_the_choice():
    scores = likelihood.ChoiceScores(logprob=[-6.0, -4.0], n_tokens=[6, 2])
    assert likelihood.choose(scores, "sum") == 1 and likelihood.choose(scores, "token") == 0
    assert likelihood.choice_accuracy([scores, scores], [0, 0], "token") == 1.0
    assert likelihood.choice_accuracy([scores, scores], [0, 0], "sum") == 0.0
    with pytest.raises(ValueError):
        likelihood.choice_accuracy([scores], [0, 1])


# ------------------------------------------------------------------------------------------------------ stats
def test_mean_se_and_paired_difference_match_exact_fractions():
    a, b = [1.0, 0.0, 0.5, 1.0, 0.25], [0.5, 0.0, 0.5, 0.0, 0.0]
    d = [Fraction(x) - Fraction(y) for x, y in zip(a, b, strict=True)]
    mean = sum(d) / len(d)
    se = math.sqrt(float(sum((x - mean) ** 2 for x in d) / (len(d) - 1)) / len(d))
    assert stats.paired_difference(a, b) == pytest.approx((float(mean), se), rel=1e-12)
    m, s = stats.mean_and_se([2.0, 4.0, 6.0])
    assert m == 4.0 and s == pytest.approx(2.0 / math.sqrt(3), rel=1e-12)
    for bad in ([1.0], [1.0, math.nan], [[1.0, 2.0]]):
        with pytest.raises(ValueError):
            stats.mean_and_se(bad)
    with pytest.raises(ValueError):
        stats.paired_difference([1.0, 2.0], [1.0, 2.0, 3.0])


def test_bootstrap_spread_matches_the_closed_form_and_the_interval_the_normal_one():
    rng = np.random.default_rng(1)
    x = rng.normal(0.3, 1.0, 400)
    means = stats.bootstrap_means(x, 20_000, seed=3)
    assert means.shape == (20_000,)
    assert means.std() == pytest.approx(x.std(ddof=0) / math.sqrt(len(x)), rel=0.03)  # MC noise ≈ 0.5 %
    low, high = stats.bootstrap_interval(x, 0.95, 20_000, seed=3)
    m, se = stats.mean_and_se(x)
    assert low == pytest.approx(m - 1.96 * se, abs=0.2 * se) and high == pytest.approx(m + 1.96 * se, abs=0.2 * se)
    assert stats.bootstrap_interval(x, seed=3) == stats.bootstrap_interval(x, seed=3)  # seeded
    assert np.all(stats.bootstrap_means([0.0, 0.0, 1.0], 500) <= 1.0)
    with pytest.raises(ValueError):
        stats.bootstrap_interval(x, level=1.5)
    with pytest.raises(ValueError):
        stats.bootstrap_means(x, 0)


def test_pass_at_k_equals_brute_force_and_exact_binomials():
    for n in range(1, 9):
        for c in range(n + 1):
            samples = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(samples, k))
                brute = sum(any(s) for s in subsets) / len(subsets)
                assert stats.pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)
    exact = float(1 - Fraction(math.comb(2000 - 37, 300), math.comb(2000, 300)))
    assert stats.pass_at_k(2000, 37, 300) == pytest.approx(exact, rel=1e-12)
    assert stats.pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert stats.pass_at_k_mean([0, 8], 8, 2) == pytest.approx(0.5)
    for bad in ((5, 6, 1), (5, 2, 0), (5, 2, 6), (-1, 0, 1)):
        with pytest.raises(ValueError):
            stats.pass_at_k(*bad)
    with pytest.raises(TypeError):
        stats.pass_at_k(5.0, 2, 1)
    with pytest.raises(ValueError):
        stats.pass_at_k_mean([], 8, 1)


def test_the_plug_in_pass_at_k_is_biased_and_the_estimator_is_not():
    rng = random.Random(0)
    p, n, k, trials = 0.2, 10, 5, 20_000
    truth = 1 - (1 - p) ** k
    unbiased, plug = [], []
    for _ in range(trials):
        c = sum(rng.random() < p for _ in range(n))
        unbiased.append(stats.pass_at_k(n, c, k))
        plug.append(1 - (1 - c / n) ** k)
    se = np.std(unbiased) / math.sqrt(trials)
    assert abs(np.mean(unbiased) - truth) < 4 * se
    assert np.mean(plug) < truth - 10 * se


# ------------------------------------------------------------------------------------------------------ judge
def test_judge_measures_by_hand():
    assert judge.pointwise_verdicts([1.0, 0.0, 0.5], [0.0, 1.0, 0.5]) == [0, 1, 1]
    assert judge.agreement_with_gold([0, 1, 1, 1], [1.0, 0.0, 0.5, 0.5], [0.0, 1.0, 0.0, 0.5], 0.2) == (2 / 3, 3)
    assert judge.position_consistency([0, 0, 1], [1, 0, 0]) == pytest.approx(2 / 3)
    assert judge.first_position_rate([0, 0, 1], [1, 0, 0]) == pytest.approx(4 / 6)
    assert judge.longer_preference([0, 1, 0], [10, 3, 5], [2, 3, 9]) == 0.5
    assert "Answer 1: A\nAnswer 2: B" in judge.judge_prompt("Q?", "A", "B")
    with pytest.raises(ValueError):
        judge.agreement_with_gold([0], [0.5], [0.5], 0.1)
    with pytest.raises(ValueError):
        judge.position_consistency([0], [])
    with pytest.raises(ValueError):
        judge.longer_preference([0], [3], [3])


def test_a_pairwise_judge_is_the_likelihood_of_each_reply_after_both(tiny):
    model, tok = tiny
    verdict = judge.likelihood_verdict(model, tok, "Where did Lily go?", "the park.", "the lake with a dog.")
    scores = likelihood.choice_logprobs(
        model,
        tok,
        judge.judge_prompt("Where did Lily go?", "the park.", "the lake with a dog."),
        ["the park.", "the lake with a dog."],
    ).normalised("token")
    assert verdict == (0 if scores[0] > scores[1] else 1)


def test_reward_scores_read_the_last_response_token(tiny):
    from minillm.alignment.reward_model import ScalarHeadModel

    model, tok = tiny
    rm = ScalarHeadModel(model, 16).eval()
    torch.nn.init.normal_(rm.head.weight, generator=torch.Generator().manual_seed(0))
    prompts, replies = ["Where did Lily go?"] * 3, ["the park.", "the lake with the dog.", "home"]
    batched = judge.reward_scores(rm, tok, prompts, replies, batch_size=2)
    alone = [judge.reward_scores(rm, tok, [p], [r])[0] for p, r in zip(prompts, replies, strict=True)]
    assert batched == pytest.approx(alone, abs=1e-5)
    with pytest.raises(ValueError):
        judge.reward_scores(rm, tok, prompts, replies[:2])
