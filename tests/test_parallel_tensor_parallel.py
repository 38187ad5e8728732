"""Simulated Megatron tensor parallelism vs the unsplit layers (float64, outputs and every gradient)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from minillm.model import GPT, GPTConfig
from minillm.parallel.collectives import CommLedger
from minillm.parallel.tensor_parallel import (
    ColumnParallelLinear,
    RowParallelLinear,
    TensorParallelAttention,
    TensorParallelMLP,
    causal_self_attention,
)

TOL = 1e-12


def max_diff(a, b):
    return (a - b).abs().max().item()


@pytest.mark.parametrize("t", [1, 2, 4])
def test_column_and_row_parallel_linear(t):
    torch.manual_seed(0)
    dense = nn.Linear(8, 12, dtype=torch.float64)
    x = torch.randn(5, 8, dtype=torch.float64)
    col = ColumnParallelLinear(dense, t)
    out = torch.cat(col.forward(x), dim=-1)
    (out**2).sum().backward()
    (dense(x) ** 2).sum().backward()
    assert max_diff(out, dense(x)) <= TOL
    assert max_diff(col.gather_grads()["weight"], dense.weight.grad) <= TOL
    assert max_diff(col.gather_grads()["bias"], dense.bias.grad) <= TOL

    dense.zero_grad()
    row = (
        RowParallelLinear(dense.to(torch.float64), t)
        if t == 1
        else RowParallelLinear(nn.Linear(8, 12, dtype=torch.float64), t)
    )
    ref = nn.Linear(8, 12, dtype=torch.float64)
    ref.load_state_dict({"weight": torch.cat(row.weights, 1).detach(), "bias": row.bias.detach()})
    x.requires_grad_(True)
    y = row.forward(list(x.chunk(t, dim=-1)))
    (y**3).sum().backward()
    grad_x_tp = x.grad.clone()
    x.grad = None
    (ref(x) ** 3).sum().backward()
    assert max_diff(y, ref(x)) <= TOL
    assert max_diff(row.gather_grads()["weight"], ref.weight.grad) <= TOL
    assert max_diff(row.gather_grads()["bias"], ref.bias.grad) <= TOL
    assert max_diff(grad_x_tp, x.grad) <= TOL


def test_row_parallel_bias_added_once():
    """The classic bug (bias added on every rank) is off by (t−1)·b: the check can fail."""
    torch.manual_seed(0)
    dense = nn.Linear(8, 4, dtype=torch.float64)
    with torch.no_grad():
        dense.bias.fill_(0.35)
    x = torch.randn(3, 8, dtype=torch.float64)
    row = RowParallelLinear(dense, 2)
    assert max_diff(row.forward(list(x.chunk(2, -1))), dense(x)) <= TOL
    wrong = row.forward(list(x.chunk(2, -1)), bias_on_every_rank=True)
    assert abs(max_diff(wrong, dense(x)) - 0.35) <= TOL


@pytest.mark.parametrize("t", [2, 4])
def test_megatron_mlp_matches_gpt_mlp(t):
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, d_model=16, n_head=4, vocab_size=32, context_length=8)).double()
    mlp = model.blocks[0].mlp
    x = torch.randn(2, 8, 16, dtype=torch.float64, requires_grad=True)
    tp = TensorParallelMLP(mlp.fc, mlp.proj, t)
    ledger = CommLedger(t)
    y_tp = tp.forward(x, ledger=ledger)
    w = torch.randn_like(y_tp)
    (y_tp * w).sum().backward()
    gx_tp, x.grad = x.grad.clone(), None
    y = mlp(x)
    (y * w).sum().backward()
    assert max_diff(y_tp, y) <= TOL
    assert max_diff(gx_tp, x.grad) <= TOL
    grads = tp.gather_grads()
    for name in ("fc.weight", "fc.bias", "proj.weight", "proj.bias"):
        module, attr = name.split(".")
        assert max_diff(grads[name], getattr(getattr(mlp, module), attr).grad) <= TOL, name
    assert len(ledger.records) == 1  # exactly one all-reduce in the forward pass


@pytest.mark.parametrize("t", [2, 4])
def test_attention_heads_split_matches_gpt_attention(t):
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, d_model=16, n_head=4, vocab_size=32, context_length=8)).double()
    attn = model.blocks[0].attn
    x = torch.randn(2, 8, 16, dtype=torch.float64, requires_grad=True)
    tp = TensorParallelAttention(attn.qkv, attn.proj, n_head=4, world_size=t)
    y_tp = tp.forward(x)
    w = torch.randn_like(y_tp)
    (y_tp * w).sum().backward()
    gx_tp, x.grad = x.grad.clone(), None
    y = attn(x)
    (y * w).sum().backward()
    assert max_diff(y_tp, y) <= TOL
    assert max_diff(y, causal_self_attention(x, attn.qkv, attn.proj, 4)) <= TOL
    assert max_diff(gx_tp, x.grad) <= TOL
    grads = tp.gather_grads()
    for name in ("qkv.weight", "qkv.bias", "proj.weight", "proj.bias"):
        module, attr = name.split(".")
        assert max_diff(grads[name], getattr(getattr(attn, module), attr).grad) <= TOL, name


def test_indivisible_split_is_rejected():
    with pytest.raises(ValueError, match="n_head"):
        TensorParallelAttention(nn.Linear(12, 36), nn.Linear(12, 12), n_head=3, world_size=2)
    with pytest.raises(ValueError, match="out_features"):
        ColumnParallelLinear(nn.Linear(4, 5), 2)


def test_gelu_is_local():
    """GELU commutes with the column split (element-wise), which is why the MLP needs one all-reduce only."""
    h = torch.randn(3, 8, dtype=torch.float64)
    assert torch.equal(torch.cat([F.gelu(c) for c in h.chunk(2, -1)], -1), F.gelu(h))
