"""The paged KV cache: attention through block tables equals attention over a contiguous cache; memory held is
blocks in use × block bytes."""

from __future__ import annotations

import math
import random

import pytest
import torch

from minillm.attention import scaled_dot_product_attention
from minillm.inference.paged_kv import OutOfBlocksError, PagedKVCache, memory_report
from minillm.model import GPTConfig

CONFIG = GPTConfig.preset("llama-style", vocab_size=64, context_length=64, n_layer=2, n_head=4, n_kv_head=2, d_model=32)
H, D = CONFIG.n_kv_head, CONFIG.head_dim


def test_attention_through_the_block_tables_equals_a_contiguous_cache() -> None:
    """Three sequences grow in turns (prefills, then single decode steps), so their blocks interleave in the
    pool; the free list is shuffled so they are not even in order. Reference: contiguous float64 tensors."""
    torch.manual_seed(0)
    cache = PagedKVCache(CONFIG, num_rows=3, num_blocks=20, block_size=4, dtype=torch.float64)
    random.Random(0).shuffle(cache.free)
    for row in range(3):
        cache.open(row, 20)
    reference = {row: ([], []) for row in range(3)}  # per layer 0 keys/values, contiguous
    growth = [([0, 1, 2], 5), ([1], 7), ([0, 2], 1), ([0, 1, 2], 1), ([2], 9), ([0, 1, 2], 1)]
    for rows_list, num_new in growth:
        rows = torch.tensor(rows_list)
        k = torch.randn(len(rows_list), H, num_new, D, dtype=torch.float64)
        v = torch.randn_like(k)
        q = torch.randn(len(rows_list), H, num_new, D, dtype=torch.float64)
        pos = cache.positions(rows, num_new)
        keys, values, allowed = cache.attend(0, rows, k, v)
        cache.attend(1, rows, k, v)  # the second layer writes too
        cache.advance(rows, num_new)
        got = scaled_dot_product_attention(q, keys, values, mask=allowed[:, None])
        for b, row in enumerate(rows_list):
            ks, vs = reference[row]
            start = sum(t.shape[1] for t in ks)
            assert pos[b].tolist() == list(range(start, start + num_new))
            ks.append(k[b])
            vs.append(v[b])
            full_k, full_v = torch.cat(ks, dim=1), torch.cat(vs, dim=1)
            n = full_k.shape[1]
            assert torch.equal(keys[b, :, :n], full_k) and torch.equal(values[b, :, :n], full_v)
            expected = scaled_dot_product_attention(q[b], full_k, full_v, is_causal=True)  # queries are the last
            assert (got[b] - expected).abs().max().item() <= 1e-12
    lengths = [5 + 1 + 1 + 1, 5 + 7 + 1 + 1, 5 + 1 + 1 + 9 + 1]
    assert cache.lengths == lengths
    assert cache.blocks_in_use() == sum(math.ceil(n / 4) for n in lengths)
    assert cache.bytes_held() == cache.blocks_in_use() * 4 * (2 * CONFIG.n_layer * H * D * 8)  # float64


def test_closing_returns_blocks_to_the_free_list() -> None:
    cache = PagedKVCache(CONFIG, num_rows=2, num_blocks=4, block_size=8)
    cache.open(0, 32)
    assert not cache.can_open(1)  # all four blocks are promised to row 0
    cache.positions(torch.tensor([0]), 17)
    cache.advance(torch.tensor([0]), 17)
    assert cache.blocks_in_use() == 3 and len(cache.free) == 1
    cache.close(0)
    assert cache.blocks_in_use() == 0 and cache.can_open(32)
    with pytest.raises(OutOfBlocksError):
        cache.open(1, 33)


def test_running_out_of_blocks_is_an_error() -> None:
    cache = PagedKVCache(CONFIG, num_rows=1, num_blocks=2, block_size=4)
    cache.open(0, 8)
    cache.positions(torch.tensor([0]), 8)
    cache.advance(torch.tensor([0]), 8)
    with pytest.raises(OutOfBlocksError, match="no free block"):
        cache.positions(torch.tensor([0]), 1)
    with pytest.raises(RuntimeError, match="still in use"):
        cache.open(0, 1)


def test_memory_report_against_the_closed_forms() -> None:
    lengths = [3, 17, 40, 9]
    report = memory_report(CONFIG, lengths, block_size=16, bytes_per_value=2)
    per_token = 2 * CONFIG.n_layer * H * D * 2
    assert report.blocks == 1 + 2 + 3 + 1
    assert report.paged_bytes == 7 * 16 * per_token
    assert report.contiguous_bytes == CONFIG.kv_cache_bytes(4, 40, 2)
    reserve_all = memory_report(CONFIG, lengths, block_size=16, bytes_per_value=2, reserve=64)
    assert reserve_all.contiguous_bytes == CONFIG.kv_cache_bytes(4, 64, 2)
    assert reserve_all.saving == pytest.approx(4 * 64 / (7 * 16))
    with pytest.raises(ValueError, match="lengths"):
        memory_report(CONFIG, [])
    with pytest.raises(ValueError, match="num_blocks"):
        PagedKVCache(CONFIG, 1, 0)
