"""Streaming: ``encode_iterable`` equals ``encode`` on the whole text, with memory independent of size."""

from __future__ import annotations

import os
import random

import pytest
from tokenizer_corpus import course_text

from minillm.tokenizer import BPETokenizer
from minillm.tokenizer.pretokenize import pretokenize, stream_chunks


def current_rss() -> int:
    """Resident memory of this process in bytes (Linux /proc, else psutil)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import psutil

        return psutil.Process().memory_info().rss


@pytest.fixture(scope="module")
def tok() -> BPETokenizer:
    return BPETokenizer.train(course_text(200_000), 512)


def awkward_text() -> str:
    """Course text with the places chunking could go wrong: runs of spaces and newlines, contractions,
    special tokens, lines without spaces, digits, non-ASCII."""
    rng = random.Random(0)
    pieces = course_text(30_000).split(" ")
    extras = ["  \n ", "<|endoftext|>", "it's", "\n\n\n", "1234567", "日本語", "x<|end|>y", "noSpacesHere" * 30, "\t"]
    extras += ["。\n日本語のテキスト\n", "end.\nNext", "\r\n", "a \n b", "x\n'll"]
    for _ in range(600):
        pieces.insert(rng.randrange(len(pieces)), rng.choice(extras))
    return " ".join(pieces)


@pytest.mark.parametrize("chunk_chars", [1, 13, 200, 5000, 1 << 20])
@pytest.mark.parametrize("pattern", ["gpt2", "gpt4"])
def test_stream_chunks_preserve_pretokenization(chunk_chars: int, pattern: str) -> None:
    text = awkward_text()
    lines = text.splitlines(keepends=True)
    chunks = list(stream_chunks(lines, chunk_chars, special_tokens=["<|endoftext|>", "<|end|>"]))
    assert "".join(chunks) == text
    if chunk_chars < 1000:
        assert len(chunks) > 20  # it really did cut
    assert [p for c in chunks for p in pretokenize(c, pattern)] == pretokenize(text, pattern)


@pytest.mark.parametrize("chunk_chars", [1, 500, 1 << 18])
def test_encode_iterable_equals_encode(tok: BPETokenizer, chunk_chars: int) -> None:
    text = awkward_text()
    expected = tok.encode(text)
    assert list(tok.encode_iterable(text.splitlines(keepends=True), chunk_chars=chunk_chars)) == expected
    assert list(tok.encode_iterable(iter([text]), chunk_chars=chunk_chars)) == expected


def test_stream_chunks_cut_text_without_spaces_at_newlines() -> None:
    lines = [f"日本語のテキスト{i}。\n" for i in range(2000)]
    chunks = list(stream_chunks(lines, 100))
    assert len(chunks) > 100 and max(len(c) for c in chunks) < 200
    assert "".join(chunks) == "".join(lines)
    text = "".join(lines)
    for pattern in ("gpt2", "gpt4"):
        assert [p for c in chunks for p in pretokenize(c, pattern)] == pretokenize(text, pattern)


def test_encode_iterable_reads_paths_and_files(tok: BPETokenizer, tmp_path) -> None:
    text = awkward_text()
    path = tmp_path / "small.txt"
    path.write_bytes(text.encode("utf-8"))
    expected = tok.encode(text)
    assert list(tok.encode_iterable(path)) == expected
    with open(path, encoding="utf-8", newline="") as handle:  # no newline translation: "\r\n" stays
        assert list(tok.encode_iterable(handle)) == expected


@pytest.mark.slow
def test_encode_iterable_memory_is_bounded_on_a_50mb_file(tok: BPETokenizer, tmp_path) -> None:
    block = course_text(1_060_000, offset=200_000)
    copies = 50
    path = tmp_path / "big.txt"
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(copies):
            handle.write(block)
    size = path.stat().st_size
    assert size >= 50 * 2**20

    # Pre-tokenization only looks at neighbouring characters, so every junction between copies encodes
    # the same way: the id count (and id sum) of k copies is linear in k; derive it from 1, 2, 3 copies.
    one, two, three = (tok.encode(block * k) for k in (1, 2, 3))
    assert len(three) - len(two) == len(two) - len(one)
    expected_count = len(one) + (copies - 1) * (len(two) - len(one))
    expected_sum = sum(one) + (copies - 1) * (sum(two) - sum(one))
    del one, two, three

    baseline = current_rss()
    peak = baseline
    count = total = 0
    with open(path, encoding="utf-8") as handle:
        for i, token_id in enumerate(tok.encode_iterable(handle)):
            count += 1
            total += token_id
            if i % 200_000 == 0:
                peak = max(peak, current_rss())
    peak = max(peak, current_rss())
    assert (count, total) == (expected_count, expected_sum)
    growth = peak - baseline
    # Holding the text alone would take 50 MB, and its ids as a list another ~100 MB.
    assert growth < 25 * 2**20, f"memory grew by {growth / 2**20:.1f} MiB while streaming {size / 2**20:.0f} MiB"
