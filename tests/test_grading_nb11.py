"""Notebook 11's graders: the reference passes, each named mistake (written here as its own small wrong
implementation) is caught with its name, and a stub, an exception, a wrong shape or NaN get a clear line."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from grading_helpers import assert_fails, assert_passes, stub

from minillm.flash_attention import flash_attention
from minillm.grading import nb11_efficient_attention as nb11


# ------------------------------------------------------------------------------------------ online softmax
class OnlineStats:
    """A learner's one-pass softmax statistics, with switches for the mistakes learners make."""

    rescale, inverted, keep_running_max, subtract_max = True, False, True, True

    def __call__(self, x, block):
        m = torch.tensor(-math.inf, dtype=torch.float64)
        l = torch.tensor(0.0, dtype=torch.float64)  # noqa: E741
        trace = []
        for chunk in torch.split(x.to(torch.float64), block):
            new_m = torch.maximum(m, chunk.max()) if self.keep_running_max else chunk.max()
            shifted = chunk - new_m if self.subtract_max else chunk
            if not self.rescale or not self.subtract_max:
                factor = torch.tensor(1.0, dtype=torch.float64)
            else:
                factor = torch.exp(new_m - m) if self.inverted else torch.exp(m - new_m)
            l = factor * l + shifted.exp().sum()  # noqa: E741
            m = new_m
            trace.append((m.item(), l.item()))
        return m.item(), l.item(), trace


class NoRescale(OnlineStats):
    rescale = False


class InvertedRescale(OnlineStats):
    inverted = True


class BlockMaxOnly(OnlineStats):
    keep_running_max = False


class NoShift(OnlineStats):
    subtract_max = False


def test_online_softmax_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb11.online_softmax, nb11.ONLINE_SOFTMAX.truth, capsys)
    assert_passes(nb11.online_softmax, OnlineStats(), capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (NoRescale(), "the online softmax missing the rescale of the running sum"),
        (InvertedRescale(), "the rescale factor upside down"),
        (BlockMaxOnly(), "the running maximum replaced by the block's maximum"),
        (NoShift(), "the running sum without the max subtracted"),
    ],
)
def test_online_softmax_names_the_mistake(wrong, name, capsys):
    assert_fails(nb11.online_softmax, wrong, capsys, says=f"Looks like {name}", fallback=nb11.ONLINE_SOFTMAX.fallback)


def test_online_softmax_stub_raising_wrong_return_and_nan(capsys):
    assert_fails(nb11.online_softmax, stub("online_softmax_stats"), capsys, says="is not written yet")
    assert_fails(nb11.online_softmax, lambda x, block: x[block * 100], capsys, says="raised IndexError")
    assert_fails(nb11.online_softmax, lambda x, block: OnlineStats()(x, block)[:2], capsys, says="returned 2 items")

    def nan_normaliser(x, block):
        m, _, trace = OnlineStats()(x, block)
        return m, math.nan, trace

    assert_fails(nb11.online_softmax, nan_normaliser, capsys, says="returned NaN")


def test_online_softmax_fallback_serves_the_notebooks_float32_logits():
    g = torch.Generator().manual_seed(0)
    logits = 1000 + 30 * torch.randn(100_000, generator=g)
    m, l, trace = nb11.ONLINE_SOFTMAX.fallback(logits, block=10_000)
    assert isinstance(m, float) and isinstance(l, float) and len(trace) == 10
    probs = torch.exp(logits - m) / l
    assert (probs.double() - torch.softmax(logits.double(), 0)).abs().max() < 1e-6


# -------------------------------------------------------------------------------------------- the forward
class TiledForward:
    """A learner's tiled attention forward, with switches for the mistakes learners make."""

    rescale_out, rescale_sum, mask, scale_by_d, lse_with_max = True, True, "right", False, True

    def __call__(self, q, k, v, causal=False, block_q=16, block_k=16):
        n_q, n_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
        factor = 1 / d if self.scale_by_d else d**-0.5
        outs, lses = [], []
        for r0 in range(0, n_q, block_q):
            qb = q[..., r0 : r0 + block_q, :]
            nq = qb.shape[-2]
            run_max = torch.full(qb.shape[:-1], float("-inf"), dtype=q.dtype)
            run_sum = torch.zeros(qb.shape[:-1], dtype=q.dtype)
            run_out = torch.zeros(*qb.shape[:-1], v.shape[-1], dtype=q.dtype)
            for c0 in range(0, n_k, block_k):
                kb, vb = k[..., c0 : c0 + block_k, :], v[..., c0 : c0 + block_k, :]
                tile = (qb @ kb.mT) * factor
                if causal:
                    qpos = torch.arange(nq)[:, None]
                    kpos = torch.arange(kb.shape[-2])[None, :]
                    if self.mask != "local":
                        qpos, kpos = qpos + r0, kpos + c0
                    hidden = kpos >= qpos if self.mask == "own" else kpos > qpos + (self.mask == "next")
                    tile = torch.where(hidden, float("-inf"), tile)
                new_max = torch.maximum(run_max, tile.max(dim=-1).values)
                w = (tile - new_max.unsqueeze(-1)).exp()
                shrink = (run_max - new_max).exp()
                run_sum = (shrink * run_sum if self.rescale_sum else run_sum) + w.sum(dim=-1)
                run_out = (shrink.unsqueeze(-1) * run_out if self.rescale_out else run_out) + w @ vb
                run_max = new_max
            outs.append(run_out / run_sum.unsqueeze(-1))
            lses.append(run_sum.log() + (run_max if self.lse_with_max else 0))
        return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)


def _variant(base, **switches):
    return type("Variant", (base,), switches)()


def test_forward_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb11.tiled_forward, nb11.TILED_FORWARD.truth, capsys)
    assert_passes(nb11.tiled_forward, TiledForward(), capsys)


@pytest.mark.parametrize(
    ("switches", "name"),
    [
        ({"rescale_out": False}, "the output accumulator not rescaled"),
        ({"rescale_sum": False}, "the online softmax missing the rescale of the running sum"),
        ({"mask": "own"}, "the causal mask within a tile off by one (a query cannot see its own key)"),
        ({"mask": "next"}, "the causal mask within a tile off by one (a query sees the next key)"),
        ({"mask": "local"}, "the causal mask built from positions within the tile"),
        ({"lse_with_max": False}, "the saved log-sum-exp missing the running max"),
        ({"scale_by_d": True}, "scores scaled by 1/d instead of 1/√d"),
    ],
)
def test_forward_names_the_mistake(switches, name, capsys):
    wrong = _variant(TiledForward, **switches)
    assert_fails(nb11.tiled_forward, wrong, capsys, says=f"Looks like {name}", fallback=nb11.TILED_FORWARD.fallback)


def test_forward_stub_raising_shape_and_nan(capsys):
    assert_fails(nb11.tiled_forward, stub("tiled_attention_forward"), capsys, says="is not written yet")

    def wrong_product(q, k, v, causal=False, block_q=16, block_k=16):
        return q @ k, None  # forgot the transpose

    assert_fails(nb11.tiled_forward, wrong_product, capsys, says="raised RuntimeError")

    def lse_kept_as_column(q, k, v, causal=False, block_q=16, block_k=16):
        out, lse = TiledForward()(q, k, v, causal, block_q, block_k)
        return out, lse[..., None]

    assert_fails(nb11.tiled_forward, lse_kept_as_column, capsys, says="returned shape")

    def nan_output(q, k, v, causal=False, block_q=16, block_k=16):
        out, lse = TiledForward()(q, k, v, causal, block_q, block_k)
        return out * math.nan, lse

    assert_fails(nb11.tiled_forward, nan_output, capsys, says="returned NaN")


def test_forward_fallback_answers_the_notebooks_calls():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 50, 16, generator=g) for _ in range(3))
    for causal in (False, True):
        out, lse = nb11.TILED_FORWARD.fallback(q, k, v, causal=causal, block_q=7, block_k=13)
        assert out.dtype == lse.dtype == torch.float32 and lse.shape == (2, 3, 50)
        assert (out - F.scaled_dot_product_attention(q, k, v, is_causal=causal)).abs().max() < 1e-5


# ------------------------------------------------------------------------------------------- the backward
class TiledBackward:
    """A learner's tiled attention backward, with switches for the mistakes learners make."""

    delta, scaled, p_from_lse, masked = "row", True, True, True

    def __call__(self, q, k, v, out, lse, d_out, causal=False, block_q=16, block_k=16):
        n_q, n_k = q.shape[-2], k.shape[-2]
        c = q.shape[-1] ** -0.5
        row_delta = torch.einsum("...td,...td->...t", d_out, out)
        dq, dk, dv = (torch.zeros_like(t) for t in (q, k, v))
        for r0 in range(0, n_q, block_q):
            r1 = min(r0 + block_q, n_q)
            for c0 in range(0, n_k, block_k):
                c1 = min(c0 + block_k, n_k)
                tile = q[..., r0:r1, :] @ k[..., c0:c1, :].mT * c
                if causal and self.masked:
                    future = torch.arange(c0, c1)[None, :] > torch.arange(r0, r1)[:, None]
                    tile = tile.masked_fill(future, float("-inf"))
                p = (tile - lse[..., r0:r1, None]).exp() if self.p_from_lse else tile.softmax(-1)
                dp = d_out[..., r0:r1, :] @ v[..., c0:c1, :].mT
                if self.delta == "row":
                    ds = p * (dp - row_delta[..., r0:r1, None])
                elif self.delta == "tile":
                    ds = p * (dp - (p * dp).sum(-1, keepdim=True))
                else:
                    ds = p * dp
                g = c if self.scaled else 1.0
                dv[..., c0:c1, :] += p.mT @ d_out[..., r0:r1, :]
                dq[..., r0:r1, :] += g * ds @ k[..., c0:c1, :]
                dk[..., c0:c1, :] += g * ds.mT @ q[..., r0:r1, :]
        return dq, dk, dv


def test_backward_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb11.tiled_backward, nb11.TILED_BACKWARD.truth, capsys)
    assert_passes(nb11.tiled_backward, TiledBackward(), capsys)


@pytest.mark.parametrize(
    ("switches", "name"),
    [
        ({"delta": "none"}, "D left out of dS"),
        ({"delta": "tile"}, "D summed over one tile, not the whole row"),
        ({"p_from_lse": False}, "P recomputed as the tile's own softmax"),
        ({"scaled": False}, "the 1/√d scale missing from dQ and dK"),
        ({"masked": False}, "the causal mask left out of backward"),
    ],
)
def test_backward_names_the_mistake(switches, name, capsys):
    wrong = _variant(TiledBackward, **switches)
    assert_fails(nb11.tiled_backward, wrong, capsys, says=f"Looks like {name}", fallback=nb11.TILED_BACKWARD.fallback)


def test_backward_stub_raising_shape_and_nan(capsys):
    assert_fails(nb11.tiled_backward, stub("tiled_attention_backward"), capsys, says="is not written yet")

    def raises(q, k, v, out, lse, d_out, causal=False, block_q=16, block_k=16):
        raise ValueError("not sure about the shapes yet")

    assert_fails(nb11.tiled_backward, raises, capsys, says="raised ValueError: not sure about the shapes yet")

    def dk_transposed(*args):
        dq, dk, dv = TiledBackward()(*args)
        return dq, dk.mT, dv

    assert_fails(nb11.tiled_backward, dk_transposed, capsys, says="returned shape")

    def nan_dv(*args):
        dq, dk, dv = TiledBackward()(*args)
        return dq, dk, dv / 0 * 0

    assert_fails(nb11.tiled_backward, nan_dv, capsys, says="returned NaN")


def test_backward_fallback_answers_the_notebooks_calls():
    g = torch.Generator().manual_seed(0)
    q, k, v, d_out = (torch.randn(2, 3, 50, 16, generator=g) for _ in range(4))
    for causal in (False, True):
        out, lse = nb11.TILED_FORWARD.fallback(q, k, v, causal, 7, 13)
        ours = nb11.TILED_BACKWARD.fallback(q, k, v, out, lse, d_out, causal, 7, 13)
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        want = torch.autograd.grad(flash_attention(*leaves, is_causal=causal, block_q=16, block_k=8), leaves, d_out)
        assert all((a - b).abs().max() < 1e-5 for a, b in zip(ours, want, strict=True))


# ------------------------------------------------------------------------- Exercise 1: skip the masked tiles
class CausalTiles:
    """A learner's causal forward that skips the tiles above the diagonal, with switches for the usual mistakes."""

    stop_at, masking, hide_own_key = "last", "crossing", False

    def __call__(self, q, k, v, block_q=32, block_k=32):
        n, c = q.shape[-2], q.shape[-1] ** -0.5
        outs, count = [], 0
        for r0 in range(0, n, block_q):
            r1 = min(r0 + block_q, n)
            limit = {"last": r1, "first": r0 + 1, "all": n}[self.stop_at]
            best = torch.full((*q.shape[:-2], r1 - r0), float("-inf"), dtype=q.dtype)
            total = torch.zeros_like(best)
            acc = torch.zeros(*q.shape[:-2], r1 - r0, v.shape[-1], dtype=q.dtype)
            for c0 in range(0, limit, block_k):
                c1 = min(c0 + block_k, n)
                count += 1
                tile = q[..., r0:r1, :] @ k[..., c0:c1, :].mT * c
                qpos, kpos = torch.arange(r0, r1)[:, None], torch.arange(c0, c1)[None, :]
                needs_mask = {"crossing": c1 - 1 > r0, "never": False, "diagonal": c0 == r0}[self.masking]
                if self.hide_own_key:
                    tile = torch.where(kpos >= qpos, float("-inf"), tile)
                elif needs_mask:
                    tile = torch.where(kpos > qpos, float("-inf"), tile)
                new_best = torch.maximum(best, tile.max(-1).values)
                w = (tile - new_best[..., None]).exp()
                shrink = (best - new_best).exp()
                total = shrink * total + w.sum(-1)
                acc = shrink[..., None] * acc + w @ v[..., c0:c1, :]
                best = new_best
            outs.append(acc / total[..., None])
        return torch.cat(outs, dim=-2), count


def test_causal_tiles_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb11.causal_tiled_forward, nb11.CAUSAL_TILED_FORWARD.truth, capsys)
    assert_passes(nb11.causal_tiled_forward, CausalTiles(), capsys)


@pytest.mark.parametrize(
    ("switches", "name"),
    [
        ({"stop_at": "all"}, "every tile visited, none skipped"),
        ({"stop_at": "first"}, "the key loop stopped at the block's first query, not its last"),
        ({"masking": "never"}, "the mask left off the tiles that cross the diagonal"),
        ({"masking": "diagonal"}, "the mask applied only to the tile with j == i (square tiles assumed)"),
        ({"hide_own_key": True}, "the causal mask off by one (a query cannot see its own key)"),
    ],
)
def test_causal_tiles_names_the_mistake(switches, name, capsys):
    wrong = _variant(CausalTiles, **switches)
    fallback = nb11.CAUSAL_TILED_FORWARD.fallback
    assert_fails(nb11.causal_tiled_forward, wrong, capsys, says=f"Looks like {name}", fallback=fallback)


def test_causal_tiles_stub_raising_shape_and_nan(capsys):
    assert_fails(nb11.causal_tiled_forward, stub("causal_tiled_forward"), capsys, says="is not written yet")

    def forgot_the_count(q, k, v, block_q=32, block_k=32):
        out, _ = CausalTiles()(q, k, v, block_q, block_k)
        return out

    assert_fails(nb11.causal_tiled_forward, forgot_the_count, capsys, says="returned a Tensor, expected a tuple of 2")

    def raises(q, k, v, block_q=32, block_k=32):
        return flash_attention(q, k[..., :1, :], v, is_causal=True)

    assert_fails(nb11.causal_tiled_forward, raises, capsys, says="raised ValueError")

    def one_row_per_head(q, k, v, block_q=32, block_k=32):
        out, tiles = CausalTiles()(q, k, v, block_q, block_k)
        return out[..., :1, :], tiles

    assert_fails(nb11.causal_tiled_forward, one_row_per_head, capsys, says="returned shape")

    def nan_output(q, k, v, block_q=32, block_k=32):
        out, tiles = CausalTiles()(q, k, v, block_q, block_k)
        return out * math.nan, tiles

    assert_fails(nb11.causal_tiled_forward, nan_output, capsys, says="returned NaN")


def test_causal_tiles_fallback_answers_the_exercise():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 256, 16, generator=g) for _ in range(3))
    out, tiles = nb11.CAUSAL_TILED_FORWARD.fallback(q, k, v)
    assert out.dtype == torch.float32 and tiles == 8 * 9 // 2
    assert (out - F.scaled_dot_product_attention(q, k, v, is_causal=True)).abs().max() < 1e-5


# ----------------------------------------------------------------------------- Exercise 2: a KV cache in GiB
def kv_cache_gib(n_layer, n_kv, head_dim, tokens, batch=1, bytes_per_value=2, *, k_and_v=2, unit=1024**3):
    """A learner's answer: bytes per token across all layers, times the tokens of every sequence."""
    per_token = k_and_v * n_layer * n_kv * head_dim * bytes_per_value
    return per_token * tokens * batch / unit


def test_kv_gib_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb11.kv_gib, nb11.KV_GIB.truth, capsys)
    assert_passes(nb11.kv_gib, kv_cache_gib, capsys)


def _only_keys(n_layer, n_kv, head_dim, tokens, batch=1, bytes_per_value=2):
    return kv_cache_gib(n_layer, n_kv, head_dim, tokens, batch, bytes_per_value, k_and_v=1)


def _gigabytes(n_layer, n_kv, head_dim, tokens, batch=1, bytes_per_value=2):
    return kv_cache_gib(n_layer, n_kv, head_dim, tokens, batch, bytes_per_value, unit=1e9)


def _one_sequence(n_layer, n_kv, head_dim, tokens, batch=1, bytes_per_value=2):
    return kv_cache_gib(n_layer, n_kv, head_dim, tokens, 1, bytes_per_value)


def _values_not_bytes(n_layer, n_kv, head_dim, tokens, batch=1, bytes_per_value=2):
    return kv_cache_gib(n_layer, n_kv, head_dim, tokens, batch, 1)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (_only_keys, "the cache counted for K only, not K and V"),
        (_gigabytes, "GB (10⁹ bytes) instead of GiB (2³⁰ bytes)"),
        (_one_sequence, "the batch left out"),
        (_values_not_bytes, "values counted, not bytes (bytes_per_value left out)"),
    ],
)
def test_kv_gib_names_the_mistake(wrong, name, capsys):
    assert_fails(nb11.kv_gib, wrong, capsys, says=f"Looks like {name}", fallback=nb11.KV_GIB.fallback)


def test_kv_gib_stub_raising_wrong_type_and_nan(capsys):
    assert_fails(nb11.kv_gib, stub("kv_gib"), capsys, says="is not written yet")
    assert_fails(nb11.kv_gib, lambda *args, **kwargs: 1 / 0, capsys, says="raised ZeroDivisionError")
    assert_fails(nb11.kv_gib, lambda *args, **kwargs: f"{kv_cache_gib(*args, **kwargs):.1f} GiB", capsys,
                 says="returned a str, expected a number")  # fmt: skip
    assert_fails(nb11.kv_gib, lambda *args, **kwargs: math.nan, capsys, says="returned NaN")


def test_kv_gib_fallback_answers_the_exercise():
    from minillm.model import GPTConfig

    kv = nb11.KV_GIB.fallback
    assert (kv(32, 32, 128, 8192), kv(32, 8, 128, 8192)) == (4, 1)
    assert kv(32, 32, 128, 1) * 2**20 == 512
    llama = GPTConfig.preset("llama-style", vocab_size=128256, context_length=8192, n_layer=32, n_head=32,
                             d_model=4096, n_kv_head=8)  # fmt: skip
    assert llama.kv_cache_bytes(batch_size=1, seq_len=8192, bytes_per_value=2) == kv(32, 8, 128, 8192) * 2**30
