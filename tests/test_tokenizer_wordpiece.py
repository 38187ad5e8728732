"""WordPiece: likelihood-scored training, and encoding identical to `tokenizers`' WordPiece model."""

from __future__ import annotations

import json
import sys

import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizer_corpus import course_text
from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers

from minillm.tokenizer import WordPieceTokenizer, to_tokenizers
from minillm.tokenizer.wordpiece import _WHITE_SPACE, BERT_SPECIAL_TOKENS

ADVERSARIAL = [
    "",
    "   \t\n  ",
    "Hello, World! It's 3.14 o'clock...",
    "Ünïcödé naïve café résumé ÅNGSTRÖM",
    "日本語のテキストと漢字 mixed中文text",
    "emoji 😀👍🏽 and symbols $5 + 3 = 8 <tag> a|b ~x ^y `z`",
    "control\x00chars\x07here\x0bthere\x85and\u200bzero\ufeffwidth\ufffdreplacement",
    "x" * 101 + " " + "y" * 100,  # longer than max_input_chars_per_word, then exactly the limit
    "##hash ## # ###",
    "[UNK] [CLS] text [SEP] [MASK][PAD]",
    "ΣΑΣ σας İstanbul ǅemal ß ﬁ",
    "a\u0301e\u0301 \u0301alone combining",
    "zzqqxxjj unseenwordhere",
    "tab\tsep\u00a0nbsp\u2003em\u3000ideographic",
]

# Blocks whose character properties are the same in Python's Unicode tables and in `tokenizers`' older
# ones (newer punctuation and marks are classified differently there): Latin, Greek, Cyrillic, combining
# diacritics, general punctuation, CJK, kana, Hangul, emoticons, and some control/format characters.
STABLE_ALPHABET = st.one_of(
    st.characters(min_codepoint=0x20, max_codepoint=0x24F),
    st.characters(min_codepoint=0x300, max_codepoint=0x36F),
    st.characters(min_codepoint=0x391, max_codepoint=0x3C9),
    st.characters(min_codepoint=0x410, max_codepoint=0x44F),
    st.characters(min_codepoint=0x2010, max_codepoint=0x2027),
    st.characters(min_codepoint=0x3040, max_codepoint=0x30FF),
    st.characters(min_codepoint=0x4E00, max_codepoint=0x4FFF),
    st.characters(min_codepoint=0xAC00, max_codepoint=0xAC40),
    st.characters(min_codepoint=0x1F600, max_codepoint=0x1F64F),
    st.sampled_from(list("\x00\t\n\r\x0b\x0c\x1f\x7f\x85\xa0\u200b\u200d\ufeff\ufffd\u3000") + ["##", "[UNK]"]),
)


def reference(tok: WordPieceTokenizer) -> Tokenizer:
    """`tokenizers`' own WordPiece model with BERT's normaliser and pre-tokenizer, same vocabulary."""
    hf = Tokenizer(models.WordPiece(vocab=tok.vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    hf.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=tok.lowercase, lowercase=tok.lowercase
    )
    hf.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    hf.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in BERT_SPECIAL_TOKENS])
    return hf


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def trained(request):
    text = course_text(120_000) + "\n" + "\n".join(ADVERSARIAL[2:6]) * 3
    tok = WordPieceTokenizer.train(text, 700, lowercase=request.param)
    return tok, reference(tok)


def test_hand_worked_likelihood_scores() -> None:
    # The Hugging Face course's example corpus. First merge: score(##g, ##s) = 5 / (20 * 5) = 1/20 beats
    # every other pair (1/36). After it, six pairs tie at 1/36; the tie goes to the greatest pair of
    # strings, ("p", "##u") ("p" > "h" > "b" > "##u" as "#" sorts before letters).
    words = ["hug"] * 10 + ["pug"] * 5 + ["pun"] * 12 + ["bun"] * 4 + ["hugs"] * 5
    tok = WordPieceTokenizer.train(" ".join(words), 5 + 7 + 2)
    alphabet = ["##g", "##n", "##s", "##u", "b", "h", "p"]
    assert list(tok.vocab) == [*BERT_SPECIAL_TOKENS, *alphabet, "##gs", "pu"]


def test_training_layout_and_size(trained) -> None:
    tok, _ = trained
    assert tok.vocab_size == 700
    tokens = list(tok.vocab)
    assert tokens[:5] == list(BERT_SPECIAL_TOKENS)
    assert len(set(tokens)) == len(tokens)
    assert tok.special_tokens == {t: i for i, t in enumerate(BERT_SPECIAL_TOKENS)}


def test_same_ids_as_tokenizers_on_course_corpus(trained) -> None:
    tok, hf = trained
    text = course_text(60_000, offset=120_000)
    lines = text.split("\n")
    assert tok.encode_batch(lines) == [e.ids for e in hf.encode_batch(lines)]


@pytest.mark.parametrize("text", ADVERSARIAL)
def test_same_ids_as_tokenizers_on_adversarial_strings(trained, text: str) -> None:
    tok, hf = trained
    assert tok.encode(text) == hf.encode(text).ids


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(STABLE_ALPHABET, max_size=40).map("".join))
def test_same_ids_as_tokenizers_on_random_text(trained, text: str) -> None:
    tok, hf = trained
    assert tok.encode(text) == hf.encode(text).ids


def test_export_matches(trained) -> None:
    tok, _ = trained
    exported = to_tokenizers(tok)
    texts = [*ADVERSARIAL, *course_text(20_000, offset=200_000).split("\n")]
    assert tok.encode_batch(texts) == [e.ids for e in exported.encode_batch(texts)]


def test_white_space_is_the_pretokenizers_backslash_s() -> None:
    """WordPiece spells Unicode White_Space out; BPE pre-tokenization gets it from `regex`'s \\s. Same set."""
    everything = "".join(chr(cp) for cp in range(sys.maxunicode + 1))
    assert set(regex.findall(r"\s", everything)) == _WHITE_SPACE


def test_greedy_longest_match_and_unknown() -> None:
    vocab = ["[UNK]", "un", "##aff", "##able", "##a", "a", "##b"]
    tok = WordPieceTokenizer(vocab, special_tokens=["[UNK]"])
    assert tok.tokenize("unaffable") == ["un", "##aff", "##able"]
    assert tok.tokenize("unaffablex") == ["[UNK]"]  # no piece for "x": the whole word is unknown
    assert tok.tokenize("ab a") == ["a", "##b", "a"]
    assert tok.decode(tok.encode("unaffable ab")) == "unaffable ab"


def test_save_load_roundtrip_and_errors(tmp_path, trained) -> None:
    tok, _ = trained
    path = tok.save(tmp_path / "wp.json")
    loaded = WordPieceTokenizer.load(path)
    assert loaded.vocab == tok.vocab and loaded.lowercase == tok.lowercase
    assert loaded.encode(ADVERSARIAL[3]) == tok.encode(ADVERSARIAL[3])
    document = json.loads(path.read_text(encoding="utf-8"))
    (tmp_path / "dup.json").write_text(json.dumps({**document, "vocab": document["vocab"] + [document["vocab"][10]]}))
    with pytest.raises(ValueError, match="duplicate tokens"):
        WordPieceTokenizer.load(tmp_path / "dup.json")
    (tmp_path / "bpe.json").write_text(json.dumps({"kind": "minillm-bpe", "format_version": 1}))
    with pytest.raises(ValueError, match="expected 'minillm-wordpiece'"):
        WordPieceTokenizer.load(tmp_path / "bpe.json")


def test_bad_input_errors(trained) -> None:
    tok, _ = trained
    with pytest.raises(TypeError, match="expected str"):
        tok.encode(42)
    with pytest.raises(ValueError, match="unknown token id"):
        tok.decode([tok.vocab_size])
    with pytest.raises(ValueError, match="smaller than"):
        WordPieceTokenizer.train("some text with letters", 10)
    with pytest.raises(ValueError, match="duplicate special tokens"):
        WordPieceTokenizer.train("abc", 100, special_tokens=["[UNK]", "[UNK]"])
