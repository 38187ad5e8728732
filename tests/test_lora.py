"""LoRA adapters on a real minillm GPT: exact at init, equal to the merged full-rank weights after training,
only the adapters train, the closed-form parameter count, and clear errors for bad settings."""

import copy

import pytest
import torch
import torch.nn.functional as F
from chat_helpers import TOK

from minillm import chat, lora, sft
from minillm.layers import linear
from minillm.model import GPT, GPTConfig

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_gpt(preset="gpt2-style", seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    config = GPTConfig.preset(preset, vocab_size=50, context_length=16, n_layer=2, n_head=2, d_model=32)
    return GPT(config).to(dtype)


def ids(seed=1, batch=3, length=12):
    return torch.randint(0, 50, (batch, length), generator=torch.Generator().manual_seed(seed))


def train_adapters(model, steps=5, lr=1e-2):
    """A few AdamW steps on the trainable parameters only (the adapters after apply_lora)."""
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    for step in range(steps):
        x = ids(seed=10 + step)
        loss = F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


@pytest.mark.parametrize("preset", ["gpt2-style", "llama-style"])
def test_at_initialisation_the_adapted_model_equals_the_base_model_exactly(preset):
    base = tiny_gpt(preset).eval()
    adapted = lora.apply_lora(copy.deepcopy(base), rank=4, alpha=8, generator=torch.Generator().manual_seed(0))
    assert len(lora.lora_layers(adapted)) == base.config.n_layer * (4 if preset == "gpt2-style" else 5)
    with torch.no_grad():
        assert torch.equal(adapted(ids()), base(ids()))  # B = 0: the update adds exact zeros


def test_lora_linear_computes_x_times_the_merged_weight():
    torch.manual_seed(0)
    layer = linear(6, 5).double()
    wrapped = lora.LoRALinear(layer, rank=2, alpha=3.0)
    with torch.no_grad():
        wrapped.lora_B.normal_()  # a trained-looking B, so the low-rank term is not zero
    x = torch.randn(4, 6, dtype=torch.float64)
    w = layer.weight + 1.5 * wrapped.lora_B @ wrapped.lora_A  # closed form: W + (α/r)·B·A
    torch.testing.assert_close(wrapped(x), x @ w.T + layer.bias, rtol=0, atol=1e-12)
    torch.testing.assert_close(wrapped.merged_weight(), w, rtol=0, atol=1e-12)
    assert wrapped.scale == 1.5 and (wrapped.in_features, wrapped.out_features) == (6, 5)


@pytest.mark.parametrize("preset", ["gpt2-style", "llama-style"])
def test_after_training_the_lora_model_equals_the_merged_model(preset):
    base = tiny_gpt(preset, dtype=torch.float64)
    adapted = train_adapters(lora.apply_lora(copy.deepcopy(base), rank=4, generator=torch.Generator().manual_seed(1)))
    assert any(layer.lora_B.abs().max() > 0 for layer in lora.lora_layers(adapted).values())
    merged = lora.merge_lora(adapted)
    assert not lora.lora_layers(merged) and lora.lora_layers(adapted)  # merged is a plain GPT; adapted unchanged
    assert list(merged.state_dict()) == list(base.state_dict())  # same names and shapes: saves like the base
    with torch.no_grad():
        got, want = adapted(ids()), merged(ids())
        assert (got - base(ids())).abs().max() > 1e-3  # training changed the function ...
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)  # ... and the merged weights compute the same one
    # in float32 too, within float32 rounding
    adapted32, merged32 = copy.deepcopy(adapted).float(), merged.float()
    with torch.no_grad():
        torch.testing.assert_close(adapted32(ids()), merged32(ids()), rtol=0, atol=1e-5)


def test_only_the_adapters_receive_gradients_and_change():
    base = tiny_gpt()
    adapted = lora.apply_lora(copy.deepcopy(base), rank=2, generator=torch.Generator().manual_seed(2))
    trainable = [name for name, p in adapted.named_parameters() if p.requires_grad]
    assert trainable and all(name.endswith(("lora_A", "lora_B")) for name in trainable)
    x = ids()
    F.cross_entropy(adapted(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten()).backward()
    for name, p in adapted.named_parameters():
        assert (p.grad is not None) == name.endswith(("lora_A", "lora_B")), name
    # at B = 0 the gradient reaches B only: dL/dA = (α/r)·Bᵀ·(...) is zero on the first step
    layer = adapted.blocks[0].attn.qkv
    assert layer.lora_B.grad.abs().max() > 0 and layer.lora_A.grad.abs().max() == 0
    train_adapters(adapted)
    # every base weight is still there, untouched (a wrapped layer's weights sit under ".base.")
    kept = {n.replace(".base.", "."): t for n, t in adapted.state_dict().items() if "lora_" not in n}
    assert kept.keys() == base.state_dict().keys()
    assert all(torch.equal(kept[n], t) for n, t in base.state_dict().items())


@pytest.mark.parametrize("preset", ["gpt2-style", "llama-style"])
@pytest.mark.parametrize("rank", [1, 4])
def test_trainable_parameter_count_matches_the_closed_form(preset, rank):
    model = tiny_gpt(preset)
    c = model.config
    d, f = c.d_model, c.d_ff
    if preset == "gpt2-style":  # qkv d→3d, proj d→d, fc d→f, proj f→d
        per_block = (d + 3 * d) + (d + d) + (d + f) + (f + d)
    else:  # qkv, proj, gate d→f, up d→f, down f→d
        per_block = (d + 3 * d) + (d + d) + 2 * (d + f) + (f + d)
    expected = rank * per_block * c.n_layer
    lora.apply_lora(model, rank)
    assert lora.count_trainable(model) == expected == lora.lora_parameter_count(c, rank)
    # attention only: r·((d + 3d) + (d + d)) per block
    attn_only = lora.apply_lora(tiny_gpt(preset), rank, targets=("attn",))
    assert lora.count_trainable(attn_only) == rank * 6 * d * c.n_layer == lora.lora_parameter_count(c, rank, ("attn",))


def test_same_generator_gives_the_same_adapters():
    a = lora.apply_lora(tiny_gpt(), 3, generator=torch.Generator().manual_seed(5))
    b = lora.apply_lora(tiny_gpt(), 3, generator=torch.Generator().manual_seed(5))
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert na == nb and torch.equal(pa, pb)
    layer = a.blocks[0].mlp.fc.lora_A  # N(0, 1/in): std about 1/√32
    assert 0.5 / 32**0.5 < layer.std().item() < 2 / 32**0.5


def test_train_sft_trains_only_the_adapters_of_a_lora_model():
    """The library's SFT loop builds its optimizer from requires_grad parameters: adapters only."""
    torch.manual_seed(3)
    model = GPT(GPTConfig(vocab_size=len(TOK.vocab), context_length=48, n_layer=2, n_head=2, d_model=32))
    before = copy.deepcopy(model)
    lora.apply_lora(model, rank=4, alpha=8, generator=torch.Generator().manual_seed(0))
    examples = [chat.encode_chat([{"role": "user", "content": "hi?"}, {"role": "assistant", "content": "yes."}], TOK)]
    history = sft.train_sft(model, examples, pad_id=0, steps=30, lr=1e-2, batch_size=2)
    assert history.loss[-1] < history.loss[0] - 0.3
    merged = lora.merge_lora(model)
    changed = {
        n for (n, p), q in zip(merged.named_parameters(), before.parameters(), strict=True) if not torch.equal(p, q)
    }
    assert changed == {
        f"blocks.{i}.{m}.weight" for i in range(2) for m in ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj")
    }


def test_bad_settings_raise_clear_errors():
    for rank in (0, -1, 1.5, True, None):
        with pytest.raises(ValueError, match="rank must be a positive int"):
            lora.apply_lora(tiny_gpt(), rank)
    for alpha in (0, -2.0, float("nan"), "8"):
        with pytest.raises(ValueError, match="alpha must be a positive number"):
            lora.apply_lora(tiny_gpt(), 2, alpha=alpha)
    with pytest.raises(ValueError, match="unknown LoRA target 'attn.q'"):
        lora.apply_lora(tiny_gpt(), 2, targets=("attn.q",))
    with pytest.raises(ValueError, match="targets is empty"):
        lora.apply_lora(tiny_gpt(), 2, targets=())
    with pytest.raises(ValueError, match="'mlp.gate' matches no layer"):
        lora.apply_lora(tiny_gpt("gpt2-style"), 2, targets=("attn", "mlp.gate"))
    with pytest.raises(ValueError, match="'mlp.fc' matches no layer"):
        lora.lora_parameter_count(tiny_gpt("llama-style").config, 2, targets=("mlp.fc",))
    with pytest.raises(ValueError, match="rank 33 is larger than attn.qkv allows"):
        lora.apply_lora(tiny_gpt(), 33)
    model = lora.apply_lora(tiny_gpt(), 2)
    with pytest.raises(ValueError, match="already has LoRA adapters"):
        lora.apply_lora(model, 2)
    with pytest.raises(ValueError, match="no LoRA adapters to merge"):
        lora.merge_lora(tiny_gpt())
    with pytest.raises(ValueError, match="expects a minillm GPT"):
        lora.apply_lora(torch.nn.Sequential(linear(4, 4)), 2)
    with pytest.raises(TypeError, match="wraps an nn.Linear layer"):
        lora.LoRALinear(torch.nn.LayerNorm(4), 2)
