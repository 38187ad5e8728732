"""minillm.moe against dense MLPs, a per-token float64 loop, the balancing loss's formula and hand-counted capacity."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from minillm.layers import GeluMLP, SwiGLU
from minillm.model import GPT, GPTConfig, count_parameters
from minillm.moe import MoE, capacity_keep_mask, expert_capacity, load_balancing_loss, moe_stats

F32, F64 = 1e-6, 1e-12  # tolerances: float32 layer vs reference, float64 vs float64


def make_moe(n_experts=4, top_k=2, mlp="gelu", d=8, f=12, seed=0, **kwargs) -> MoE:
    torch.manual_seed(seed)
    moe = MoE(d, f, n_experts, top_k, mlp=mlp, bias=mlp == "gelu", **kwargs)
    with torch.no_grad():  # biases start at 0: make them non-zero so the reference must use them
        for p in moe.parameters():
            if p.dim() == 1:
                p.normal_(0.0, 0.1)
    return moe


def forced_router(moe: MoE, scale: float = 10.0) -> None:
    """Router weight = scale · [I | 0]: input coordinate e is expert e's logit (tests route by building x)."""
    with torch.no_grad():
        moe.router.weight.zero_()
        moe.router.weight[:, : moe.n_experts] = scale * torch.eye(moe.n_experts)


def inputs_for(choices: list[int], d: int, seed: int = 0) -> torch.Tensor:
    """Tokens whose top expert (under :func:`forced_router`) is ``choices[t]``."""
    x = 0.01 * torch.randn(len(choices), d, generator=torch.Generator().manual_seed(seed))
    x[torch.arange(len(choices)), torch.tensor(choices)] = 1.0
    return x


def expert_by_formula(expert, x: torch.Tensor) -> torch.Tensor:
    """One expert MLP written out from its weights (not its forward)."""
    if isinstance(expert, GeluMLP):
        return F.linear(F.gelu(F.linear(x, expert.fc.weight, expert.fc.bias)), expert.proj.weight, expert.proj.bias)
    gate = F.linear(x, expert.gate.weight, expert.gate.bias)
    return F.linear(gate * torch.sigmoid(gate) * F.linear(x, expert.up.weight, expert.up.bias), expert.down.weight)


def loop_reference(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """The layer one token at a time in float64: softmax, sorted top-k, optional renormalisation, capacity in
    GShard's priority order (all first choices, then second ...), weighted sum of the chosen experts."""
    x = x.double()
    W = moe.router.weight.detach().double()
    n, E, k = x.shape[0], moe.n_experts, moe.top_k
    choices = []
    for t in range(n):
        logits = [float(W[e] @ x[t]) for e in range(E)]
        z = sum(math.exp(v) for v in logits)
        probs = [math.exp(v) / z for v in logits]
        best = sorted(range(E), key=lambda e: -probs[e])[:k]
        total = sum(probs[e] for e in best)
        choices.append([(e, probs[e] / total if moe.renormalize else probs[e]) for e in best])
    capacity = None if moe.capacity_factor is None else math.ceil(moe.capacity_factor * n * k / E)
    load = [0] * E
    kept = [[False] * k for _ in range(n)]
    for j in range(k):
        for t in range(n):
            e = choices[t][j][0]
            if capacity is None or load[e] < capacity:
                load[e] += 1
                kept[t][j] = True
    out = torch.zeros_like(x)
    for t in range(n):
        for j, (e, w) in enumerate(choices[t]):
            if kept[t][j]:
                out[t] += w * expert_by_formula(moe.experts[e].double(), x[t])
    return out


# ---------------------------------------------------------------- equal to a dense MLP


@pytest.mark.parametrize("mlp", ["gelu", "swiglu"])
def test_one_expert_is_the_dense_mlp(mlp):
    moe = make_moe(n_experts=1, top_k=1, mlp=mlp)
    dense = (GeluMLP if mlp == "gelu" else SwiGLU)(8, 12, bias=mlp == "gelu")
    dense.load_state_dict(moe.experts[0].state_dict())
    x = torch.randn(3, 5, 8)
    torch.testing.assert_close(moe(x), dense(x), atol=F32, rtol=0)


@pytest.mark.parametrize("renormalize", [True, False])
def test_every_token_sent_to_one_expert_is_that_mlp_times_its_gate(renormalize):
    moe = make_moe(n_experts=4, top_k=1, renormalize=renormalize)
    forced_router(moe)
    x = inputs_for([2] * 9, d=8)
    gate = torch.softmax(x @ moe.router.weight.t(), dim=-1)[:, 2:3]
    expected = expert_by_formula(moe.experts[2], x) * (1.0 if renormalize else gate)
    torch.testing.assert_close(moe(x), expected, atol=F32, rtol=0)
    assert moe.stats.routed.tolist() == [0, 0, 9, 0]


def test_a_gpt_with_one_expert_is_the_dense_gpt():
    shape = dict(vocab_size=31, context_length=16, n_layer=2, n_head=2, d_model=16)
    torch.manual_seed(0)
    moe_gpt = GPT(GPTConfig(**shape, n_experts=1, experts_top_k=1))
    dense = GPT(GPTConfig(**shape))
    state = {k.replace("mlp.experts.0.", "mlp."): v for k, v in moe_gpt.state_dict().items() if "router" not in k}
    dense.load_state_dict(state)
    idx = torch.randint(0, 31, (2, 16), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(moe_gpt(idx), dense(idx), atol=F32, rtol=0)


# ---------------------------------------------------------------- against a per-token loop


@pytest.mark.parametrize("mlp", ["gelu", "swiglu"])
@pytest.mark.parametrize("n_experts,top_k,renormalize", [(4, 1, False), (4, 2, True), (6, 3, False), (5, 5, True)])
@pytest.mark.parametrize("capacity_factor", [None, 1.0, 0.5])
def test_routed_output_equals_a_per_token_float64_loop(mlp, n_experts, top_k, renormalize, capacity_factor):
    moe = make_moe(n_experts, top_k, mlp, renormalize=renormalize, capacity_factor=capacity_factor)
    x = torch.randn(23, 8, generator=torch.Generator().manual_seed(3))
    reference = loop_reference(moe, x)
    torch.testing.assert_close(moe.double()(x.double()), reference, atol=F64, rtol=0)
    torch.testing.assert_close(moe.float()(x), reference.float(), atol=1e-5, rtol=0)  # float32 rounding of ~1e-7


# ---------------------------------------------------------------- the load-balancing loss


def test_aux_loss_equals_its_formula_and_its_gradient():
    moe = make_moe(n_experts=5, top_k=2).double()
    x = torch.randn(17, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    moe(x)
    probs = torch.softmax(x @ moe.router.weight.t(), dim=-1)
    chosen = probs.topk(2, dim=-1).indices
    E, N = 5, 17
    f = [sum(int(e == i) for e in chosen.reshape(-1).tolist()) / (N * 2) for i in range(E)]
    P = [float(probs[:, i].mean().detach()) for i in range(E)]
    assert abs(moe.aux_loss.item() - E * sum(fi * pi for fi, pi in zip(f, P, strict=True))) < F64
    # f is a count: d aux / d probs[t, i] = E · f_i / N exactly.
    probs = probs.detach().requires_grad_()
    load_balancing_loss(probs, chosen).backward()
    expected = torch.tensor(f, dtype=torch.float64).expand(N, E) * E / N
    torch.testing.assert_close(probs.grad, expected, atol=F64, rtol=0)


def test_aux_loss_is_one_when_routing_is_uniform_and_e_when_it_collapses():
    E, N = 4, 8
    uniform = torch.full((N, E), 1 / E, dtype=torch.float64)
    round_robin = torch.arange(N)[:, None] % E
    assert abs(load_balancing_loss(uniform, round_robin).item() - 1.0) < F64
    # Uniform dispatch gives 1 whatever the probabilities (Σ P = 1); so do uniform probabilities, whatever f.
    skewed = torch.softmax(torch.randn(N, E, dtype=torch.float64), dim=-1)
    assert abs(load_balancing_loss(skewed, round_robin).item() - 1.0) < F64
    assert abs(load_balancing_loss(uniform, torch.zeros(N, 1, dtype=torch.long)).item() - 1.0) < F64
    collapsed = torch.zeros(N, E, dtype=torch.float64)
    collapsed[:, 0] = 1.0
    assert abs(load_balancing_loss(collapsed, torch.zeros(N, 1, dtype=torch.long)).item() - E) < F64


def test_when_probabilities_match_the_dispatch_uniform_is_the_minimum():
    # With P_i = f_i the loss is E · Σ f_i² ≥ (Σ f_i)² = 1 (Cauchy–Schwarz), equality only at f uniform.
    E, N = 4, 12
    gen = torch.Generator().manual_seed(5)
    for _ in range(20):
        experts = torch.randint(0, E, (N, 1), generator=gen)
        f = torch.bincount(experts.reshape(-1), minlength=E).double() / N
        probs = f.expand(N, E).clone()
        loss = load_balancing_loss(probs, experts).item()
        assert abs(loss - E * float((f**2).sum())) < F64
        assert loss >= 1.0 - F64
        assert (abs(loss - 1.0) < F64) == bool(torch.all(f == 1 / E))


# ---------------------------------------------------------------- capacity


def test_capacity_drops_are_counted_on_a_hand_built_top1_case():
    experts = torch.tensor([[0], [0], [0], [1], [0], [1]])
    assert expert_capacity(6, 2, 1, 1.0) == 3
    keep = capacity_keep_mask(experts, 2, 3)
    assert keep.reshape(-1).tolist() == [True, True, True, True, False, True]  # token 4 is expert 0's 4th
    stats = moe_stats(experts, keep, 2, 3)
    assert stats.routed.tolist() == [4, 2] and stats.kept.tolist() == [3, 2]
    assert stats.dropped == 1 and stats.dropped_tokens == 1
    assert stats.usage.tolist() == pytest.approx([4 / 6, 2 / 6])


def test_capacity_serves_first_choices_before_second_ones():
    experts = torch.tensor([[0, 1], [0, 1], [1, 0]])
    assert expert_capacity(3, 2, 2, 0.5) == 2  # ceil(0.5 · 3 · 2 / 2)
    keep = capacity_keep_mask(experts, 2, 2)
    # First choices: e0 ← t0, t1; e1 ← t2. Second: t0 → e1 (its 2nd), t1 → e1 full, t2 → e0 full.
    assert keep.tolist() == [[True, True], [True, False], [True, False]]
    stats = moe_stats(experts, keep, 2, 2)
    assert stats.dropped == 2 and stats.dropped_tokens == 0
    assert capacity_keep_mask(experts, 2, 3).all()  # factor 1: every choice fits


def test_a_dropped_token_gets_zero_from_the_layer():
    moe = make_moe(n_experts=2, top_k=1, capacity_factor=1.0)
    forced_router(moe)
    x = inputs_for([0, 0, 0, 1, 0, 1], d=8)
    y = moe(x)
    assert moe.stats.dropped == 1 and moe.stats.capacity == 3
    assert torch.equal(y[4], torch.zeros(8))
    assert y[[0, 1, 2, 3, 5]].abs().amin(dim=-1).gt(0).all()


# ---------------------------------------------------------------- in the GPT


def test_gpt_collects_the_aux_loss_and_the_router_learns_from_it():
    config = GPTConfig(vocab_size=31, context_length=16, n_layer=3, n_head=2, d_model=16, n_experts=4, moe_every=2)
    torch.manual_seed(0)
    model = GPT(config)
    assert [type(b.mlp).__name__ for b in model.blocks] == ["GeluMLP", "MoE", "GeluMLP"]
    assert model.moe_aux_loss is None
    model(torch.randint(0, 31, (2, 16)))
    assert model.moe_aux_loss is not None and model.moe_aux_loss.dim() == 0
    assert abs(model.moe_aux_loss.item() - model.blocks[1].mlp.aux_loss.item()) < F64
    assert [s.n_tokens for s in model.moe_stats] == [32]
    model.moe_aux_loss.backward()
    assert model.blocks[1].mlp.router.weight.grad.abs().sum() > 0
    assert count_parameters(config) == model.num_parameters()


def test_gpt_moe_gradients_are_the_same_with_activation_checkpointing():
    config = GPTConfig(vocab_size=31, context_length=16, n_layer=2, n_head=2, d_model=16, n_experts=3)
    idx = torch.randint(0, 31, (2, 16), generator=torch.Generator().manual_seed(2))
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = GPT(config)
        model.activation_checkpointing = checkpointing
        (model(idx).square().mean() + 0.01 * model.moe_aux_loss).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=F32, rtol=0)


@pytest.mark.parametrize("mlp,bias,top_k,every", [("gelu", True, 2, 1), ("swiglu", False, 1, 2), ("gelu", False, 3, 3)])
def test_parameter_formula_counts_experts(mlp, bias, top_k, every):
    config = GPTConfig(vocab_size=31, context_length=16, n_layer=3, n_head=2, d_model=16, mlp=mlp, bias=bias,
                       n_experts=3, experts_top_k=top_k, moe_every=every, qk_norm=True)  # fmt: skip
    assert count_parameters(config) == GPT(config).num_parameters()


# ---------------------------------------------------------------- clear errors


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(top_k=5), "top_k=5 exceeds n_experts=4"),
        (dict(top_k=0), "top_k must be an int ≥ 1"),
        (dict(capacity_factor=0.0), "capacity_factor must be a positive number"),
        (dict(capacity_factor=-1.0), "capacity_factor must be a positive number"),
        (dict(mlp="relu"), "mlp must be one of"),
    ],
)
def test_bad_moe_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MoE(**{**dict(d_model=8, d_ff=12, n_experts=4), **kwargs})


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(n_experts=4, experts_top_k=5), "experts_top_k=5 exceeds n_experts=4"),
        (dict(n_experts=4, experts_top_k=0), "experts_top_k must be an int ≥ 1"),
        (dict(n_experts=0), "n_experts must be a positive int"),
        (dict(n_experts=4, capacity_factor=0), "capacity_factor must be a positive number"),
        (dict(n_experts=4, moe_every=0), "moe_every must be a positive int"),
    ],
)
def test_bad_moe_config_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(**kwargs)
