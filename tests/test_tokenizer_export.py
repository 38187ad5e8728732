"""Our BPE against Hugging Face `tokenizers` (its own regex engine, merge loop and special-token matcher).

`tokenizers` uses Oniguruma's Unicode tables and our pre-tokenizer those of the `regex` package; the two
are different Unicode versions, so a code point assigned in only one of them may be a letter in one and not
in the other. The random-Unicode tests leave out what Python's `unicodedata` calls unassigned (category
Cn), which is older than both. Every 31st assigned code point is checked to split identically (see below).
"""

from __future__ import annotations

import random
import string
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizer_corpus import course_text, sft_texts
from tokenizers import Regex, pre_tokenizers

from minillm.tokenizer import COURSE_SPECIAL_TOKENS, BPETokenizer
from minillm.tokenizer.hf_export import to_tokenizers
from minillm.tokenizer.io import byte_to_unicode
from minillm.tokenizer.pretokenize import pretokenize, resolve_pattern

UNICODE_SAMPLE = (
    "naïve café 😀👍🏽 日本語のテキスト über Ünïcödé x\u0301y Ωμέγα привет мир 123456 ١٢٣ \t\r\n\u00a0\u2003"
)


# Without pre-tokenization a whole text is one word, and training rewrites that word at every merge: keep it small.
TEXT_CHARS = {"gpt2": 200_000, "gpt4": 200_000, "none": 10_000}


@pytest.fixture(scope="module", params=["gpt2", "gpt4", "none"])
def pair(request):
    chars = TEXT_CHARS[request.param]
    text = course_text(chars // 2) + UNICODE_SAMPLE * 3
    tok = BPETokenizer.train(text, 600, special_tokens=COURSE_SPECIAL_TOKENS, pattern=request.param)
    return tok, to_tokenizers(tok), chars


def test_byte_to_unicode_is_a_bijection_onto_printable_characters() -> None:
    table = byte_to_unicode()
    assert sorted(table) == list(range(256))
    assert len(set(table.values())) == 256
    assert all(ch.isprintable() and not ch.isspace() for ch in table.values())
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("a")] == "a"


def test_same_ids_on_course_corpus(pair) -> None:
    tok, hf, chars = pair
    text = course_text(chars, offset=chars // 2)  # text not seen in training
    assert tok.encode(text) == hf.encode(text).ids


def test_same_ids_on_sft_data(pair) -> None:
    tok, hf, chars = pair
    texts = sft_texts(chars // 1000)
    assert tok.encode_batch(texts) == [e.ids for e in hf.encode_batch(texts)]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.one_of(
            st.characters(blacklist_categories=("Cs", "Cn")),
            st.sampled_from([*COURSE_SPECIAL_TOKENS, "<|", "|>", "<|end", "'s", "'LL", " ", "  ", "\n", "123"]),
        ),
        max_size=40,
    ).map("".join)
)
def test_same_ids_on_random_unicode(pair, text: str) -> None:
    tok, hf, _ = pair
    ids = tok.encode(text)
    assert ids == hf.encode(text).ids
    assert hf.decode(ids, skip_special_tokens=False) == text


@pytest.mark.parametrize("name", ["gpt2", "gpt4"])
def test_pretokenization_matches_oniguruma_on_assigned_code_points(name: str) -> None:
    """Every 31st assigned code point, in contexts that exercise each alternative of the pattern."""
    import unicodedata

    split = pre_tokenizers.Split(Regex(resolve_pattern(name)), behavior="isolated")
    chars = [chr(cp) for cp in range(0, sys.maxunicode + 1, 31) if unicodedata.category(chr(cp)) not in ("Cs", "Cn")]
    for start in range(0, len(chars), 2000):
        text = "".join(f"{c}a {c}{c}1{c} 's{c}\n" for c in chars[start : start + 2000])
        assert pretokenize(text, name) == [piece for piece, _ in split.pre_tokenize_str(text)]


def test_same_ids_on_long_text_without_spaces(pair) -> None:
    """One pre-token of 50 000 letters: the merge loop's worst case (see `merges.apply_merges`)."""
    tok, hf, _ = pair
    rng = random.Random(0)
    text = "".join(rng.choices(string.ascii_lowercase, k=50_000))
    assert tok.encode(text) == hf.encode(text).ids
    repeated = "thecat" * 8_000 + "aaaa" * 2_000  # runs of one merge, and a pair overlapping itself
    assert tok.encode(repeated) == hf.encode(repeated).ids


def test_special_tokens_and_overlaps_agree() -> None:
    tok = BPETokenizer.train(course_text(50_000), 400, special_tokens=["<|end|>", "<|end|><|x|>", "<|e"])
    hf = to_tokenizers(tok)
    for text in ["a<|end|><|x|>b", "<|end|><|e", "<|e<|end|>", "<<|end|>|>", "<|end|><|x|", ""]:
        assert tok.encode(text) == hf.encode(text).ids, text


def test_export_rejects_other_objects() -> None:
    with pytest.raises(TypeError, match="BPETokenizer or WordPieceTokenizer"):
        to_tokenizers("gpt2")
