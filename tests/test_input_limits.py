"""Inputs that used to cost unbounded memory or time, or failed late with a bare error, are bounded or refused.

* MinHash on one long document: signatures in bounded memory, bit-identical to the all-at-once computation;
* vocabulary files with one id far beyond the number of entries;
* an opted-in pre-tokenization pattern that backtracks catastrophically;
* token ids outside the vocabulary at the boundaries where they enter (token files, ``generate``);
* command-line settings that used to run and report nonsense (``--n 0``) or name the wrong value (``--bands 0``).
"""

from __future__ import annotations

import base64
import importlib
import json
import random
import re
import time
import tracemalloc

import numpy as np
import pytest
import torch

from minillm.batches import load_tokens, save_tokens
from minillm.model import GPT, GPTConfig
from minillm.textdata import __main__ as textdata_cli
from minillm.textdata import minhash, normalize
from minillm.textdata.contamination import NgramIndex
from minillm.textdata.language import ENGLISH_STOP_WORDS, english_stop_word_share
from minillm.textdata.minhash import PRIME, MinHasher, shingle_id, shingles
from minillm.textdata.pipeline import Pipeline, clean_file
from minillm.textdata.quality import MARKUP_CHARS, quality_stats
from minillm.tokenizer import GPT2_PATTERN, GPT4_PATTERN, BPETokenizer
from minillm.tokenizer.io import byte_to_unicode
from minillm.tokenizer.pretokenize import check_pattern, unsafe_repetition

MiB = 1 << 20
pretokenize_module = importlib.import_module("minillm.tokenizer.pretokenize")  # the package's name is the function


def _words(count: int, seed: int = 0) -> str:
    """``count`` random words on one line (no blank line: one document), from a vocabulary of 3000."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choices("abcdefghij", k=rng.randint(2, 7))) for _ in range(3000)]
    return " ".join(rng.choices(vocab, k=count))


def _peak_bytes(function, *args) -> int:
    """Peak memory Python and numpy allocate while ``function(*args)`` runs (tracemalloc sees both)."""
    tracemalloc.start()
    try:
        function(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ------------------------------------------------------------------------------------------ MinHash memory
SMALL_DOCS = [
    "",
    "!!! ...",
    "one",
    "two words",
    "exactly five words right here",
    "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat.",
    "Ｆｕｌｌ-width ﬁne café Naïve ÉCOLE école, naïve! 123 4 5 6 7",
    _words(300, seed=1),
    _words(2_000, seed=2),
]


def _unchunked(hasher: MinHasher, ids: list[int]) -> np.ndarray:
    """The signature as it was computed before chunking: every shingle against every hash function at once."""
    if not ids:
        return np.full(hasher.num_hashes, PRIME, dtype=np.uint32)
    x = np.array(ids, dtype=np.uint64)
    return ((hasher.a[:, None] * x[None, :] + hasher.b[:, None]) % PRIME).min(axis=1).astype(np.uint32)


def _brute_force(hasher: MinHasher, ids: list[int]) -> list[int]:
    """min over shingles of (a·x + b) mod p, in Python integers (no numpy, no overflow question)."""
    return [
        min(((int(a) * x + int(b)) % PRIME for x in ids), default=PRIME)
        for a, b in zip(hasher.a, hasher.b, strict=True)
    ]


@pytest.mark.parametrize("chunk", [3, 64, minhash.SIGNATURE_CHUNK])
def test_signatures_are_bit_identical_to_the_unchunked_and_brute_force_minimum(chunk, monkeypatch):
    monkeypatch.setattr(minhash, "SIGNATURE_CHUNK", chunk)
    hasher = MinHasher(num_hashes=32, shingle_size=5, seed=7)
    for doc in SMALL_DOCS:
        ids = [shingle_id(s) for s in shingles(doc, 5)]  # the shingle set, as the signature was defined on it
        signature = hasher.signature(doc)
        assert signature.dtype == np.uint32 and signature.shape == (32,)
        assert np.array_equal(signature, _unchunked(hasher, ids)), doc[:40]
        assert signature.tolist() == _brute_force(hasher, ids), doc[:40]


def test_a_document_of_many_chunks_keeps_its_signature():
    hasher = MinHasher()  # the pipeline's 128 hashes
    doc = _words(3 * minhash.SIGNATURE_CHUNK + 17, seed=3)
    ids = [shingle_id(s) for s in shingles(doc, 5)]
    assert len(ids) > 2 * minhash.SIGNATURE_CHUNK
    assert np.array_equal(hasher.signature(doc), _unchunked(hasher, ids))
    assert np.array_equal(hasher.signature_of_ids(ids + ids[::-1]), _unchunked(hasher, ids))  # repeats: same min


def test_signature_memory_does_not_grow_with_the_number_of_shingles():
    """All at once, 200,000 shingles took a 128 × 200,000 uint64 table (205 MB; a 50 MB text asked for 7.3 GiB)."""
    hasher = MinHasher()
    peaks = [_peak_bytes(hasher.signature_of_ids, (i * 7919 % PRIME for i in range(n))) for n in (20_000, 200_000)]
    table = 8 * hasher.num_hashes * minhash.SIGNATURE_CHUNK
    assert all(peak < table + MiB for peak in peaks), peaks
    assert abs(peaks[1] - peaks[0]) < 64 * 1024, peaks  # ten times the shingles, the same peak


@pytest.mark.parametrize("words", [30_000, 120_000])
def test_signature_of_one_long_line_costs_a_few_copies_of_the_text(words):
    """Text copies (normalised, case-folded) and one hash table; the word list, the shingle set and the
    [k, shingles] table the old code built cost some 200 bytes a character."""
    text = _words(words)
    peak = _peak_bytes(MinHasher().signature, text)
    assert peak < 4 * len(text) + 6 * MiB, (peak, len(text))


def test_clean_file_on_a_document_without_blank_lines_stays_near_its_size(tmp_path):
    """The whole pipeline on one 0.3 MB line (the 1 GB run of the issue is reported, not repeated here)."""
    source = tmp_path / "one_line.txt"
    source.write_text(_words(60_000), encoding="utf-8")
    size = source.stat().st_size
    peak = _peak_bytes(clean_file, source, tmp_path / "out.txt")
    assert peak < 6 * size + 6 * MiB, (peak, size)


_REFERENCE_SPACES = re.compile(r"[^\S\n]+")
_WHITESPACE_SOUP = [
    "a",
    "b",
    "é",
    " ",
    "  ",
    "\t",
    "\u00a0",
    "\u2003",
    "\x1c",
    "\x85",
    "\u2028",
    "\n",
    "\n\n",
    "<",
    "|",
]


def _soup(rng: random.Random, length: int) -> str:
    return "".join(rng.choice(_WHITESPACE_SOUP) for _ in range(length))


def test_long_lines_collapse_their_spaces_exactly_as_one_substitution(monkeypatch):
    monkeypatch.setattr(normalize, "SPACE_CHUNK", 5)  # every line of the soup is cut into many pieces
    rng = random.Random(0)
    for _ in range(300):
        line = _soup(rng, rng.randint(0, 80)).replace("\n", "")
        assert normalize._collapse_spaces(line) == _REFERENCE_SPACES.sub(" ", line).strip(), repr(line)


def test_quality_and_language_counts_equal_the_list_based_definitions():
    """The counts are now made word by word; these are the list-based formulas they replaced."""
    rng = random.Random(1)
    for _ in range(200):
        text = _soup(rng, rng.randint(0, 120)) + " The cat, the dog & <b>the</b> end."
        words = text.split()
        lines = [line.strip() for line in text.split("\n") if line.strip()]
        chars = [c for c in text if not c.isspace()]
        expected = {
            "words": len(words),
            "alpha_word_fraction": sum(any(c.isalpha() for c in w) for w in words) / len(words) if words else 0.0,
            "mean_word_length": sum(map(len, words)) / len(words) if words else 0.0,
            "duplicate_line_fraction": 1.0 - len(set(lines)) / len(lines) if lines else 0.0,
            "markup_fraction": sum(c in MARKUP_CHARS for c in chars) / len(chars) if chars else 0.0,
        }
        assert quality_stats(text) == expected, repr(text)
        letters = re.findall(r"[^\W\d_]+", text.casefold())
        stop = sum(w in ENGLISH_STOP_WORDS for w in letters)
        assert english_stop_word_share(text) == (stop / len(letters) if letters else 0.0)


# ---------------------------------------------------------------------------------------- vocabulary files
DIGITS_5000 = r"9{12}\.\.\. \(5,000 digits\)"  # how an id too long to be an int is shown


def _gpt2_files(tmp_path, special_id: str):
    vocab = {ch: b for b, ch in byte_to_unicode().items()}
    body = ",\n".join(f" {json.dumps(text)}: {i}" for text, i in vocab.items())
    (tmp_path / "vocab.json").write_text("{\n" + body + f',\n "<|endoftext|>": {special_id}\n}}\n', encoding="utf-8")
    (tmp_path / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    return tmp_path / "vocab.json", tmp_path / "merges.txt"


@pytest.mark.parametrize(
    ("special_id", "shown"),
    [
        ("100000000", "100,000,000"),
        ("10000000000000", "10,000,000,000,000"),
        ("9" * 5000, r"9{12}\.\.\. \(5,000 digits\)"),
    ],
)
def test_a_vocab_json_id_far_beyond_its_entries_names_file_and_line(tmp_path, special_id, shown):
    """10^8 used to load as a 100,000,001-entry vocabulary (0.8 GB), 10^13 to raise a bare MemoryError and
    5,000 digits Python's int-size error; the entry is line 258 (after "{" and the 256 bytes)."""
    paths = _gpt2_files(tmp_path, special_id)
    with pytest.raises(ValueError, match=rf"vocab\.json, line 258: .*has id {shown}, far beyond"):
        BPETokenizer.from_gpt2_files(*paths, special_tokens=["<|endoftext|>"])


def test_a_vocab_json_gap_within_the_limit_still_loads(tmp_path):
    tokenizer = BPETokenizer.from_gpt2_files(*_gpt2_files(tmp_path, "1000"), special_tokens=["<|endoftext|>"])
    assert tokenizer.vocab_size == 1001 and tokenizer.encode("a<|endoftext|>") == [ord("a"), 1000]


def _ranks_file(tmp_path, rank: str):
    lines = [f"{base64.b64encode(bytes([b])).decode()} {b}" for b in range(256)]
    lines.append(f"{base64.b64encode(b'ab').decode()} {rank}")
    path = tmp_path / "big.tiktoken"
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    return path


@pytest.mark.parametrize(("rank", "shown"), [("100000000", "100,000,000"), ("9" * 5000, DIGITS_5000)])
def test_a_tiktoken_rank_far_beyond_its_entries_names_file_and_line(tmp_path, rank, shown):
    with pytest.raises(ValueError, match=rf"big\.tiktoken, line 257: token b'ab' has id {shown}, far beyond"):
        BPETokenizer.from_tiktoken_ranks(_ranks_file(tmp_path, rank))


def test_in_memory_ranks_and_special_ids_have_the_same_limit(tmp_path):
    ranks = {bytes([b]): b for b in range(256)}
    with pytest.raises(ValueError, match=r"ranks: token b'ab' has id 10,000,000,000,000, far beyond the 257"):
        BPETokenizer.from_tiktoken_ranks({**ranks, b"ab": 10**13})
    with pytest.raises(ValueError, match=r"token '<\|endoftext\|>' has id 10,000,000,000,000, far beyond the 257"):
        BPETokenizer.from_tiktoken_ranks(ranks, special_tokens={"<|endoftext|>": 10**13})
    assert BPETokenizer.from_tiktoken_ranks(_ranks_file(tmp_path, "300")).vocab_size == 301  # a gap is fine


# ---------------------------------------------------------------------------------- pre-tokenization pattern
ISSUE_PATTERN = r"(?:(?:q|q)+)+r|[\s\S]"  # accepted before; encoding 21 q's then took 12 s
CATASTROPHIC = [ISSUE_PATTERN, r"(a+)+$|[\s\S]", r"(a|aa)+$|[\s\S]"]  # "|[\s\S]": lossless, so only speed fails


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_an_opted_in_pattern_with_nested_repetition_is_refused(pattern):
    started = time.perf_counter()
    with pytest.raises(ValueError, match=r"repeats a group that holds a quantifier or an alternation"):
        check_pattern(pattern, allow_custom_pattern=True)
    with pytest.raises(ValueError, match="catastrophic backtracking"):
        BPETokenizer([], pattern=pattern, allow_custom_pattern=True)
    assert time.perf_counter() - started < 1.0  # refused by reading it, not by running it


def test_the_timed_run_probes_catch_the_issue_pattern_on_their_own(monkeypatch):
    """Were the syntax rule to miss it, the runs of each character the pattern names would still show it."""
    monkeypatch.setattr(pretokenize_module, "unsafe_repetition", lambda pattern: None)
    pretokenize_module._check_custom_pattern.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"took over 1 s on probe texts .*catastrophic backtracking"):
            check_pattern(ISSUE_PATTERN, allow_custom_pattern=True)
    finally:
        pretokenize_module._check_custom_pattern.cache_clear()


# GPT-4's pattern as published (possessive quantifiers, a scoped case-insensitive group)
PUBLISHED_GPT4 = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
)
COURSE_CUSTOM = r"[A-Za-z]+| ?[0-9]+|\s+|[^\sA-Za-z0-9]"  # test_tokenizer_bpe.py's opted-in pattern


@pytest.mark.parametrize("pattern", [GPT2_PATTERN, GPT4_PATTERN, PUBLISHED_GPT4, COURSE_CUSTOM])
def test_gpt2_gpt4_and_the_course_patterns_pass_the_custom_check(pattern):
    assert unsafe_repetition(pattern) is None
    pretokenize_module._check_custom_pattern(pattern)  # what an opted-in pattern goes through (presets skip it)
    text = "Hello, world! It's 2024:  don't\n\nstop 😀"
    assert "".join(pretokenize_module.compile_pattern(pattern).findall(text)) == text


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [(r"(a)\1+|[\s\S]", "repeats a backreference"), (r"(?R)?a|[\s\S]", "recursively"), (r"(?x)a|[\s\S]", "verbose")],
)
def test_other_ways_to_nest_repetition_are_refused(pattern, reason):
    with pytest.raises(ValueError, match=reason):
        check_pattern(pattern, allow_custom_pattern=True)


# ---------------------------------------------------------------------------- ids at the model's boundaries
def _tiny(vocab: int = 50) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=vocab, context_length=16, n_layer=1, n_head=2, d_model=16))


def test_a_token_file_with_ids_beyond_the_vocabulary_is_refused_on_load(tmp_path):
    ids = np.arange(100) % 60  # written for a 60-id tokenizer
    path = save_tokens(ids, tmp_path / "train.bin", 60)
    assert np.array_equal(load_tokens(path, 60), ids)
    with pytest.raises(IndexError):  # what training on it used to meet, mid-run (forward does not check: no sync)
        _tiny(50)(torch.from_numpy(ids[50:66].astype(np.int64))[None])
    with pytest.raises(ValueError, match=r"train\.bin: token id 50 at position 50 is outside the vocabulary \[0, 50\)"):
        load_tokens(path, 50)
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(ValueError, match=r"train\.bin: 199 bytes is not a whole, non-zero number of 2-byte token ids"):
        load_tokens(path, 60)
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=r"train\.bin: 0 bytes"):
        load_tokens(path, 60)


@pytest.mark.parametrize("eos_id", [50, -1, True, 3.0])
def test_generate_refuses_an_eos_the_model_cannot_produce(eos_id):
    with pytest.raises(ValueError, match=re.escape(f"eos_id must be a token id in [0, 50) or None, got {eos_id!r}")):
        _tiny().generate(torch.tensor([[1, 2]]), 3, eos_id=eos_id)
    assert _tiny().generate(torch.tensor([[1, 2]]), 3, temperature=0, eos_id=49).shape == (1, 5)


# ------------------------------------------------------------------------- settings checked before any work
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["contamination", "nope_train.txt", "nope_test.txt", "--n", "0"], "argument --n: must be at least 1, got 0"),
        (["clean", "nope.txt", "out.txt", "--bands", "0"], "argument --bands: must be at least 1, got 0"),
        (["clean", "nope.txt", "out.txt", "--rows", "-2"], "argument --rows: must be at least 1, got -2"),
        (["clean", "nope.txt", "out.txt", "--shingle-size", "x"], "argument --shingle-size: expected a whole number"),
        (["clean", "nope.txt", "out.txt", "--near-threshold", "0"], r"argument --near-threshold: must be in \(0, 1\]"),
        (["clean", "nope.txt", "out.txt", "--min-english", "nan"], r"argument --min-english: must be in \[0, 1\]"),
    ],
)
def test_textdata_flags_are_refused_by_name_before_any_file_is_read(argv, message, capsys):
    with pytest.raises(SystemExit):
        textdata_cli.main(argv)
    assert re.search(message, capsys.readouterr().err)  # the flag, not "file not found" for the missing files


def test_the_library_names_n_and_bands_too():
    with pytest.raises(ValueError, match="n-gram length n must be a positive int, got 0"):
        NgramIndex(["a b c"], n=0)  # used to match every text: "100.0 %" contaminated
    with pytest.raises(ValueError, match="bands must be a positive int, got 0"):
        Pipeline(bands=0)  # used to be reported as "num_hashes must be a positive int, got 0"
    with pytest.raises(ValueError, match="rows must be a positive int, got 0"):
        Pipeline(rows=0)
