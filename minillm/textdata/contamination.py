"""Train/test contamination: how much of a test set already appears, n-gram for n-gram, in the training text.

A benchmark is worthless for a model that saw its answers in training. GPT-3's paper (Brown et al. 2020,
appendix C) called a test example *dirty* when it shares any n-gram (lower-cased words, punctuation dropped;
n = 13 for most benchmarks, fewer for very short examples) with the training data. :class:`NgramIndex` holds
the training n-grams as sorted 64-bit hashes (8 bytes each, however long the n-gram), and :func:`contamination`
scores each test document: the fraction of its n-grams found in training, and whether any was.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from minillm.textdata.minhash import shingle_words

_BASE = np.uint64(0x100000001B3)  # an odd multiplier (FNV's prime): the hash below mixes every word's position


@lru_cache(maxsize=1 << 16)
def _word_hash(word: str) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")


def _ngram_hashes(text: str, n: int) -> np.ndarray:
    """64-bit hashes of the text's n-grams: ``sum_i h(word_i) · B^(n-1-i) mod 2^64``, all n-grams at once.

    Why not hash each n-gram's string: this is one vectorised pass per position instead of a Python call
    per n-gram (~10× faster), and two different n-grams collide with probability about 2^-64.
    """
    words = shingle_words(text)
    if len(words) < n:
        return np.zeros(0, dtype=np.uint64)
    w = np.fromiter((_word_hash(word) for word in words), dtype=np.uint64, count=len(words))
    count = len(words) - n + 1
    hashes = np.zeros(count, dtype=np.uint64)
    with np.errstate(over="ignore"):  # arithmetic modulo 2^64 is the point
        for i in range(n):
            hashes = hashes * _BASE + w[i : i + count]
    return hashes


class NgramIndex:
    """The set of a training text's ``n``-grams, as a sorted array of 64-bit hashes (a set costs ~10× more)."""

    def __init__(self, documents: Iterable[str], n: int = 13) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:  # n = 0 matched everything: "100 %" dirty
            raise ValueError(f"n-gram length n must be a positive int, got {n!r}")
        self.n = n
        hashes = np.concatenate([np.zeros(0, dtype=np.uint64), *(_ngram_hashes(doc, n) for doc in documents)])
        hashes.sort()  # then drop repeats; np.unique would do the same several times slower here
        self.hashes = hashes[np.concatenate([[True], hashes[1:] != hashes[:-1]])] if len(hashes) else hashes

    def __len__(self) -> int:
        return len(self.hashes)

    def found(self, text: str) -> np.ndarray:
        """For each of ``text``'s n-grams (in order), whether the training text holds it (a bool array)."""
        query = _ngram_hashes(text, self.n)
        if not len(self.hashes):
            return np.zeros(len(query), dtype=bool)
        at = np.searchsorted(self.hashes, query).clip(max=len(self.hashes) - 1)
        return self.hashes[at] == query


@dataclass(frozen=True)
class Contamination:
    """One test document against the training index."""

    ngrams: int  # how many n-grams the document has
    overlap: int  # how many of them occur in the training text
    dirty: bool  # GPT-3's rule: at least one does

    @property
    def fraction(self) -> float:
        return self.overlap / self.ngrams if self.ngrams else 0.0


def contamination(index: NgramIndex, test_documents: Iterable[str]) -> list[Contamination]:
    """Score every test document against ``index``."""
    out = []
    for doc in test_documents:
        found = index.found(doc)
        out.append(Contamination(len(found), int(found.sum()), bool(found.any())))
    return out
