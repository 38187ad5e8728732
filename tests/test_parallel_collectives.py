"""Ring collectives simulated over per-rank tensors vs plain sums, and their traffic vs the closed form."""

import pytest
import torch

from minillm.parallel.collectives import CommLedger, ring_all_gather, ring_all_reduce, ring_reduce_scatter


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_all_reduce_equals_sum_on_every_rank(n):
    g = torch.Generator().manual_seed(n)
    tensors = [torch.randn(5, 7, dtype=torch.float64, generator=g) for _ in range(n)]
    reference = torch.stack(tensors).sum(0)
    out = ring_all_reduce(tensors)
    for t in out:
        assert t.shape == (5, 7)
        assert torch.allclose(t, reference, rtol=0, atol=1e-12)
        assert torch.equal(t, out[0])  # every chunk is summed once, then copied: ranks agree bit for bit
    mean = ring_all_reduce(tensors, op="mean")[0]
    assert torch.allclose(mean, reference / n, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_all_reduce_traffic_matches_ring_formula(n):
    size = 400
    ledger = CommLedger(n)
    ring_all_reduce([torch.ones(size) for _ in range(n)], ledger=ledger)
    expected = 2 * (n - 1) * size // n  # Patarasuk & Yuan: 2(n−1)/n·S per rank
    assert ledger.sent_per_rank() == [expected] * n
    assert ledger.sent_per_rank("all_reduce") == [expected] * n
    ledger = CommLedger(n)
    shards = ring_reduce_scatter([torch.ones(size) for _ in range(n)], ledger=ledger)
    ring_all_gather(shards, ledger=ledger)
    assert ledger.sent_per_rank("reduce_scatter") == ledger.sent_per_rank("all_gather") == [expected // 2] * n
    if n == 4:
        assert expected == 600


def test_reduce_scatter_and_all_gather_compose_to_all_reduce():
    n = 3
    tensors = [torch.arange(10, dtype=torch.float64) * (r + 1) for r in range(n)]
    shards = ring_reduce_scatter(tensors)
    full = torch.stack(tensors).sum(0)
    for r, piece in enumerate(torch.tensor_split(full, n)):  # uneven chunks: 4, 3, 3 elements
        assert torch.equal(shards[r], piece)
    gathered = ring_all_gather(shards)
    assert all(torch.equal(g, full) for g in gathered)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="rank 1"):
        ring_all_reduce([torch.zeros(3), torch.zeros(4)])
    with pytest.raises(ValueError, match="op"):
        ring_all_reduce([torch.zeros(3)], op="max")
    with pytest.raises(TypeError):
        ring_all_reduce([torch.zeros(3), [1, 2, 3]])
