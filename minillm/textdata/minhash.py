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
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import islice

import numpy as np

from minillm.textdata.normalize import normalize_text

#: The modulus of the hash family (a Mersenne prime: 2^31 - 1).
PRIME = (1 << 31) - 1

#: Shingles hashed at once by :meth:`MinHasher.signature_of_ids`: the ``[k, chunk]`` table of hashes is then
#: ``8·k·chunk`` bytes (4 MiB for k = 128) whatever the document's length; all at once it was 1 KiB per
#: shingle (7.3 GiB for a 50 MB document).
SIGNATURE_CHUNK = 4096

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


def shingle_id(shingle: Iterable[str]) -> int:
    """A shingle as a number below :data:`PRIME` (a stable hash: the same in every process, unlike ``hash``)."""
    digest = hashlib.blake2b(" ".join(shingle).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % PRIME


def iter_shingle_ids(text: str, n: int = 5) -> Iterator[int]:
    """The ids of the text's ``n``-word shingles, one per position (repeats included), read word by word.

    The same ids as ``map(shingle_id, shingles(text, n))`` up to repeats and order, which a minimum ignores;
    but neither the word list nor the shingle set is built, so memory does not grow with the document.
    """
    if not isinstance(n, int) or n <= 0:
        raise ValueError(f"shingle size n must be a positive int, got {n!r}")
    window: deque[str] = deque(maxlen=n)
    for match in _WORD.finditer(normalize_text(text).casefold()):
        window.append(match.group())
        if len(window) == n:
            yield shingle_id(window)
    if 0 < len(window) < n:  # fewer than n words in all: the whole text is the one shingle
        yield shingle_id(window)


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
        Ids are hashed :data:`SIGNATURE_CHUNK` at a time and the running minimum kept: the minimum over all
        shingles is the minimum of the chunks' minima, so the signature is the same as hashing them all at once,
        with memory bounded by the chunk.
        """
        ids = iter(ids)
        a, b = self.a[:, None], self.b[:, None]
        best = np.full(self.num_hashes, PRIME, dtype=np.uint64)
        while (x := np.fromiter(islice(ids, SIGNATURE_CHUNK), dtype=np.uint64)).size:
            hashes = a * x[None, :]  # [k, chunk]; a·x + b < 2^62: no overflow. In place: one table, not three
            hashes += b
            np.remainder(hashes, PRIME, out=hashes)
            np.minimum(best, hashes.min(axis=1), out=best)
            del hashes  # freed before the next chunk's table is made: one table at a time
        return best.astype(np.uint32)

    def signature(self, text: str) -> np.ndarray:
        """The MinHash signature of a document's shingles: beyond two copies of the text (normalised, then
        case-folded), memory does not grow with the document (a 1 GB single-line document included)."""
        return self.signature_of_ids(iter_shingle_ids(text, self.shingle_size))


def estimate_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """The fraction of positions where two signatures agree: an unbiased estimate of their Jaccard."""
    if sig_a.shape != sig_b.shape:
        raise ValueError(f"signatures differ in length: {sig_a.shape} vs {sig_b.shape}")
    return float(np.mean(sig_a == sig_b))
