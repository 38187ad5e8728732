"""Export to Hugging Face `tokenizers`: a ``tokenizers.Tokenizer`` that gives the same ids.

Useful to hand a course tokenizer to the wider ecosystem, and used by the tests as an independent
implementation: `tokenizers` runs its own regex engine (Oniguruma), its own BPE merge loop and its own
special-token matcher, so agreement on arbitrary text checks all three of ours.

Byte-level BPE in `tokenizers` works on strings, not bytes: each byte is first mapped to a printable
character (GPT-2's table: printable Latin-1 bytes map to themselves, the others to U+0100 upwards, so a
space becomes ``Ġ``). Vocabulary and merges are written in that alphabet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from minillm.tokenizer.io import byte_level_text
from minillm.tokenizer.pretokenize import resolve_pattern

if TYPE_CHECKING:
    import tokenizers

    from minillm.tokenizer.bpe import BPETokenizer
    from minillm.tokenizer.wordpiece import WordPieceTokenizer


def to_tokenizers(tokenizer: BPETokenizer | WordPieceTokenizer) -> tokenizers.Tokenizer:
    """Build a ``tokenizers.Tokenizer`` that encodes like ``tokenizer`` (special tokens all allowed)."""
    from minillm.tokenizer.bpe import BPETokenizer
    from minillm.tokenizer.wordpiece import WordPieceTokenizer

    if isinstance(tokenizer, BPETokenizer):
        return _bpe_to_tokenizers(tokenizer)
    if isinstance(tokenizer, WordPieceTokenizer):
        return _wordpiece_to_tokenizers(tokenizer)
    raise TypeError(f"expected a BPETokenizer or WordPieceTokenizer, got {type(tokenizer).__name__}")


def _bpe_to_tokenizers(tokenizer: BPETokenizer) -> tokenizers.Tokenizer:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    special_ids = set(tokenizer.special_tokens.values())  # a loaded vocabulary may put special tokens anywhere
    vocab = {byte_level_text(token): i for i, token in tokenizer.vocab.items() if i not in special_ids}
    vocab.update(tokenizer.special_tokens)
    merges = [(byte_level_text(left), byte_level_text(right)) for left, right in tokenizer.merges]
    hf = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    steps = []
    pattern = resolve_pattern(tokenizer.pattern)
    if pattern is not None:
        steps.append(pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False))
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    hf.pre_tokenizer = pre_tokenizers.Sequence(steps)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in tokenizer.special_tokens])
    return hf


def _wordpiece_to_tokenizers(tokenizer: WordPieceTokenizer) -> tokenizers.Tokenizer:
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers

    hf = Tokenizer(
        models.WordPiece(
            vocab=dict(tokenizer.vocab),
            unk_token=tokenizer.unk_token,
            max_input_chars_per_word=tokenizer.max_input_chars_per_word,
        )
    )
    hf.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=tokenizer.lowercase, lowercase=tokenizer.lowercase
    )
    hf.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    hf.decoder = decoders.WordPiece(prefix="##")
    hf.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in tokenizer.special_tokens])
    return hf
