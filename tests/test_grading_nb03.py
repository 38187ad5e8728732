"""Notebook 03's graders: the reference passes, each named mistake (written here as its own small wrong
implementation) is caught with its name, and a stub, an exception, a wrong shape or NaN get a clear line."""

from __future__ import annotations

import math
import time

import pytest
import torch
import torch.nn.functional as F
from grading_helpers import assert_fails, assert_passes, stub

from minillm import attention
from minillm.grading import nb03_attention as nb03
from minillm.model import GPT, GPTConfig


# ------------------------------------------------------------------------------------- causal attention
def attend_where(q, k, v):
    """A learner's causal attention with torch.where and an explicit position comparison."""
    T = q.shape[-2]
    scores = torch.einsum("...id,...jd->...ij", q, k) / q.shape[-1] ** 0.5
    allowed = torch.arange(T)[None, :] <= torch.arange(T)[:, None]
    weights = F.softmax(torch.where(allowed, scores, torch.tensor(float("-inf"), dtype=q.dtype)), dim=-1)
    return weights @ v, weights


def attend_masked(q, k, v, allowed, scale=None, dim=-1):
    scale = math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-1, -2)) / scale
    if allowed is not None:
        scores = scores.masked_fill(~allowed, -math.inf)
    weights = scores.softmax(dim)
    return weights @ v, weights


def sees_one_ahead(q, k, v):
    T = q.shape[-2]
    return attend_masked(q, k, v, torch.arange(T)[None, :] <= torch.arange(T)[:, None] + 1)


def never_itself(q, k, v):
    T = q.shape[-2]
    return attend_masked(q, k, v, torch.arange(T)[None, :] < torch.arange(T)[:, None])


def upper_triangle(q, k, v):
    T = q.shape[-2]
    return attend_masked(q, k, v, torch.ones(T, T).triu().bool())


def divides_by_d(q, k, v):
    T = q.shape[-2]
    return attend_masked(q, k, v, torch.ones(T, T).tril().bool(), scale=q.shape[-1])


def no_scale(q, k, v):
    T = q.shape[-2]
    return attend_masked(q, k, v, torch.ones(T, T).tril().bool(), scale=1.0)


def softmax_down_columns(q, k, v):
    T = q.shape[-2]
    return attend_masked(q, k, v, torch.ones(T, T).tril().bool(), dim=-2)


def test_attention_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb03.causal_attention, nb03.ATTENTION.fallback, capsys)
    assert_passes(nb03.causal_attention, attend_where, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (sees_one_ahead, "the causal mask off by one (each token sees the next one)"),
        (never_itself, "the causal mask off by one (a token cannot see itself)"),
        (upper_triangle, "the mask letting a token see the future"),
        (lambda q, k, v: attend_masked(q, k, v, None), "no causal mask"),
        (divides_by_d, "scores scaled by d instead of √d"),
        (no_scale, "the scores not scaled"),
        (softmax_down_columns, "softmax over the wrong axis"),
    ],
)
def test_attention_names_the_mistake(wrong, name, capsys):
    assert_fails(nb03.causal_attention, wrong, capsys, says=f"Looks like {name}")


def test_attention_stub_raising_shape_nan(capsys):
    assert_fails(nb03.causal_attention, stub("causal_attention"), capsys, says="causal_attention is not written yet")
    assert_fails(nb03.causal_attention, lambda q, k, v: q @ k, capsys, says="raised RuntimeError")
    assert_fails(nb03.causal_attention, lambda q, k, v: attend_where(q, k, v)[0], capsys, says="expected a tuple of 2")

    def drops_the_last_query(q, k, v):
        out, weights = attend_where(q, k, v)
        return out[..., :-1, :], weights

    out = assert_fails(nb03.causal_attention, drops_the_last_query, capsys, says="shape")
    assert "item 0: returned shape" in out
    assert_fails(
        nb03.causal_attention, lambda q, k, v: tuple(t * math.nan for t in attend_where(q, k, v)), capsys, says="NaN"
    )


def test_attention_fallback_runs_the_notebooks_call(capsys):
    fallback, _ = nb03.causal_attention(stub("causal_attention")), capsys.readouterr()
    q, k, v = torch.randn(3, 1, 5, 8).unbind(0)
    out, weights = fallback(q, k, v)
    assert out.shape == (1, 5, 8) and torch.allclose(weights.sum(-1), torch.ones(1, 5))
    assert torch.allclose(out[0, 0], v[0, 0])


# ------------------------------------------------------------------------------------------- multi-head
def mha_learner(x, W_qkv, W_o, n_head, split="view", merge="transpose", scale_width=None, causal=True):
    """A learner's multi-head attention through F.scaled_dot_product_attention, with switches for mistakes."""
    B, T, d = x.shape
    hd = d // n_head
    q, k, v = F.linear(x, W_qkv).chunk(3, dim=-1)
    if split == "view":
        q, k, v = (t.reshape(B, T, n_head, hd).permute(0, 2, 1, 3) for t in (q, k, v))
    else:
        q, k, v = (t.reshape(B, n_head, T, hd) for t in (q, k, v))
    scale = None if scale_width is None else 1 / math.sqrt(scale_width)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    merged = heads.permute(0, 2, 1, 3).reshape(B, T, d) if merge == "transpose" else heads.reshape(B, T, d)
    return F.linear(merged, W_o)


def test_mha_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb03.multi_head_attention, nb03.MULTI_HEAD.fallback, capsys)
    assert_passes(nb03.multi_head_attention, mha_learner, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (lambda *a: mha_learner(*a, split="reshape"), "heads split in the wrong layout"),
        (lambda *a: mha_learner(*a, merge="reshape"), "heads merged without transposing back"),
        (
            lambda x, W, Wo, h: mha_learner(x, W, Wo, h, scale_width=x.shape[-1]),
            "scores scaled by √d of the whole width",
        ),
        (lambda *a: mha_learner(*a, causal=False), "no causal mask"),
    ],
)
def test_mha_names_the_mistake(wrong, name, capsys):
    assert_fails(nb03.multi_head_attention, wrong, capsys, says=f"Looks like {name}")


def test_mha_stub_raising_shape_nan(capsys):
    assert_fails(nb03.multi_head_attention, stub("multi_head_attention"), capsys, says="is not written yet")
    assert_fails(nb03.multi_head_attention, lambda x, W, Wo, h: x @ W, capsys, says="raised RuntimeError")
    assert_fails(nb03.multi_head_attention, lambda x, W, Wo, h: x @ W.T, capsys, says="returned shape")
    assert_fails(nb03.multi_head_attention, lambda *a: mha_learner(*a) * math.nan, capsys, says="returned NaN")


def test_mha_fallback_matches_minillms_module_and_keeps_the_random_stream(capsys):
    fallback, _ = nb03.multi_head_attention(stub("multi_head_attention")), capsys.readouterr()
    d, n_head = 32, 4
    x, W_qkv, W_o = torch.randn(2, 6, d), torch.randn(3 * d, d) * 0.1, torch.randn(d, d) * 0.1
    state = torch.get_rng_state()
    y = fallback(x, W_qkv, W_o, n_head)
    assert torch.equal(state, torch.get_rng_state())  # the notebook's later draws are not shifted
    ours = attention.CausalSelfAttention(d, n_head, bias=False)
    ours.qkv.weight.data.copy_(W_qkv)
    ours.proj.weight.data.copy_(W_o)
    assert y.shape == (2, 6, d) and torch.allclose(y, ours(x), atol=1e-6)


# ------------------------------------------------------------------------------------------- decoding
@torch.no_grad()
def decode_learner(model, ids, n_new, use_cache, mistake=None):
    """A learner's greedy decoding, with switches for the mistakes (written for these tests)."""
    cache = model.new_kv_cache(len(ids)) if use_cache else None
    logits_seen, seconds, feed = [], [], ids
    for _ in range(n_new):
        begin = time.perf_counter()
        if use_cache and mistake == "fresh cache":
            cache = model.new_kv_cache(len(ids))
        out = model(feed, kv_cache=cache) if use_cache else model(ids)
        last = out[:, 0, :] if mistake == "first" else out[:, out.shape[1] - 1, :]
        token = last.argmax(dim=-1)[:, None]
        if mistake != "no append":
            ids = torch.cat((ids, token), dim=-1)
        feed = ids if mistake == "refeed" else token
        logits_seen.append(last)
        seconds.append(time.perf_counter() - begin)
    return ids, torch.stack(logits_seen, dim=1), seconds


def test_decode_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb03.greedy_decode, nb03.DECODE.fallback, capsys)
    assert_passes(nb03.greedy_decode, decode_learner, capsys)


@pytest.mark.parametrize(
    ("mistake", "name"),
    [
        ("refeed", "the whole sequence fed again with the cache"),
        ("fresh cache", "a new cache at every step"),
        ("first", "the logits of the first position, not the last"),
        ("no append", "the new token not appended"),
    ],
)
def test_decode_names_the_mistake(mistake, name, capsys):
    def wrong(model, ids, n_new, use_cache):
        return decode_learner(model, ids, n_new, use_cache, mistake)

    assert_fails(nb03.greedy_decode, wrong, capsys, says=f"Looks like {name}")


def test_decode_stub_raising_wrong_return_nan(capsys):
    assert_fails(nb03.greedy_decode, stub("greedy_decode"), capsys, says="greedy_decode is not written yet")
    assert_fails(nb03.greedy_decode, lambda m, ids, n, c: m(ids, kv_cache=3), capsys, says="raised AttributeError")
    assert_fails(nb03.greedy_decode, lambda m, ids, n, c: decode_learner(m, ids, n, c)[0], capsys, says="raised")

    def nan_logits(model, ids, n_new, use_cache):
        tokens, logits, seconds = decode_learner(model, ids, n_new, use_cache)
        return tokens, logits * math.nan, seconds

    assert_fails(nb03.greedy_decode, nan_logits, capsys, says="returned NaN")

    def one_step_less(model, ids, n_new, use_cache):
        return decode_learner(model, ids, n_new - 1, use_cache)

    assert_fails(nb03.greedy_decode, one_step_less, capsys, says="returned shape")


def test_decode_fallback_runs_the_notebooks_calls(capsys):
    fallback, _ = nb03.greedy_decode(stub("greedy_decode")), capsys.readouterr()
    torch.manual_seed(0)
    config = GPTConfig.preset("gpt2-style", vocab_size=256, context_length=24, n_layer=1, n_head=2, d_model=16)
    model = GPT(config).eval()
    start = torch.tensor([list(b"Once")])
    n_new = config.context_length - start.shape[1]  # the notebook fills the context
    cached_ids, cached_logits, cached_seconds = fallback(model, start, n_new, use_cache=True)
    full_ids, full_logits, full_seconds = fallback(model, start, n_new, use_cache=False)
    assert torch.equal(cached_ids, full_ids) and cached_ids.shape == (1, config.context_length)
    assert torch.allclose(cached_logits, full_logits, atol=1e-4)
    assert len(cached_seconds) == len(full_seconds) == n_new and all(s >= 0 for s in cached_seconds)


# ------------------------------------------------------------------ exercise 2: parameters of a Llama-style GPT
def count_notebook(cfg):
    """The exercise's solution."""
    V, dm, L, ff = cfg.vocab_size, cfg.d_model, cfg.n_layer, cfg.d_ff
    return V * dm + L * (2 * dm + 4 * dm * dm + 3 * dm * ff) + dm + V * dm


def count_per_piece(cfg):
    d = cfg.d_model
    embedding = head = cfg.vocab_size * d
    block = d + d * 3 * d + d * d + d + 2 * d * cfg.d_ff + cfg.d_ff * d  # norm, qkv, out, norm, gate+up, down
    return embedding + cfg.n_layer * block + d + head


def count_tied(cfg):
    V, d, L, f = cfg.vocab_size, cfg.d_model, cfg.n_layer, cfg.d_ff
    return V * d + L * (2 * d + 4 * d * d + 3 * d * f) + d


def count_one_norm(cfg):
    V, d, L, f = cfg.vocab_size, cfg.d_model, cfg.n_layer, cfg.d_ff
    return 2 * V * d + L * (d + 4 * d * d + 3 * d * f) + d


def count_gelu_mlp(cfg):
    V, d, L, f = cfg.vocab_size, cfg.d_model, cfg.n_layer, cfg.d_ff
    return 2 * V * d + L * (2 * d + 4 * d * d + 2 * d * f) + d


def count_no_final_norm(cfg):
    V, d, L, f = cfg.vocab_size, cfg.d_model, cfg.n_layer, cfg.d_ff
    return 2 * V * d + L * (2 * d + 4 * d * d + 3 * d * f)


def count_layernorm(cfg):
    V, d, L, f = cfg.vocab_size, cfg.d_model, cfg.n_layer, cfg.d_ff
    return 2 * V * d + L * (2 * (d + d) + 4 * d * d + 3 * d * f) + 2 * d


LLAMA_CFG = GPTConfig.preset("llama-style", vocab_size=256, context_length=64, n_layer=4, n_head=4, d_model=128)


def test_parameters_by_hand_reference_and_learners_versions_pass(capsys):
    assert_passes(nb03.parameters_by_hand, nb03.PARAMETERS.fallback, capsys)
    assert_passes(nb03.parameters_by_hand, count_notebook, capsys)
    assert_passes(nb03.parameters_by_hand, count_per_piece, capsys)
    assert_passes(nb03.parameters_by_hand, lambda cfg=LLAMA_CFG: GPT(cfg).num_parameters(), capsys)
    assert_passes(nb03.parameters_by_hand, lambda cfg: torch.tensor(count_notebook(cfg)), capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (count_tied, "the head tied to the embedding"),
        (count_one_norm, "one norm per block, not two"),
        (count_gelu_mlp, "the MLP with two matrices, not SwiGLU's three"),
        (count_no_final_norm, "the final norm left out"),
        (count_layernorm, "LayerNorm biases counted"),
    ],
)
def test_parameters_by_hand_names_the_mistake(wrong, name, capsys):
    assert_fails(nb03.parameters_by_hand, wrong, capsys, says=f"Looks like {name}")


def test_parameters_by_hand_stub_raising_wrong_type_nan(capsys):
    grader = nb03.parameters_by_hand
    fallback = nb03.PARAMETERS.fallback
    assert_fails(
        grader, stub("parameters_by_hand"), capsys, says="parameters_by_hand is not written yet", fallback=fallback
    )
    assert_fails(grader, lambda cfg: cfg.d_head * 2, capsys, says="raised AttributeError")
    assert_fails(grader, lambda cfg: count_notebook(cfg) / 3, capsys, says="expected the whole number")
    assert_fails(grader, lambda cfg: str(count_notebook(cfg)), capsys, says="expected a number")
    assert_fails(grader, lambda cfg: math.nan, capsys, says="returned NaN")
    assert_fails(grader, lambda cfg: count_notebook(LLAMA_CFG), capsys, says="returned 918656, expected 413664")


def test_parameters_by_hand_fallback_runs_the_exercises_check(capsys):
    state = torch.get_rng_state()
    fallback, _ = nb03.parameters_by_hand(stub("parameters_by_hand")), capsys.readouterr()
    assert torch.equal(state, torch.get_rng_state())
    assert fallback(LLAMA_CFG) == count_notebook(LLAMA_CFG) == GPT(LLAMA_CFG).num_parameters() == 918_656


# ------------------------------------------------------------------------------------ exercise 3: top-p
def nucleus_notebook(probs, p):
    """The exercise's solution."""
    sorted_p, order = torch.sort(probs, descending=True)
    keep = (sorted_p.cumsum(0) - sorted_p) < p
    return set(order[keep].tolist())


def nucleus_loop(probs, p):
    """A learner's loop: add tokens from the most likely on until the total reaches p."""
    kept, total = set(), 0.0
    for i in torch.argsort(probs, descending=True).tolist():
        kept.add(i)
        total += probs[i].item()
        if total >= p:
            break
    return kept


def nucleus_strict_prefix(probs, p):
    sorted_p, order = torch.sort(probs, descending=True)
    return set(order[sorted_p.cumsum(0) < p].tolist())


def nucleus_ascending(probs, p):
    order = torch.argsort(probs)
    before = torch.cumsum(probs[order], 0) - probs[order]
    return {int(i) for i, b in zip(order, before, strict=True) if b < p}


def nucleus_sorted_index(probs, p):
    sorted_p, _ = torch.sort(probs, descending=True)
    before = sorted_p.cumsum(0) - sorted_p
    return set(torch.nonzero(before < p).flatten().tolist())


def nucleus_removed(probs, p):
    sorted_p, order = torch.sort(probs, descending=True)
    remove = (sorted_p.cumsum(0) - sorted_p) >= p  # what to filter away, returned instead of what is kept
    return set(order[remove].tolist())


def test_nucleus_reference_and_learners_versions_pass(capsys):
    assert_passes(nb03.nucleus, nb03.NUCLEUS.fallback, capsys)
    assert_passes(nb03.nucleus, nucleus_notebook, capsys)
    assert_passes(nb03.nucleus, nucleus_loop, capsys)
    assert_passes(nb03.nucleus, lambda probs, p: frozenset(nucleus_loop(probs, p)), capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (nucleus_strict_prefix, "the token that reaches p left out"),
        (nucleus_ascending, "sorted ascending"),
        (nucleus_sorted_index, "positions in the sorted order, not token ids"),
        (nucleus_removed, "the kept and the dropped tokens swapped"),
    ],
)
def test_nucleus_names_the_mistake(wrong, name, capsys):
    assert_fails(nb03.nucleus, wrong, capsys, says=f"Looks like {name}")


def test_nucleus_stub_raising_wrong_type(capsys):
    grader, fallback = nb03.nucleus, nb03.NUCLEUS.fallback
    assert_fails(grader, stub("nucleus"), capsys, says="nucleus is not written yet", fallback=fallback)
    assert_fails(grader, lambda probs, p: probs.sort(reverse=True), capsys, says="raised TypeError")
    assert_fails(
        grader, lambda probs, p: sorted(nucleus_loop(probs, p)), capsys, says="returned a list, expected a set"
    )
    assert_fails(grader, lambda probs, p: probs * (probs > 0.05), capsys, says="returned a Tensor, expected a set")
    assert_fails(grader, lambda probs, p: nucleus_loop(probs, p) | {math.nan}, capsys, says="1 unexpected (e.g. nan)")


def test_nucleus_fallback_runs_the_exercises_check(capsys):
    from minillm.model import sample_next_token

    fallback, _ = nb03.nucleus(stub("nucleus")), capsys.readouterr()
    probs = torch.softmax(torch.randn(256, generator=torch.Generator().manual_seed(5)) * 3, -1)
    kept = fallback(probs, 0.9)
    draws = sample_next_token(probs.log().expand(2000, -1), top_p=0.9, generator=torch.Generator().manual_seed(0))
    assert set(draws.tolist()) <= kept and kept == nucleus_loop(probs, 0.9)
