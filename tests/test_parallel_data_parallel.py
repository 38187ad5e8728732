"""Simulated data parallelism: the all-reduced step equals the single-model full-batch step."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from minillm.parallel.data_parallel import SimulatedDataParallel, shard_batch


def mlp(dtype):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)).to(dtype)


def loss_fn(model, x, y):
    return F.cross_entropy(model(x), y)


@pytest.mark.parametrize(
    "dtype, tol, make_opt",
    [
        (torch.float64, 1e-12, lambda ps: torch.optim.SGD(ps, lr=0.1)),
        (torch.float32, 1e-6, lambda ps: torch.optim.SGD(ps, lr=0.1)),
        (torch.float64, 1e-12, lambda ps: torch.optim.AdamW(ps, lr=1e-2)),
    ],
)
@pytest.mark.parametrize("world_size", [2, 4])
def test_dp_step_equals_full_batch_step(dtype, tol, make_opt, world_size):
    model = mlp(dtype)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 6, dtype=dtype, generator=g), torch.randint(0, 3, (16,), generator=g)
    reference = copy.deepcopy(model)
    ref_opt = make_opt(list(reference.parameters()))
    dp = SimulatedDataParallel(model, world_size, make_opt)
    for _ in range(3):
        ref_opt.zero_grad()
        loss_fn(reference, x, y).backward()
        ref_grads = [p.grad.clone() for p in reference.parameters()]
        dp.backward(x, y, loss_fn)
        for replica in dp.replicas:
            for p, g_ref in zip(replica.parameters(), ref_grads, strict=True):
                assert (p.grad - g_ref).abs().max().item() <= tol
        ref_opt.step()
        for opt in dp.optimizers:
            opt.step()
        for replica in dp.replicas:
            for p, p_ref in zip(replica.parameters(), reference.parameters(), strict=True):
                assert (p - p_ref).abs().max().item() <= tol
    numel = sum(p.numel() for p in model.parameters())
    # Each step every chunk crosses n−1 links twice (reduce-scatter, all-gather): 2(n−1)·S over all ranks.
    assert sum(dp.ledger.sent_per_rank()) == 3 * 2 * (world_size - 1) * numel


def test_summing_without_dividing_is_caught():
    """Guard against a vacuous pass: the rank-summed (not averaged) gradient is world_size × too large."""
    model = mlp(torch.float64)
    x, y = torch.randn(8, 6, dtype=torch.float64), torch.randint(0, 3, (8,))
    dp = SimulatedDataParallel(model, 2, lambda ps: torch.optim.SGD(ps, lr=0.1))
    dp.backward(x, y, loss_fn)
    loss_fn(model, x, y).backward()
    p_dp, p_ref = next(dp.replicas[0].parameters()), next(model.parameters())
    assert torch.allclose(p_dp.grad, p_ref.grad, atol=1e-12)
    assert not torch.allclose(2 * p_dp.grad, p_ref.grad, atol=1e-6)


def test_shard_batch_rejects_uneven_split():
    with pytest.raises(ValueError, match="not divisible"):
        shard_batch(torch.zeros(10, 2), torch.zeros(10), 4)
