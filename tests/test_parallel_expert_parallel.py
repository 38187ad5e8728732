"""Simulated expert parallelism against the unsplit MoE layer, and its all-to-all traffic against hand counts."""

from __future__ import annotations

import pytest
import torch

from minillm.moe import MoE
from minillm.parallel.collectives import CommLedger, all_to_all
from minillm.parallel.comm import collective_bytes
from minillm.parallel.expert_parallel import ExpertParallelMoE


def make_moe(n_experts=4, top_k=2, mlp="gelu", d=8, dtype=torch.float32, **kwargs) -> MoE:
    torch.manual_seed(0)
    return MoE(d, 12, n_experts, top_k, mlp=mlp, **kwargs).to(dtype)


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("mlp,top_k", [("gelu", 2), ("swiglu", 1), ("gelu", 3)])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
def test_expert_parallel_equals_the_unsplit_layer_forward_and_backward(world_size, mlp, top_k, dtype, tol):
    moe = make_moe(mlp=mlp, top_k=top_k, dtype=dtype, renormalize=top_k > 1)  # k = 1: the router gets a gradient
    x = torch.randn(4 * world_size + 3, 8, dtype=dtype, generator=torch.Generator().manual_seed(1))
    shards = list(x.tensor_split(world_size))  # unequal shards are fine
    target = torch.randn_like(x)
    y = moe(x)
    (y * target).sum().backward()
    grads = {n: None if p.grad is None else p.grad.clone() for n, p in moe.named_parameters()}
    moe.zero_grad()
    ys = ExpertParallelMoE(moe, world_size).forward(shards)
    torch.testing.assert_close(torch.cat(ys), y, atol=tol, rtol=0)
    (torch.cat(ys) * target).sum().backward()
    assert grads["router.weight"] is not None and sum(g is not None for g in grads.values()) > len(grads) // 2
    for name, p in moe.named_parameters():
        if grads[name] is None:
            assert p.grad is None, name
        else:
            torch.testing.assert_close(p.grad, grads[name], atol=tol, rtol=0, msg=name)


def test_traffic_is_every_remote_choice_there_and_back():
    moe = make_moe(n_experts=8, top_k=2)
    ep = ExpertParallelMoE(moe, 4)
    gen = torch.Generator().manual_seed(2)
    shards = [torch.randn(5 + r, 8, generator=gen) for r in range(4)]
    ep.forward(shards)
    # Count from the router's choices (expert e lives on rank e // 2): rank r dispatches its choices of remote
    # experts, and in the combine sends back the results of the choices other ranks sent to its experts.
    owners = [torch.softmax(moe.router(x), dim=-1).topk(2, dim=-1).indices // 2 for x in shards]
    dispatched = [int((owners[r] != r).sum()) for r in range(4)]
    served = [sum(int((owners[s] == r).sum()) for s in range(4) if s != r) for r in range(4)]
    assert ep.bytes_sent == [(dispatched[r] + served[r]) * 8 * 4 for r in range(4)]  # d_model float32 values a row
    assert sum(dispatched) == sum(served) > 0
    assert [op for op, _ in ep.ledger.records] == ["all_to_all", "all_to_all"]


def test_uniform_routing_sends_the_ring_model_s_all_to_all_volume():
    n = 4
    moe = make_moe(n_experts=n, top_k=1, d=8)
    with torch.no_grad():  # router logit e = 10 · x[e]: token j of every rank goes to expert j (on rank j)
        moe.router.weight.zero_()
        moe.router.weight[:, :n] = 10 * torch.eye(n)
    shard = 0.01 * torch.randn(n, 8, generator=torch.Generator().manual_seed(3))
    shard[torch.arange(n), torch.arange(n)] = 1.0
    ep = ExpertParallelMoE(moe, n)
    ep.forward([shard.clone() for _ in range(n)])
    buffer = n * 8 * 4  # each rank's rows: n tokens × d_model float32
    dispatch = collective_bytes("all_to_all", buffer, n)  # (n − 1)/n of it leaves the rank
    assert ep.bytes_sent == [2 * dispatch] * n


def test_all_to_all_transposes_and_counts_only_remote_messages():
    send = [[torch.full((r + q,), float(10 * r + q)) for q in range(3)] for r in range(3)]
    ledger = CommLedger(3)
    recv = all_to_all(send, ledger)
    for q in range(3):
        for r in range(3):
            assert torch.equal(recv[q][r], send[r][q])
    assert ledger.sent_per_rank("all_to_all") == [sum(r + q for q in range(3) if q != r) for r in range(3)]
    with pytest.raises(ValueError, match="n × n"):
        all_to_all([[torch.zeros(1)], [torch.zeros(1)]])


def test_bad_expert_parallel_settings_are_refused():
    with pytest.raises(ValueError, match="not divisible by world_size=3"):
        ExpertParallelMoE(make_moe(n_experts=4), 3)
    with pytest.raises(ValueError, match="capacity_factor=None"):
        ExpertParallelMoE(make_moe(capacity_factor=1.25), 2)
    with pytest.raises(ValueError, match="one token shard per rank"):
        ExpertParallelMoE(make_moe(), 2).forward([torch.zeros(3, 8)])
