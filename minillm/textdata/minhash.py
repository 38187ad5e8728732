"""MinHash: a short signature whose agreement rate estimates the Jaccard similarity of two documents.

A document becomes a set of *shingles* (runs of ``n`` consecutive words). Two documents are near-duplicates
when their sets overlap a lot: Jaccard ``J(A, B) = |A ∩ B| / |A ∪ B|``. For a random hash function ``h``,
``P[min h(A) = min h(B)] = J(A, B)`` — the smallest hash of the union is equally likely to be any of its
elements, and both minima agree exactly when that element lies in both sets. With ``k`` independent hash
functions the fraction of agreeing minima is an unbiased estimate of ``J`` with standard deviation
``sqrt(J (1 - J) / k)``; the ``k`` minima are the signature, a fixed size whatever the document's length.

The hash functions are ``h_i(x) = (a_i x + b_i) mod p`` with the Mersenne prime ``p = 2³¹ − 1`` (a
universal family: a product of two 31-bit numbers fits in 64 bits, so numpy computes all ``k`` at once).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

import numpy as np

from minillm.textdata.normalize import normalize_text

#: The modulus of the hash family (a Mersenne prime: 2^31 - 1).
PRIME = (1 << 31) - 1

_WORD = re.compile(r"\w+")


def shingle_words(text: str) -> list[str]:
    """The words MinHash compares: normalised, case-folded, punctuation dropped (it should not count)."""
    return _WORD.findall(normalize_text(text).casefold())


def shingles(text: str, n: int = 5) -> set[tuple[str, ...]]:
    """The set of ``n``-word shingles; a document shorter than ``n`` words is one shingle (none if empty)."""
    if not isinstance(n, int) or n <= 0:
        raise ValueError(f"shingle size n must be a positive int, got {n!r}")
    words = shingle_words(text)
    if len(words) < n:
        return {tuple(words)} if words else set()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def shingle_id(shingle: tuple[str, ...]) -> int:
    """A shingle as a number below :data:`PRIME` (a stable hash: the same in every process, unlike ``hash``)."""
    digest = hashlib.blake2b(" ".join(shingle).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % PRIME


def jaccard(a: set, b: set) -> float:
    """Exact Jaccard similarity of two sets (1.0 for two empty sets: nothing tells them apart)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


class MinHasher:
    """``k`` hash functions ``(a_i x + b_i) mod p`` drawn from one seed, and the signatures they make."""

    def __init__(self, num_hashes: int = 128, shingle_size: int = 5, seed: int = 0) -> None:
        if not isinstance(num_hashes, int) or num_hashes <= 0:
            raise ValueError(f"num_hashes must be a positive int, got {num_hashes!r}")
        if not isinstance(shingle_size, int) or shingle_size <= 0:
            raise ValueError(f"shingle_size must be a positive int, got {shingle_size!r}")
        rng = np.random.default_rng(seed)
        self.num_hashes, self.shingle_size = num_hashes, shingle_size
        self.a = rng.integers(1, PRIME, size=num_hashes, dtype=np.uint64)
        self.b = rng.integers(0, PRIME, size=num_hashes, dtype=np.uint64)

    def signature_of_ids(self, ids: Iterable[int]) -> np.ndarray:
        """The signature of a set of shingle ids: for each hash function, the smallest hash (uint32, ``[k]``).

        An empty set gets the all-``PRIME`` signature (larger than any hash), so empty documents match each other.
        """
        x = np.fromiter(ids, dtype=np.uint64)
        if x.size == 0:
            return np.full(self.num_hashes, PRIME, dtype=np.uint32)
        hashes = (self.a[:, None] * x[None, :] + self.b[:, None]) % PRIME  # [k, shingles]: < 2^62, no overflow
        return hashes.min(axis=1).astype(np.uint32)

    def signature(self, text: str) -> np.ndarray:
        """The MinHash signature of a document's shingles."""
        return self.signature_of_ids(shingle_id(s) for s in shingles(text, self.shingle_size))


def estimate_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """The fraction of positions where two signatures agree: an unbiased estimate of their Jaccard."""
    if sig_a.shape != sig_b.shape:
        raise ValueError(f"signatures differ in length: {sig_a.shape} vs {sig_b.shape}")
    return float(np.mean(sig_a == sig_b))
