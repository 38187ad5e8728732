"""minillm.loss against PyTorch's cross_entropy, float64 gradcheck and closed forms."""

import math

import pytest
import torch
import torch.nn.functional as F

from minillm.loss import IGNORE_INDEX, bits_per_byte, cross_entropy, log_softmax, perplexity, z_loss


def _batch(seed: int = 0, shape=(4, 7), vocab: int = 11, scale: float = 3.0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(*shape, vocab, generator=gen, dtype=torch.float64) * scale).to(dtype)
    targets = torch.randint(0, vocab, shape, generator=gen)
    return logits, targets


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_matches_torch_float32(reduction):
    logits, targets = _batch()
    ours = cross_entropy(logits, targets, reduction=reduction)
    ref = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1), reduction=reduction)
    assert torch.allclose(ours.reshape(-1), ref.reshape(-1), atol=1e-6, rtol=0)


def test_huge_logits_do_not_overflow():
    logits, targets = _batch(scale=1e4)
    assert logits.abs().max() > 1e4  # really that large
    naive = -(logits.exp() / logits.exp().sum(-1, keepdim=True)).log().gather(-1, targets[..., None])
    assert not torch.isfinite(naive).all()  # the naive formula does overflow here
    ours = cross_entropy(logits, targets)
    ref = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1))
    assert torch.isfinite(ours)
    assert abs(ours.item() - ref.item()) <= 1e-6 * max(1.0, abs(ref.item()))


def test_ignore_index_matches_torch_and_masks_gradient():
    logits, targets = _batch(seed=1)
    targets[0, :3] = IGNORE_INDEX
    targets[2, 5] = IGNORE_INDEX
    a = logits.clone().requires_grad_()
    b = logits.clone().requires_grad_()
    ours = cross_entropy(a, targets)
    ref = F.cross_entropy(b.reshape(-1, 11), targets.reshape(-1), ignore_index=IGNORE_INDEX)
    assert abs(ours.item() - ref.item()) <= 1e-6
    ours.backward()
    ref.backward()
    assert torch.allclose(a.grad, b.grad, atol=1e-7)
    assert a.grad[0, :3].abs().max() == 0


def test_custom_ignore_index():
    logits, targets = _batch(seed=2)
    targets[1] = 0
    ours = cross_entropy(logits, targets, ignore_index=0)
    ref = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1), ignore_index=0)
    assert abs(ours.item() - ref.item()) <= 1e-6


def test_all_masked_mean_is_nan_like_torch():
    logits, _ = _batch()
    targets = torch.full((4, 7), IGNORE_INDEX)
    assert torch.isnan(cross_entropy(logits, targets))
    assert torch.isnan(F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1)))


def test_gradcheck_float64():
    logits, targets = _batch(shape=(3, 4), vocab=5, dtype=torch.float64)
    targets[1, 2] = IGNORE_INDEX
    logits.requires_grad_()
    for reduction in ("mean", "sum", "none"):
        assert torch.autograd.gradcheck(lambda z, r=reduction: cross_entropy(z, targets, reduction=r), (logits,))


def test_gradient_is_softmax_minus_one_hot():
    logits, targets = _batch(shape=(6,), vocab=9, dtype=torch.float64)
    logits.requires_grad_()
    cross_entropy(logits, targets, reduction="sum").backward()
    expected = torch.softmax(logits.detach(), -1) - F.one_hot(targets, 9).double()
    assert torch.allclose(logits.grad, expected, atol=1e-12)


def test_uniform_logits_give_ln_vocab():
    for vocab in (2, 17, 2048):
        logits = torch.zeros(5, vocab, dtype=torch.float64)
        targets = torch.arange(5) % vocab
        assert abs(cross_entropy(logits, targets).item() - math.log(vocab)) < 1e-12


def test_log_softmax_matches_torch_for_large_logits():
    logits, _ = _batch(scale=1e4)
    assert torch.allclose(log_softmax(logits), torch.log_softmax(logits, -1), atol=1e-3, rtol=1e-6)


def test_perplexity_and_bits_per_byte_closed_forms():
    assert perplexity(math.log(7.0)) == pytest.approx(7.0, rel=1e-12)
    # 100 tokens of 1 nat each over 50 bytes is 2 nats per byte = 2 / ln 2 bits per byte
    assert bits_per_byte(1.0, n_tokens=100, n_bytes=50) == pytest.approx(2 / math.log(2), rel=1e-12)
    with pytest.raises(ValueError, match="positive"):
        bits_per_byte(1.0, n_tokens=0, n_bytes=5)


def test_bad_inputs_raise_clear_errors():
    logits, targets = _batch()
    with pytest.raises(ValueError, match="shape"):
        cross_entropy(logits, targets[:, :3])
    with pytest.raises(RuntimeError, match="out of bounds"):  # no min/max sync in the loss: torch's gather refuses
        cross_entropy(logits, torch.full_like(targets, 11))
    with pytest.raises(TypeError, match="integer"):
        cross_entropy(logits, targets.float())
    with pytest.raises(TypeError, match="floating"):
        cross_entropy(targets, targets)
    with pytest.raises(ValueError, match="reduction"):
        cross_entropy(logits, targets, reduction="avg")


def test_z_loss_equals_the_float64_formula_and_survives_huge_logits():
    logits, _ = _batch(seed=3, scale=5.0)
    expected = (
        sum(math.log(sum(math.exp(v) for v in row)) ** 2 for row in logits.double().reshape(-1, 11).tolist())
        / logits[..., 0].numel()
    )
    assert abs(z_loss(logits).item() - expected) < 1e-4 * expected  # float32 sum of squares ~ 1e-6 relative
    assert abs(z_loss(logits.double()).item() - expected) < 1e-12 * expected
    huge, _ = _batch(seed=3, scale=1e4)
    reference = torch.logsumexp(huge.double(), dim=-1).square().mean()
    assert torch.isfinite(z_loss(huge)) and abs(z_loss(huge).double() - reference) < 1e-6 * reference


def test_z_loss_gradient_is_two_log_z_times_softmax():
    logits, _ = _batch(seed=4, dtype=torch.float64)
    logits.requires_grad_()
    z_loss(logits).backward()
    log_z = torch.logsumexp(logits.detach(), dim=-1, keepdim=True)
    expected = 2 * log_z * torch.softmax(logits.detach(), dim=-1) / logits[..., 0].numel()
    torch.testing.assert_close(logits.grad, expected, atol=1e-12, rtol=0)
    with pytest.raises(TypeError, match="floating-point"):
        z_loss(torch.ones(3, dtype=torch.long))
