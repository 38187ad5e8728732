"""minillm.flash_attention: tiled attention with the online softmax equals PyTorch's attention in outputs and in
every gradient, for any tile sizes, and keeps O(T·d) numbers for backward where written-out attention keeps T²."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from minillm.attention import scaled_dot_product_attention
from minillm.flash_attention import flash_attention
from minillm.parallel.memory import measure_saved_activation_bytes


def _qkv(t: int, s: int, d: int = 16, dv: int = 8, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    shapes = ((2, 3, t, d), (2, 3, s, d), (2, 3, s, dv))
    return [torch.randn(*shape, generator=g, dtype=dtype).requires_grad_() for shape in shapes]


SHAPES = [(37, 37, 8, 16), (64, 64, 64, 64), (33, 33, 1, 7), (50, 50, 128, 5)]  # T, S, block_q, block_k
CASES = [(causal, *shape) for causal in (False, True) for shape in SHAPES] + [(False, 20, 45, 6, 9)]  # S ≠ T


@pytest.mark.parametrize(("causal", "t", "s", "block_q", "block_k"), CASES)
def test_outputs_and_gradients_equal_pytorchs_attention(causal, t, s, block_q, block_k):
    q, k, v = _qkv(t, s)
    d_out = torch.randn(2, 3, t, 8, generator=torch.Generator().manual_seed(1))
    ours = flash_attention(q, k, v, causal, block_q, block_k)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    grads = torch.autograd.grad(ours, (q, k, v), d_out), torch.autograd.grad(theirs, (q, k, v), d_out)
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_backward_passes_gradcheck_in_float64(causal):
    """The hand-derived backward against finite differences (an independent check of dQ, dK, dV)."""
    q, k, v = _qkv(9, 9, d=4, dv=3, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda a, b, c: flash_attention(a, b, c, causal, 4, 3), (q, k, v))


def test_memory_kept_for_backward_grows_with_t_not_t_squared():
    """Saved for backward: Q, K, V, the output and one log-sum-exp per row, exactly; written-out attention also
    keeps the T × T weights, so its bytes grow about four-fold per doubling of T while these grow two-fold."""
    flash, written = {}, {}
    for t in (128, 256, 512):
        q, k, v = _qkv(t, t, d=16, dv=16)
        flash[t] = measure_saved_activation_bytes(lambda a, b, c: flash_attention(a, b, c, True, 64, 64), q, k, v)
        assert flash[t] == 4 * (2 * 3 * t) * (16 * 4 + 1)  # q, k, v, out (16 each) and the log-sum-exp, float32
        written[t] = measure_saved_activation_bytes(
            lambda a, b, c: scaled_dot_product_attention(a, b, c, is_causal=True), q, k, v
        )
    assert flash[512] == 2 * flash[256] == 4 * flash[128]
    assert written[512] > 3.5 * written[256] and written[512] > 10 * flash[512]


@pytest.mark.parametrize("causal", [False, True])
def test_one_key_value_head_serves_every_query_head(causal):
    """Multi-query attention: k and v with one head broadcast over q's heads, in forward and backward (the
    gradient of the shared head is the sum over the query heads it serves) — against SDPA on copied heads."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 4, 21, 8, generator=g, requires_grad=True)
    k, v = (torch.randn(2, 1, 21, 8, generator=g, requires_grad=True) for _ in range(2))
    d_out = torch.randn(2, 4, 21, 8, generator=g)
    ours = flash_attention(q, k, v, causal, 8, 5)
    theirs = F.scaled_dot_product_attention(q, k.expand(-1, 4, -1, -1), v.expand(-1, 4, -1, -1), is_causal=causal)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    grads = torch.autograd.grad(ours, (q, k, v), d_out), torch.autograd.grad(theirs, (q, k, v), d_out)
    for a, b in zip(*grads, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_bad_inputs_are_refused():
    q, k, v = _qkv(8, 12)
    with pytest.raises(ValueError, match="as many queries as keys"):
        flash_attention(q, k, v, is_causal=True)
    with pytest.raises(ValueError, match="block sizes must be positive"):
        flash_attention(q, k, v, block_q=0)
    with pytest.raises(ValueError, match=r"need q \[\.\.\., T, d\]"):
        flash_attention(q, k[..., :4], v)
    q4, k2 = torch.randn(1, 4, 8, 16), torch.randn(1, 2, 8, 16)  # grouped-query heads do not broadcast
    with pytest.raises(ValueError, match="repeat each key/value head"):
        flash_attention(q4, k2, k2)
