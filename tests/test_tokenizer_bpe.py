"""Byte-level BPE: training rule, fast vs naive trainer, encode/decode, special tokens, save/load, errors."""

from __future__ import annotations

import importlib
import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizer_corpus import rescan_encode

from minillm.tokenizer import (
    COURSE_SPECIAL_TOKENS,
    GPT4_PATTERN,
    BPETokenizer,
    pretokenize,
    to_tokenizers,
    train_bpe_naive,
)
from minillm.tokenizer.bpe_train import descending_key
from minillm.tokenizer.merges import apply_merges, merge_pair
from minillm.tokenizer.pretokenize import PATTERN_PROBE

WORDS = "the cat sat on a mat and the dog ran to the big red ball Lily Tom was happy sad 42 1999 !?".split()


def story_text(seed: int, paragraphs: int = 60) -> str:
    rng = random.Random(seed)
    stories = []
    for _ in range(paragraphs):
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 25)))
        stories.append(sentence[0].upper() + sentence[1:] + ".")
    return "\n\n".join(stories)


def tie_heavy_text(seed: int) -> str:
    """Short random words over a tiny alphabet: many pairs share the same count at every step."""
    rng = random.Random(seed)
    return " ".join("".join(rng.choice("abc") for _ in range(rng.randint(1, 4))) for _ in range(300))


CORPORA = {
    "stories": story_text(0) + "<|endoftext|>" + story_text(1),
    "tie_heavy": tie_heavy_text(0),
    "all_distinct_pairs": " ".join(chr(97 + i) + chr(97 + j) for i in range(20) for j in range(20)),
    "unicode": "naïve café 😀😀 日本語のテキスト 日本 über Ünïcödé " * 5 + "x\u0301y\u0301 " * 7,
    "one_long_word": "ab" * 40 + "ba" * 33,
}


def test_hand_worked_example_with_tie() -> None:
    # "aaabdaaabac" as one word: (a,a) occurs 4 times -> merge 1. Then (aa,a) and (a,b) both occur twice:
    # the tie goes to the greater pair of byte strings, (b"aa", b"a") > (b"a", b"b"). Then (aaa,b) twice.
    merges = train_bpe_naive("aaabdaaabac", 256 + 3, pattern="none")
    assert merges == [(b"a", b"a"), (b"aa", b"a"), (b"aaa", b"b")]
    fast = BPETokenizer.train("aaabdaaabac", 256 + 3, special_tokens=(), pattern="none")
    assert fast.merges == merges


def test_descending_key_orders_bytes_in_reverse() -> None:
    rng = random.Random(0)
    tokens = [bytes(rng.choice([0, 1, 97, 255]) for _ in range(rng.randint(1, 4))) for _ in range(300)]
    assert sorted(tokens, key=descending_key) == sorted(tokens, reverse=True)


@pytest.mark.parametrize("corpus", sorted(CORPORA))
@pytest.mark.parametrize("vocab_size", [262, 300, 420])
@pytest.mark.parametrize("pattern", ["gpt2", "gpt4"])
def test_fast_trainer_matches_naive(corpus: str, vocab_size: int, pattern: str) -> None:
    text = CORPORA[corpus]
    fast = BPETokenizer.train(text, vocab_size, special_tokens=COURSE_SPECIAL_TOKENS, pattern=pattern)
    naive = train_bpe_naive(text, vocab_size, COURSE_SPECIAL_TOKENS, pattern=pattern)
    assert fast.merges == naive


def test_fast_trainer_matches_naive_without_pretokenization() -> None:
    text = tie_heavy_text(1)[:600]
    fast = BPETokenizer.train(text, 380, special_tokens=(), pattern="none")
    assert fast.merges == train_bpe_naive(text, 380, (), pattern="none")


def test_training_inputs_text_path_and_iterable_agree(tmp_path) -> None:
    text = CORPORA["stories"]
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    from_text = BPETokenizer.train(text, 320)
    assert BPETokenizer.train(path, 320).merges == from_text.merges
    assert BPETokenizer.train(str(path), 320).merges == from_text.merges
    assert BPETokenizer.train(text.splitlines(keepends=True), 320).merges == from_text.merges


def test_vocabulary_layout() -> None:
    tok = BPETokenizer.train(CORPORA["stories"], 300)
    assert tok.vocab_size == 300
    vocab = tok.vocab
    assert all(vocab[i] == bytes([i]) for i in range(256))
    for rank, (left, right) in enumerate(tok.merges):
        assert vocab[256 + rank] == left + right  # no duplicate results in this corpus
    assert list(tok.special_tokens.values()) == list(range(300 - 5, 300))
    assert list(tok.special_tokens) == list(COURSE_SPECIAL_TOKENS)
    assert tok.token_to_id("<|end|>") == 299
    assert tok.token_to_id(" the") == tok.encode(" the")[0]


def test_constructible_from_vocab_and_merges() -> None:
    tok = BPETokenizer.train(CORPORA["stories"], 300)
    rebuilt = BPETokenizer.from_vocab_and_merges(tok.vocab, tok.merges, COURSE_SPECIAL_TOKENS)
    assert rebuilt.encode(CORPORA["stories"]) == tok.encode(CORPORA["stories"])
    shuffled = dict(tok.vocab)
    shuffled[256], shuffled[257] = shuffled[257], shuffled[256]
    with pytest.raises(ValueError, match="id layout"):
        BPETokenizer.from_vocab_and_merges(shuffled, tok.merges, COURSE_SPECIAL_TOKENS)


def test_special_tokens_are_never_merged() -> None:
    text = ("<|endoftext|>hello<|endoftext|>" * 50) + "<|user|>hi<|end|>" * 50
    tok = BPETokenizer.train(text, 320)
    for left, right in tok.merges:
        assert b"<|" not in left + right and b"|>" not in left + right
    ids = tok.encode("<|user|>hi<|end|>")
    assert ids[0] == tok.special_tokens["<|user|>"] and ids[-1] == tok.special_tokens["<|end|>"]


def test_special_tokens_longest_match_first_and_allowed_special() -> None:
    tok = BPETokenizer([], special_tokens=["<|end|>", "<|end|><|x|>", "<|e"], pattern="gpt2")
    assert tok.encode("a<|end|><|x|>b") == [97, 257, 98]  # ids: 256, 257, 258 in order given
    assert tok.encode("<|end|>") == [256]
    assert tok.encode("<|e") == [258]
    plain = tok.encode("<|end|>", allowed_special="none")
    assert plain == list(b"<|end|>")
    assert tok.encode("<|end|><|e", allowed_special={"<|e"}) == [258, *b"nd|>", 258]
    with pytest.raises(ValueError, match="not special tokens"):
        tok.encode("x", allowed_special={"<|nope|>"})


def test_encode_applies_merges_by_rank() -> None:
    # ranks: (b,c) first, then (a,b). "abc" must become [a, bc], not [ab, c].
    tok = BPETokenizer([(b"b", b"c"), (b"a", b"b")], pattern="none")
    assert tok.encode("abc") == [97, 256]
    assert tok.encode("abab") == [257, 257]
    assert tok.encode("bcab") == [256, 257]


def test_merge_pair_is_left_to_right_without_overlaps() -> None:
    assert merge_pair([1, 1, 1], (1, 1), 9) == [9, 1]
    assert merge_pair([1, 2, 1, 2, 3], (1, 2), 9) == [9, 9, 3]
    assert merge_pair(["h", "##u", "##g"], ("h", "##u"), "hu") == ["hu", "##g"]


def test_heap_encoding_equals_the_rescan_loop() -> None:
    """Random merge lists over a tiny alphabet, many of them re-creating an existing token (whose pairs may
    then rank earlier than the merge that re-created it: the case that needs merges taken rank by rank)."""
    rng = random.Random(0)
    recreated = 0
    for _ in range(400):
        tokens = [b"a", b"b", b"c"][: rng.randint(1, 3)]
        merges: list[tuple[bytes, bytes]] = []
        for _ in range(rng.randint(1, 25)):
            pair = (rng.choice(tokens), rng.choice(tokens))
            if pair in merges or len(pair[0] + pair[1]) > 8:
                continue
            merges.append(pair)
            if pair[0] + pair[1] in tokens:
                recreated += 1
            else:
                tokens.append(pair[0] + pair[1])
        tok = BPETokenizer(merges, pattern="none")
        for _ in range(10):
            ids = list(bytes(rng.choice(b"abc"[: len(tokens[:3])]) for _ in range(rng.randint(0, 40))))
            assert apply_merges(ids, tok._ranks) == rescan_encode(ids, tok._ranks), (merges, ids)
    assert recreated > 100


def test_encoding_the_training_text_reproduces_training_merges() -> None:
    text = CORPORA["stories"]
    tok = BPETokenizer.train(text, 400)
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert len(ids) < len(text.encode()) / 2  # the merges learned here compress their own corpus


def test_decode_invalid_utf8_uses_replacement_character() -> None:
    tok = BPETokenizer([], special_tokens=())
    ids = list("😀".encode())
    assert tok.decode(ids[:2]) == "\ufffd"
    assert tok.decode([*ids[:2], 65]) == "\ufffdA"
    assert tok.decode_bytes(ids[:2]) == "😀".encode()[:2]


def test_encode_batch_and_cache_consistency() -> None:
    tok = BPETokenizer.train(CORPORA["stories"], 350)
    texts = ["The cat sat.", "", "Lily was happy!", "The cat sat."]
    assert tok.encode_batch(texts) == [tok.encode(t) for t in texts]
    fresh = BPETokenizer(tok.merges, COURSE_SPECIAL_TOKENS)
    assert [fresh.encode(t) for t in texts] == tok.encode_batch(texts)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.characters(blacklist_categories=("Cs",)),  # any code point but lone surrogates
            st.sampled_from(["<|end|>", "<|endoftext|>", "<|", "|>", "<|end", " ", "\n", "\u0301", "😀", "日本"]),
        ),
        max_size=40,
    ).map("".join)
)
def test_roundtrip_arbitrary_unicode(text: str) -> None:
    assert ROUNDTRIP_TOKENIZER.decode(ROUNDTRIP_TOKENIZER.encode(text)) == text
    assert ROUNDTRIP_TOKENIZER.decode(ROUNDTRIP_TOKENIZER.encode(text, allowed_special="none")) == text


ROUNDTRIP_TOKENIZER = BPETokenizer.train(CORPORA["stories"] + CORPORA["unicode"], 420)


@pytest.mark.parametrize(
    "text",
    ["", " ", "\n\n\n", "<|end|", "<<|end|>>", "日本語", "e\u0301\u0301", "\x00\x1f\x7f", "\U0010ffff", "a  \n b"],
)
def test_roundtrip_edge_cases(text: str) -> None:
    assert ROUNDTRIP_TOKENIZER.decode(ROUNDTRIP_TOKENIZER.encode(text)) == text


def test_save_load_roundtrip(tmp_path) -> None:
    tok = BPETokenizer.train(CORPORA["stories"] + CORPORA["unicode"], 380, pattern="gpt4")
    path = tok.save(tmp_path / "tok.json")
    loaded = BPETokenizer.load(path)
    assert loaded.merges == tok.merges
    assert loaded.special_tokens == tok.special_tokens
    assert loaded.pattern == "gpt4"
    sample = CORPORA["unicode"] + "<|endoftext|>" + CORPORA["stories"][:500]
    assert loaded.encode(sample) == tok.encode(sample)
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["kind"] == "minillm-bpe"


def test_load_rejects_corrupt_and_foreign_files(tmp_path) -> None:
    tok = BPETokenizer.train(CORPORA["stories"], 300)
    good = json.loads(tok.save(tmp_path / "good.json").read_text(encoding="utf-8"))
    cases = {
        "not_json.json": "{ this is not json",
        "binary.json": None,
        "foreign.json": json.dumps({"kind": "minillm-wordpiece", "format_version": 1}),
        "no_kind.json": json.dumps({"merges": []}),
        "hf.json": json.dumps({"version": "1.0", "model": {"type": "BPE"}}),
        "missing.json": json.dumps({k: v for k, v in good.items() if k != "merges"}),
        "bad_merge.json": json.dumps({**good, "merges": [["zz", "q"], *good["merges"]]}),
        "bad_escape.json": json.dumps({**good, "merges": [["\\xzz", "a"]]}),
        "bad_vocab.json": json.dumps({**good, "merged_tokens": {"256": "nope"}}),
        "bad_special.json": json.dumps({**good, "special_tokens": {"<|endoftext|>": 7}}),
        "version.json": json.dumps({**good, "format_version": 99}),
    }
    for name, content in cases.items():
        path = tmp_path / name
        if content is None:
            path.write_bytes(b"\xff\xfe\x00garbage")
        else:
            path.write_text(content, encoding="utf-8")
        with pytest.raises(ValueError, match=re.escape(path.name)):
            BPETokenizer.load(path)


def test_bad_input_errors() -> None:
    with pytest.raises(ValueError, match="smaller than 256"):
        BPETokenizer.train("abc", 258)  # 256 + 5 specials needed
    with pytest.raises(ValueError, match="smaller than 256"):
        BPETokenizer.train("abc", 100, special_tokens=())
    with pytest.raises(TypeError, match="vocab_size"):
        BPETokenizer.train("abc", 300.0)
    with pytest.raises(ValueError, match="duplicate special tokens"):
        BPETokenizer.train("abc", 300, special_tokens=["<|a|>", "<|a|>"])
    with pytest.raises(TypeError, match="got bytes"):
        BPETokenizer.train(b"abc", 300)
    with pytest.raises(TypeError, match="item of type int"):
        BPETokenizer.train(["abc", 3], 300)
    tok = BPETokenizer.train("hello hello", 270)
    with pytest.raises(TypeError, match="encode expects str"):
        tok.encode(b"hello")
    with pytest.raises(TypeError, match="encode expects str"):
        tok.encode(None)
    with pytest.raises(ValueError, match="unknown token id 270"):
        tok.decode([1, 270])
    with pytest.raises(ValueError, match="unknown token id -1"):
        tok.decode([-1])
    with pytest.raises(TypeError, match="must be ints"):
        tok.decode([1.5])
    with pytest.raises(ValueError, match="surrogate"):
        tok.encode("a\ud800b")
    with pytest.raises(ValueError, match="not a token"):
        tok.token_to_id("zzzzzz")
    with pytest.raises(ValueError, match="uses a token"):
        BPETokenizer([(b"ab", b"c")])
    with pytest.raises(ValueError, match="invalid pre-tokenization pattern"):
        BPETokenizer([], pattern="(unclosed", allow_custom_pattern=True)


# ------------------------------------------------ pre-tokenization patterns in files: checked, never trusted
TEXT = "hello, world! the cat sat on the mat. the dog sat on the log. " * 10


@pytest.fixture(scope="module")
def tokenizer() -> BPETokenizer:
    return BPETokenizer.train(TEXT, 300)


def _with_pattern(tokenizer: BPETokenizer, folder: Path, pattern: str) -> Path:
    """A tokenizer file as someone else might hand it over: ours, with its pattern replaced."""
    document = json.loads(tokenizer.save(folder / "good.json").read_text(encoding="utf-8"))
    path = folder / "tokenizer.json"
    path.write_text(json.dumps({**document, "pattern": pattern}), encoding="utf-8")
    return path


def test_catastrophic_pattern_in_a_file_is_refused_before_any_encode(tokenizer, tmp_path, monkeypatch):
    # (a|a)+$ takes exponential time on "aaa...a!" (about 2.7 s at 22 letters, doubling with each one);
    # the file is refused at load, so no text ever reaches the regex and no timing is needed
    path = _with_pattern(tokenizer, tmp_path, r"(a|a)+$")
    compiled = []
    module = importlib.import_module("minillm.tokenizer.pretokenize")  # the name alone is the function
    monkeypatch.setattr(module.regex, "compile", lambda *a, **k: compiled.append(a))
    with pytest.raises(ValueError, match=r"tokenizer\.json: pre-tokenization pattern '\(a\|a\)\+\$' is not one"):
        BPETokenizer.load(path)
    assert compiled == []  # never even compiled
    with pytest.raises(ValueError, match="allow_custom_pattern=True"):
        BPETokenizer([], pattern=r"(a+)+$")


def test_opted_in_pattern_that_backtracks_is_refused_by_the_probe(tokenizer, tmp_path):
    # a custom pattern the caller vouches for still has to split the probe text in under a second
    path = _with_pattern(tokenizer, tmp_path, r"(a|a)+$|[\s\S]")
    with pytest.raises(ValueError, match=r"tokenizer\.json: .*catastrophic backtracking"):
        BPETokenizer.load(path, allow_custom_pattern=True)


def test_custom_pattern_that_drops_text_is_refused(tokenizer, tmp_path):
    path = _with_pattern(tokenizer, tmp_path, r"\w+")  # used to decode "hello, world!" as "helloworld"
    with pytest.raises(ValueError, match=r"tokenizer\.json: .*'\\\\w\+' does not cover every character.*','"):
        BPETokenizer.load(path, allow_custom_pattern=True)
    with pytest.raises(ValueError, match="does not cover every character"):
        BPETokenizer.train(TEXT, 300, pattern=r"\w+", allow_custom_pattern=True)
    with pytest.raises(ValueError, match="capturing group"):
        BPETokenizer([], pattern=r"(\w+)|(\W+)", allow_custom_pattern=True)


def test_opted_in_lossless_pattern_round_trips_and_agrees_with_tokenizers(tmp_path):
    pattern = r"[A-Za-z]+| ?[0-9]+|\s+|[^\sA-Za-z0-9]"
    tok = BPETokenizer.train(TEXT + " 123 456", 300, pattern=pattern, allow_custom_pattern=True)
    path = tok.save(tmp_path / "custom.json")
    assert json.loads(path.read_text(encoding="utf-8"))["pattern"] == pattern
    with pytest.raises(ValueError, match="not one of the built-in patterns"):
        BPETokenizer.load(path)  # a file's own regex always needs the caller's consent
    loaded = BPETokenizer.load(path, allow_custom_pattern=True)
    text = "hello, world! 42 cats\n\n  sat."
    assert loaded.decode(loaded.encode(text)) == text
    assert to_tokenizers(loaded).encode(text).ids == loaded.encode(text)


def test_presets_cover_the_probe_and_are_saved_by_name(tmp_path):
    for name in ("gpt2", "gpt4", "none"):
        assert "".join(pretokenize(PATTERN_PROBE, name)) == PATTERN_PROBE
    tok = BPETokenizer([], special_tokens=(), pattern=GPT4_PATTERN)  # the regex itself is the preset
    assert tok.pattern == "gpt4"
    assert json.loads(tok.save(tmp_path / "t.json").read_text(encoding="utf-8"))["pattern"] == "gpt4"
    with pytest.raises(ValueError, match="not one of the built-in patterns"):
        pretokenize("a b", r"\S+")


# --------------------------------------------------- encoding work on long unspaced text is linear
class _CountingRanks(dict):
    """A merge table that counts how often a pair is looked up: encoding work, measured without a clock."""

    lookups = 0

    def get(self, key, default=None):
        self.lookups += 1
        return super().get(key, default)

    def __getitem__(self, key):
        self.lookups += 1
        return super().__getitem__(key)

    def __contains__(self, key):
        self.lookups += 1
        return super().__contains__(key)


@pytest.fixture(scope="module")
def letters_tokenizer() -> BPETokenizer:
    import random

    words = ("".join(random.Random(i).choices("abcdef", k=7)) for i in range(400))
    return BPETokenizer.train(" ".join(words), 400)


def _unspaced(letters: int) -> str:
    import random

    return "".join(random.Random(letters).choices("abcdef", k=letters))


def test_the_rescanning_encode_does_quadratic_work(letters_tokenizer):
    """The finding, reproduced: rescanning per merge costs ≈ n × merges lookups (200 000 letters: 11.9 s)."""
    ranks = _CountingRanks(letters_tokenizer._ranks)
    ids = rescan_encode(list(_unspaced(2_000).encode()), ranks)
    assert letters_tokenizer.decode(ids) == _unspaced(2_000)
    assert ranks.lookups > 50 * 2_000  # far above any linear bound


@pytest.mark.parametrize("letters", [2_000, 16_000, 128_000])
def test_encode_work_on_unspaced_text_is_linear_in_its_length(letters_tokenizer, letters, monkeypatch):
    """The heap-based encode looks each new pair up a bounded number of times: n - 1 initial pairs, one check
    per popped candidate and two new pairs per merge, with fewer than n merges and pops — so ≤ 8n lookups."""
    text = _unspaced(letters)
    ranks = _CountingRanks(letters_tokenizer._ranks)
    monkeypatch.setattr(letters_tokenizer, "_ranks", ranks)
    ids = letters_tokenizer.encode(text)
    assert letters_tokenizer.decode(ids) == text and len(ids) < letters / 2  # it did merge, a lot
    assert 0 < ranks.lookups <= 8 * letters, (ranks.lookups, letters)
