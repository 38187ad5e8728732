"""Exact deduplication: a document is dropped when the hash of its normalised text was seen before.

Why a hash and not the text: the index holds 16 bytes per kept document, however long the document, so a
corpus far larger than memory can be deduplicated in one pass. A 128-bit digest makes an accidental
collision (two different texts, one digest) vanishingly unlikely (about n²/2¹²⁹ for n documents).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from minillm.textdata.normalize import normalize_text


def text_digest(text: str) -> bytes:
    """16-byte BLAKE2b digest of the normalised text: equal for copies that differ only in spelling."""
    return hashlib.blake2b(normalize_text(text).encode("utf-8"), digest_size=16).digest()


class ExactDeduplicator:
    """Remembers the digests of the documents it has kept; :meth:`is_duplicate` adds new ones."""

    def __init__(self) -> None:
        self._seen: set[bytes] = set()

    def __len__(self) -> int:
        return len(self._seen)

    def is_duplicate(self, text: str) -> bool:
        """True when a document with the same normalised text came before; otherwise remember this one."""
        digest = text_digest(text)
        if digest in self._seen:
            return True
        self._seen.add(digest)
        return False


def exact_dedup(documents: Iterable[str]) -> list[str]:
    """The documents whose normalised text has not appeared earlier, in order (first copy kept)."""
    index = ExactDeduplicator()
    return [doc for doc in documents if not index.is_duplicate(doc)]
