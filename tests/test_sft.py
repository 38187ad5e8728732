"""SFT batches, the response-only loss, padding invariance and the SFT loop, on a character tokenizer and a tiny GPT."""

import math

import pytest
import torch
import torch.nn.functional as F
from chat_helpers import TOK

from minillm import chat, generation, sft
from minillm.evaluation import greedy_gold
from minillm.model import GPT, GPTConfig

CHAT = [{"role": "user", "content": "hi?"}, {"role": "assistant", "content": "yes."}]

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_gpt(seed=0, context=48):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=len(TOK.vocab), context_length=context, n_layer=2, n_head=2, d_model=32))


def test_collate_shifts_and_right_pads():
    short = chat.encode_chat(CHAT, TOK)
    long = chat.encode_chat([{"role": "user", "content": "hello there?"}, CHAT[1]], TOK)
    batch = sft.collate([short, long], pad_id=99)
    n = len(short.ids) - 1
    assert batch.inputs.shape == batch.targets.shape == batch.mask.shape == (2, len(long.ids) - 1)
    assert batch.inputs[0, :n].tolist() == short.ids[:-1]
    assert batch.targets[0, :n].tolist() == short.ids[1:]
    assert batch.mask[0, :n].tolist() == short.loss_mask[1:]
    assert torch.all(batch.inputs[0, n:] == 99) and torch.all(batch.mask[0, n:] == 0)


def test_sft_loss_equals_cross_entropy_with_ignore_index():
    torch.manual_seed(1)
    logits = torch.randn(3, 6, 8, dtype=torch.float64)
    targets = torch.randint(0, 8, (3, 6))
    mask = torch.tensor([[0, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0]])
    labels = targets.masked_fill(mask == 0, -100)
    expected = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    got = sft.sft_loss(logits, targets, mask, "token")
    assert got.item() == pytest.approx(expected.item(), abs=1e-6)
    per_row = [
        F.cross_entropy(logits[b], labels[b], ignore_index=-100).item()  # each row's own mean
        for b in range(3)
    ]
    assert sft.sft_loss(logits, targets, mask, "sequence").item() == pytest.approx(sum(per_row) / 3, abs=1e-6)


def test_sft_loss_gradient_is_zero_on_prompt_positions():
    torch.manual_seed(2)
    logits = torch.randn(2, 5, 7, requires_grad=True)
    targets = torch.randint(0, 7, (2, 5))
    mask = torch.tensor([[0, 0, 1, 1, 0], [0, 1, 1, 1, 1]])
    sft.sft_loss(logits, targets, mask).backward()
    norms = logits.grad.abs().sum(-1)
    assert torch.all(norms[mask == 0] == 0) and torch.all(norms[mask == 1] > 0)


def test_sft_loss_rejects_bad_normalization_and_empty_masks():
    with pytest.raises(ValueError, match="normalization"):
        sft.sft_loss(torch.zeros(1, 2, 3), torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2), "word")
    with pytest.raises(ValueError, match="no response token"):
        sft.sft_loss(torch.zeros(1, 2, 3), torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 2))


@pytest.mark.parametrize("normalization", ["token", "sequence"])
def test_padding_an_example_does_not_change_its_loss(normalization):
    model = tiny_gpt().eval()
    example = chat.encode_chat(CHAT, TOK)
    alone = sft.collate([example], pad_id=0)
    padded = sft.collate([example], pad_id=0)
    extra = 9
    padded = sft.SFTBatch(
        F.pad(padded.inputs, (0, extra), value=TOK.index["z"]),  # any id: causal attention never sees it
        F.pad(padded.targets, (0, extra), value=TOK.index["z"]),
        F.pad(padded.mask, (0, extra), value=0),
    )
    loss_alone = sft.sft_loss(model(alone.inputs), alone.targets, alone.mask, normalization)
    loss_padded = sft.sft_loss(model(padded.inputs), padded.targets, padded.mask, normalization)
    assert abs(loss_alone.item() - loss_padded.item()) < 1e-6
    # and in a batch next to a longer example, under per-sequence normalisation its own loss is unchanged
    other = chat.encode_chat(
        [{"role": "user", "content": "what is the sky?"}, {"role": "assistant", "content": "blue."}], TOK
    )
    both = sft.collate([example, other], pad_id=0)
    loss_in_batch = sft.sft_loss(model(both.inputs)[:1], both.targets[:1], both.mask[:1], normalization)
    assert abs(loss_alone.item() - loss_in_batch.item()) < 1e-6


def test_prompt_tokens_condition_the_loss_but_are_not_targets():
    model = tiny_gpt().eval()
    example = chat.encode_chat(CHAT, TOK)
    batch = sft.collate([example], pad_id=0)
    logits = model(batch.inputs)
    base = sft.sft_loss(logits, batch.targets, batch.mask)
    # changing prompt *targets* (e.g. what the model should predict after "h") changes nothing
    targets = batch.targets.clone()
    targets[0, 2] = TOK.index["q"]
    assert sft.sft_loss(logits, targets, batch.mask).item() == base.item()
    # changing a prompt *input* changes the response predictions, hence the loss
    inputs = batch.inputs.clone()
    inputs[0, 2] = TOK.index["q"]
    assert sft.sft_loss(model(inputs), batch.targets, batch.mask).item() != pytest.approx(base.item(), abs=1e-6)


def test_train_sft_learns_a_reply_that_greedy_generation_reproduces():
    model = tiny_gpt(seed=3)
    before = [p.detach().clone() for p in model.parameters()]
    examples = [
        chat.encode_chat(CHAT, TOK),
        chat.encode_chat([{"role": "user", "content": "no?"}, {"role": "assistant", "content": "no."}], TOK),
    ]
    history = sft.train_sft(model, examples, pad_id=0, steps=80, lr=1e-2, batch_size=4)
    assert history.loss[-1] < 0.05 < history.loss[0]
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    replies = generation.generate_responses(model, TOK, ["hi?", "no?", "hi?"], max_new_tokens=10)
    assert replies == ["yes.", "no.", "yes."]
    exact = lambda p, r: float(r == ("yes." if p == "hi?" else "no."))  # noqa: E731
    right = greedy_gold(model, TOK, ["hi?", "no?"], 10, scorer=exact)
    assert right.scores == [1.0, 1.0] and right.replies == ["yes.", "no."]


def _two_examples():
    return [
        chat.encode_chat(CHAT, TOK),
        chat.encode_chat([{"role": "user", "content": "no?"}, {"role": "assistant", "content": "no not now."}], TOK),
    ]


@pytest.mark.parametrize("normalization", ["token", "sequence"])
def test_train_sft_runs_the_library_loop_and_equals_a_plain_pytorch_loop(normalization):
    """train_sft goes through minillm.train.Trainer; a hand-written AdamW loop on the same batches agrees."""
    examples, steps, lr = _two_examples(), 6, 3e-3
    ours = tiny_gpt(seed=5).double()
    history = sft.train_sft(
        ours,
        examples,
        0,
        steps,
        lr,
        batch_size=3,
        normalization=normalization,
        generator=torch.Generator().manual_seed(7),
    )
    assert len(history.records) == steps and {"lr", "grad_norm", "tokens_per_s"} <= set(history.records[0])
    reference = tiny_gpt(seed=5).double()
    opt = torch.optim.AdamW(reference.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    picks_from = torch.Generator().manual_seed(7)
    for _ in range(steps):
        picks = torch.randint(len(examples), (3,), generator=picks_from).tolist()
        batch = sft.collate([examples[i] for i in picks], 0, max_len=reference.config.context_length)
        loss = sft.sft_loss(reference(batch.inputs), batch.targets, batch.mask, normalization)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
        opt.step()
    for a, b in zip(ours.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def test_train_sft_mixing_logs_the_sft_loss_apart_from_the_pretraining_loss():
    stream = torch.randint(0, len(TOK.vocab), (200,), generator=torch.Generator().manual_seed(0))

    def pretrain_batches():
        return stream[:-1].view(1, -1)[:, :40], stream[1:].view(1, -1)[:, :40]

    history = sft.train_sft(
        tiny_gpt(seed=6),
        _two_examples(),
        0,
        3,
        1e-3,
        batch_size=2,
        pretrain_batches=pretrain_batches,
        pretrain_weight=0.5,
    )
    for record, sft_loss in zip(history.records, history.loss, strict=True):
        assert record["sft_loss"] == sft_loss
        # the optimised loss is the sum (up to the float32 rounding of the logged parts)
        assert record["loss"] == pytest.approx(sft_loss + 0.5 * record["pretrain_loss"], rel=1e-5)


def test_train_sft_rejects_bad_settings():
    with pytest.raises(ValueError, match="steps"):
        sft.train_sft(tiny_gpt(), _two_examples(), 0, 0, 1e-3)
    with pytest.raises(ValueError, match="normalization"):
        sft.train_sft(tiny_gpt(), _two_examples(), 0, 2, 1e-3, normalization="batch")
    with pytest.raises(ValueError, match="no chat examples"):
        sft.train_sft(tiny_gpt(), [], 0, 2, 1e-3)


def test_lm_validation_loss_matches_manual_windows_and_uniform_model():
    model = tiny_gpt(seed=4).eval()
    stream = torch.randint(0, len(TOK.vocab), (100,))
    context = 16
    got = sft.lm_validation_loss(model, stream, context, batch_size=2)
    n = (100 - 1) // context
    x = torch.stack([stream[i * context : (i + 1) * context] for i in range(n)])
    y = torch.stack([stream[i * context + 1 : (i + 1) * context + 1] for i in range(n)])
    expected = F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
    assert got == pytest.approx(expected, rel=1e-5)
    with torch.no_grad():
        model.lm_head.weight.zero_()  # tied to the embedding: the whole model now predicts uniformly
    assert sft.lm_validation_loss(model, stream, context) == pytest.approx(math.log(len(TOK.vocab)), rel=1e-5)
