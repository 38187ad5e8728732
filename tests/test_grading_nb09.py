"""Notebook 09's graders: the reference passes, each named mistake (written here as its own small wrong
implementation) is caught with its name, and a stub, an exception, a wrong shape or NaN get a clear line."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from grading_helpers import StubClass, assert_fails, assert_passes, stub

from minillm import chat, lora, sft
from minillm.grading import NotWrittenYet
from minillm.grading import nb09_sft as nb09


# --------------------------------------------------------------------------------------------- encoding
def encode_by_hand(
    messages, tokenizer, *, all_roles=False, end_trained=True, specials=False, marker_trained=False, start=True
):
    """A learner's chat encoder, with switches for the mistakes (written for these tests)."""
    special = {name: tokenizer.encode(name)[0] for name in chat.CHAT_SPECIAL_TOKENS}
    ids, mask = ([special["<|endoftext|>"]], [0]) if start else ([], [])
    for message in messages:
        role = message["role"]
        text = tokenizer.encode(message["content"]) if specials else tokenizer.encode(message["content"], "none")
        on = 1 if (all_roles or role == "assistant") else 0
        ids.append(special[f"<|{role}|>"])
        mask.append(on if marker_trained else 0)
        for token in text:
            ids.append(token)
            mask.append(on)
        ids.append(special["<|end|>"])
        mask.append(on if end_trained else 0)
    return ids, mask


def library_encoding(messages, tokenizer):
    encoded = chat.encode_chat(messages, tokenizer)
    return encoded.ids, encoded.loss_mask


def test_encode_chat_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb09.encode_chat, library_encoding, capsys)
    assert_passes(nb09.encode_chat, encode_by_hand, capsys)


@pytest.mark.parametrize(
    ("switch", "name"),
    [
        ({"all_roles": True}, "the prompt trained on too"),
        ({"end_trained": False}, "the closing <|end|> not trained"),
        ({"specials": True}, "special tokens allowed in message content"),
        ({"marker_trained": True}, "the <|assistant|> marker trained"),
        ({"start": False}, "the leading <|endoftext|> left out"),
    ],
)
def test_encode_chat_names_the_mistake(switch, name, capsys):
    assert_fails(nb09.encode_chat, lambda m, t: encode_by_hand(m, t, **switch), capsys, says=f"Looks like {name}")


def test_encode_chat_stub_raising_and_wrong_return(capsys):
    assert_fails(nb09.encode_chat, stub("my_encode_chat"), capsys, says="my_encode_chat is not written yet")
    assert_fails(nb09.encode_chat, lambda m, t: [][0], capsys, says="raised IndexError")
    out = assert_fails(nb09.encode_chat, chat.encode_chat, capsys, says="must return a tuple (ids, mask)")
    assert "returned a ChatTokens" in out

    def one_short(m, t):
        ids, mask = encode_by_hand(m, t)
        return ids, mask[:-1]

    assert_fails(nb09.encode_chat, one_short, capsys, says="at key 'mask': returned 18 items, expected 19")


def test_encode_chat_fallback_serves_the_notebooks_calls(capsys):
    fallback = nb09.ENCODE_CHAT.fallback
    assert_fails(nb09.encode_chat, stub("my_encode_chat"), capsys, says="not written yet", fallback=fallback)
    conversation = [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hi."}]
    ids, mask = fallback(conversation, nb09._tokenizer())
    assert (ids, mask) == encode_by_hand(conversation, nb09._tokenizer())


# ---------------------------------------------------------------------------------------------- collate
def collate_by_hand(examples, pad_id, *, shift_mask=True, left=False, pad_mask=0):
    rows = [(ids[:-1], ids[1:], mask[1:] if shift_mask else mask[:-1]) for ids, mask in examples]
    width = max(len(r[0]) for r in rows)
    out = []
    for k, fill in enumerate((pad_id, pad_id, pad_mask)):
        parts = [torch.tensor(r[k]) for r in rows]
        pads = [torch.full((width - len(p),), fill) for p in parts]
        out.append(torch.stack([torch.cat((q, p) if left else (p, q)) for p, q in zip(parts, pads, strict=True)]))
    return tuple(out)


def test_collate_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb09.collate, collate_by_hand, capsys)


def test_collate_names_the_mistakes(capsys):
    wrong = lambda ex, pad: collate_by_hand(ex, pad, shift_mask=False)  # noqa: E731
    assert_fails(nb09.collate, wrong, capsys, says="Looks like the mask not shifted with the targets")
    assert_fails(
        nb09.collate, lambda ex, pad: collate_by_hand(ex, pad, left=True), capsys, says="Looks like left padding"
    )
    pads_on = lambda ex, pad: collate_by_hand(ex, pad, pad_mask=1)  # noqa: E731
    assert_fails(nb09.collate, pads_on, capsys, says="Looks like the padding trained on")


def test_collate_stub_and_wrong_shape(capsys):
    assert_fails(nb09.collate, stub("my_collate"), capsys, says="is not written yet", fallback=nb09.COLLATE.fallback)

    def not_shifted(examples, pad_id):  # the full ids as inputs: one column too many
        width = max(len(ids) for ids, _ in examples)
        inputs = torch.full((len(examples), width), pad_id)
        for b, (ids, _) in enumerate(examples):
            inputs[b, : len(ids)] = torch.tensor(ids)
        return inputs, inputs, inputs

    assert_fails(nb09.collate, not_shifted, capsys, says="returned shape")
    batch = nb09.COLLATE.fallback([([1, 2, 3], [0, 1, 1]), ([4, 5], [0, 1])], 9)
    assert [t.tolist() for t in batch] == [[[1, 2], [4, 9]], [[2, 3], [5, 9]], [[1, 1], [1, 0]]]


# --------------------------------------------------------------------------------------------- SFT loss
def loss_by_hand(logits, targets, mask, normalization="token"):
    labels = torch.where(mask.bool(), targets, torch.full_like(targets, -100))
    if normalization == "token":
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    return torch.stack(
        [F.cross_entropy(lg, lb, ignore_index=-100) for lg, lb in zip(logits, labels, strict=True)]
    ).mean()


def loss_on_every_token(logits, targets, mask, normalization="token"):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def loss_over_all_positions(logits, targets, mask, normalization="token"):
    nll = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    return (nll * mask.flatten()).mean()


def loss_from_softmax(logits, targets, mask, normalization="token"):
    p = torch.softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    m = mask.float()
    if normalization == "token":
        return (-torch.log(p) * m).sum() / m.sum()
    return ((-torch.log(p) * m).sum(1) / m.sum(1)).mean()


def test_sft_loss_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb09.sft_loss, sft.sft_loss, capsys)
    assert_passes(nb09.sft_loss, loss_by_hand, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (loss_on_every_token, "the SFT loss over the prompt tokens too"),
        (loss_over_all_positions, "the masked loss averaged over every position"),
        (
            lambda lg, t, m, normalization="token": loss_by_hand(lg, t, m),
            "the per-sequence normalisation done per token",
        ),
        (loss_from_softmax, "the log of the softmax (underflows at large logits)"),
    ],
)
def test_sft_loss_names_the_mistake(wrong, name, capsys):
    assert_fails(nb09.sft_loss, wrong, capsys, says=f"Looks like {name}")


def test_sft_loss_stub_nan_shape_and_raising(capsys):
    assert_fails(nb09.sft_loss, stub("my_sft_loss"), capsys, says="is not written yet", fallback=sft.sft_loss)

    def empty_rows_nan(logits, targets, mask, normalization="token"):
        return loss_by_hand(logits, targets, mask) * float("nan")

    assert_fails(nb09.sft_loss, empty_rows_nan, capsys, says="returned NaN")

    def not_reduced(logits, targets, mask, normalization="token"):
        return F.cross_entropy(logits.transpose(1, 2), targets, reduction="none") * mask

    assert_fails(nb09.sft_loss, not_reduced, capsys, says="returned shape (3, 6), expected ()")
    assert_fails(nb09.sft_loss, lambda lg, t, m, n="token": lg @ t, capsys, says="raised RuntimeError")


# --------------------------------------------------------------------------------------------- SFT loop
def loop_by_hand(
    model,
    lr,
    steps,
    batch_size=2,
    seed=0,
    pretrain=None,
    pretrain_weight=1.0,
    examples=(),
    *,
    zero=True,
    clip=True,
    nan=False,
    defaults=False,
    weighted=True,
):
    trainable = [p for p in model.parameters() if p.requires_grad]
    if defaults:
        opt = torch.optim.AdamW(trainable, lr=lr)
    else:
        opt = torch.optim.AdamW(trainable, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    picks = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        chosen = [examples[i] for i in torch.randint(len(examples), (batch_size,), generator=picks).tolist()]
        batch = sft.collate([chat.ChatTokens(list(ids), list(mask)) for ids, mask in chosen], 0)
        loss = sft.sft_loss(model(batch.inputs), batch.targets, batch.mask)
        if pretrain is not None:
            x, y = pretrain()
            lm = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            loss = loss + (pretrain_weight * lm if weighted else lm)
        if nan:
            loss = loss * float("nan")
        if zero:
            opt.zero_grad()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
    model.eval()
    return loss.item()


def test_sft_train_a_learners_loop_passes(capsys):
    assert_passes(nb09.sft_train, loop_by_hand, capsys)


@pytest.mark.parametrize(
    ("switch", "name"),
    [
        ({"zero": False}, "the gradients not zeroed between steps"),
        ({"clip": False}, "no gradient clipping"),
        ({"defaults": True}, "AdamW with its default betas and weight decay"),
        ({"weighted": False}, "the pretraining loss not weighted"),
    ],
)
def test_sft_train_names_the_mistake(switch, name, capsys):
    def wrong(model, lr, steps, batch_size=2, seed=0, pretrain=None, pretrain_weight=1.0, examples=()):
        return loop_by_hand(model, lr, steps, batch_size, seed, pretrain, pretrain_weight, examples, **switch)

    assert_fails(nb09.sft_train, wrong, capsys, says=f"Looks like {name}")


def test_sft_train_stub_raising_and_nan(capsys):
    assert_fails(nb09.sft_train, stub("my_sft_train"), capsys, says="my_sft_train is not written yet")
    assert_fails(nb09.sft_train, lambda model, lr, steps, *a, **k: 1 / 0, capsys, says="raised ZeroDivisionError")

    def nan_loss(model, lr, steps, batch_size=2, seed=0, pretrain=None, pretrain_weight=1.0, examples=()):
        return loop_by_hand(model, lr, steps, batch_size, seed, pretrain, pretrain_weight, examples, nan=True)

    assert_fails(nb09.sft_train, nan_loss, capsys, says="returned NaN")


def test_sft_train_fallback_keeps_the_notebooks_default_examples(capsys):
    examples = nb09._chat_examples(7, 4)

    def unwritten(model, lr, steps, batch_size=2, seed=0, pretrain=None, pretrain_weight=1.0, examples=examples):
        raise NotWrittenYet("my_sft_train")  # the workbook's stub keeps the signature, and so its default

    out = assert_fails(nb09.sft_train, unwritten, capsys, says="not written yet")
    assert "uses minillm.sft.train_sft" in out
    fallback = nb09.sft_train(unwritten)
    mine, lib = nb09._tiny_model(), nb09._tiny_model()
    loss = fallback(lib, 1e-2, 2)  # the notebook's run() leaves examples at its default
    loop_by_hand(mine, 1e-2, 2, examples=examples)
    assert isinstance(loss, float) and math.isfinite(loss)
    assert all(
        torch.allclose(a, b, rtol=1e-9, atol=1e-12) for a, b in zip(mine.parameters(), lib.parameters(), strict=True)
    )


# ------------------------------------------------------------------------------------------- LoRA layer
class LoRAByHand(torch.nn.Module):
    """A learner's LoRA layer, with switches for the mistakes (written for these tests)."""

    scaled, zero_b, freeze, zero_a = True, True, True, False

    def __init__(self, layer, rank, alpha, generator=None):
        super().__init__()
        if self.freeze:
            for p in layer.parameters():
                p.requires_grad = False
        self.base = layer
        self.scale = {True: alpha / rank, False: 1.0, "alpha": alpha, "inverted": rank / alpha}[self.scaled]
        n_out, n_in = layer.weight.shape
        a = torch.zeros(rank, n_in) if self.zero_a else torch.randn(rank, n_in, generator=generator) * n_in**-0.5
        self.A = torch.nn.Parameter(a)
        self.B = torch.nn.Parameter(torch.zeros(n_out, rank) if self.zero_b else 0.01 * torch.randn(n_out, rank))

    def forward(self, x):
        return F.linear(x, self.base.weight, self.base.bias) + self.scale * (x @ self.A.T @ self.B.T)


class LoRAUnscaled(LoRAByHand):
    scaled = False


class LoRAScaledByAlpha(LoRAByHand):
    scaled = "alpha"


class LoRAInvertedScale(LoRAByHand):
    scaled = "inverted"


class LoRABothZero(LoRAByHand):
    zero_a = True


class LoRARandomB(LoRAByHand):
    zero_b = False


class LoRANotFrozen(LoRAByHand):
    freeze = False


def test_lora_reference_and_a_learners_layer_pass(capsys):
    assert_passes(nb09.lora_linear, LoRAByHand, capsys)
    assert_passes(nb09.lora_linear, nb09.LORA.fallback, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (LoRAUnscaled, "LoRA without the α/r scaling"),
        (LoRAScaledByAlpha, "the update scaled by α, not α/r"),
        (LoRAInvertedScale, "the scale inverted (r/α)"),
        (LoRABothZero, "A and B both zero"),
        (LoRARandomB, "B initialised at random"),
        (LoRANotFrozen, "the base weight not frozen"),
    ],
)
def test_lora_names_the_mistake(wrong, name, capsys):
    assert_fails(nb09.lora_linear, wrong, capsys, says=f"Looks like {name}")


def test_lora_stub_shape_nan_and_raising(capsys):
    assert_fails(nb09.lora_linear, StubClass, capsys, says="is not written yet", fallback=nb09.LORA.fallback)

    class OnlyTheAdapter(LoRAByHand):
        def forward(self, x):
            return x @ self.A.T

    assert_fails(nb09.lora_linear, OnlyTheAdapter, capsys, says="returned shape (2, 3, 2), expected (2, 3, 5)")

    class NaNs(LoRAByHand):
        def forward(self, x):
            return super().forward(x) / 0 * 0

    assert_fails(nb09.lora_linear, NaNs, capsys, says="returned NaN")

    class Raises(LoRAByHand):
        def forward(self, x):
            raise ValueError("no")

    assert_fails(nb09.lora_linear, Raises, capsys, says="raised ValueError: no")


def test_lora_fallback_answers_to_the_notebooks_names(capsys):
    layer = torch.nn.Linear(8, 6)
    fallback = nb09.LORA.fallback
    mine = fallback(layer, rank=2, alpha=4, generator=torch.Generator().manual_seed(0))
    lib = lora.LoRALinear(layer, rank=2, alpha=4, generator=torch.Generator().manual_seed(0))
    assert mine.A is mine.lora_A and mine.B is mine.lora_B and mine.scale == 2.0
    assert torch.equal(mine.A, lib.lora_A)
    with torch.no_grad():
        mine.B.copy_(torch.ones(6, 2))
    mine(torch.randn(3, 8)).sum().backward()
    assert mine.base.weight.grad is None and mine.A.grad is not None
