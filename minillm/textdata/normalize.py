"""Normalisation: one spelling per text, so that copies that only *look* different hash the same.

Web text writes the same words in many byte sequences: a non-breaking space for a space, full-width letters
(``Ｈｅｌｌｏ``), ligatures (``ﬁ``), invisible zero-width characters, Windows line ends, runs of spaces. Left
alone they make copies look distinct to an exact hash and waste tokens. :func:`normalize_text` maps them to
one form, and is idempotent (normalising twice changes nothing), which is what a dedup key needs.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

#: Characters that print as nothing: zero-width space/joiners, word joiner, byte-order mark, soft hyphen.
ZERO_WIDTH = frozenset("\u200b\u200c\u200d\u2060\ufeff\u00ad")

_SPACES = re.compile(r"[^\S\n]+")  # any whitespace except the line break itself (NBSP is gone after NFKC)
_NON_SPACE = re.compile(r"\S")
#: A line longer than this is collapsed piece by piece: ``re.sub`` holds a list of every piece it makes, about
#: 12 bytes a character for ordinary prose, which for one long line (a document without line breaks) is the
#: peak of the whole pipeline.
SPACE_CHUNK = 1 << 18


@lru_cache(maxsize=1 << 14)
def _visible(char: str) -> bool:
    """Keep line breaks and tabs; drop zero-width characters and other control/format characters."""
    if char in "\n\t":
        return True
    return char not in ZERO_WIDTH and unicodedata.category(char) not in ("Cc", "Cf")


def normalize_text(text: str) -> str:
    """NFKC, ``\\n`` line ends, no invisible or control characters, single spaces, no blank lines, stripped.

    Why NFKC: compatibility characters (full-width letters, ligatures, NBSP, superscripts) become the plain
    letters they stand for; NFC alone would keep them. Case and punctuation are kept: they carry meaning, and
    near-duplicate detection (:mod:`minillm.textdata.minhash`) ignores them in its own way.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = unicodedata.normalize("NFKC", text)
    invisible = {ord(char): None for char in set(text) if not _visible(char)}  # each distinct character once
    if invisible:  # translate copies the text even when it removes nothing: a copy less of a long document
        text = text.translate(invisible)
    lines = (_collapse_spaces(line) for line in text.split("\n"))
    return "\n".join(line for line in lines if line)


def _collapse_spaces(line: str) -> str:
    """``_SPACES.sub(" ", line).strip()``, in pieces of about :data:`SPACE_CHUNK` characters for a long line.

    Each piece ends where a non-space character starts, so no run of spaces is split between two pieces and
    the result is the same as one ``sub`` over the whole line.
    """
    if len(line) <= SPACE_CHUNK:
        return _SPACES.sub(" ", line).strip()
    pieces, start = [], 0
    while start < len(line):
        after = _NON_SPACE.search(line, start + SPACE_CHUNK)
        end = after.start() if after else len(line)
        pieces.append(_SPACES.sub(" ", line[start:end]))
        start = end
    return "".join(pieces).strip()
