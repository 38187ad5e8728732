"""Byte-level BPE: the tokenizer GPT-2 and most LLMs use, trained, applied, saved and loaded.

Id layout of a tokenizer trained or built here (fixed, so ids are stable and a tokenizer is rebuilt from
its merge list alone):

* ``0 .. 255``: the single bytes, so any text can be spelled (nothing is out of vocabulary);
* ``256 ..``: one id per merge, in merge order (a merge re-creating existing bytes reuses their id);
* then the special tokens, in the order given.

A tokenizer loaded from another library's files keeps *their* ids, whatever the layout
(:meth:`BPETokenizer.from_gpt2_files`, :meth:`BPETokenizer.from_tiktoken_ranks`; see
:mod:`minillm.tokenizer.vocab_files`): GPT-2's single bytes, for one, are not ids 0..255 in byte order.

Encoding cuts out special tokens first (longest match first where two start at the same place), splits
the rest into pre-tokens with a regex, and inside each pre-token applies merges by rank: repeatedly merge
the adjacent pair that was learned earliest (``merges.apply_merges``: n log n for n bytes). A tokenizer
loaded from tiktoken ranks follows tiktoken's rule instead, which joins the adjacent pair whose joined bytes
rank lowest (``merges.apply_token_ranks``); for a vocabulary learned by BPE training the two agree. Decoding
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
from minillm.tokenizer.merges import apply_merges, apply_token_ranks
from minillm.tokenizer.pretokenize import (
    check_pattern,
    compile_pattern,
    special_regex,
    split_on_specials,
    stream_chunks,
)
from minillm.tokenizer.vocab_files import (
    far_id_message,
    id_limit,
    merges_from_ranks,
    read_gpt2_files,
    read_tiktoken_ranks,
    write_gpt2_files,
    write_tiktoken_ranks,
)

#: The course's special tokens — document separator, then the chat markers — defined with the chat format.
COURSE_SPECIAL_TOKENS: tuple[str, ...] = CHAT_SPECIAL_TOKENS

FILE_KIND = "minillm-bpe"
#: How merges are applied: "merge-rank" (GPT-2, Hugging Face: the earliest merge in the list) or
#: "token-rank" (tiktoken: the adjacent pair whose joined bytes have the lowest rank, i.e. id).
MERGE_RULES = ("merge-rank", "token-rank")
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
        """``pattern`` names a built-in pattern ("gpt2", "gpt4", "none"); a regex of your own needs
        ``allow_custom_pattern=True`` and must split any text losslessly (see ``pretokenize.check_pattern``)."""
        self.pattern = check_pattern(pattern, allow_custom_pattern)
        self._regex = compile_pattern(self.pattern)
        token_ids = _merge_order_ids(merges)
        specials = check_special_tokens(special_tokens)
        special_ids = {token: len(token_ids) + i for i, token in enumerate(specials)}
        self._setup(merges, token_ids, special_ids, "merge-rank")

    def _setup(
        self,
        merges: Sequence[tuple[bytes, bytes]],
        token_ids: Mapping[bytes, int],
        special_ids: Mapping[str, int],
        merge_rule: str,
    ) -> None:
        """Index a vocabulary with any id layout: ``token_ids`` (bytes → id) holds the 256 single bytes and
        every merge result, nothing else; special tokens take ids of their own. Raises :class:`MergeError`
        (a ValueError naming the merge) or ValueError if the pieces do not fit together."""
        missing = [b for b in range(256) if bytes([b]) not in token_ids]
        if missing:
            raise ValueError(
                f"the vocabulary has no token for the byte(s) {[hex(b) for b in missing[:8]]}; a byte-level BPE "
                "needs all 256 single bytes so that any text can be spelled"
            )
        known = {bytes([b]) for b in range(256)}
        self._ranks: dict[tuple[int, int], tuple[int, int]] = {}
        self.merges: list[tuple[bytes, bytes]] = []
        for rank, pair in enumerate(merges):
            left, right = _check_merge(rank, pair)
            if left not in known or right not in known:
                raise MergeError(rank, f"merge #{rank} {pair!r} uses a token that no earlier merge created")
            ids = (token_ids[left], token_ids[right])
            if ids in self._ranks:
                raise MergeError(rank, f"merge #{rank} {pair!r} repeats an earlier merge")
            merged = left + right
            if merged not in token_ids:
                raise MergeError(rank, f"merge #{rank} {pair!r} makes {merged!r}, which is not in the vocabulary")
            self._ranks[ids] = (rank, token_ids[merged])
            self.merges.append((left, right))
            known.add(merged)
        unreachable = [token for token in token_ids if token not in known]
        if unreachable:
            raise ValueError(
                f"{len(unreachable)} token(s) are neither a single byte nor made by a merge, e.g. {unreachable[:3]}; "
                "name them as special tokens if they are"
            )
        owner: dict[int, bytes | str] = {}
        for token, token_id in [*token_ids.items(), *special_ids.items()]:
            if isinstance(token_id, bool) or not isinstance(token_id, int) or token_id < 0:
                raise ValueError(f"token {token!r} has id {token_id!r}; ids must be non-negative ints")
            if token_id in owner:
                raise ValueError(f"id {token_id} is given to two tokens, {owner[token_id]!r} and {token!r}")
            owner[token_id] = token
        if merge_rule not in MERGE_RULES:
            raise ValueError(f"merge_rule must be one of {MERGE_RULES}, got {merge_rule!r}")
        top = max(owner)
        if top >= id_limit(len(owner)):  # before the list below is made: one row per id up to the largest
            raise ValueError(far_id_message(f"token {owner[top]!r}", top, len(owner)))
        vocab: list[bytes | None] = [None] * (top + 1)
        for token, token_id in token_ids.items():
            vocab[token_id] = token
        self._special = {token: special_ids[token] for token in check_special_tokens(special_ids)}
        for token, token_id in self._special.items():
            vocab[token_id] = token.encode("utf-8")
        self.merge_rule = merge_rule
        self._has_gaps = len(owner) < len(vocab)
        self._num_ordinary = len(token_ids)
        self._vocab = vocab
        self._token_id = dict(token_ids)
        byte_ids = [token_ids[bytes([b])] for b in range(256)]
        self._byte_ids = None if byte_ids == list(range(256)) else byte_ids  # None: byte b is id b
        self._special_regex = special_regex(self._special)
        self._subset_regex: dict[frozenset[str], re.Pattern[str] | None] = {}
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def _with_layout(
        cls,
        merges: Sequence[tuple[bytes, bytes]],
        token_ids: Mapping[bytes, int],
        special_ids: Mapping[str, int],
        pattern: str | None,
        merge_rule: str,
        allow_custom_pattern: bool,
    ) -> BPETokenizer:
        tokenizer = cls.__new__(cls)
        tokenizer.pattern = check_pattern(pattern, allow_custom_pattern)
        tokenizer._regex = compile_pattern(tokenizer.pattern)
        tokenizer._setup(merges, token_ids, special_ids, merge_rule)
        return tokenizer

    @classmethod
    def from_gpt2_files(
        cls,
        vocab_json: str | os.PathLike,
        merges_txt: str | os.PathLike,
        special_tokens: Iterable[str] = (),
        pattern: str | None = "gpt2",
        *,
        allow_custom_pattern: bool = False,
    ) -> BPETokenizer:
        """Load GPT-2's published format, keeping its ids: ``vocab.json`` (token in GPT-2's byte-to-unicode
        alphabet → id) and ``merges.txt`` (an optional ``#version`` line, then one merge "a b" per line in
        rank order). Encoding follows GPT-2's rule: the earliest merge first.

        ``special_tokens`` names the entries of ``vocab.json`` that are special tokens, written as their
        own text (GPT-2's ``"<|endoftext|>"``); every other entry must be a single byte or made by a merge.
        Malformed files raise ValueError naming the file (and the line of ``merges.txt``).
        """
        token_ids, special_ids, merges, lines = read_gpt2_files(vocab_json, merges_txt, special_tokens)
        try:
            return cls._with_layout(merges, token_ids, special_ids, pattern, "merge-rank", allow_custom_pattern)
        except MergeError as err:
            raise ValueError(f"{merges_txt}, line {lines[err.index]}: {err}") from err
        except ValueError as err:
            raise ValueError(f"{vocab_json} + {merges_txt}: {err}") from err

    @classmethod
    def from_tiktoken_ranks(
        cls,
        ranks: str | os.PathLike | Mapping[bytes, int],
        pattern: str | None = "gpt2",
        special_tokens: Mapping[str, int] | None = None,
        *,
        allow_custom_pattern: bool = False,
    ) -> BPETokenizer:
        """Load tiktoken's ranks (a ``.tiktoken`` file of ``base64(token) rank`` lines, or the dict
        ``tiktoken.Encoding`` takes as ``mergeable_ranks``); ids are the ranks, and ``special_tokens``
        (token → id) are added as given, as tiktoken's ``special_tokens`` are.

        Encoding follows tiktoken's rule: join the adjacent pair whose joined bytes rank lowest. What the
        loader assumes, and checks: the ranks are a BPE merge order, i.e. every token of two or more bytes
        is what that rule makes of its own bytes using only lower-ranked tokens, in exactly two parts; those
        two parts are its merge, so the tokenizer also has a merge list (for :meth:`save_gpt2_files`).
        """
        source = "ranks" if isinstance(ranks, Mapping) else str(ranks)
        token_ranks = read_tiktoken_ranks(ranks)
        specials = dict(special_tokens or {})
        check_special_tokens(specials)
        try:
            merges = merges_from_ranks(token_ranks)
            return cls._with_layout(merges, token_ranks, specials, pattern, "token-rank", allow_custom_pattern)
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from err

    def save_gpt2_files(self, vocab_json: str | os.PathLike, merges_txt: str | os.PathLike) -> tuple[Path, Path]:
        """Write ``vocab.json`` + ``merges.txt`` in GPT-2's format with this tokenizer's ids (special tokens
        as their own text). :meth:`from_gpt2_files` and Hugging Face ``tokenizers`` read them back."""
        return write_gpt2_files(vocab_json, merges_txt, self._token_id, self._special, self.merges)

    def save_tiktoken_ranks(self, path: str | os.PathLike) -> Path:
        """Write the ordinary tokens as a ``.tiktoken`` file, each with its id as its rank (special tokens
        are not part of that format: pass ``special_tokens`` alongside, as tiktoken does).

        tiktoken joins pairs by the rank of the joined bytes, not by a merge list, so the file is written
        only if the ranks describe this tokenizer's merges exactly (:func:`vocab_files.merges_from_ranks`
        recovers them). A tokenizer trained here passes (its ids follow its merge order) unless one of its
        merges re-creates an existing token; anything else is refused rather than written to encode differently.
        """
        if len(self.merges) != self._num_ordinary - 256:
            raise ValueError(
                f"{len(self.merges)} merges make only {self._num_ordinary - 256} distinct tokens (a merge re-creates "
                "an existing one), so ranks by token cannot describe this merge list; use save_gpt2_files"
            )
        implied = merges_from_ranks(self._token_id)
        for merge, ranked in zip(self.merges, implied, strict=True):
            if merge != ranked:
                raise ValueError(
                    f"this tokenizer makes {merge[0] + merge[1]!r} from {merge}, but tiktoken's rule on its ids as "
                    f"ranks would make {ranked[0] + ranked[1]!r} from {ranked}; use save_gpt2_files"
                )
        return write_tiktoken_ranks(path, self._token_id)

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
        """Number of ids, the largest id + 1 (the rows an embedding table needs): 256 bytes + merged
        tokens + special tokens, plus any ids a loaded file leaves unassigned."""
        return len(self._vocab)

    @property
    def special_tokens(self) -> dict[str, int]:
        """Special token → id."""
        return dict(self._special)

    @property
    def vocab(self) -> dict[int, bytes]:
        """Id → bytes (special tokens as their UTF-8 bytes)."""
        return {i: token for i, token in enumerate(self._vocab) if token is not None}

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
        return self.decode_bytes([token_id])

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
            data = piece.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ValueError(
                f"text contains a lone surrogate {piece[err.start]!r}, which is not valid Unicode"
            ) from err
        if self.merge_rule == "token-rank":
            whole = self._token_id.get(data)  # tiktoken takes a pre-token that is one token as it is
            token_id = self._token_id
            return [whole] if whole is not None else [token_id[part] for part in apply_token_ranks(data, token_id)]
        ids = list(data) if self._byte_ids is None else [self._byte_ids[b] for b in data]
        return apply_merges(ids, self._ranks)

    # ------------------------------------------------------------------------------------- decoding
    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """Ids → the exact bytes they stand for."""
        ids = self._check_ids(ids)
        vocab = self._vocab
        pieces = [vocab[i] for i in ids]
        if self._has_gaps and None in pieces:
            raise ValueError(f"id {ids[pieces.index(None)]} is not assigned to any token in this vocabulary")
        return b"".join(pieces)

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

        A built-in pattern is saved by name, so a file never carries a regex unless its author chose one.
        The format stores merges only and rebuilds ids in merge order, so a tokenizer loaded with another
        layout or merge rule (:meth:`from_gpt2_files`, :meth:`from_tiktoken_ranks`) is refused: save it in
        its own format instead.
        """
        if not self._has_merge_order_layout():
            raise ValueError(
                "this tokenizer keeps the id layout (or merge rule) of the files it was loaded from, which the "
                "minillm JSON format cannot hold; save it with save_gpt2_files or save_tiktoken_ranks"
            )
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

        The file is data, not code: its ``pattern`` must name a built-in pattern ("gpt2", "gpt4", "none"). A file
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

    def _has_merge_order_layout(self) -> bool:
        """True if the ids are the ones this class gives: bytes, merge results in order, then specials."""
        if self.merge_rule != "merge-rank" or self._token_id != _merge_order_ids(self.merges):
            return False
        return list(self._special.values()) == list(range(self._num_ordinary, self._num_ordinary + len(self._special)))

    def _merged_token_texts(self) -> dict[str, str]:
        """Id → readable text of every token above the 256 bytes (saved for people reading the file)."""
        return {str(i): token_to_text(self._vocab[i]) for i in range(256, self._num_ordinary)}

    def __repr__(self) -> str:
        return (
            f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, "
            f"special_tokens={list(self._special)}, pattern={self.pattern!r}"
            + (f", merge_rule={self.merge_rule!r})" if self.merge_rule != "merge-rank" else ")")
        )


class MergeError(ValueError):
    """A merge that does not fit the vocabulary; ``index`` is its place in the merge list."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


def _check_merge(rank: int, pair: Any) -> tuple[bytes, bytes]:
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
        raise MergeError(rank, f"merge #{rank} must be a pair of byte strings, got {pair!r}")
    left, right = pair
    if not (isinstance(left, bytes) and isinstance(right, bytes)):
        raise TypeError(f"merge #{rank} must be a pair of bytes, got {pair!r}")
    return left, right


def _merge_order_ids(merges: Sequence[tuple[bytes, bytes]]) -> dict[bytes, int]:
    """The ids this class gives: bytes 0..255, then each new merge result in merge order (a merge that
    re-creates an existing token reuses its id). Checks the merges' form as it goes."""
    token_id: dict[bytes, int] = {bytes([i]): i for i in range(256)}
    for rank, pair in enumerate(merges):
        left, right = _check_merge(rank, pair)
        if left not in token_id or right not in token_id:
            raise MergeError(rank, f"merge #{rank} {pair!r} uses a token that no earlier merge created")
        token_id.setdefault(left + right, len(token_id))
    return token_id
