"""minillm.optim against torch.optim, torch.nn.utils.clip_grad_norm_ and hand-computed schedule endpoints."""

import math

import pytest
import torch
from torch import nn

from minillm.optim import (
    SGD,
    AdamW,
    clip_grad_norm,
    global_grad_norm,
    make_schedule,
    param_groups,
    set_lr,
    warmup_cosine,
    warmup_linear,
    warmup_stable_decay,
)


def _real_model(seed: int = 0) -> nn.Module:
    """A small GPT from the course's model (embeddings, attention, norms, MLP, tied head)."""
    from minillm.model import GPT, GPTConfig

    torch.manual_seed(seed)
    config = GPTConfig.preset("gpt2-style", vocab_size=64, context_length=16, n_layer=2, n_head=2, d_model=32)
    return GPT(config)


def _token_batch(step: int):
    gen = torch.Generator().manual_seed(1000 + step % 2)  # two batches, repeated: learnable
    idx = torch.randint(0, 64, (4, 17), generator=gen)
    return idx[:, :-1], idx[:, 1:]


def _run(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> list[float]:
    losses = []
    for step in range(steps):
        x, y = _token_batch(step)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _max_param_diff(a: nn.Module, b: nn.Module) -> float:
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_adamw_matches_torch_for_100_steps_on_gpt():
    ours, ref = _real_model(), _real_model()
    kwargs = dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
    opt_ours = AdamW(param_groups(ours, weight_decay=0.1), **kwargs)
    opt_ref = torch.optim.AdamW(param_groups(ref, weight_decay=0.1), **kwargs)
    losses_ours = _run(ours, opt_ours, 100)
    losses_ref = _run(ref, opt_ref, 100)
    assert losses_ours[-1] < losses_ours[0] - 0.5  # it really trained
    assert _max_param_diff(ours, ref) <= 1e-6
    assert max(abs(a - b) for a, b in zip(losses_ours, losses_ref, strict=True)) <= 1e-5


def test_adamw_weight_decay_is_decoupled():
    # zero gradient: Adam's update is 0, so only the decay acts, exactly p * (1 - lr * wd)
    p = nn.Parameter(torch.tensor([2.0, -4.0], dtype=torch.float64))
    opt = AdamW([p], lr=0.1, weight_decay=0.5)
    p.grad = torch.zeros_like(p)
    opt.step()
    assert torch.allclose(p.detach(), torch.tensor([2.0, -4.0], dtype=torch.float64) * (1 - 0.05), atol=1e-15)


def test_adamw_first_step_is_lr_times_sign():
    # bias correction makes the first update exactly lr * g / (|g| + eps) ~ lr * sign(g)
    p = nn.Parameter(torch.tensor([1.0, 1.0], dtype=torch.float64))
    opt = AdamW([p], lr=0.01, weight_decay=0.0, eps=1e-12)
    p.grad = torch.tensor([3.0, -0.002], dtype=torch.float64)
    opt.step()
    assert torch.allclose(p.detach(), torch.tensor([0.99, 1.01], dtype=torch.float64), atol=1e-9)


@pytest.mark.parametrize("momentum,weight_decay", [(0.0, 0.0), (0.9, 0.0), (0.9, 1e-2)])
def test_sgd_matches_torch(momentum, weight_decay):
    ours, ref = _real_model(), _real_model()
    opt_ours = SGD(ours.parameters(), lr=0.1, momentum=momentum, weight_decay=weight_decay)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=momentum, weight_decay=weight_decay)
    _run(ours, opt_ours, 20)
    _run(ref, opt_ref, 20)
    assert _max_param_diff(ours, ref) <= 1e-6


def test_param_groups_exclude_norms_biases_and_embeddings():
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 10, bias=False))
    decay, no_decay = param_groups(model, weight_decay=0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert {id(p) for p in decay["params"]} == {id(model[1].weight), id(model[3].weight)}
    assert {id(p) for p in no_decay["params"]} == {
        id(model[0].weight),
        id(model[1].bias),
        id(model[2].weight),
        id(model[2].bias),
    }
    decay_e, _ = param_groups(model, weight_decay=0.1, decay_embeddings=True)
    assert id(model[0].weight) in {id(p) for p in decay_e["params"]}


def test_param_groups_count_tied_weights_once():
    model = _real_model()
    groups = param_groups(model, weight_decay=0.1)
    n_grouped = sum(p.numel() for g in groups for p in g["params"])
    assert n_grouped == sum(p.numel() for p in model.parameters())  # .parameters() deduplicates too
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("max_norm", [0.01, 1.0, 1e6])
def test_clip_grad_norm_matches_torch(max_norm):
    ours, ref = _real_model(), _real_model()
    for model in (ours, ref):
        x, y = _token_batch(0)
        nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
    # a parameter without a gradient must be ignored
    extra_ours, extra_ref = nn.Parameter(torch.ones(3)), nn.Parameter(torch.ones(3))
    norm_ours = clip_grad_norm([*ours.parameters(), extra_ours], max_norm)
    norm_ref = torch.nn.utils.clip_grad_norm_([*ref.parameters(), extra_ref], max_norm)
    assert abs(norm_ours.item() - norm_ref.item()) <= 1e-6 * norm_ref.item()
    for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
        assert torch.allclose(p.grad, q.grad, atol=1e-8, rtol=1e-6)
    clipped = global_grad_norm(ours.parameters()).item()
    assert clipped == pytest.approx(min(norm_ref.item(), max_norm), rel=1e-5)


def test_clip_grad_norm_float64_closed_form():
    p = nn.Parameter(torch.zeros(2, dtype=torch.float64))
    q = nn.Parameter(torch.zeros(1, dtype=torch.float64))
    p.grad = torch.tensor([3.0, 0.0], dtype=torch.float64)
    q.grad = torch.tensor([4.0], dtype=torch.float64)
    assert clip_grad_norm([p, q], max_norm=1.0).item() == pytest.approx(5.0, abs=1e-12)
    assert p.grad[0].item() == pytest.approx(3.0 / (5.0 + 1e-6), rel=1e-12)
    assert q.grad[0].item() == pytest.approx(4.0 / (5.0 + 1e-6), rel=1e-12)


def test_warmup_cosine_endpoints():
    kw = dict(max_lr=1.0, warmup_steps=10, total_steps=110, min_lr=0.1)
    assert warmup_cosine(0, **kw) == pytest.approx(0.1)  # max_lr / warmup_steps
    assert warmup_cosine(4, **kw) == pytest.approx(0.5)
    assert warmup_cosine(9, **kw) == pytest.approx(1.0)
    assert warmup_cosine(10, **kw) == pytest.approx(1.0)
    assert warmup_cosine(60, **kw) == pytest.approx(0.55)  # halfway: (max + min) / 2
    assert warmup_cosine(110, **kw) == pytest.approx(0.1)
    assert warmup_cosine(10_000, **kw) == pytest.approx(0.1)
    lrs = [warmup_cosine(s, **kw) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(lrs[:-1], lrs[1:], strict=True))  # monotone decay


def test_warmup_linear_endpoints():
    kw = dict(max_lr=2.0, warmup_steps=4, total_steps=24, min_lr=0.0)
    assert [warmup_linear(s, **kw) for s in range(4)] == pytest.approx([0.5, 1.0, 1.5, 2.0])
    assert warmup_linear(14, **kw) == pytest.approx(1.0)
    assert warmup_linear(24, **kw) == 0.0
    assert warmup_linear(99, **kw) == 0.0


def test_warmup_stable_decay_endpoints():
    kw = dict(max_lr=1.0, warmup_steps=10, total_steps=100, decay_steps=20, min_lr=0.0)
    assert warmup_stable_decay(0, **kw) == pytest.approx(0.1)
    assert all(warmup_stable_decay(s, **kw) == 1.0 for s in range(10, 81))
    assert warmup_stable_decay(90, **kw) == pytest.approx(0.5)
    assert warmup_stable_decay(100, **kw) == 0.0
    with pytest.raises(ValueError, match="decay_steps"):
        warmup_stable_decay(0, **{**kw, "decay_steps": 95})


def test_schedules_without_warmup_start_at_max_lr():
    assert warmup_cosine(0, max_lr=3.0, warmup_steps=0, total_steps=10) == 3.0
    assert warmup_linear(0, max_lr=3.0, warmup_steps=0, total_steps=10) == 3.0


def test_make_schedule_and_set_lr():
    schedule = make_schedule("cosine", max_lr=1.0, warmup_steps=0, total_steps=100, min_lr=0.0)
    assert schedule(50) == pytest.approx(0.5)
    assert schedule(25) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    with pytest.raises(ValueError, match="unknown schedule"):
        make_schedule("exp", max_lr=1.0)
    with pytest.raises(ValueError, match="warmup_steps"):
        make_schedule("cosine", max_lr=1.0, warmup_steps=20, total_steps=10)
    opt = AdamW([nn.Parameter(torch.ones(1))], lr=1.0)
    set_lr(opt, 0.25)
    assert opt.param_groups[0]["lr"] == 0.25


def test_bad_hyperparameters_raise():
    params = [nn.Parameter(torch.ones(1))]
    with pytest.raises(ValueError, match="betas"):
        AdamW(params, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="lr"):
        SGD(params, lr=-1.0)
    with pytest.raises(ValueError, match="max_norm"):
        clip_grad_norm(params, 0.0)


def test_param_groups_on_gpt_put_only_matrices_in_decay():
    model = _real_model()
    decay, no_decay = param_groups(model, weight_decay=0.1)
    decayed = {id(p) for p in decay["params"]}
    for name, p in model.named_parameters():
        expect_decay = p.dim() == 2 and "emb" not in name
        assert (id(p) in decayed) == expect_decay, name
    assert id(model.tok_emb.weight) not in decayed and id(model.pos_emb.weight) not in decayed
