"""minillm.batches: windows are contiguous slices of the stream, reproducible, resumable and shardable."""

import numpy as np
import pytest
import torch

from minillm.batches import RandomWindows, load_tokens, save_tokens, sequential_windows, token_dtype


def test_windows_are_contiguous_and_targets_shifted_by_one():
    tokens = np.arange(1000)  # each token is its own position, so a window shows where it came from
    batches = RandomWindows(tokens, batch_size=8, context_length=16, seed=0)
    x, y = batches.next_batch()
    assert x.shape == y.shape == (8, 16) and x.dtype == y.dtype == torch.long
    starts = x[:, :1]
    assert torch.equal(x, starts + torch.arange(16))
    assert torch.equal(y, starts + 1 + torch.arange(16))


def test_every_start_offset_is_reachable_and_none_overflows():
    tokens = np.arange(20)
    batches = RandomWindows(tokens, batch_size=64, context_length=5, seed=1)
    starts = torch.cat([batches.next_batch()[0][:, 0] for _ in range(20)])
    assert set(starts.tolist()) == set(range(0, 20 - 5))  # the last window ends exactly at the last token


def test_same_seed_same_batches_and_resume_from_state():
    tokens = np.random.default_rng(0).integers(0, 50, 5000)
    a = RandomWindows(tokens, 4, 32, seed=7)
    b = RandomWindows(tokens, 4, 32, seed=7)
    for _ in range(3):
        assert torch.equal(a.next_batch()[0], b.next_batch()[0])
    state = a.state_dict()
    expected = [a.next_batch()[0] for _ in range(3)]
    c = RandomWindows(tokens, 4, 32, seed=123)
    c.load_state_dict(state)
    assert c.batches_drawn == 3
    assert all(torch.equal(c.next_batch()[0], e) for e in expected)
    other = RandomWindows(tokens, 4, 32, seed=8)
    assert not torch.equal(other.next_batch()[0], RandomWindows(tokens, 4, 32, seed=7).next_batch()[0])


def test_ranks_split_the_global_batch():
    tokens = np.arange(10_000)
    whole = RandomWindows(tokens, 8, 16, seed=3)
    ranks = [RandomWindows(tokens, 8, 16, seed=3, rank=r, world_size=2) for r in range(2)]
    for _ in range(4):
        x, y = whole.next_batch()
        parts = [r.next_batch() for r in ranks]
        assert parts[0][0].shape == (4, 16)
        assert torch.equal(x, torch.cat([p[0] for p in parts]))
        assert torch.equal(y, torch.cat([p[1] for p in parts]))


def test_save_and_memmap_tokens(tmp_path):
    ids = np.random.default_rng(0).integers(0, 2048, 3000)
    path = save_tokens(ids, tmp_path / "train.bin", vocab_size=2048)
    assert path.stat().st_size == 3000 * 2  # uint16 on disk
    loaded = load_tokens(path, vocab_size=2048)
    assert isinstance(loaded, np.memmap) and loaded.dtype == np.uint16
    assert np.array_equal(loaded, ids)
    x, _ = RandomWindows(loaded, 2, 8, seed=0).next_batch()
    assert x.dtype == torch.long


def test_large_vocab_uses_uint32(tmp_path):
    assert token_dtype(65_536) == np.uint16 and token_dtype(65_537) == np.uint32
    ids = [0, 70_000, 65_535]
    assert np.array_equal(load_tokens(save_tokens(ids, tmp_path / "t.bin", 70_001), 70_001), ids)


def test_sequential_windows_are_fixed_and_non_overlapping():
    tokens = np.arange(101)
    batches = list(sequential_windows(tokens, batch_size=3, context_length=10))
    xs = torch.cat([x for x, _ in batches])
    assert xs.shape == (10, 10) and [x.shape[0] for x, _ in batches] == [3, 3, 3, 1]
    assert torch.equal(xs.flatten(), torch.arange(100))
    assert torch.equal(torch.cat([y for _, y in batches]).flatten(), torch.arange(1, 101))
    assert len(list(sequential_windows(tokens, 3, 10, max_batches=2))) == 2


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="context_length \\+ 1"):
        RandomWindows(np.arange(10), 2, 10)
    with pytest.raises(ValueError, match="divisible"):
        RandomWindows(np.arange(100), 3, 4, world_size=2)
    with pytest.raises(ValueError, match="rank"):
        RandomWindows(np.arange(100), 4, 4, rank=2, world_size=2)
    with pytest.raises(ValueError, match="lie in"):
        save_tokens([1, 2, 5000], "/tmp/never-written.bin", vocab_size=100)
    with pytest.raises(FileNotFoundError, match="token file"):
        load_tokens("/nonexistent/x.bin", 100)
