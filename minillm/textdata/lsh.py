"""Locality-sensitive hashing: find the near-duplicate pairs without comparing every pair.

Comparing all ``n²/2`` signature pairs is too slow for a corpus. LSH cuts each signature into ``b`` *bands*
of ``r`` rows and puts the document in one bucket per band, keyed by that band's ``r`` values. Two documents
become *candidates* when any band matches exactly. A band matches with probability ``s^r`` (``s`` their
Jaccard), so they become candidates with probability ``1 - (1 - s^r)^b``: an S-curve that rises steeply near
``(1/b)^(1/r)``. Pairs well above that threshold are almost always found, pairs well below almost never; the
candidates are then checked on the full signature.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from minillm.textdata.minhash import MinHasher, estimate_jaccard


def candidate_probability(s: float | np.ndarray, bands: int, rows: int) -> float | np.ndarray:
    """``1 - (1 - s^r)^b``: the chance that a pair with Jaccard ``s`` shares at least one band."""
    return 1.0 - (1.0 - np.asarray(s, dtype=np.float64) ** rows) ** bands


def lsh_threshold(bands: int, rows: int) -> float:
    """``(1/b)^(1/r)``: about where the S-curve is steepest; a pair there is found with probability ≈ 1 - 1/e."""
    return (1.0 / bands) ** (1.0 / rows)


class LSHIndex:
    """Buckets of document ids, one table per band; the key of a band is its ``rows`` values as bytes."""

    def __init__(self, bands: int, rows: int) -> None:
        for name, value in (("bands", bands), ("rows", rows)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.bands, self.rows = bands, rows
        self._tables: list[dict[bytes, list[int]]] = [defaultdict(list) for _ in range(bands)]

    def _keys(self, signature: np.ndarray) -> list[bytes]:
        if signature.shape != (self.bands * self.rows,):
            raise ValueError(f"signature of shape {signature.shape}, expected ({self.bands * self.rows},) = b·r")
        return [signature[i * self.rows : (i + 1) * self.rows].tobytes() for i in range(self.bands)]

    def candidates(self, signature: np.ndarray) -> set[int]:
        """Ids of the indexed documents that share at least one band with ``signature``."""
        found: set[int] = set()
        for table, key in zip(self._tables, self._keys(signature), strict=True):
            found.update(table.get(key, ()))
        return found

    def add(self, doc_id: int, signature: np.ndarray) -> None:
        """Put a document in its bucket of every band."""
        for table, key in zip(self._tables, self._keys(signature), strict=True):
            table[key].append(doc_id)


def candidate_pairs(signatures: list[np.ndarray], bands: int, rows: int) -> set[tuple[int, int]]:
    """All pairs ``(i, j)``, ``i < j``, that share a band: what LSH hands on to the exact check."""
    index = LSHIndex(bands, rows)
    pairs: set[tuple[int, int]] = set()
    for j, signature in enumerate(signatures):
        pairs.update((i, j) for i in index.candidates(signature))
        index.add(j, signature)
    return pairs


class NearDuplicateIndex:
    """Streaming near-dedup: a document is a near-duplicate when an earlier *kept* one is an LSH candidate
    whose signatures agree on at least ``threshold`` of their positions (estimated Jaccard).

    Memory: one signature (``4·b·r`` bytes) and ``b`` bucket entries per kept document.
    """

    def __init__(
        self,
        bands: int = 32,
        rows: int = 4,
        threshold: float = 0.5,
        shingle_size: int = 5,
        seed: int = 0,
    ) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
        self.lsh = LSHIndex(bands, rows)  # first: bands and rows are checked by name, not as their product
        self.hasher = MinHasher(bands * rows, shingle_size, seed)
        self.threshold = threshold
        self._signatures: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self._signatures)

    def match(self, text: str) -> int | None:
        """The id of the first kept document this one near-duplicates; None (and keep it) when there is none."""
        signature = self.hasher.signature(text)
        for doc_id in sorted(self.lsh.candidates(signature)):
            if estimate_jaccard(signature, self._signatures[doc_id]) >= self.threshold:
                return doc_id
        self.lsh.add(len(self._signatures), signature)
        self._signatures.append(signature)
        return None

    def is_duplicate(self, text: str) -> bool:
        """True when ``text`` near-duplicates a kept document; otherwise it is kept."""
        return self.match(text) is not None
