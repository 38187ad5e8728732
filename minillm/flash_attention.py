"""FlashAttention in plain PyTorch: attention computed tile by tile, never holding the T × T score matrix.

Written-out attention (:func:`minillm.attention.scaled_dot_product_attention`) builds every score, softmaxes
each row and keeps the weights for backward: memory grows as T². FlashAttention (Dao et al. 2022; the loop
order of FlashAttention-2, Dao 2023) visits the keys and values block by block and keeps, per query row, only a
running maximum ``m``, a running normaliser ``l`` and a running weighted sum — the *online softmax*: when a new
block raises the maximum from ``m`` to ``m'``, what was summed so far is rescaled by ``exp(m − m')``, so the
result is exactly ``softmax(QKᵀ/√d)·V``. For backward it saves only Q, K, V, the output and each row's
log-sum-exp ``L = m + log l`` (O(T·d) numbers), and recomputes the scores block by block:

    P = exp(S − L),  dV = Pᵀ·dO,  dP = dO·Vᵀ,  dS = P ∘ (dP − rowsum(dO ∘ O)),  dQ = dS·K/√d,  dK = dSᵀ·Q/√d

The loops run in Python over tiles of ``block_q`` × ``block_k``, so this is for understanding and for measuring
memory, not for speed: PyTorch's fused kernels (``F.scaled_dot_product_attention``) do the same in one kernel.
"""

from __future__ import annotations

import math

import torch

__all__ = ["flash_attention", "FlashAttention"]


def _mask_future(s: torch.Tensor, rows: range, cols: range) -> torch.Tensor:
    """The tile of scores ``s`` with −inf where key ``col`` lies after query ``row`` (causal attention)."""
    if cols.stop - 1 <= rows.start:
        return s  # every key of the tile is at or before every query
    r = torch.arange(rows.start, rows.stop, device=s.device)[:, None]
    c = torch.arange(cols.start, cols.stop, device=s.device)[None, :]
    return s.masked_fill(c > r, -math.inf)


class FlashAttention(torch.autograd.Function):
    """Tiled attention with the online softmax; backward recomputes the scores tile by tile."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool, block_q: int, block_k: int):  # type: ignore[override]
        # Leading (batch, head) dims may broadcast, e.g. one key/value head for every query head (multi-query
        # attention): expand views (no copy) here, and backward sums each gradient back to its input's shape.
        ctx.shapes = q.shape, k.shape, v.shape
        lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        q, k, v = (t.expand(*lead, *t.shape[-2:]) for t in (q, k, v))
        scale = 1.0 / math.sqrt(q.shape[-1])
        n_q, n_k = q.shape[-2], k.shape[-2]
        f = torch.promote_types(q.dtype, torch.float32)  # accumulate in at least fp32 (bf16 inputs too)
        out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
        lse = torch.empty(q.shape[:-1], dtype=f, device=q.device)
        for i in range(0, n_q, block_q):
            rows = range(i, min(i + block_q, n_q))
            q_i = q[..., rows.start : rows.stop, :].to(f) * scale
            m = torch.full(q_i.shape[:-1], -math.inf, dtype=f, device=q.device)  # running row maximum
            l = torch.zeros(q_i.shape[:-1], dtype=f, device=q.device)  # running Σ exp(score − m)  # noqa: E741
            acc = torch.zeros(*q_i.shape[:-1], v.shape[-1], dtype=f, device=q.device)  # running Σ exp(score − m)·v
            for j in range(0, rows.stop if causal else n_k, block_k):
                cols = range(j, min(j + block_k, n_k))
                s = q_i @ k[..., cols.start : cols.stop, :].to(f).transpose(-2, -1)
                if causal:
                    s = _mask_future(s, rows, cols)
                m_new = torch.maximum(m, s.amax(-1))
                p = torch.exp(s - m_new[..., None])
                rescale = torch.exp(m - m_new)  # what the old maximum's sums are worth under the new one
                l = rescale * l + p.sum(-1)  # noqa: E741
                acc = rescale[..., None] * acc + p @ v[..., cols.start : cols.stop, :].to(f)
                m = m_new
            out[..., rows.start : rows.stop, :] = (acc / l[..., None]).to(q.dtype)
            lse[..., rows.start : rows.stop] = m + torch.log(l)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.block_q, ctx.block_k = causal, block_q, block_k
        return out

    @staticmethod
    def backward(ctx, d_out):  # type: ignore[override]
        q, k, v, out, lse = ctx.saved_tensors
        scale = 1.0 / math.sqrt(q.shape[-1])
        n_q, n_k = q.shape[-2], k.shape[-2]
        f = lse.dtype
        d_out = d_out.to(f)
        delta = (d_out * out.to(f)).sum(-1)  # rowsum(dO ∘ O): the softmax Jacobian's correction term
        dq, dk, dv = (torch.zeros_like(t, dtype=f) for t in (q, k, v))
        for j in range(0, n_k, ctx.block_k):
            cols = range(j, min(j + ctx.block_k, n_k))
            k_j, v_j = k[..., cols.start : cols.stop, :].to(f), v[..., cols.start : cols.stop, :].to(f)
            first_row = (cols.start // ctx.block_q) * ctx.block_q if ctx.causal else 0
            for i in range(first_row, n_q, ctx.block_q):
                rows = range(i, min(i + ctx.block_q, n_q))
                q_i, do_i = q[..., rows.start : rows.stop, :].to(f), d_out[..., rows.start : rows.stop, :]
                s = (q_i @ k_j.transpose(-2, -1)) * scale
                if ctx.causal:
                    s = _mask_future(s, rows, cols)
                p = torch.exp(s - lse[..., rows.start : rows.stop, None])  # the softmax weights, recomputed
                dv[..., cols.start : cols.stop, :] += p.transpose(-2, -1) @ do_i
                dp = do_i @ v_j.transpose(-2, -1)
                ds = p * (dp - delta[..., rows.start : rows.stop, None])
                dq[..., rows.start : rows.stop, :] += (ds @ k_j) * scale
                dk[..., cols.start : cols.stop, :] += (ds.transpose(-2, -1) @ q_i) * scale
        grads = (
            g.sum_to_size(shape).to(t.dtype) for g, t, shape in zip((dq, dk, dv), (q, k, v), ctx.shapes, strict=True)
        )
        return *grads, None, None, None


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
) -> torch.Tensor:
    """``softmax(QKᵀ/√d)·V`` for q [..., T, d], k [..., S, d], v [..., S, dv], tile by tile (see the module docstring).

    ``is_causal``: query ``t`` sees keys ``≤ t`` (as ``F.scaled_dot_product_attention``), so it needs T = S.
    The leading dims broadcast: k and v with one head serve every query head (multi-query attention).
    Any tile sizes work; the result does not depend on them beyond float rounding.
    """
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"need q [..., T, d], k [..., S, d], v [..., S, dv]; got {q.shape}, {k.shape}, {v.shape}")
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading (batch, head) dims of q {tuple(q.shape[:-2])}, k {tuple(k.shape[:-2])} and v "
            f"{tuple(v.shape[:-2])} must match or broadcast; for grouped-query attention repeat each key/value head "
            "n_head / n_kv_head times first (repeat_interleave on the head dim)"
        ) from None
    if is_causal and q.shape[-2] != k.shape[-2]:
        raise ValueError(f"causal attention here needs as many queries as keys, got {q.shape[-2]} and {k.shape[-2]}")
    if block_q < 1 or block_k < 1:
        raise ValueError(f"block sizes must be positive, got {block_q} and {block_k}")
    return FlashAttention.apply(q, k, v, is_causal, block_q, block_k)
