"""Graders for notebook 11: the online softmax, the tiled FlashAttention forward and its tiled backward, and the
answers to Exercise 1 (a causal forward that skips the tiles above the diagonal) and Exercise 2 (a KV cache in GiB).

Each grader takes what the learner defined in the notebook and returns what the rest of the notebook should
use: the learner's own version when it passes, the course's otherwise. The wrong variants below are the
mistakes the graders recognise by their results; they are written here only to be recognised.

The references are independent of any tiling: float64 log-sum-exps of whole prefixes for the online softmax,
``F.scaled_dot_product_attention`` and the log-sum-exp of the full score matrix for the forward, autograd through
it for the backward. The probes use tile sizes that do not divide the sequence, so that a mistake at a tile's
edge shows.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from minillm.flash_attention import FlashAttention
from minillm.grading.core import Build, Mistake, Probe, grade
from minillm.model import GPTConfig

BUILDS = (
    "online_softmax_stats",
    "tiled_attention_forward",
    "tiled_attention_backward",
    "causal_tiled_forward",  # Exercise 1
    "kv_gib",  # Exercise 2
)

F64 = torch.float64


# ------------------------------------------------------------------------------------------ online softmax
def _stats_truth(x: torch.Tensor, block: int) -> tuple[float, float, list[tuple[float, float]]]:
    """(max, Σ exp(x − max), the same pair for every prefix that ends a block), from whole prefixes in float64."""
    x = x.detach().to(F64)
    trace = []
    for stop in range(block, len(x) + block, block):
        prefix = x[: min(stop, len(x))]
        m = prefix.max().item()
        trace.append((m, math.exp(torch.logsumexp(prefix, 0).item() - m)))
    return trace[-1][0], trace[-1][1], trace


def _stats_variant(*, rescale: str = "right", running_max: bool = True, shift: bool = True):
    """The notebook's one-pass loop with one thing written wrong."""

    def stats(x, block):
        m, l, trace = -math.inf, 0.0, []  # noqa: E741
        for start in range(0, len(x), block):
            chunk = x[start : start + block]
            m_new = max(m, chunk.max().item()) if running_max else chunk.max().item()
            terms = torch.exp(chunk - m_new).sum().item() if shift else torch.exp(chunk).sum().item()
            if rescale == "right":
                factor = math.exp(m - m_new) if shift else 1.0
            elif rescale == "missing":
                factor = 1.0
            else:  # "inverted": exp(m' − m), infinite at the first block (0 · inf = NaN)
                factor = math.exp(m_new - m)
            l = l * factor + terms  # noqa: E741
            m = m_new
            trace.append((m, l))
        return m, l, trace

    return stats


def _stats_case(name: str, make, block: int) -> Probe:
    def run(implementation: Any):
        return implementation(make(), block=block)

    return Probe(f"{name}, block {block}", run)


def _rising() -> torch.Tensor:  # a trend upwards: the maximum grows at most blocks
    g = torch.Generator().manual_seed(31)
    return torch.randn(23, generator=g, dtype=F64) * 2 + torch.arange(23, dtype=F64) * 0.5


def _around_1000() -> torch.Tensor:  # far past exp's range: only a shifted sum stays finite
    g = torch.Generator().manual_seed(32)
    return 1000 + 30 * torch.randn(40, generator=g, dtype=F64)


def _falling() -> torch.Tensor:  # the largest values first, then smaller blocks
    g = torch.Generator().manual_seed(33)
    return torch.randn(15, generator=g, dtype=F64) - torch.arange(15, dtype=F64)


ONLINE_SOFTMAX = Build(
    name="online_softmax_stats",
    what="the online softmax's running max and normaliser",
    truth=_stats_truth,
    truth_name="float64 logsumexp of every prefix",
    fallback=_stats_truth,
    fallback_name="the float64 reference (max and logsumexp of each prefix)",
    probes=(
        _stats_case("23 float64 numbers rising", _rising, 5),
        _stats_case("40 float64 numbers around 1000", _around_1000, 8),
        _stats_case("15 float64 numbers falling", _falling, 1),
    ),
    mistakes=(
        Mistake(
            "the online softmax missing the rescale of the running sum",
            "when the maximum grows from m to m', multiply the old sum by exp(m − m') before adding the block's terms.",
            _stats_variant(rescale="missing"),
        ),
        Mistake(
            "the rescale factor upside down",
            "the old sum was measured against m: under m' it is worth exp(m − m') ≤ 1, not exp(m' − m).",
            _stats_variant(rescale="inverted"),
        ),
        Mistake(
            "the running maximum replaced by the block's maximum",
            "m' = max(m, max of the block): the maximum of everything seen so far, never smaller than before.",
            _stats_variant(running_max=False),
        ),
        Mistake(
            "the running sum without the max subtracted",
            "add Σ exp(x − m') for the block, not Σ exp(x): exp overflows past about 709.",
            _stats_variant(shift=False),
        ),
    ),
    rtol=1e-11,
    atol=1e-12,
    what_is_compared="(m, l, trace per block)",
)


def online_softmax(learner: Any) -> Any:
    """Grade ``online_softmax_stats(x, block)`` → ``(m, l, trace)``: Python floats, trace = (m, l) after each block."""
    return grade(ONLINE_SOFTMAX, learner)


# -------------------------------------------------------------------------------------------- the forward
def _scores(q, k, causal):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        T, S = q.shape[-2], k.shape[-2]
        s = s.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), -math.inf)
    return s


def _forward_truth(q, k, v, causal=False, block_q=16, block_k=16):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return out, torch.logsumexp(_scores(q, k, causal), -1)


class _Saved:
    """A stand-in for autograd's ctx, so that minillm's FlashAttention forward and backward can be called directly."""

    def save_for_backward(self, *tensors: torch.Tensor) -> None:
        self.saved_tensors = tensors


def _forward_library(q, k, v, causal=False, block_q=16, block_k=16):
    """minillm.flash_attention's forward, returning the output and the log-sum-exp it saves for backward."""
    ctx = _Saved()
    with torch.no_grad():
        out = FlashAttention.forward(ctx, q, k, v, causal, block_q, block_k)
    return out, ctx.saved_tensors[4]


def _forward_variant(
    *,
    rescale_acc=True,
    rescale_l=True,
    mask="right",
    lse_max=True,
    scale_power=0.5,
):
    """The notebook's tiled forward with one thing written wrong."""

    def forward(q, k, v, causal=False, block_q=16, block_k=16):
        T, S = q.shape[-2], k.shape[-2]
        scale = q.shape[-1] ** -scale_power
        out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
        lse = torch.empty(q.shape[:-1], dtype=q.dtype)
        for i in range(0, T, block_q):
            q_i = q[..., i : i + block_q, :] * scale
            m = torch.full(q_i.shape[:-1], -math.inf, dtype=q.dtype)
            l = torch.zeros(q_i.shape[:-1], dtype=q.dtype)  # noqa: E741
            acc = torch.zeros(*q_i.shape[:-1], v.shape[-1], dtype=q.dtype)
            for j in range(0, S, block_k):
                s = q_i @ k[..., j : j + block_k, :].transpose(-2, -1)
                if causal:
                    local = mask == "local"
                    rows = torch.arange(q_i.shape[-2]) + (0 if local else i)
                    cols = torch.arange(s.shape[-1]) + (0 if local else j)
                    if mask == "own key hidden":
                        future = cols[None, :] >= rows[:, None]
                    elif mask == "next key seen":
                        future = cols[None, :] > rows[:, None] + 1
                    else:
                        future = cols[None, :] > rows[:, None]
                    s = s.masked_fill(future, -math.inf)
                m_new = torch.maximum(m, s.amax(-1))
                p = torch.exp(s - m_new[..., None])
                correction = torch.exp(m - m_new)
                l = (correction * l if rescale_l else l) + p.sum(-1)  # noqa: E741
                acc = (correction[..., None] * acc if rescale_acc else acc) + p @ v[..., j : j + block_k, :]
                m = m_new
            out[..., i : i + block_q, :] = acc / l[..., None]
            lse[..., i : i + block_q] = (m + torch.log(l)) if lse_max else torch.log(l)
        return out, lse

    return forward


def _qkv(seed: int, lead: tuple[int, ...], T: int, S: int, d: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*lead, T, d, generator=g, dtype=F64)
    k, v = (torch.randn(*lead, S, d, generator=g, dtype=F64) for _ in range(2))
    return q, k, v


_ATTENTION_CASES = (  # seed, (batch, heads), T, S, d, causal, block_q, block_k
    (41, (2, 3), 20, 20, 8, True, 6, 7),
    (42, (1, 2), 17, 11, 4, False, 5, 3),
    (43, (2, 2), 24, 24, 8, True, 8, 8),
)


def _describe(lead, T, S, d, causal, block_q, block_k) -> str:
    shape = "×".join(str(n) for n in lead)
    keys = f"T = {T}" if S == T else f"T = {T} queries, S = {S} keys"
    return f"{'causal' if causal else 'not causal'}, float64 {shape} heads, {keys}, d = {d}, tiles {block_q}×{block_k}"


def _forward_case(seed, lead, T, S, d, causal, block_q, block_k) -> Probe:
    def run(implementation: Any):
        q, k, v = _qkv(seed, lead, T, S, d)
        return implementation(q, k, v, causal, block_q, block_k)

    return Probe(_describe(lead, T, S, d, causal, block_q, block_k), run)


TILED_FORWARD = Build(
    name="tiled_attention_forward",
    what="the tiled forward (output and log-sum-exp)",
    truth=_forward_truth,
    truth_name="F.scaled_dot_product_attention and the float64 logsumexp of the full scores",
    fallback=_forward_library,
    fallback_name="minillm.flash_attention's forward",
    probes=tuple(_forward_case(*case) for case in _ATTENTION_CASES),
    mistakes=(
        Mistake(
            "the output accumulator not rescaled",
            "when the maximum grows, the running Σ exp(s − m)·v is rescaled by exp(m − m') too, like l.",
            _forward_variant(rescale_acc=False),
        ),
        Mistake(
            "the online softmax missing the rescale of the running sum",
            "l' = exp(m − m')·l + rowsum(P): the old normaliser was measured against the old maximum.",
            _forward_variant(rescale_l=False),
        ),
        Mistake(
            "the causal mask within a tile off by one (a query cannot see its own key)",
            "mask key positions > query position, not ≥: each token attends to itself.",
            _forward_variant(mask="own key hidden"),
        ),
        Mistake(
            "the causal mask within a tile off by one (a query sees the next key)",
            "mask every key position > query position: the next token is the future.",
            _forward_variant(mask="next key seen"),
        ),
        Mistake(
            "the causal mask built from positions within the tile",
            "compare the positions in the sequence: rows i … i + block_q − 1 and columns j … j + block_k − 1.",
            _forward_variant(mask="local"),
        ),
        Mistake(
            "the saved log-sum-exp missing the running max",
            "save L = m + log l: l alone was measured against the maximum m.",
            _forward_variant(lse_max=False),
        ),
        Mistake(
            "scores scaled by 1/d instead of 1/√d",
            "scale q by 1/√d (d the head width), as softmax(QKᵀ/√d) says.",
            _forward_variant(scale_power=1.0),
        ),
    ),
    rtol=1e-10,
    atol=1e-12,
    what_is_compared="(output, log-sum-exp)",
)


def tiled_forward(learner: Any) -> Any:
    """Grade ``tiled_attention_forward(q, k, v, causal, block_q, block_k)`` → ``(out [..., T, dv], lse [..., T])``."""
    return grade(TILED_FORWARD, learner)


# ------------------------------------------------------------------------------------------- the backward
def _backward_truth(q, k, v, out, lse, d_out, causal=False, block_q=16, block_k=16):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    with torch.enable_grad():
        result = F.scaled_dot_product_attention(*leaves, is_causal=causal)
        return torch.autograd.grad(result, leaves, d_out)


def _backward_library(q, k, v, out, lse, d_out, causal=False, block_q=16, block_k=16):
    """minillm.flash_attention's backward, fed the forward's output and log-sum-exp."""
    ctx = _Saved()
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.shapes, ctx.causal, ctx.block_q, ctx.block_k = (q.shape, k.shape, v.shape), causal, block_q, block_k
    with torch.no_grad():
        dq, dk, dv, *_ = FlashAttention.backward(ctx, d_out)
    return dq, dk, dv


def _backward_variant(*, delta="row", scale_grads=True, p_from="lse", mask=True):
    """The notebook's tiled backward with one thing written wrong."""

    def backward(q, k, v, out, lse, d_out, causal=False, block_q=16, block_k=16):
        T, S = q.shape[-2], k.shape[-2]
        scale = 1 / math.sqrt(q.shape[-1])
        D = (d_out * out).sum(-1)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for j in range(0, S, block_k):
            k_j, v_j = k[..., j : j + block_k, :], v[..., j : j + block_k, :]
            cols = torch.arange(j, j + k_j.shape[-2])
            for i in range(0, T, block_q):
                q_i, do_i = q[..., i : i + block_q, :], d_out[..., i : i + block_q, :]
                s = q_i @ k_j.transpose(-2, -1) * scale
                if causal and mask:
                    rows = torch.arange(i, i + q_i.shape[-2])
                    s = s.masked_fill(cols[None, :] > rows[:, None], -math.inf)
                p = torch.exp(s - lse[..., i : i + block_q, None]) if p_from == "lse" else torch.softmax(s, -1)
                dv[..., j : j + block_k, :] += p.transpose(-2, -1) @ do_i
                dp = do_i @ v_j.transpose(-2, -1)
                if delta == "row":
                    ds = p * (dp - D[..., i : i + block_q, None])
                elif delta == "tile":
                    ds = p * (dp - (p * dp).sum(-1, keepdim=True))
                else:  # left out
                    ds = p * dp
                factor = scale if scale_grads else 1.0
                dq[..., i : i + block_q, :] += ds @ k_j * factor
                dk[..., j : j + block_k, :] += ds.transpose(-2, -1) @ q_i * factor
        return dq, dk, dv

    return backward


def _backward_case(seed, lead, T, S, d, causal, block_q, block_k) -> Probe:
    def run(implementation: Any):
        q, k, v = _qkv(seed, lead, T, S, d)
        d_out = torch.randn(*lead, T, d, generator=torch.Generator().manual_seed(seed + 100), dtype=F64)
        out, lse = _forward_truth(q, k, v, causal)
        return implementation(q, k, v, out, lse, d_out, causal, block_q, block_k)

    return Probe(_describe(lead, T, S, d, causal, block_q, block_k) + ", exact out and lse given", run)


TILED_BACKWARD = Build(
    name="tiled_attention_backward",
    what="the tiled backward (dQ, dK, dV)",
    truth=_backward_truth,
    truth_name="autograd through F.scaled_dot_product_attention",
    fallback=_backward_library,
    fallback_name="minillm.flash_attention's backward",
    probes=tuple(_backward_case(*case) for case in _ATTENTION_CASES),
    mistakes=(
        Mistake(
            "D left out of dS",
            "the softmax's Jacobian gives dS = P ∘ (dP − D) with D = rowsum(dO ∘ O), one number per query row.",
            _backward_variant(delta="none"),
        ),
        Mistake(
            "D summed over one tile, not the whole row",
            "D_i = Σ_j P_ij dP_ij runs over every key: compute it once before the loop as rowsum(dO ∘ O).",
            _backward_variant(delta="tile"),
        ),
        Mistake(
            "P recomputed as the tile's own softmax",
            "a tile holds only part of the row: recompute P = exp(S − L) with the saved log-sum-exp L.",
            _backward_variant(p_from="tile softmax"),
        ),
        Mistake(
            "the 1/√d scale missing from dQ and dK",
            "S = QKᵀ/√d, so dQ = dS·K/√d and dK = dSᵀ·Q/√d.",
            _backward_variant(scale_grads=False),
        ),
        Mistake(
            "the causal mask left out of backward",
            "mask the recomputed scores as in forward, or P = exp(S − L) gives weight to future keys.",
            _backward_variant(mask=False),
        ),
    ),
    rtol=1e-10,
    atol=1e-12,
    what_is_compared="gradients (dQ, dK, dV)",
)


def tiled_backward(learner: Any) -> Any:
    """Grade ``tiled_attention_backward(q, k, v, out, lse, d_out, causal, block_q, block_k)`` → ``(dq, dk, dv)``."""
    return grade(TILED_BACKWARD, learner)


# ------------------------------------------------------------------------- Exercise 1: skip the masked tiles
def _visible_tiles(T: int, block_q: int, block_k: int) -> int:
    """How many block_q × block_k tiles hold at least one key a query may see, counted from the causal mask."""
    visible = torch.ones(T, T, dtype=torch.bool).tril()
    return sum(
        bool(visible[i : i + block_q, j : j + block_k].any())
        for i in range(0, T, block_q)
        for j in range(0, T, block_k)
    )


def _causal_tiles_truth(q, k, v, block_q=32, block_k=32):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True), _visible_tiles(q.shape[-2], block_q, block_k)


def _causal_tiles_library(q, k, v, block_q=32, block_k=32):
    """minillm.flash_attention's causal forward (it skips the same tiles) and the number of tiles its loops visit."""
    T = q.shape[-2]
    tiles = sum(len(range(0, min(i + block_q, T), block_k)) for i in range(0, T, block_q))
    return _forward_library(q, k, v, True, block_q, block_k)[0], tiles


def _causal_tiles_variant(*, stop="last query", mask="crossing"):
    """The exercise's causal forward with one thing written wrong."""

    def forward(q, k, v, block_q=32, block_k=32):
        T = q.shape[-2]
        scale = 1 / math.sqrt(q.shape[-1])
        out, tiles = torch.empty_like(q), 0
        for i in range(0, T, block_q):
            q_i = q[..., i : i + block_q, :] * scale
            rows = torch.arange(i, i + q_i.shape[-2])
            m = torch.full(q_i.shape[:-1], -math.inf, dtype=q.dtype)
            l = torch.zeros(q_i.shape[:-1], dtype=q.dtype)  # noqa: E741
            acc = torch.zeros_like(q_i)
            last = {"last query": int(rows[-1]) + 1, "first query": i + 1, "every tile": T}[stop]
            for j in range(0, last, block_k):
                tiles += 1
                s = q_i @ k[..., j : j + block_k, :].transpose(-2, -1)
                cols = torch.arange(j, j + s.shape[-1])
                if mask == "own key hidden":
                    s = s.masked_fill(cols[None, :] >= rows[:, None], -math.inf)
                elif (mask == "crossing" and cols[-1] > rows[0]) or (mask == "diagonal tile" and j == i):
                    s = s.masked_fill(cols[None, :] > rows[:, None], -math.inf)
                m_new = torch.maximum(m, s.amax(-1))
                p = torch.exp(s - m_new[..., None])
                correction = torch.exp(m - m_new)
                l = correction * l + p.sum(-1)  # noqa: E741
                acc = correction[..., None] * acc + p @ v[..., j : j + block_k, :]
                m = m_new
            out[..., i : i + block_q, :] = acc / l[..., None]
        return out, tiles

    return forward


_CAUSAL_TILE_CASES = (  # seed, (batch, heads), T, d, block_q, block_k: the exercise's own first, then uneven tiles
    (61, (1, 2), 256, 16, 32, 32),
    (62, (2, 3), 20, 8, 6, 4),
    (63, (1, 2), 23, 8, 5, 7),
)


def _causal_tiles_case(seed, lead, T, d, block_q, block_k) -> Probe:
    def run(implementation: Any):
        q, k, v = _qkv(seed, lead, T, T, d)
        return implementation(q, k, v, block_q=block_q, block_k=block_k)

    shape = "×".join(str(n) for n in lead)
    return Probe(f"float64 {shape} heads, T = {T}, d = {d}, tiles {block_q}×{block_k}", run)


CAUSAL_TILED_FORWARD = Build(
    name="causal_tiled_forward",
    what="the causal forward over the visible tiles only (output and tile count)",
    truth=_causal_tiles_truth,
    truth_name="F.scaled_dot_product_attention(is_causal=True) and the tiles the causal mask leaves visible",
    fallback=_causal_tiles_library,
    fallback_name="minillm.flash_attention's causal forward (it skips the same tiles)",
    probes=tuple(_causal_tiles_case(*case) for case in _CAUSAL_TILE_CASES),
    mistakes=(
        Mistake(
            "every tile visited, none skipped",
            "stop the key loop after the tile that holds the block's last query: every later tile is all −inf.",
            _causal_tiles_variant(stop="every tile"),
        ),
        Mistake(
            "the key loop stopped at the block's first query, not its last",
            "the block's last query sees keys up to its own position: run j up to rows[-1], not just i.",
            _causal_tiles_variant(stop="first query"),
        ),
        Mistake(
            "the mask left off the tiles that cross the diagonal",
            "a tile that holds the diagonal is partly in the future: mask key positions > query positions there.",
            _causal_tiles_variant(mask="none"),
        ),
        Mistake(
            "the mask applied only to the tile with j == i (square tiles assumed)",
            "with block_q ≠ block_k the diagonal crosses other tiles: mask each tile whose last key > its first query.",
            _causal_tiles_variant(mask="diagonal tile"),
        ),
        Mistake(
            "the causal mask off by one (a query cannot see its own key)",
            "mask key positions > query position, not ≥: each token attends to itself.",
            _causal_tiles_variant(mask="own key hidden"),
        ),
    ),
    rtol=1e-10,
    atol=1e-12,
    what_is_compared="(output, tiles computed)",
)


def causal_tiled_forward(learner: Any) -> Any:
    """Grade ``causal_tiled_forward(q, k, v, block_q, block_k)`` → ``(out [..., T, d], tiles computed)``."""
    return grade(CAUSAL_TILED_FORWARD, learner)


# ----------------------------------------------------------------------------- Exercise 2: a KV cache in GiB
_DTYPE_OF_SIZE = {1: torch.uint8, 2: torch.bfloat16, 4: torch.float32, 8: torch.float64}


def _kv_gib_truth(n_layer, n_kv, head_dim, tokens, batch=1, bytes_per_value=2):
    """The bytes of the tensors a cache holds (a key and a value tensor per layer, on the meta device), in GiB."""
    shape, dtype = (batch, n_kv, tokens, head_dim), _DTYPE_OF_SIZE[bytes_per_value]
    held = [torch.empty(shape, dtype=dtype, device="meta") for _layer in range(n_layer) for _kv in ("k", "v")]
    return sum(t.nbytes for t in held) / 2**30


def _kv_gib_library(n_layer, n_kv, head_dim, tokens, batch=1, bytes_per_value=2):
    """minillm's GPTConfig.kv_cache_bytes, for a config with these key/value heads, in GiB."""
    config = GPTConfig(n_layer=n_layer, n_head=n_kv, n_kv_head=n_kv, d_model=n_kv * head_dim, context_length=tokens)
    return config.kv_cache_bytes(batch_size=batch, seq_len=tokens, bytes_per_value=bytes_per_value) / 2**30


def _kv_gib_variant(*, tensors=2, unit=2**30, batch_counted=True, bytes_counted=True):
    """The cache size with one thing written wrong."""

    def kv_gib(n_layer, n_kv, head_dim, tokens, batch=1, bytes_per_value=2):
        values = tensors * n_layer * (batch if batch_counted else 1) * tokens * n_kv * head_dim
        return values * (bytes_per_value if bytes_counted else 1) / unit

    return kv_gib


_KV_CASES = (  # n_layer, n_kv, head_dim, tokens, batch, bytes_per_value — an unlike case first: it tells mistakes apart
    (12, 4, 64, 1000, 3, 4),
    (32, 32, 128, 8192, 1, 2),
    (32, 8, 128, 8192, 1, 2),
)


def _kv_case(n_layer, n_kv, head_dim, tokens, batch, bytes_per_value) -> Probe:
    def run(implementation: Any):
        return implementation(n_layer, n_kv, head_dim, tokens, batch=batch, bytes_per_value=bytes_per_value)

    return Probe(
        f"{n_layer} layers, {n_kv} KV heads of {head_dim}, {tokens} tokens, batch {batch}, {bytes_per_value} bytes",
        run,
    )


KV_GIB = Build(
    name="kv_gib",
    what="the KV cache's size in GiB",
    truth=_kv_gib_truth,
    truth_name="the bytes of a key and a value tensor per layer (meta tensors)",
    fallback=_kv_gib_library,
    fallback_name="minillm's GPTConfig.kv_cache_bytes / 2**30",
    probes=tuple(_kv_case(*case) for case in _KV_CASES),
    mistakes=(
        Mistake(
            "the cache counted for K only, not K and V",
            "every layer caches a key and a value for each token and KV head: the factor 2.",
            _kv_gib_variant(tensors=1),
        ),
        Mistake(
            "GB (10⁹ bytes) instead of GiB (2³⁰ bytes)",
            "a GiB is 2**30 = 1,073,741,824 bytes.",
            _kv_gib_variant(unit=10**9),
        ),
        Mistake(
            "the batch left out",
            "each sequence of the batch has its own cache: multiply by batch.",
            _kv_gib_variant(batch_counted=False),
        ),
        Mistake(
            "values counted, not bytes (bytes_per_value left out)",
            "each cached value takes bytes_per_value bytes (2 in bf16).",
            _kv_gib_variant(bytes_counted=False),
        ),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="size in GiB",
)


def kv_gib(learner: Any) -> Any:
    """Grade ``kv_gib(n_layer, n_kv, head_dim, tokens, batch=1, bytes_per_value=2)`` → the cache's GiB (a float)."""
    return grade(KV_GIB, learner)
