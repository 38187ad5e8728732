"""GPT-2 (vocab.json + merges.txt) and tiktoken (.tiktoken ranks) files: any id layout, loaded and written.

References: `tiktoken` built in memory from the same ranks (its own Rust merge loop and regex engine), and
Hugging Face `tokenizers` reading the same vocab.json + merges.txt as a byte-level BPE model (its own file
parser, merge loop and Oniguruma regex). Neither shares code with minillm's loader or encoder.

The random-Unicode texts leave out what Python's `unicodedata` (Unicode 14 on Python 3.11) calls unassigned,
so that every engine's Unicode tables know each character (see test_tokenizer_export.py).
"""

from __future__ import annotations

import base64
import json
import random
import string
import sys
import unicodedata

import pytest
import tiktoken
from tiktoken.load import load_tiktoken_bpe
from tokenizer_corpus import course_text, sft_texts
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from minillm.tokenizer import COURSE_SPECIAL_TOKENS, BPETokenizer
from minillm.tokenizer.hf_export import to_tokenizers
from minillm.tokenizer.io import byte_to_unicode
from minillm.tokenizer.merges import apply_token_ranks
from minillm.tokenizer.pretokenize import resolve_pattern

UNICODE_SAMPLE = "naïve café 😀👍🏽 日本語のテキスト Ünïcödé x\u0301y Ωμέγα привет 123456 ١٢٣ \t\r\n\u00a0\u2003"
PIECES = [*COURSE_SPECIAL_TOKENS, "<|", "|>", "'s", "'LL", "'ve", " ", "  ", "\n", "\r\n", "\t", "123", "98765"]
PIECES += ["aaaa", "😀👍🏽", "Ġ", " the", "Once upon", "don't", "!!", "...", "\u00a0", "e\u0301"]


def _assigned_code_points() -> list[str]:
    return [
        chr(cp) for cp in range(0, sys.maxunicode + 1, 7) if unicodedata.category(chr(cp)) not in ("Cs", "Cn", "Co")
    ]


def varied_texts() -> list[str]:
    """About 400 deterministic texts: unseen stories, chat turns, random Unicode with special tokens mixed
    in, and the merge loop's hard cases (one long pre-token, a pair overlapping itself)."""
    rng = random.Random(0)
    stories = course_text(40_000, offset=300_000)  # after the training slice
    texts = [stories[i : i + rng.randint(20, 400)] for i in range(0, 40_000, 400)]
    texts += sft_texts(40)
    chars = _assigned_code_points()
    for _ in range(200):
        parts = [rng.choice(PIECES) if rng.random() < 0.3 else rng.choice(chars) for _ in range(rng.randint(0, 40))]
        texts.append("".join(parts))
    texts += ["", " ", "\n\n", UNICODE_SAMPLE, "".join(rng.choices(string.ascii_lowercase, k=5_000))]
    texts += ["thecat" * 500, "a" * 1_001, "1" * 50, " " * 30 + "x"]
    return texts


TEXTS = varied_texts()


@pytest.fixture(scope="module", params=["gpt2", "gpt4"])
def trained(request) -> BPETokenizer:
    text = course_text(150_000) + UNICODE_SAMPLE * 3
    tok = BPETokenizer.train(text, 700, special_tokens=COURSE_SPECIAL_TOKENS, pattern=request.param)
    # the premise of "for vocabularies built by BPE training the two rules agree": no merge re-creates a token
    assert len(tok.merges) == tok.vocab_size - 256 - len(COURSE_SPECIAL_TOKENS)
    return tok


def _permuted_gpt2_files(tok: BPETokenizer, folder, seed: int) -> dict[int, int]:
    """Write tok's GPT-2 files, then rewrite vocab.json with every id (bytes and specials too) shuffled.
    Returns old id → new id."""
    tok.save_gpt2_files(folder / "vocab.json", folder / "merges.txt")
    entries = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    ids = sorted(entries.values())
    shuffled = ids[:]
    random.Random(seed).shuffle(shuffled)
    new_id = dict(zip(ids, shuffled, strict=True))
    permuted = {text: new_id[i] for text, i in entries.items()}
    (folder / "vocab.json").write_text(json.dumps(permuted, ensure_ascii=False), encoding="utf-8")
    return new_id


def _hf_from_files(folder, specials) -> Tokenizer:
    """Hugging Face's own reading of vocab.json + merges.txt, as a GPT-2 byte-level BPE."""
    hf = Tokenizer(models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt")))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)  # GPT-2's split regex
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return hf


# ------------------------------------------------------------------------------------------ GPT-2 files


def test_permuted_vocabulary_encodes_to_the_permuted_ids_and_decodes_back(trained, tmp_path) -> None:
    new_id = _permuted_gpt2_files(trained, tmp_path, seed=1)
    loaded = BPETokenizer.from_gpt2_files(
        tmp_path / "vocab.json", tmp_path / "merges.txt", COURSE_SPECIAL_TOKENS, pattern=trained.pattern
    )
    assert loaded.vocab_size == trained.vocab_size and loaded.merges == trained.merges
    byte_ids = [loaded.token_to_id(bytes([b])) for b in range(256)]
    assert byte_ids != list(range(256))  # single bytes are not ids 0..255 in byte order any more
    assert loaded.special_tokens == {t: new_id[i] for t, i in trained.special_tokens.items()}
    for text in TEXTS:
        ids = loaded.encode(text)
        assert ids == [new_id[i] for i in trained.encode(text)], text
        assert loaded.decode(ids) == text
    assert loaded.decode_bytes([new_id[i] for i in range(trained.vocab_size)]) == trained.decode_bytes(
        range(trained.vocab_size)
    )
    exported = to_tokenizers(loaded)  # the Hugging Face export keeps the loaded layout too
    assert [e.ids for e in exported.encode_batch(TEXTS)] == loaded.encode_batch(TEXTS)


def test_gpt2_files_round_trip_and_a_merge_order_layout_saves_as_json(trained, tmp_path) -> None:
    trained.save_gpt2_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
    assert (tmp_path / "merges.txt").read_text(encoding="utf-8").startswith("#version: 0.2\n")
    loaded = BPETokenizer.from_gpt2_files(
        tmp_path / "vocab.json", tmp_path / "merges.txt", COURSE_SPECIAL_TOKENS, pattern=trained.pattern
    )
    assert loaded.vocab == trained.vocab and loaded.special_tokens == trained.special_tokens
    assert loaded.encode_batch(TEXTS) == trained.encode_batch(TEXTS)
    # its ids happen to be the course layout, so the minillm format can hold it
    assert BPETokenizer.load(loaded.save(tmp_path / "tok.json")).encode(UNICODE_SAMPLE) == trained.encode(
        UNICODE_SAMPLE
    )


@pytest.mark.parametrize("permute", [False, True], ids=["merge-order-ids", "permuted-ids"])
def test_hugging_face_reads_the_written_files_to_the_same_ids(trained, tmp_path, permute) -> None:
    if permute:
        _permuted_gpt2_files(trained, tmp_path, seed=2)
    else:
        trained.save_gpt2_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
    ours = BPETokenizer.from_gpt2_files(
        tmp_path / "vocab.json", tmp_path / "merges.txt", COURSE_SPECIAL_TOKENS, pattern=trained.pattern
    )
    hf = _hf_from_files(tmp_path, COURSE_SPECIAL_TOKENS)
    if trained.pattern != "gpt2":  # tokenizers' ByteLevel splits with GPT-2's regex; use the trained pattern
        hf.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(resolve_pattern(trained.pattern)), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    assert hf.get_vocab_size() == ours.vocab_size
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == hf.encode(text).ids, text
        assert hf.decode(ids, skip_special_tokens=False) == text


def test_gpt2_files_keep_merges_that_re_create_a_token(tmp_path) -> None:
    # "abc" is made twice, by (ab, c) and by (a, bc): GPT-2's format holds both merges, tiktoken's cannot
    tok = BPETokenizer([(b"a", b"b"), (b"ab", b"c"), (b"b", b"c"), (b"a", b"bc"), (b"c", b"a")], pattern="none")
    tok.save_gpt2_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
    loaded = BPETokenizer.from_gpt2_files(tmp_path / "vocab.json", tmp_path / "merges.txt", pattern="none")
    hf = Tokenizer(models.BPE.from_file(str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt")))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    for text in ["abc", "bcabc", "cabcab", "aabbcc", "abcabcabc", "xbcax"]:
        assert loaded.encode(text) == tok.encode(text) == hf.encode(text).ids, text
    with pytest.raises(ValueError, match="ranks by token cannot describe"):
        tok.save_tiktoken_ranks(tmp_path / "r.tiktoken")


# ------------------------------------------------------------------------------------------ tiktoken ranks


def _tiktoken(ranks: dict[bytes, int], tok: BPETokenizer, specials: dict[str, int]) -> tiktoken.Encoding:
    return tiktoken.Encoding(
        name="minillm-test", pat_str=resolve_pattern(tok.pattern), mergeable_ranks=ranks, special_tokens=specials
    )


def _ranks_of(tok: BPETokenizer) -> dict[bytes, int]:
    specials = set(tok.special_tokens.values())
    return {tok.id_to_token(i): i for i in range(tok.vocab_size) if i not in specials}


def test_tiktoken_file_gives_tiktokens_ids(trained, tmp_path, monkeypatch) -> None:
    path = trained.save_tiktoken_ranks(tmp_path / "minillm.tiktoken")
    ranks = _ranks_of(trained)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # read the file itself, never a cached copy keyed by its path
    assert load_tiktoken_bpe(str(path)) == ranks  # tiktoken's own reader agrees on the file
    ours = BPETokenizer.from_tiktoken_ranks(path, trained.pattern, trained.special_tokens)
    enc = _tiktoken(ranks, trained, trained.special_tokens)
    assert ours.merges == trained.merges  # the merge list recovered from ranks alone
    for text in TEXTS:
        want = enc.encode(text, allowed_special="all")
        assert ours.encode(text) == want, text
        assert trained.encode(text) == want, text  # GPT-2's rule on the trained merges agrees: the assumption
        assert ours.encode(text, allowed_special="none") == enc.encode_ordinary(text)
        assert ours.decode(want) == text


def test_tiktoken_ranks_with_any_layout(trained) -> None:
    """Ranks are ids: relabel them (single bytes shuffled among themselves, gaps between the others, special
    tokens in a gap) and tiktoken's ids follow; ours must be the same ids."""
    rng = random.Random(3)
    ranks = _ranks_of(trained)
    byte_ranks = list(range(256))
    rng.shuffle(byte_ranks)
    relabel = {i: (byte_ranks[i] if i < 256 else 3 * i + 7) for i in ranks.values()}
    new_ranks = {token: relabel[i] for token, i in ranks.items()}
    specials = {t: 3 * n + 8 for t, n in trained.special_tokens.items()}  # between two ordinary ranks
    ours = BPETokenizer.from_tiktoken_ranks(new_ranks, trained.pattern, specials)
    enc = _tiktoken(new_ranks, trained, specials)
    assert ours.vocab_size == enc.n_vocab == max([*new_ranks.values(), *specials.values()]) + 1
    old_ids = {**relabel, **{trained.special_tokens[t]: n for t, n in specials.items()}}
    for text in TEXTS:
        want = enc.encode(text, allowed_special="all")
        assert ours.encode(text) == want == [old_ids[i] for i in trained.encode(text)], text
        assert ours.decode(want) == text
    assert 300 not in old_ids.values()  # bytes take 0..255, merged tokens 3·i + 7 from 775 on
    with pytest.raises(ValueError, match="id 300 is not assigned"):
        ours.decode([65, 300])
    with pytest.raises(ValueError, match="minillm JSON format cannot hold"):
        ours.save("never-written.json")


def test_tiktoken_ranks_convert_to_gpt2_files_with_the_same_ids(trained, tmp_path) -> None:
    """tiktoken's rule (by rank of the joined bytes) on the ranks, and GPT-2's (by merge rank) on the merges
    recovered from them, agree on every text: what the loader's assumption buys."""
    ours = BPETokenizer.from_tiktoken_ranks(_ranks_of(trained), trained.pattern, trained.special_tokens)
    ours.save_gpt2_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
    again = BPETokenizer.from_gpt2_files(
        tmp_path / "vocab.json", tmp_path / "merges.txt", COURSE_SPECIAL_TOKENS, pattern=trained.pattern
    )
    assert again.merge_rule == "merge-rank" and ours.merge_rule == "token-rank"
    assert again.encode_batch(TEXTS) == ours.encode_batch(TEXTS)


def test_the_two_merge_rules_differ_on_merges_that_ranks_cannot_express(tmp_path) -> None:
    """Why the ranks must describe the merges: GPT-2's rule follows the merge list, tiktoken's joins any
    adjacent pair whose bytes are a token. Merges (b c), (a b), (ab c) make "abc" from (ab, c); given the same
    tokens as ranks, tiktoken instead joins (a, bc), and the loader recovers that merge, not (ab, c)."""
    gpt2_rule = BPETokenizer([(b"b", b"c"), (b"a", b"b"), (b"ab", b"c")], pattern="none")
    ranks = _ranks_of(gpt2_rule)
    assert (ranks[b"bc"], ranks[b"ab"], ranks[b"abc"]) == (256, 257, 258)
    enc = tiktoken.Encoding(name="t", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={})
    assert enc.encode("xabc") == [ord("x"), 258]  # tiktoken joins (a, bc): their bytes rank 258
    assert gpt2_rule.encode("xabc") == [ord("x"), ord("a"), 256]  # no merge (a, bc): they stay apart
    from_ranks = BPETokenizer.from_tiktoken_ranks(ranks, pattern="none")
    assert from_ranks.merges == [(b"b", b"c"), (b"a", b"b"), (b"a", b"bc")]
    assert from_ranks.encode("xabc") == enc.encode("xabc")
    with pytest.raises(ValueError, match=r"ranks would make b'abc' from \(b'a', b'bc'\)"):
        gpt2_rule.save_tiktoken_ranks(tmp_path / "r.tiktoken")


def test_tiktoken_rule_matches_tiktoken_on_random_ranks_that_are_no_merge_order() -> None:
    """The merge loop of a tiktoken-loaded tokenizer (``merges.apply_token_ranks``) on vocabularies with no
    BPE structure at all, where GPT-2's rule would differ: random tokens over "abc" at random ranks."""
    rng = random.Random(4)
    for _ in range(30):
        ranks = {bytes([b]): b for b in range(256)}
        tokens = {"".join(rng.choices("abc", k=rng.randint(2, 5))).encode() for _ in range(rng.randint(3, 25))}
        order = list(range(256, 256 + len(tokens)))
        rng.shuffle(order)
        ranks.update(zip(sorted(tokens), order, strict=True))
        enc = tiktoken.Encoding(name="random", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={})
        for _ in range(40):
            text = "".join(rng.choices("abc", k=rng.randint(1, 30)))
            if text.encode() in ranks:
                continue  # tiktoken takes a whole piece that is a token as it is, before any merging
            assert [ranks[p] for p in apply_token_ranks(text.encode(), ranks)] == enc.encode_ordinary(text), text


# ------------------------------------------------------------------------------------------ malformed files


def _gpt2_pair(tmp_path, vocab: str, merges: str):
    (tmp_path / "vocab.json").write_text(vocab, encoding="utf-8")
    (tmp_path / "merges.txt").write_text(merges, encoding="utf-8")
    return tmp_path / "vocab.json", tmp_path / "merges.txt"


def _byte_vocab(extra: dict[str, int] | None = None) -> dict[str, int]:
    vocab = {ch: b for b, ch in byte_to_unicode().items()}
    return {**vocab, **(extra or {})}


GOOD_VOCAB = _byte_vocab({"ab": 256, "abc": 257, "<|endoftext|>": 258})
GOOD_MERGES = "#version: 0.2\na b\nab c\n"

BAD_GPT2 = [
    ("{not json", GOOD_MERGES, r"vocab\.json, line 1: not valid JSON"),
    ("[1, 2]", GOOD_MERGES, "expected a JSON object of token → id"),
    ('{"a": 1, "a": 2}', GOOD_MERGES, "the token 'a' appears twice"),
    (json.dumps({**GOOD_VOCAB, "ab": "256"}), GOOD_MERGES, "token 'ab' has id '256'; ids must be non-negative"),
    (json.dumps({**GOOD_VOCAB, "ab": -1}), GOOD_MERGES, "ids must be non-negative ints"),
    (json.dumps({**GOOD_VOCAB, "a b": 300}), GOOD_MERGES, "has the character ' ', which is not in GPT-2's"),
    (json.dumps({**GOOD_VOCAB, "abc": 256}), GOOD_MERGES, "id 256 is given to two tokens"),
    (json.dumps({k: v for k, v in GOOD_VOCAB.items() if k != "a"}), GOOD_MERGES, r"no token for the byte\(s\)"),
    (json.dumps({**GOOD_VOCAB, "zz": 300}), GOOD_MERGES, "neither a single byte nor made by a merge"),
    (json.dumps(GOOD_VOCAB), "#version: 0.2\na b\nab c d\n", r"merges\.txt, line 3: expected one merge"),
    (json.dumps(GOOD_VOCAB), "#version: 0.2\na b\n\nab c\n", r"merges\.txt, line 3: expected one merge"),
    (json.dumps(GOOD_VOCAB), "a b\r\nab c\r\n", r"merges\.txt, line 1: ends in '\\r'"),
    (json.dumps(GOOD_VOCAB), "#version: 0.2\na b\nabc a\n", r"merges\.txt, line 3: merge #1 .* no earlier merge"),
    (json.dumps(GOOD_VOCAB), "#version: 0.2\na b\nab c\nb c\n", r"line 4: merge #2 .* not in the vocabulary"),
    (json.dumps(GOOD_VOCAB), "#version: 0.2\na b\na b\nab c\n", r"line 3: merge #1 .* repeats an earlier merge"),
    (json.dumps(GOOD_VOCAB), "#version: 0.2\na b\nab c\n#version: 0.2\n", r"line 4: merge #2 .* no earlier merge"),
]


@pytest.mark.parametrize(("vocab", "merges", "message"), BAD_GPT2)
def test_malformed_gpt2_files_are_clear_errors(tmp_path, vocab, merges, message) -> None:
    paths = _gpt2_pair(tmp_path, vocab, merges)
    with pytest.raises(ValueError, match=message):
        BPETokenizer.from_gpt2_files(*paths, special_tokens=["<|endoftext|>"])


def test_good_gpt2_files_load_and_special_tokens_must_be_named(tmp_path) -> None:
    paths = _gpt2_pair(tmp_path, json.dumps(GOOD_VOCAB), GOOD_MERGES)
    tok = BPETokenizer.from_gpt2_files(*paths, special_tokens=["<|endoftext|>"])
    assert tok.encode("abcab<|endoftext|>") == [257, 256, 258]
    with pytest.raises(ValueError, match="neither a single byte nor made by a merge"):
        BPETokenizer.from_gpt2_files(*paths)  # <|endoftext|> not named as special
    with pytest.raises(ValueError, match=r"special token\(s\) \['<\|user\|>'\] are not in the vocabulary"):
        BPETokenizer.from_gpt2_files(*paths, special_tokens=["<|endoftext|>", "<|user|>"])
    (tmp_path / "merges.txt").write_bytes(b"a b\n\xff\xfe c\n")
    with pytest.raises(ValueError, match=r"merges\.txt: not UTF-8 text"):
        BPETokenizer.from_gpt2_files(*paths, special_tokens=["<|endoftext|>"])


def _b64(token: bytes) -> str:
    return base64.b64encode(token).decode("ascii")


GOOD_RANKS = "".join(f"{_b64(bytes([b]))} {b}\n" for b in range(256)) + f"{_b64(b'ab')} 256\n"

BAD_TIKTOKEN = [
    (GOOD_RANKS + "!!!! 300\n", "line 258: expected 'base64\\(token\\) rank'"),
    (GOOD_RANKS + f"{_b64(b'abc')}\n", "line 258: expected 'base64\\(token\\) rank'"),
    (GOOD_RANKS + f"{_b64(b'abc')}  300\n", "line 258: expected 'base64\\(token\\) rank'"),
    (GOOD_RANKS + f"{_b64(b'abc')} -3\n", "line 258: expected 'base64\\(token\\) rank'"),
    (GOOD_RANKS + f"{_b64(b'abc')} 03\n", "line 258: expected 'base64\\(token\\) rank'"),
    (GOOD_RANKS + "YWJj= 300\n", r"line 258: invalid base64 'YWJj='"),
    (GOOD_RANKS + "YWJ= 300\n", r"line 258: invalid base64 'YWJ=' \(not the canonical encoding"),
    (GOOD_RANKS + f"{_b64(b'ab')} 300\n", r"line 258: token b'ab' was already given rank 256"),
    (GOOD_RANKS + f"{_b64(b'abc')} 256\n", "line 258: rank 256 was already given on line 257"),
    (GOOD_RANKS + "\n" + f"{_b64(b'abc')} 300\n", "line 258: expected 'base64\\(token\\) rank'"),
    (GOOD_RANKS + f"{_b64(b'xyz')} 300\n", r"b'xyz' \(rank 300\) is not the join of two lower-ranked tokens"),
    (GOOD_RANKS.replace(f"{_b64(b'A')} 65\n", ""), r"no token for the byte\(s\) \['0x41'\]"),
    ("", "no tokens"),
]


@pytest.mark.parametrize(("content", "message"), BAD_TIKTOKEN)
def test_malformed_tiktoken_files_are_clear_errors(tmp_path, content, message) -> None:
    path = tmp_path / "bad.tiktoken"
    path.write_text(content, encoding="ascii")
    with pytest.raises(ValueError, match=rf"bad\.tiktoken.*{message}"):
        BPETokenizer.from_tiktoken_ranks(path)


def test_tiktoken_input_checks(tmp_path) -> None:
    path = tmp_path / "ok.tiktoken"
    path.write_text(GOOD_RANKS, encoding="ascii")
    tok = BPETokenizer.from_tiktoken_ranks(path, special_tokens={"<|endoftext|>": 257})
    assert tok.encode("xab<|endoftext|>") == [ord("x"), 256, 257]
    with pytest.raises(ValueError, match="id 256 is given to two tokens"):
        BPETokenizer.from_tiktoken_ranks(path, special_tokens={"<|endoftext|>": 256})
    with pytest.raises(ValueError, match="ranks: tokens must be non-empty bytes"):
        BPETokenizer.from_tiktoken_ranks({"a": 0})
    with pytest.raises(ValueError, match="ranks: rank 0 is given to both"):
        BPETokenizer.from_tiktoken_ranks({bytes([b]): 0 for b in range(2)})
    path.write_bytes(GOOD_RANKS.encode("ascii") + "é 300\n".encode())
    with pytest.raises(ValueError, match="not a .tiktoken file"):
        BPETokenizer.from_tiktoken_ranks(path)
