"""minillm.batches: text → token file (streamed, atomic), and windows that are contiguous slices of the
stream, reproducible, resumable and shardable."""

import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minillm import batches, data
from minillm.batches import (
    RandomWindows,
    encode_documents,
    encode_file,
    load_tokens,
    save_tokens,
    sequential_windows,
    token_dtype,
)
from minillm.paths import data_path
from minillm.tokenizer import BPETokenizer


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


# ------------------------------------------------------------------------------ text file → token file


@pytest.fixture(scope="module")
def tokenizer() -> BPETokenizer:
    return BPETokenizer.load(data_path("base") / "tokenizer.json")


def _whole_file_bytes(tokenizer: BPETokenizer, path: Path, folder: Path) -> bytes:
    """What the non-streaming way writes: the whole text, all its ids, one save."""
    ids = encode_documents(tokenizer, data.load_text(path))
    return save_tokens(ids, folder / "whole.bin", tokenizer.vocab_size).read_bytes()


HAND_CASES = {
    "crlf": b"Tom had a red ball.\r\nHe liked it.\r\n\r\nMia ran home.\r\n",
    "bom": "\ufeffOnce upon a time.\n\nThe end.\n".encode(),
    "blank lines with spaces and tabs": b"First story.\n \t \nSecond story,\nline two.\n\t\n\n  Third.  \n",
    "fake separator in the text": b"A <|endoftext|> inside a story.\n\nNext.",
    "one document, no final newline": "caf\u00e9 \u2014 \U0001f642 no blank line\nat all".encode(),
}


@pytest.mark.parametrize("chunk_tokens", [1, 3, 1 << 20])
@pytest.mark.parametrize("case", sorted(HAND_CASES))
def test_streamed_token_file_equals_encoding_the_whole_text(tokenizer, tmp_path, case, chunk_tokens):
    source = tmp_path / "story.txt"
    source.write_bytes(HAND_CASES[case])
    target = encode_file(tokenizer, source, tmp_path / "out" / "train.bin", chunk_tokens=chunk_tokens)
    assert target.read_bytes() == _whole_file_bytes(tokenizer, source, tmp_path)
    ids = load_tokens(target, tokenizer.vocab_size)
    assert ids[-1] == tokenizer.special_tokens["<|endoftext|>"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["train.bin"]  # no temporary file left


@settings(max_examples=60, deadline=None)
@given(st.text(st.sampled_from(list("ab é🙂<|>\t\n\r\ufeff\xa0")), max_size=60), st.sampled_from([1, 2, 1 << 20]))
def test_streamed_token_file_equals_encoding_the_whole_text_for_any_text(tokenizer, text, read_bytes):
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        patch.setattr(data, "_CHUNK_BYTES", read_bytes)  # characters and CRLFs split between reads
        source = Path(folder) / "t.txt"
        source.write_bytes(text.encode())
        if not text.removeprefix("\ufeff").strip():  # no document at all
            with pytest.raises(ValueError, match="t.txt: the file is empty"):
                encode_file(tokenizer, source, Path(folder) / "t.bin")
            assert sorted(p.name for p in Path(folder).iterdir()) == ["t.txt"]
            return
        streamed = encode_file(tokenizer, source, Path(folder) / "t.bin", chunk_tokens=2).read_bytes()
        assert streamed == _whole_file_bytes(tokenizer, source, Path(folder))


def test_token_file_from_worker_processes_is_byte_identical(tokenizer, tmp_path):
    """Two worker processes, parts of a few kilobytes (dozens of them), the hand cases' awkward documents and a
    CRLF stretch included: the same bytes as one process and as encoding the whole text."""
    source = tmp_path / "mixed.txt"
    stories = data_path("stories_val.txt").read_bytes()[:200_000]
    source.write_bytes(b"\n\n".join([*HAND_CASES.values(), stories, stories[:20_000].replace(b"\n", b"\r\n")]))
    one = encode_file(tokenizer, source, tmp_path / "one.bin").read_bytes()
    two = encode_file(tokenizer, source, tmp_path / "two.bin", workers=2, part_bytes=5_000).read_bytes()
    assert two == one == _whole_file_bytes(tokenizer, source, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mixed.txt", "one.bin", "two.bin", "whole.bin"]


@settings(max_examples=80, deadline=None)
@given(st.text(st.sampled_from(list("ab é🙂\t\n\r\ufeff\xa0")), min_size=1, max_size=80), st.integers(1, 12))
def test_file_parts_cut_only_between_documents(tokenizer, text, part_bytes):
    """What each worker does, run here part by part: the parts' ids, in order, are the whole file's ids."""
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "t.txt"
        source.write_bytes(text.encode())
        parts = batches.file_parts(source, part_bytes)
        assert parts[0][0] == 0 and parts[-1][1] == source.stat().st_size
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))
        batches._start_worker(tokenizer)
        ids = np.concatenate([batches._encode_part(source, start, end) for start, end in parts])
        if not text.removeprefix("\ufeff").strip():
            assert len(ids) == 0
            return
        assert ids.tobytes() == _whole_file_bytes(tokenizer, source, Path(folder))


def test_course_corpus_streams_to_the_same_ids(tokenizer, tmp_path):
    source = data_path("stories_val.txt")
    ids = load_tokens(encode_file(tokenizer, source, tmp_path / "val.bin"), tokenizer.vocab_size)
    assert np.array_equal(ids, encode_documents(tokenizer, source.read_text(encoding="utf-8")))


@pytest.mark.parametrize(
    "content, error, message",
    [
        (None, FileNotFoundError, "not found"),
        (b"", ValueError, "the file is empty"),
        (b" \n\t\r\n\n", ValueError, "the file is empty"),
        (
            b"good start\n\n" + "na\u00efve".encode("latin-1"),
            ValueError,
            r"not UTF-8 text \(byte 14, line 3",
        ),
    ],
)
def test_bad_source_is_refused_by_name_and_leaves_nothing(tokenizer, tmp_path, content, error, message):
    source = tmp_path / "nowhere.txt"
    if content is not None:
        source.write_bytes(content)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(error, match=f"nowhere.txt: {message}"):
        encode_file(tokenizer, source, out / "train.bin")
    assert list(out.iterdir()) == []


def test_failure_half_way_keeps_the_old_token_file_and_removes_the_temporary_one(tokenizer, tmp_path):
    source = tmp_path / "t.txt"
    source.write_text("one\n\ntwo\n\nthree\n", encoding="utf-8")
    target = save_tokens([1, 2, 3], tmp_path / "out" / "train.bin", tokenizer.vocab_size)
    calls, written = [], []

    class Interrupted(BPETokenizer):
        def encode(self, text, allowed_special="all"):
            calls.append(text)
            if len(calls) == 3:
                # the first two documents are already on disk, in a temporary file beside the target
                written.extend(p.stat().st_size for p in target.parent.iterdir() if p.name != "train.bin")
                raise KeyboardInterrupt  # Ctrl-C after two documents were written
            return super().encode(text, allowed_special)

    broken = Interrupted.load(data_path("base") / "tokenizer.json")
    with pytest.raises(KeyboardInterrupt):
        encode_file(broken, source, target, chunk_tokens=1)
    two_documents = len(encode_documents(tokenizer, "one\n\ntwo"))
    assert written == [two_documents * 2]  # uint16: ids go to disk as they come, not all at the end
    assert np.array_equal(load_tokens(target, tokenizer.vocab_size), [1, 2, 3])
    assert sorted(p.name for p in target.parent.iterdir()) == ["train.bin"]
    with pytest.raises(ValueError, match="chunk_tokens"):
        encode_file(tokenizer, source, target, chunk_tokens=0)
