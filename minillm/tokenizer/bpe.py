"""Byte-level BPE: the tokenizer GPT-2 and most LLMs use, trained, applied, saved and loaded.

Id layout (fixed, so ids are stable and a tokenizer is rebuilt from its merge list alone):

* ``0 .. 255``: the single bytes, so any text can be spelled (nothing is out of vocabulary);
* ``256 ..``: one id per merge, in merge order (a merge re-creating existing bytes reuses their id);
* then the special tokens, in the order given.

Encoding cuts out special tokens first (longest match first where two start at the same place), splits
the rest into pre-tokens with a regex, and inside each pre-token applies merges by rank: repeatedly merge
the adjacent pair that was learned earliest (``merges.apply_merges``: n log n for n bytes). Decoding
joins the tokens' bytes and decodes them as UTF-8; bytes that are not valid UTF-8 (e.g. half an emoji)
become U+FFFD, the replacement character, exactly as ``bytes.decode("utf-8", errors="replace")`` does. Use
:meth:`BPETokenizer.decode_bytes` for the raw bytes.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from minillm.chat import CHAT_SPECIAL_TOKENS
from minillm.tokenizer.bpe_train import train_merges
from minillm.tokenizer.io import read_json, text_to_token, token_to_text, write_json
from minillm.tokenizer.merges import apply_merges
from minillm.tokenizer.pretokenize import (
    check_pattern,
    compile_pattern,
    special_regex,
    split_on_specials,
    stream_chunks,
)

#: The course's special tokens — document separator, then the chat markers — defined with the chat format.
COURSE_SPECIAL_TOKENS: tuple[str, ...] = CHAT_SPECIAL_TOKENS

FILE_KIND = "minillm-bpe"
_CACHE_LIMIT = 100_000  # pre-token → ids entries kept (bounded memory) before the cache is cleared


def check_special_tokens(special_tokens: Iterable[str]) -> list[str]:
    """Validate special tokens: non-empty strings, no duplicates. Returns them as a list."""
    if isinstance(special_tokens, str):
        raise TypeError(f"special_tokens must be a sequence of strings, not the string {special_tokens!r}")
    tokens = list(special_tokens)
    for token in tokens:
        if not isinstance(token, str):
            raise TypeError(f"special tokens must be str, got {token!r} ({type(token).__name__})")
        if not token:
            raise ValueError("a special token cannot be the empty string")
    duplicates = sorted({t for t in tokens if tokens.count(t) > 1})
    if duplicates:
        raise ValueError(f"duplicate special tokens: {duplicates}")
    return tokens


def read_texts(data: str | os.PathLike | Iterable[str]) -> Iterator[str]:
    """Texts from a string, a file path (``os.PathLike``, or a ``str`` naming an existing file) or an
    iterable of strings. Files are read lazily, line by line."""
    if isinstance(data, str) and not _names_file(data):
        yield data
    elif isinstance(data, (str, os.PathLike)):
        with open(data, encoding="utf-8", newline="") as handle:  # keep "\r\n" as it is in the file
            yield from handle
    elif isinstance(data, (bytes, bytearray)):
        raise TypeError("expected text (str), a path or an iterable of str; got bytes (decode them first)")
    elif isinstance(data, Iterable):
        for item in data:
            if not isinstance(item, str):
                raise TypeError(f"expected an iterable of str, got an item of type {type(item).__name__}")
            yield item
    else:
        raise TypeError(f"expected text (str), a path or an iterable of str, got {type(data).__name__}")


def _names_file(text: str) -> bool:
    return len(text) < 1024 and "\n" not in text and os.path.isfile(text)


class BPETokenizer:
    """A byte-level BPE tokenizer built from an ordered merge list (and special tokens)."""

    def __init__(
        self,
        merges: Sequence[tuple[bytes, bytes]],
        special_tokens: Iterable[str] = (),
        pattern: str | None = "gpt2",
        *,
        allow_custom_pattern: bool = False,
    ) -> None:
        """``pattern`` is a preset name ("gpt2", "gpt4", "none"); a regex of your own needs
        ``allow_custom_pattern=True`` and must split any text losslessly (see ``pretokenize.check_pattern``)."""
        self.pattern = check_pattern(pattern, allow_custom_pattern)
        self._regex = compile_pattern(self.pattern)
        vocab: list[bytes] = [bytes([i]) for i in range(256)]
        token_id: dict[bytes, int] = {b: i for i, b in enumerate(vocab)}
        self._ranks: dict[tuple[int, int], tuple[int, int]] = {}
        self.merges: list[tuple[bytes, bytes]] = []
        for rank, pair in enumerate(merges):
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise ValueError(f"merge #{rank} must be a pair of byte strings, got {pair!r}")
            left, right = pair
            if not (isinstance(left, bytes) and isinstance(right, bytes)):
                raise TypeError(f"merge #{rank} must be a pair of bytes, got {pair!r}")
            if left not in token_id or right not in token_id:
                raise ValueError(f"merge #{rank} {pair!r} uses a token that no earlier merge created")
            ids = (token_id[left], token_id[right])
            if ids in self._ranks:
                raise ValueError(f"merge #{rank} {pair!r} repeats an earlier merge")
            merged = left + right
            if merged not in token_id:
                token_id[merged] = len(vocab)
                vocab.append(merged)
            self._ranks[ids] = (rank, token_id[merged])
            self.merges.append((left, right))
        self._special = {token: len(vocab) + i for i, token in enumerate(check_special_tokens(special_tokens))}
        self._num_ordinary = len(vocab)
        self._vocab = vocab + [token.encode("utf-8") for token in self._special]
        self._token_id = token_id
        self._special_regex = special_regex(self._special)
        self._subset_regex: dict[frozenset[str], re.Pattern[str] | None] = {}
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def from_vocab_and_merges(
        cls,
        vocab: Mapping[int, bytes],
        merges: Sequence[tuple[bytes, bytes]],
        special_tokens: Iterable[str] = (),
        pattern: str | None = "gpt2",
        *,
        allow_custom_pattern: bool = False,
    ) -> BPETokenizer:
        """Build from a vocabulary (id → bytes) and merge list, checking that the vocabulary follows the
        layout (bytes, then merge results, then special tokens); raises ValueError if it does not."""
        tokenizer = cls(merges, special_tokens, pattern, allow_custom_pattern=allow_custom_pattern)
        if dict(vocab) != tokenizer.vocab:
            wrong = sorted(set(vocab.items()) ^ set(tokenizer.vocab.items()))[:3]
            raise ValueError(f"vocab does not follow the id layout of these merges; e.g. {wrong}")
        return tokenizer

    # ----------------------------------------------------------------------------------------- training
    @classmethod
    def train(
        cls,
        data: str | os.PathLike | Iterable[str],
        vocab_size: int,
        special_tokens: Iterable[str] = COURSE_SPECIAL_TOKENS,
        pattern: str | None = "gpt2",
        show_progress: bool = False,
        *,
        allow_custom_pattern: bool = False,
    ) -> BPETokenizer:
        """Learn a tokenizer with ``vocab_size`` ids (256 bytes + merges + special tokens).

        ``data`` is a text, a path (``pathlib.Path``, or a ``str`` naming an existing file) or an
        iterable of texts; files are streamed. Special tokens in the data are cut out before counting,
        so they are never split and never part of a merge. ``pattern``: "gpt2" (default), "gpt4",
        "none", or a regex string with ``allow_custom_pattern=True``. If the data runs out of pairs first,
        the vocabulary is smaller.
        """
        specials = check_special_tokens(special_tokens)
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
            raise TypeError(f"vocab_size must be an int, got {vocab_size!r}")
        if vocab_size < 256 + len(specials):
            raise ValueError(f"vocab_size={vocab_size} is smaller than 256 bytes + {len(specials)} special tokens")
        pattern = check_pattern(pattern, allow_custom_pattern)
        regex = compile_pattern(pattern)
        split = special_regex(specials)
        counts: Counter[str] = Counter()
        for chunk in stream_chunks(read_texts(data), special_tokens=specials):
            for segment, is_special in split_on_specials(chunk, split):
                if is_special:
                    continue
                counts.update(regex.findall(segment) if regex is not None else (segment,))
        word_counts = {word.encode("utf-8"): n for word, n in counts.items()}
        id_merges, vocab = train_merges(word_counts, vocab_size - len(specials), show_progress)
        return cls([(vocab[a], vocab[b]) for a, b in id_merges], specials, pattern, allow_custom_pattern=True)

    # ------------------------------------------------------------------------------------- properties
    @property
    def vocab_size(self) -> int:
        """Number of ids: 256 bytes + merged tokens + special tokens."""
        return len(self._vocab)

    @property
    def special_tokens(self) -> dict[str, int]:
        """Special token → id."""
        return dict(self._special)

    @property
    def vocab(self) -> dict[int, bytes]:
        """Id → bytes (special tokens as their UTF-8 bytes)."""
        return dict(enumerate(self._vocab))

    def token_to_id(self, token: str | bytes) -> int:
        """The id of a special token, or of an ordinary token given as text or bytes."""
        if isinstance(token, str):
            if token in self._special:
                return self._special[token]
            token_bytes = token.encode("utf-8")
        elif isinstance(token, bytes):
            token_bytes = token
        else:
            raise TypeError(f"token must be str or bytes, got {type(token).__name__}")
        if token_bytes not in self._token_id:
            raise ValueError(f"{token!r} is not a token of this vocabulary")
        return self._token_id[token_bytes]

    def id_to_token(self, token_id: int) -> bytes:
        """The bytes of one id."""
        self._check_ids([token_id])
        return self._vocab[token_id]

    # ------------------------------------------------------------------------------------- encoding
    def encode(self, text: str, allowed_special: str | Iterable[str] = "all") -> list[int]:
        """Text → ids. ``allowed_special``: "all" (default), "none" (special tokens are encoded as plain
        text) or a collection of the special tokens to recognise."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects str, got {type(text).__name__}")
        specials = self._specials_for(allowed_special)
        ids: list[int] = []
        for segment, is_special in split_on_specials(text, specials):
            if is_special:
                ids.append(self._special[segment])
            else:
                ids.extend(self.encode_ordinary(segment))
        return ids

    def encode_ordinary(self, text: str) -> list[int]:
        """Encode text with no special-token handling (every character is ordinary text)."""
        if not isinstance(text, str):
            raise TypeError(f"encode_ordinary expects str, got {type(text).__name__}")
        pieces = self._regex.findall(text) if self._regex is not None else ([text] if text else [])
        cache = self._cache
        if len(cache) > _CACHE_LIMIT:
            cache.clear()
        ids: list[int] = []
        for piece in pieces:
            piece_ids = cache.get(piece)
            if piece_ids is None:
                piece_ids = self._encode_piece(piece)
                cache[piece] = piece_ids
            ids.extend(piece_ids)
        return ids

    def encode_batch(self, texts: Iterable[str], allowed_special: str | Iterable[str] = "all") -> list[list[int]]:
        """Encode many texts (the pre-token cache is shared between them)."""
        if isinstance(texts, str):
            raise TypeError("encode_batch expects a list of str, got one str (use encode)")
        return [self.encode(text, allowed_special) for text in texts]

    def encode_iterable(
        self,
        data: Iterable[str] | os.PathLike,
        allowed_special: str | Iterable[str] = "all",
        chunk_chars: int = 1 << 18,
    ) -> Iterator[int]:
        """Lazily encode a stream of text (an open file, an iterable of str, or a path), yielding ids.

        Memory stays bounded by ``chunk_chars`` whatever the stream's length: text is regrouped into
        chunks cut only where pre-tokenization is unaffected (see ``stream_chunks``), so the ids equal
        ``encode`` of the whole text for the built-in patterns. With ``pattern="none"`` each chunk is
        encoded on its own.
        """
        if isinstance(data, str):
            data = [data]
        elif isinstance(data, os.PathLike):
            data = read_texts(data)
        specials = list(self._special) if self._specials_for(allowed_special) is not None else []
        for chunk in stream_chunks(data, chunk_chars, specials):
            yield from self.encode(chunk, allowed_special)

    def _specials_for(self, allowed_special: str | Iterable[str]) -> re.Pattern[str] | None:
        if allowed_special == "all":
            return self._special_regex
        if allowed_special == "none":
            return None
        if isinstance(allowed_special, str):
            raise ValueError(f"allowed_special must be 'all', 'none' or a set of tokens, got {allowed_special!r}")
        subset = frozenset(allowed_special)
        if subset not in self._subset_regex:
            unknown = sorted(subset - self._special.keys())
            if unknown:
                raise ValueError(f"allowed_special names tokens that are not special tokens: {unknown}")
            self._subset_regex[subset] = special_regex(subset)
        return self._subset_regex[subset]

    def _encode_piece(self, piece: str) -> list[int]:
        """Apply merges by rank inside one pre-token."""
        try:
            ids = list(piece.encode("utf-8"))
        except UnicodeEncodeError as err:
            raise ValueError(
                f"text contains a lone surrogate {piece[err.start]!r}, which is not valid Unicode"
            ) from err
        return apply_merges(ids, self._ranks)

    # ------------------------------------------------------------------------------------- decoding
    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """Ids → the exact bytes they stand for."""
        ids = self._check_ids(ids)
        vocab = self._vocab
        return b"".join([vocab[i] for i in ids])

    def decode(self, ids: Iterable[int]) -> str:
        """Ids → text. Invalid UTF-8 (a token sequence cut inside a character) becomes U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def _check_ids(self, ids: Iterable[int]) -> list[int]:
        if isinstance(ids, (str, bytes)):
            raise TypeError(f"decode expects a sequence of ints, got {type(ids).__name__}")
        if hasattr(ids, "tolist"):  # numpy arrays and torch tensors
            ids = ids.tolist()
        ids = list(ids)
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"token ids must be ints, got {i!r} ({type(i).__name__})")
        if ids and (min(ids) < 0 or max(ids) >= len(self._vocab)):
            bad = next(i for i in ids if not 0 <= i < len(self._vocab))
            raise ValueError(f"unknown token id {bad} (vocabulary has ids 0..{len(self._vocab) - 1})")
        return ids

    # ------------------------------------------------------------------------------------- save / load
    def save(self, path: str | os.PathLike) -> Path:
        """Write the tokenizer as readable JSON (see :mod:`minillm.tokenizer.io` for the byte notation).

        A preset pattern is saved by name, so a file never carries a regex unless its author chose one.
        """
        return write_json(
            path,
            FILE_KIND,
            {
                "pattern": self.pattern,
                "special_tokens": self.special_tokens,
                "merges": [[token_to_text(left), token_to_text(right)] for left, right in self.merges],
                "merged_tokens": self._merged_token_texts(),
            },
        )

    @classmethod
    def load(cls, path: str | os.PathLike, *, allow_custom_pattern: bool = False) -> BPETokenizer:
        """Read a file written by :meth:`save`; a corrupt or foreign file raises ValueError.

        The file is data, not code: its ``pattern`` must name a preset ("gpt2", "gpt4", "none"). A file
        with a regex of its own loads only with ``allow_custom_pattern=True`` (trust it first: a regex can
        take exponential time on some texts), and only if that regex splits any text losslessly.
        """
        document = read_json(path, FILE_KIND, ("pattern", "special_tokens", "merges"))
        try:
            pattern = check_pattern(document["pattern"], allow_custom_pattern)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{path}: {err}") from err
        try:
            merges = [(text_to_token(a), text_to_token(b)) for a, b in document["merges"]]
            specials: dict[str, Any] = document["special_tokens"]
            ordered = sorted(specials, key=lambda token: specials[token])
            tokenizer = cls(merges, ordered, pattern, allow_custom_pattern=True)
        except (TypeError, ValueError, AttributeError) as err:
            raise ValueError(f"{path}: corrupt BPE tokenizer file ({err})") from err
        if tokenizer.special_tokens != specials:
            raise ValueError(f"{path}: corrupt BPE tokenizer file (special token ids do not follow the merges)")
        if "merged_tokens" in document and document["merged_tokens"] != tokenizer._merged_token_texts():
            raise ValueError(f"{path}: corrupt BPE tokenizer file (merged_tokens do not match the merges)")
        return tokenizer

    def _merged_token_texts(self) -> dict[str, str]:
        """Id → readable text of every token above the 256 bytes (saved for people reading the file)."""
        return {str(i): token_to_text(self._vocab[i]) for i in range(256, self._num_ordinary)}

    def __repr__(self) -> str:
        return (
            f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, "
            f"special_tokens={list(self._special)}, pattern={self.pattern!r})"
        )
