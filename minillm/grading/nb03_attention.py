"""Graders for notebook 03: causal attention, multi-head attention, greedy decoding with the KV cache, and the
exercises' Llama-style parameter count by hand (exercise 2) and top-p filtering (exercise 3).

Each grader takes what the learner defined in the notebook and returns what the rest of the notebook should
use: the learner's own version when it passes, ``minillm``'s otherwise. The wrong variants below are the
mistakes the graders recognise by their results; they are written here only to be recognised.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from minillm import attention
from minillm.grading.core import Build, Mistake, Probe, grade
from minillm.model import GPT, GPTConfig, count_parameters

BUILDS = ("causal_attention", "multi_head_attention", "greedy_decode", "parameters_by_hand", "nucleus")

F64 = torch.float64


def _randn(generator: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=generator, dtype=F64) * scale


# ------------------------------------------------------------------------------------- causal attention
def _attention_case(seed: int, shape: tuple[int, ...], scale: float = 1.0) -> Probe:
    def run(causal_attention: Any) -> Any:
        g = torch.Generator().manual_seed(seed)
        q, k, v = (_randn(g, *shape, scale=scale) for _ in range(3))
        return causal_attention(q, k, v)

    return Probe(f"q, k, v {list(shape)} float64" + (f" of scale {scale:g}" if scale != 1.0 else ""), run)


def _reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's fused attention; the weights are what it returns for v = the identity (one column per key)."""
    T = q.shape[-2]
    identity = torch.eye(T, dtype=q.dtype).expand(*q.shape[:-1], T)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return out, F.scaled_dot_product_attention(q, k, identity, is_causal=True)


def _library_attention(q, k, v):
    return attention.scaled_dot_product_attention(q, k, v, is_causal=True, return_weights=True)


def _attend(q, k, v, *, diagonal=0, upper=False, masked=True, scale=None, axis=-1):
    T, d = q.shape[-2], q.shape[-1]
    scores = q @ k.transpose(-2, -1) / (math.sqrt(d) if scale is None else scale(d))
    if masked:
        ones = torch.ones(T, T, dtype=torch.bool)
        allowed = ones.triu(diagonal) if upper else ones.tril(diagonal)
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=axis)
    return weights @ v, weights


def _sees_next(q, k, v):
    return _attend(q, k, v, diagonal=1)


def _not_itself(q, k, v):
    return _attend(q, k, v, diagonal=-1)


def _sees_future(q, k, v):
    return _attend(q, k, v, upper=True)


def _no_mask(q, k, v):
    return _attend(q, k, v, masked=False)


def _scaled_by_d(q, k, v):
    return _attend(q, k, v, scale=float)


def _unscaled(q, k, v):
    return _attend(q, k, v, scale=lambda d: 1.0)


def _softmax_over_queries(q, k, v):
    return _attend(q, k, v, axis=-2)


ATTENTION = Build(
    name="causal_attention",
    what="causal attention (output and weights)",
    truth=_reference_attention,
    truth_name="torch.nn.functional.scaled_dot_product_attention(is_causal=True)",
    fallback=_library_attention,
    fallback_name="minillm.attention.scaled_dot_product_attention",
    probes=(
        _attention_case(1, (1, 5, 8)),
        _attention_case(2, (2, 7, 4), scale=2.0),
        _attention_case(3, (2, 3, 6, 16)),
    ),
    mistakes=(
        Mistake(
            "the causal mask off by one (each token sees the next one)",
            "query i may attend to keys 0 … i: torch.ones(T, T).tril() (diagonal 0), not tril(1).",
            _sees_next,
        ),
        Mistake(
            "the causal mask off by one (a token cannot see itself)",
            "keep the diagonal: query i attends to keys 0 … i, including i (tril(), not tril(-1)).",
            _not_itself,
        ),
        Mistake(
            "the mask letting a token see the future",
            "True = may attend must be LOWER-triangular (tril): query i sees keys j ≤ i, never j > i.",
            _sees_future,
        ),
        Mistake("no causal mask", "set the scores of keys j > i to −inf before the softmax.", _no_mask),
        Mistake("scores scaled by d instead of √d", "divide q·kᵀ by math.sqrt(d), not by d.", _scaled_by_d),
        Mistake("the scores not scaled", "divide q·kᵀ by √d before the mask and the softmax.", _unscaled),
        Mistake(
            "softmax over the wrong axis",
            "each query's weights over the keys sum to 1: softmax(dim=-1), the last (key) axis.",
            _softmax_over_queries,
        ),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="(output, weights) pair",
)


def causal_attention(learner: Any) -> Any:
    """Grade ``causal_attention(q, k, v)``: q, k, v [..., T, d] → (out [..., T, d], weights [..., T, T])."""
    return grade(ATTENTION, learner)


# ------------------------------------------------------------------------------------------- multi-head
def _mha_case(seed: int, batch: int, T: int, d: int, n_head: int) -> Probe:
    def run(multi_head_attention: Any) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        x = _randn(g, batch, T, d)
        W_qkv, W_o = _randn(g, 3 * d, d, scale=d**-0.5), _randn(g, d, d, scale=d**-0.5)
        return multi_head_attention(x, W_qkv, W_o, n_head)

    return Probe(f"x [{batch}, {T}, {d}] float64, {n_head} heads of {d // n_head}", run)


def _reference_mha(x: torch.Tensor, W_qkv: torch.Tensor, W_o: torch.Tensor, n_head: int) -> torch.Tensor:
    """torch.nn.MultiheadAttention with the same weights (its mask: True = NOT allowed)."""
    B, T, d = x.shape
    with torch.random.fork_rng(devices=[]):  # its constructor draws initial weights: keep the notebook's stream
        module = nn.MultiheadAttention(d, n_head, bias=False, batch_first=True, dtype=x.dtype)
    with torch.no_grad():
        module.in_proj_weight.copy_(W_qkv)
        module.out_proj.weight.copy_(W_o)
    blocked = ~torch.ones(T, T, dtype=torch.bool).tril()
    return module(x, x, x, attn_mask=blocked, need_weights=False)[0].detach()


def _library_mha(x: torch.Tensor, W_qkv: torch.Tensor, W_o: torch.Tensor, n_head: int) -> torch.Tensor:
    """minillm's CausalSelfAttention holding W_qkv and W_o (nn.Linear layout [out, in])."""
    with torch.random.fork_rng(devices=[]):
        module = attention.CausalSelfAttention(x.shape[-1], n_head, bias=False)
    module = module.to(device=x.device, dtype=x.dtype)
    with torch.no_grad():
        module.qkv.weight.copy_(W_qkv)
        module.proj.weight.copy_(W_o)
    return module(x)


def _heads(x, W_qkv, W_o, n_head, *, split="right", merge="right", width="head", masked=True):
    B, T, d = x.shape
    q, k, v = (x @ W_qkv.T).split(d, dim=-1)
    if split == "right":
        q, k, v = (t.view(B, T, n_head, d // n_head).transpose(1, 2) for t in (q, k, v))
    else:  # a reshape straight to [B, h, T, d/h]: each "head" gets a block of positions, not of features
        q, k, v = (t.reshape(B, n_head, T, d // n_head) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(d // n_head if width == "head" else d)
    if masked:
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    heads = torch.softmax(scores, dim=-1) @ v
    merged = heads.transpose(1, 2).reshape(B, T, d) if merge == "right" else heads.reshape(B, T, d)
    return merged @ W_o.T


def _split_without_transpose(x, W_qkv, W_o, n_head):
    return _heads(x, W_qkv, W_o, n_head, split="reshape")


def _merge_without_transpose(x, W_qkv, W_o, n_head):
    return _heads(x, W_qkv, W_o, n_head, merge="reshape")


def _scaled_by_width(x, W_qkv, W_o, n_head):
    return _heads(x, W_qkv, W_o, n_head, width="model")


def _mha_no_mask(x, W_qkv, W_o, n_head):
    return _heads(x, W_qkv, W_o, n_head, masked=False)


MULTI_HEAD = Build(
    name="multi_head_attention",
    what="causal multi-head attention",
    truth=_reference_mha,
    truth_name="torch.nn.MultiheadAttention",
    fallback=_library_mha,
    fallback_name="minillm.attention.CausalSelfAttention",
    probes=(_mha_case(1, 2, 6, 32, 4), _mha_case(2, 1, 5, 12, 3), _mha_case(3, 3, 4, 16, 2)),
    mistakes=(
        Mistake(
            "heads split in the wrong layout",
            "view(B, T, h, d/h) first, then transpose(1, 2): a reshape straight to [B, h, T, d/h] mixes positions.",
            _split_without_transpose,
        ),
        Mistake(
            "heads merged without transposing back",
            "heads [B, h, T, d/h] → transpose(1, 2) → reshape(B, T, d): concatenate each position's heads.",
            _merge_without_transpose,
        ),
        Mistake(
            "scores scaled by √d of the whole width",
            "each head's scores are divided by √(d/h), the head's own width.",
            _scaled_by_width,
        ),
        Mistake("no causal mask", "mask the scores of future keys (j > i) with −inf in every head.", _mha_no_mask),
    ),
    rtol=1e-9,
    atol=1e-12,
    what_is_compared="output",
)


def multi_head_attention(learner: Any) -> Any:
    """Grade ``multi_head_attention(x, W_qkv, W_o, n_head)``: x [B, T, d], W_qkv [3d, d], W_o [d, d] → [B, T, d]."""
    return grade(MULTI_HEAD, learner)


# ------------------------------------------------------------------------------- greedy decoding + cache
def _tiny_gpt(seed: int, preset: str) -> GPT:
    config = GPTConfig.preset(preset, vocab_size=23, context_length=64, n_layer=2, n_head=2, d_model=16)
    with torch.random.fork_rng(devices=[]):  # the model's initial weights come from its own seed
        torch.manual_seed(seed)
        return GPT(config).to(F64).eval()


def _decode_case(seed: int, preset: str, batch: int, prompt: int, n_new: int, use_cache: bool) -> Probe:
    def run(greedy_decode: Any) -> tuple[torch.Tensor, torch.Tensor, int]:
        model = _tiny_gpt(seed, preset)
        ids = torch.randint(0, 23, (batch, prompt), generator=torch.Generator().manual_seed(seed))
        tokens, logits, seconds = greedy_decode(model, ids, n_new, use_cache)
        return tokens, logits, len(seconds)

    described = f"a tiny {preset} GPT, {batch}×{prompt} prompt, {n_new} new tokens, use_cache={use_cache}"
    return Probe(described, run)


@torch.no_grad()
def _reference_decode(model, ids, n_new, use_cache):
    """Greedy decoding by recomputing every position at every step (no cache, whatever use_cache says)."""
    step_logits = []
    for _ in range(n_new):
        logits = model(ids)[:, -1]
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
        step_logits.append(logits)
    return ids, torch.stack(step_logits, dim=1), [0.0] * n_new


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def _library_decode(model, ids, n_new, use_cache):
    """The notebook's interface on minillm's KV cache: (tokens, every step's logits [B, n_new, V], seconds)."""
    cache = model.new_kv_cache(ids.shape[0]) if use_cache else None
    step_input, step_logits, step_seconds = ids, [], []
    for _ in range(n_new):
        _synchronize(ids.device)
        start = time.perf_counter()
        logits = model(step_input, kv_cache=cache)[:, -1] if use_cache else model(ids)[:, -1]
        next_id = logits.argmax(-1, keepdim=True)
        _synchronize(ids.device)
        step_seconds.append(time.perf_counter() - start)
        ids, step_input = torch.cat([ids, next_id], dim=1), next_id
        step_logits.append(logits)
    return ids, torch.stack(step_logits, dim=1), step_seconds


@torch.no_grad()
def _decode(model, ids, n_new, use_cache, *, refeed=False, fresh_cache=False, first=False, append=True):
    cache = model.new_kv_cache(ids.shape[0]) if use_cache else None
    step_input, step_logits = ids, []
    for _ in range(n_new):
        if use_cache and fresh_cache:
            cache = model.new_kv_cache(ids.shape[0])
        out = model(step_input, kv_cache=cache) if use_cache else model(ids)
        logits = out[:, 0] if first else out[:, -1]
        next_id = logits.argmax(-1, keepdim=True)
        grown = torch.cat([ids, next_id], dim=1)
        ids = grown if append else ids
        step_input = grown if refeed else next_id
        step_logits.append(logits)
    return ids, torch.stack(step_logits, dim=1), [0.0] * n_new


def _refeeds_everything(model, ids, n_new, use_cache):
    return _decode(model, ids, n_new, use_cache, refeed=True)


def _new_cache_every_step(model, ids, n_new, use_cache):
    return _decode(model, ids, n_new, use_cache, fresh_cache=True)


def _first_position(model, ids, n_new, use_cache):
    return _decode(model, ids, n_new, use_cache, first=True)


def _tokens_not_appended(model, ids, n_new, use_cache):
    return _decode(model, ids, n_new, use_cache, append=False)


DECODE = Build(
    name="greedy_decode",
    what="greedy decoding with and without the KV cache",
    truth=_reference_decode,
    truth_name="a full recompute at every step",
    fallback=_library_decode,
    fallback_name="minillm's KV cache (model.new_kv_cache)",
    probes=(
        _decode_case(1, "gpt2-style", 2, 4, 6, True),
        _decode_case(2, "gpt2-style", 1, 3, 5, False),
        _decode_case(3, "llama-style", 1, 5, 7, True),
    ),
    mistakes=(
        Mistake(
            "the whole sequence fed again with the cache",
            "the cache already holds every earlier position: after the prompt, feed only the new token (next_id).",
            _refeeds_everything,
        ),
        Mistake(
            "a new cache at every step",
            "make the cache once, before the loop: the new token's query must see the keys of all earlier tokens.",
            _new_cache_every_step,
        ),
        Mistake(
            "the logits of the first position, not the last",
            "the next token is predicted at the last position: logits[:, -1].",
            _first_position,
        ),
        Mistake(
            "the new token not appended",
            "ids = torch.cat([ids, next_id], dim=1) at every step: the sequence grows by one token.",
            _tokens_not_appended,
        ),
    ),
    rtol=1e-9,
    atol=1e-10,
    what_is_compared="result (tokens, logits, number of steps timed)",
)


def greedy_decode(learner: Any) -> Any:
    """Grade ``greedy_decode(model, ids, n_new, use_cache)`` → (ids [B, T + n_new], logits [B, n_new, V], seconds)."""
    return grade(DECODE, learner)


# -------------------------------------------------------------- exercise 2: a Llama-style model's parameters
def _count_case(**shape: int) -> Probe:
    config = GPTConfig.preset("llama-style", **shape)

    def run(parameters_by_hand: Any) -> Any:
        return parameters_by_hand(config)

    described = ", ".join(f"{k}={v}" for k, v in shape.items() if k != "context_length")
    return Probe(f"GPTConfig.preset('llama-style', {described}) (d_ff={config.d_ff})", run)


def _built_and_counted(cfg: GPTConfig) -> int:
    """Build the model (on the meta device: shapes, no memory) and add up the sizes of its parameter tensors."""
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        model = GPT(cfg)
    return sum(p.numel() for p in model.parameters())


def _by_hand(cfg, *, head=True, norms=2, mlp=3, final=True, norm_width=1):
    V, d, L, f = cfg.vocab_size, cfg.d_model, cfg.n_layer, cfg.d_ff
    block = norms * norm_width * d + 4 * d * d + mlp * d * f
    return V * d + L * block + (norm_width * d if final else 0) + (V * d if head else 0)


def _head_tied(cfg):
    return _by_hand(cfg, head=False)


def _one_norm_per_block(cfg):
    return _by_hand(cfg, norms=1)


def _two_mlp_matrices(cfg):
    return _by_hand(cfg, mlp=2)


def _no_final_norm(cfg):
    return _by_hand(cfg, final=False)


def _layernorm_biases(cfg):
    return _by_hand(cfg, norm_width=2)


PARAMETERS = Build(
    name="parameters_by_hand",
    what="the parameter count of a Llama-style GPT",
    truth=_built_and_counted,
    truth_name="the sum of the sizes of GPT(cfg)'s parameter tensors",
    fallback=count_parameters,
    fallback_name="minillm.model.count_parameters",
    probes=(
        _count_case(vocab_size=256, context_length=64, n_layer=4, n_head=4, d_model=128),
        _count_case(vocab_size=1000, context_length=32, n_layer=2, n_head=3, d_model=96),
        _count_case(vocab_size=50, context_length=16, n_layer=3, n_head=2, d_model=64, d_ff=200),
    ),
    mistakes=(
        Mistake(
            "the head tied to the embedding",
            "llama_cfg's LM head is its own V×d matrix (tie_embeddings=False): count V·d twice.",
            _head_tied,
        ),
        Mistake(
            "one norm per block, not two",
            "each block normalises before attention AND before the MLP: 2·d gains per block.",
            _one_norm_per_block,
        ),
        Mistake(
            "the MLP with two matrices, not SwiGLU's three",
            "SwiGLU has a gate, an up and a down projection: 3·d·d_ff per block, not GELU's 2·d·d_ff.",
            _two_mlp_matrices,
        ),
        Mistake(
            "the final norm left out",
            "after the last block one more RMSNorm (d gains) comes before the head.",
            _no_final_norm,
        ),
        Mistake(
            "LayerNorm biases counted",
            "RMSNorm has a gain and no bias: d parameters per norm, not LayerNorm's 2·d.",
            _layernorm_biases,
        ),
    ),
    rtol=0.0,
    atol=0.0,
    what_is_compared="count",
)


def parameters_by_hand(learner: Any) -> Any:
    """Grade exercise 2's ``parameters_by_hand(cfg=llama_cfg) -> int``: the parameters of ``GPT(cfg)`` for a
    Llama-style ``cfg`` (RMSNorm, SwiGLU, no biases, an untied head, as many key/value heads as heads)."""
    return grade(PARAMETERS, learner)


# --------------------------------------------------------------------------- exercise 3: top-p (nucleus)
def _distribution(seed: int, size: int, scale: float, top: float | None = None) -> torch.Tensor:
    """A float32 next-token distribution: softmax of scaled Gaussian logits (optionally one token of mass ``top``)."""
    logits = torch.randn(size, generator=torch.Generator().manual_seed(seed), dtype=F64) * scale
    probs = torch.softmax(logits, -1)
    if top is not None:  # token `seed` gets `top` on top of its share: it alone reaches any p ≤ top
        probs = probs * (1 - top)
        probs[seed] += top
    return probs.float()


def _nucleus_case(seed: int, size: int, scale: float, p: float, top: float | None = None) -> Probe:
    def run(nucleus: Any) -> Any:
        return nucleus(_distribution(seed, size, scale, top), p)

    what = f"a float32 distribution over {size} tokens" + (f" (one token holds {top:g})" if top else "")
    return Probe(f"{what}, p = {p:g}", run)


def _reference_nucleus(probs: torch.Tensor, p: float) -> set[int]:
    """Without sorting, in float64: token j stays when the tokens more likely than it hold less than p."""
    q = probs.to(F64)
    above = (q[None, :] * (q[None, :] > q[:, None])).sum(-1)  # above[j] = Σ q_i over q_i > q_j
    return {j for j in range(len(q)) if above[j] < p}


def _library_nucleus(probs: torch.Tensor, p: float) -> set[int]:
    """The rule of minillm.model.sample_next_token's top_p: drop a token when those ranked above it reach p."""
    sorted_p, order = torch.sort(probs, descending=True)
    drop = sorted_p.cumsum(-1) - sorted_p >= p
    return set(order[~drop].tolist())


def _nucleus(probs, p, *, descending=True, own=False, positions=False, complement=False):
    sorted_p, order = torch.sort(probs, descending=descending)
    before = sorted_p.cumsum(0) - (0 if own else sorted_p)
    keep = before >= p if complement else before < p
    return set(keep.nonzero().flatten().tolist()) if positions else set(order[keep].tolist())


def _crossing_token_dropped(probs, p):
    return _nucleus(probs, p, own=True)


def _ascending(probs, p):
    return _nucleus(probs, p, descending=False)


def _sorted_positions(probs, p):
    return _nucleus(probs, p, positions=True)


def _complement(probs, p):
    return _nucleus(probs, p, complement=True)


NUCLEUS = Build(
    name="nucleus",
    what="the top-p (nucleus) set",
    truth=_reference_nucleus,
    truth_name="an unsorted float64 sum of the mass above each token",
    fallback=_library_nucleus,
    fallback_name="the top-p rule of minillm.model.sample_next_token",
    probes=(
        _nucleus_case(1, 256, 2.5, 0.9),
        _nucleus_case(2, 10, 1.0, 0.5),
        _nucleus_case(3, 40, 1.0, 0.5, top=0.6),
    ),
    mistakes=(
        Mistake(
            "the token that reaches p left out",
            "keep a token while the tokens BEFORE it hold less than p (cumsum − own probability < p): the one "
            "that crosses p belongs to the nucleus.",
            _crossing_token_dropped,
        ),
        Mistake(
            "sorted ascending",
            "sort with descending=True: the nucleus is the most likely tokens, not the least likely.",
            _ascending,
        ),
        Mistake(
            "positions in the sorted order, not token ids",
            "map the kept sorted positions back to token ids through the sort's indices: order[keep].",
            _sorted_positions,
        ),
        Mistake(
            "the kept and the dropped tokens swapped",
            "the nucleus is where the mass before a token is still < p; the tokens with ≥ p before them are dropped.",
            _complement,
        ),
    ),
    what_is_compared="kept token ids",
)


def nucleus(learner: Any) -> Any:
    """Grade exercise 3's ``nucleus(probs, p)``: probs [V] float (sums to 1), 0 < p ≤ 1 → the set of token ids
    (Python ints) of the smallest most-likely prefix whose probabilities reach p."""
    return grade(NUCLEUS, learner)
