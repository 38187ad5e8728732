"""Pre-tokenization: cut text into pieces (words, numbers, punctuation runs, spaces) before BPE.

BPE merges only inside a piece, so a token never straddles a word boundary ("dog." never becomes one
token). The patterns are the GPT-2 regex and a GPT-4-style one. They are written with ``\\p{L}`` (any
letter), ``\\p{N}`` (any number) and ``\\s`` (Unicode ``White_Space``) as in the originals, and translated
here for Python's standard ``re``, which lacks ``\\p{..}``: the classes are built from the running
Python's Unicode database (``unicodedata``), so no third-party regex engine is needed. The same pattern
strings are handed to `tokenizers` on export, which is how the two are checked against each other.

Differences from the published GPT-4 pattern, none of which changes a split: possessive quantifiers
are written as plain ones (the classes they guard cannot backtrack into each other), and the
case-insensitive contractions are spelled with explicit case classes (``[sS]``), because Unicode case
folding would otherwise let ``ſ`` (long s) or ``K`` (Kelvin sign) match.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator, Sequence

#: The GPT-2 split pattern (Radford et al. 2019, `encoder.py`).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

#: A GPT-4-style pattern (cl100k): case-insensitive contractions, digits in groups of at most three,
#: punctuation runs that keep their trailing newlines, and newlines split from other whitespace.
GPT4_PATTERN = (
    r"""'(?:[sdmtSDMT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
)

#: Names accepted wherever a pattern is asked for; ``"none"`` (or ``None``) keeps each text whole.
PATTERNS: dict[str, str | None] = {"gpt2": GPT2_PATTERN, "gpt4": GPT4_PATTERN, "none": None}

# Unicode White_Space (PropList.txt); stable across Unicode versions. Python's own `\s` differs from it
# (it also matches U+001C..U+001F), so the class is spelled out.
_WHITE_SPACE = "\\t\\n\\x0b\\x0c\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"


def resolve_pattern(pattern: str | None) -> str | None:
    """Map a pattern name ("gpt2", "gpt4", "none") to its regex; any other string is used as is."""
    if pattern is None:
        return None
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a name {sorted(PATTERNS)}, a regex string or None, got {pattern!r}")
    return PATTERNS.get(pattern, pattern)


def _ranges(codepoints: Iterable[int]) -> str:
    """A regex class body (without brackets) covering the given sorted code points as ranges."""
    parts: list[str] = []
    start = prev = None
    for cp in codepoints:
        if prev is not None and cp == prev + 1:
            prev = cp
            continue
        if start is not None:
            parts.append(_range_text(start, prev))
        start = prev = cp
    if start is not None:
        parts.append(_range_text(start, prev))
    return "".join(parts)


def _range_text(lo: int, hi: int) -> str:
    return f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}"


_ASTRAL = "\\U00010000-\\U0010ffff"


@functools.lru_cache(maxsize=1)
def _unicode_classes() -> dict[str, tuple[str, str]]:
    """Class bodies for letters (L*) and numbers (N*) from ``unicodedata`` (built once, ~0.3 s),
    each split into its Basic Multilingual Plane part and its astral part (code points ≥ U+10000)."""
    members: dict[str, list[int]] = {"L": [], "N": []}
    category = unicodedata.category
    for cp in range(sys.maxunicode + 1):
        major = category(chr(cp))[0]
        if major in members:
            members[major].append(cp)
    return {
        name: (_ranges(c for c in cps if c < 0x10000), _ranges(c for c in cps if c >= 0x10000))
        for name, cps in members.items()
    }


def _class_regex(negated: bool, raw: str, refs: list[str]) -> str:
    """Python regex for a class ``[raw + refs]`` (or its negation), with ``refs`` naming \\p classes.

    Python's ``re`` checks an astral range list linearly whenever a character misses the BMP bitmap,
    which made every space or comma cost hundreds of comparisons. So the astral part sits behind a
    cheap guard, ``(?=[astral])``, and BMP characters never reach it (about 4x faster).
    """
    classes = _unicode_classes()
    bmp = raw + "".join(classes[r][0] for r in refs)
    astral = "".join(classes[r][1] for r in refs)
    if not astral:
        return f"[{'^' if negated else ''}{bmp}]"
    if negated:
        return f"(?:[^{bmp}{_ASTRAL}]|(?=[{_ASTRAL}])[^{astral}])"
    return f"(?:[{bmp}]|(?=[{_ASTRAL}])[{astral}])"


def to_python_regex(pattern: str) -> str:
    r"""Translate ``\p{L}``, ``\p{N}``, ``\s`` and ``\S`` into classes Python's ``re`` understands."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith((r"\p{L}", r"\p{N}"), i):
            out.append(_class_regex(False, "", [pattern[i + 3]]))
            i += 5
        elif pattern.startswith(r"\s", i):
            out.append(f"[{_WHITE_SPACE}]")
            i += 2
        elif pattern.startswith(r"\S", i):
            out.append(f"[^{_WHITE_SPACE}]")
            i += 2
        elif pattern.startswith(r"\p", i):
            raise ValueError(f"unsupported escape at {i} in pattern {pattern!r} (only \\p{{L}} and \\p{{N}})")
        elif pattern[i] == "\\":
            out.append(pattern[i : i + 2])
            i += 2
        elif pattern[i] == "[":
            i = _translate_class(pattern, i, out)
        else:
            out.append(pattern[i])
            i += 1
    return "".join(out)


def _translate_class(pattern: str, i: int, out: list[str]) -> int:
    """Translate the bracket class starting at ``pattern[i] == "["``; returns the index after it."""
    negated = pattern.startswith("[^", i)
    j = i + (2 if negated else 1)
    raw: list[str] = []
    refs: list[str] = []
    while j < len(pattern) and pattern[j] != "]":
        if pattern.startswith((r"\p{L}", r"\p{N}"), j):
            refs.append(pattern[j + 3])
            j += 5
        elif pattern.startswith(r"\s", j):
            raw.append(_WHITE_SPACE)
            j += 2
        elif pattern.startswith((r"\S", r"\p"), j):
            raise ValueError(f"unsupported escape inside a class at {j} in pattern {pattern!r}")
        elif pattern[j] == "\\":
            raw.append(pattern[j : j + 2])
            j += 2
        else:
            raw.append(pattern[j])
            j += 1
    if j >= len(pattern):
        raise ValueError(f"unterminated character class at {i} in pattern {pattern!r}")
    out.append(_class_regex(negated, "".join(raw), refs))
    return j + 1


@functools.lru_cache(maxsize=16)
def compile_pattern(pattern: str | None) -> re.Pattern[str] | None:
    """The compiled Python regex for a pattern name or string (cached); ``None`` for no splitting."""
    resolved = resolve_pattern(pattern)
    if resolved is None:
        return None
    try:
        return re.compile(to_python_regex(resolved))
    except re.error as err:
        raise ValueError(f"invalid pre-tokenization pattern {pattern!r}: {err}") from err


def pretokenize(text: str, pattern: str | None = "gpt2") -> list[str]:
    """Split ``text`` into pre-tokens; their concatenation is ``text`` again (for the built-in patterns)."""
    regex = compile_pattern(pattern)
    if regex is None:
        return [text] if text else []
    return regex.findall(text)


def special_regex(special_tokens: Iterable[str]) -> re.Pattern[str] | None:
    """A regex matching any special token, the longest first where several start at the same place."""
    ordered = sorted(set(special_tokens), key=lambda s: (-len(s), s))
    if not ordered:
        return None
    return re.compile("|".join(re.escape(s) for s in ordered))


def split_on_specials(text: str, specials: re.Pattern[str] | None) -> Iterator[tuple[str, bool]]:
    """Yield ``(segment, is_special)`` in order; ordinary segments are never empty."""
    if specials is None:
        if text:
            yield text, False
        return
    pos = 0
    for match in specials.finditer(text):
        if match.start() > pos:
            yield text[pos : match.start()], False
        yield match.group(), True
        pos = match.end()
    if pos < len(text):
        yield text[pos:], False


# Two kinds of cut leave every pre-token of the built-in patterns intact:
# * between "letter space" and "letter" (e.g. "cat| dog"): the letter run before it ends at the space, and
#   " dog" starts a piece either way;
# * after a newline that has a non-space on both sides ("end.\n|Next"): that newline ends a piece either
#   way (alone, or glued to punctuation before it by the GPT-4 pattern), and nothing before it looks past it.
# Python's \s is a superset of Unicode White_Space, so "[^\s]" is the cautious choice here.
_SAFE_CUT = re.compile(r"(?<=[A-Za-z])(?= [A-Za-z])|(?<=[^\s]\n)(?=[^\s])")


def stream_chunks(
    texts: Iterable[str], chunk_chars: int = 1 << 20, special_tokens: Sequence[str] = ()
) -> Iterator[str]:
    """Regroup a stream of strings into chunks of about ``chunk_chars`` cut only where splitting is exact.

    Pre-tokenizing the chunks one by one gives the same pieces as pre-tokenizing the whole stream, so a
    file can be processed with memory bounded by the chunk size rather than the file size. A cut is
    placed only between an ASCII letter and " <ASCII letter>", or after a newline with non-space
    characters on both sides, and never inside a special token. If no such place turns up, the buffer
    grows until one does or the stream ends (each part of it is searched once).
    """
    if chunk_chars < 1:
        raise ValueError(f"chunk_chars must be positive, got {chunk_chars}")
    longest_special = max((len(s) for s in special_tokens), default=0)
    specials = special_regex(special_tokens)
    parts: list[str] = []
    size = 0
    searched = 0  # the buffer before this index holds no usable cut
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"expected an iterable of str, got an item of type {type(text).__name__}")
        parts.append(text)
        size += len(text)
        if size < chunk_chars:
            continue
        buffer = "".join(parts)
        cut = _find_cut(buffer, specials, longest_special, searched)
        if cut is None:
            parts, searched = [buffer], max(0, len(buffer) - longest_special - 2)
            continue
        yield buffer[:cut]
        rest = buffer[cut:]
        parts, size, searched = [rest], len(rest), 0
    tail = "".join(parts)
    if tail:
        yield tail


def _find_cut(buffer: str, specials: re.Pattern[str] | None, longest_special: int, lowest: int = 0) -> int | None:
    """The last safe cut position in ``buffer[lowest:]`` (see :func:`stream_chunks`), or None.

    Cuts closer to the end than the longest special token are not taken: a special token could be
    arriving there only in part.
    """
    end = len(buffer) - longest_special
    if end <= lowest:
        return None
    while True:
        # search backwards in windows so a cut near the end is found cheaply
        window_start = max(lowest, end - 4096)
        cuts = [m.start() for m in _SAFE_CUT.finditer(buffer, window_start, end)]
        for cut in reversed(cuts):
            if cut == 0 or not _inside_special(buffer, cut, specials, longest_special):
                return cut if cut > 0 else None
        if window_start == lowest:
            return None
        end = window_start + 2


def _inside_special(text: str, cut: int, specials: re.Pattern[str] | None, longest: int) -> bool:
    if specials is None:
        return False
    lo = max(0, cut - longest + 1)
    for match in specials.finditer(text, lo, min(len(text), cut + longest)):
        if match.start() < cut < match.end():
            return True
    return False
