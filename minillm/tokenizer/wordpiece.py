"""WordPiece (BERT's tokenizer): likelihood-scored training and greedy longest-match-first encoding.

Where BPE merges the most *frequent* pair, WordPiece merges the pair that most raises the likelihood of
the training words under a unigram model of the tokens, which comes down to the score

    score(a, b) = count(ab) / (count(a) · count(b))

so a pair of rare tokens that nearly always occur together beats a pair of common tokens. Ties go to the
lexicographically greater pair of strings, as in our BPE. A piece that continues a word carries the
prefix ``##`` ("playing" → ``play``, ``##ing``). Encoding does not replay merges: it takes the longest
vocabulary entry at the start of the word, then the longest ``##`` entry after it, and so on; if some
position has no match the whole word becomes the unknown token.

Before that, text goes through BERT's normalisation and pre-tokenization, written out below so nothing
is hidden (they match `tokenizers`' ``BertNormalizer`` and ``BertPreTokenizer``):

1. clean: drop U+FFFD and control (NUL included), format and private-use characters, then turn every
   remaining whitespace into " " (so U+000B, U+000C, U+0085 are dropped as controls, not spaces);
2. put spaces around CJK ideographs, so each becomes its own word;
3. optionally strip accents (NFD decomposition, then drop non-spacing marks) and lowercase;
4. split on whitespace, and make every punctuation character a word of its own.
"""

from __future__ import annotations

import os
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from fractions import Fraction
from pathlib import Path

from tqdm.auto import tqdm

from minillm.tokenizer.bpe import check_special_tokens, read_texts
from minillm.tokenizer.io import read_json, write_json
from minillm.tokenizer.merges import merge_pair
from minillm.tokenizer.pretokenize import special_regex, split_on_specials

FILE_KIND = "minillm-wordpiece"
PREFIX = "##"
BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# Unicode White_Space (PropList.txt, unchanged since Unicode 6.3): what `tokenizers` splits BERT text on, and the
# set ``\s`` matches in the BPE pre-tokenization patterns (the `regex` package). Python's ``str.isspace`` is
# not it: it also accepts U+001C..U+001F.
_WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | frozenset(
    chr(c) for c in range(0x2000, 0x200B)
)
_REMOVED_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs"})
_ASCII_PUNCTUATION = frozenset(string.punctuation)
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),  # as in `tokenizers`; BERT's original code starts this block at 0x2B820
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def bert_normalize(text: str, lowercase: bool = True, strip_accents: bool | None = None) -> str:
    """BERT's normalisation (steps 1–3 of the module docstring). ``strip_accents`` follows ``lowercase``
    when None, as in BERT."""
    if strip_accents is None:
        strip_accents = lowercase
    out: list[str] = []
    for ch in text:
        if ch in "\t\n\r":
            out.append(" ")
        elif ch == "\ufffd" or unicodedata.category(ch) in _REMOVED_CATEGORIES:
            continue  # control (NUL included), format, private use; unassigned code points are kept
        elif ch in _WHITE_SPACE:
            out.append(" ")
        elif _is_cjk(ch):
            out.append(f" {ch} ")
        else:
            out.append(ch)
    text = "".join(out)
    if strip_accents:
        text = "".join(ch for ch in unicodedata.normalize("NFD", text) if unicodedata.category(ch) != "Mn")
    if lowercase:
        text = "".join(ch.lower() for ch in text)  # per character: no final-sigma rule, as in BERT
    return text


def _is_punctuation(ch: str) -> bool:
    return ch in _ASCII_PUNCTUATION or unicodedata.category(ch)[0] == "P"


def bert_pretokenize(text: str) -> list[str]:
    """Split on whitespace and isolate punctuation (step 4): "hi, you!" → ["hi", ",", "you", "!"]."""
    words: list[str] = []
    current: list[str] = []
    for ch in text:
        if ch in _WHITE_SPACE or _is_punctuation(ch):
            if current:
                words.append("".join(current))
                current = []
            if ch not in _WHITE_SPACE:
                words.append(ch)
        else:
            current.append(ch)
    if current:
        words.append("".join(current))
    return words


class WordPieceTokenizer:
    """A WordPiece vocabulary (token → id) with BERT's normalisation and greedy longest-match encoding."""

    def __init__(
        self,
        vocab: Sequence[str],
        unk_token: str = "[UNK]",
        special_tokens: Iterable[str] = BERT_SPECIAL_TOKENS,
        lowercase: bool = True,
        max_input_chars_per_word: int = 100,
    ) -> None:
        tokens = list(vocab)
        if len(set(tokens)) != len(tokens):
            duplicates = sorted({t for t in tokens if tokens.count(t) > 1})
            raise ValueError(f"duplicate tokens in WordPiece vocabulary: {duplicates[:10]}")
        for token in tokens:
            if not isinstance(token, str) or not token:
                raise ValueError(f"WordPiece tokens must be non-empty strings, got {token!r}")
        self.special_tokens_list = check_special_tokens(special_tokens)
        self._vocab = {token: i for i, token in enumerate(tokens)}
        missing = [t for t in (unk_token, *self.special_tokens_list) if t not in self._vocab]
        if missing:
            raise ValueError(f"special/unknown tokens missing from the vocabulary: {missing}")
        self._tokens = tokens
        self.unk_token = unk_token
        self.lowercase = lowercase
        self.max_input_chars_per_word = max_input_chars_per_word
        self._special_regex = special_regex(self.special_tokens_list)

    @classmethod
    def train(
        cls,
        data: str | os.PathLike | Iterable[str],
        vocab_size: int,
        special_tokens: Iterable[str] = BERT_SPECIAL_TOKENS,
        unk_token: str = "[UNK]",
        lowercase: bool = True,
        show_progress: bool = False,
    ) -> WordPieceTokenizer:
        """Learn a vocabulary of ``vocab_size`` entries: special tokens, the characters seen (first
        characters plain, later ones with ``##``), then merged pieces chosen by likelihood score."""
        specials = check_special_tokens(special_tokens)
        if unk_token not in specials:
            specials.insert(1 if specials else 0, unk_token)
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
            raise TypeError(f"vocab_size must be an int, got {vocab_size!r}")
        split = special_regex(specials)
        counts: Counter[str] = Counter()
        for text in read_texts(data):
            for segment, is_special in split_on_specials(text, split):
                if not is_special:
                    counts.update(bert_pretokenize(bert_normalize(segment, lowercase)))
        words = [[w[0], *(PREFIX + ch for ch in w[1:])] for w in counts]
        alphabet = sorted({piece for word in words for piece in word} - set(specials))
        if vocab_size < len(specials) + len(alphabet):
            raise ValueError(
                f"vocab_size={vocab_size} is smaller than {len(specials)} special tokens + "
                f"{len(alphabet)} characters of the training text"
            )
        merged = _learn_merges(words, list(counts.values()), vocab_size - len(specials) - len(alphabet), show_progress)
        return cls([*specials, *alphabet, *merged], unk_token, specials, lowercase)

    @property
    def vocab(self) -> dict[str, int]:
        """Token → id."""
        return dict(self._vocab)

    @property
    def vocab_size(self) -> int:
        return len(self._tokens)

    @property
    def special_tokens(self) -> dict[str, int]:
        return {t: self._vocab[t] for t in self.special_tokens_list}

    def token_to_id(self, token: str) -> int:
        if not isinstance(token, str):
            raise TypeError(f"token must be str, got {type(token).__name__}")
        if token not in self._vocab:
            raise ValueError(f"{token!r} is not in the WordPiece vocabulary")
        return self._vocab[token]

    def tokenize(self, text: str) -> list[str]:
        """Text → token strings (special tokens in the text are kept whole)."""
        if not isinstance(text, str):
            raise TypeError(f"expected str, got {type(text).__name__}")
        pieces: list[str] = []
        for segment, is_special in split_on_specials(text, self._special_regex):
            if is_special:
                pieces.append(segment)
                continue
            for word in bert_pretokenize(bert_normalize(segment, self.lowercase)):
                pieces.extend(self._split_word(word))
        return pieces

    def encode(self, text: str) -> list[int]:
        """Text → ids."""
        return [self._vocab[piece] for piece in self.tokenize(text)]

    def encode_batch(self, texts: Iterable[str]) -> list[list[int]]:
        if isinstance(texts, str):
            raise TypeError("encode_batch expects a list of str, got one str (use encode)")
        return [self.encode(text) for text in texts]

    def _split_word(self, word: str) -> list[str]:
        """Greedy longest-match-first; the whole word is the unknown token if any position fails."""
        if len(word) > self.max_input_chars_per_word:
            return [self.unk_token]
        pieces: list[str] = []
        start = 0
        while start < len(word):
            for end in range(len(word), start, -1):
                candidate = word[start:end] if start == 0 else PREFIX + word[start:end]
                if candidate in self._vocab:
                    pieces.append(candidate)
                    start = end
                    break
            else:
                return [self.unk_token]
        return pieces

    def decode(self, ids: Iterable[int]) -> str:
        """Ids → text: ``##`` pieces are glued to the piece before, words joined by spaces. Lossy:
        case, accents and the original spacing are gone after normalisation."""
        words: list[str] = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"token ids must be ints, got {i!r}")
            if not 0 <= i < len(self._tokens):
                raise ValueError(f"unknown token id {i} (vocabulary has ids 0..{len(self._tokens) - 1})")
            token = self._tokens[i]
            if token.startswith(PREFIX) and words:
                words[-1] += token[len(PREFIX) :]
            else:
                words.append(token)
        return " ".join(words)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the vocabulary and settings as readable JSON."""
        return write_json(
            path,
            FILE_KIND,
            {
                "unk_token": self.unk_token,
                "special_tokens": self.special_tokens_list,
                "lowercase": self.lowercase,
                "max_input_chars_per_word": self.max_input_chars_per_word,
                "vocab": self._tokens,
            },
        )

    @classmethod
    def load(cls, path: str | os.PathLike) -> WordPieceTokenizer:
        """Read a file written by :meth:`save`; a corrupt or foreign file raises ValueError."""
        document = read_json(path, FILE_KIND, ("unk_token", "special_tokens", "lowercase", "vocab"))
        try:
            return cls(
                document["vocab"],
                document["unk_token"],
                document["special_tokens"],
                bool(document["lowercase"]),
                int(document.get("max_input_chars_per_word", 100)),
            )
        except (TypeError, ValueError) as err:
            raise ValueError(f"{path}: corrupt WordPiece tokenizer file ({err})") from err

    def __repr__(self) -> str:
        return f"WordPieceTokenizer(vocab_size={self.vocab_size}, lowercase={self.lowercase})"


def _learn_merges(words: list[list[str]], counts: list[int], num_merges: int, show_progress: bool) -> list[str]:
    """Merge pieces by likelihood score until ``num_merges`` new pieces exist (or no pair is left).

    Pair and piece counts are updated incrementally; the best score is found by a scan over the pairs
    (float scores first, then exact fractions among near-ties so ties are decided exactly).
    """
    pair_counts: Counter[tuple[str, str]] = Counter()
    piece_counts: Counter[str] = Counter()
    where: dict[tuple[str, str], set[int]] = {}
    for index, (word, count) in enumerate(zip(words, counts, strict=True)):
        for piece in word:
            piece_counts[piece] += count
        for pair in zip(word, word[1:], strict=False):
            pair_counts[pair] += count
            where.setdefault(pair, set()).add(index)
    known = set(piece_counts)
    new_pieces: list[str] = []
    progress = tqdm(total=num_merges, desc="WordPiece merges", disable=not show_progress)
    while len(new_pieces) < num_merges and pair_counts:
        scores = {p: c / (piece_counts[p[0]] * piece_counts[p[1]]) for p, c in pair_counts.items()}
        top = max(scores.values())
        near = [p for p, s in scores.items() if s >= top * (1 - 1e-9)]
        best = max(near, key=lambda p: (Fraction(pair_counts[p], piece_counts[p[0]] * piece_counts[p[1]]), p))
        merged = best[0] + best[1][len(PREFIX) :]  # "play" + "##ing" → "playing"
        for index in where.pop(best):
            word = words[index]
            new_word = merge_pair(word, best, merged)
            if len(new_word) == len(word):
                continue
            count = counts[index]
            for pair in zip(word, word[1:], strict=False):
                pair_counts[pair] -= count
            for piece in word:
                piece_counts[piece] -= count
            for pair in zip(new_word, new_word[1:], strict=False):
                pair_counts[pair] += count
                where.setdefault(pair, set()).add(index)
            for piece in new_word:
                piece_counts[piece] += count
            words[index] = new_word
        pair_counts = +pair_counts  # drop pairs whose count fell to zero
        if merged not in known:
            known.add(merged)
            new_pieces.append(merged)
            progress.update(1)
    progress.close()
    return new_pieces
