"""Pre-tokenization: cut text into pieces (words, numbers, punctuation runs, spaces) before BPE.

BPE merges only inside a piece, so a token never straddles a word boundary ("dog." never becomes one
token). The patterns are the GPT-2 regex and a GPT-4-style one, written with ``\\p{L}`` (any letter),
``\\p{N}`` (any number) and ``\\s`` (Unicode ``White_Space``) as in the originals. Python's standard ``re``
has no ``\\p{..}`` classes (and its ``\\s`` also matches U+001C..U+001F), so they are compiled with the
`regex` package, as GPT-2's own code, tiktoken and minbpe do. The same pattern strings are handed to
`tokenizers` on export, which is how the two engines are checked against each other.

Which code points are letters or numbers comes from the Unicode tables built into `regex` (Unicode 17 in
its 2026 releases); `tokenizers`' Oniguruma has its own, older ones. They agree on every code point that
both versions assign; one assigned only in the newer tables (a new script, say) can split differently.

Differences from the published GPT-4 pattern, none of which changes a split: possessive quantifiers
are written as plain ones (the classes they guard cannot backtrack into each other), and the
case-insensitive contractions are spelled with explicit case classes (``[sS]``), because Unicode case
folding would otherwise let ``ſ`` (long s) or ``K`` (Kelvin sign) match.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterable, Iterator, Sequence

import regex

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

#: Text a custom pattern must cut into pieces that join back to it exactly: letters in several scripts,
#: digits, every kind of ASCII punctuation, runs of spaces, tabs and newlines (``\r\n`` too), unusual
#: white space and control characters, accents as combining marks, and emoji (with a skin-tone modifier
#: and a zero-width joiner). A pattern that skips any of these would silently drop text from every encode.
#: Long runs of one character end it, so that the classic catastrophic regexes (``(a|a)+$``) show their
#: exponential time here, within the check's time limit, rather than on a learner's text.
PATTERN_PROBE = (
    "Hello, World! It's 2024: 3.14159 and 1,000,000 -- don't YOU'LL we've.\n\n"
    "  indented\tand\t\ttabs   then   spaces \r\nCRLF\r\n"
    "punct !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ \x00\x1c\x7f\u00a0nbsp\u2028\u200b "
    "café naïve e\u0301 Ωμέγα Привет 東京 日本語 ١٢٣ 😀👍🏽👩\u200d💻 end  \n"
    + "a" * 32
    + "!"
    + " " * 32
    + "x"
    + "1" * 32
    + "\n"
)

_PROBE_TIMEOUT_S = 1.0  # a sound pattern splits the probes in milliseconds; catastrophic backtracking does not
_RUN = 256  # characters in each run probe: a long run of one character is where backtracking explodes


def pattern_name(pattern: str | None) -> str | None:
    """The built-in pattern's name ("gpt2", "gpt4", "none") of a name, its regex or None; None for anything else."""
    if pattern is None:
        return "none"
    for name, built_in in PATTERNS.items():
        if pattern in (name, built_in):
            return name
    return None


def check_pattern(pattern: str | None, allow_custom_pattern: bool = False) -> str | None:
    """Validate a pre-tokenization pattern and return its canonical form: a built-in pattern's name, or the regex.

    A pattern is code that runs on every text encoded, so one read from a file is not trusted: only the
    built-in patterns ("gpt2", "gpt4", "none", or their exact regexes) are accepted unless the caller passes
    ``allow_custom_pattern=True``. Even then the regex must compile, must not repeat a group that holds a
    quantifier or an alternation (:func:`unsafe_repetition`: ``(a+)+``, ``(a|aa)+``), must finish quickly on
    :data:`PATTERN_PROBE` and on long runs of each character it names, and must cut :data:`PATTERN_PROBE` into
    pieces that join back to it exactly: a regex such as ``\\w+`` matches only some characters and would
    silently drop the rest (``"hello, world!"`` decoding as ``"helloworld"``).
    """
    name = pattern_name(pattern)
    if name is not None:
        return name
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be one of {sorted(PATTERNS)}, a regex string or None, got {pattern!r}")
    if not allow_custom_pattern:
        raise ValueError(
            f"pre-tokenization pattern {_short(pattern)} is not one of the built-in patterns {sorted(PATTERNS)}; "
            "a custom regex runs on every text you encode (it could be very slow, or drop characters), so use "
            "a built-in one, or pass allow_custom_pattern=True if you wrote this pattern yourself"
        )
    _check_custom_pattern(pattern)
    return pattern


@functools.lru_cache(maxsize=16)
def _check_custom_pattern(pattern: str) -> None:
    """Compile ``pattern``, refuse nested repetition, time it on probe texts and check that it splits
    :data:`PATTERN_PROBE` losslessly (cached: it passed)."""
    compiled = compile_pattern(pattern)
    problem = unsafe_repetition(pattern)
    if problem is not None:
        raise ValueError(
            f"pre-tokenization pattern {_short(pattern)} {problem}: such a pattern can match one text in "
            "exponentially many ways, and a backtracking regex tries them all before it gives up (catastrophic "
            "backtracking: seconds to hours on a few dozen characters); repeat single characters or classes "
            "instead ('(?:a|b)+' → '[ab]+'), make the repetition possessive ('++') or the group atomic "
            "('(?>...)'), or use a built-in pattern"
        )
    deadline = time.monotonic() + _PROBE_TIMEOUT_S
    try:
        pieces = compiled.findall(PATTERN_PROBE, timeout=_PROBE_TIMEOUT_S)
        for probe in _run_probes(pattern):
            compiled.findall(probe, timeout=max(deadline - time.monotonic(), 1e-3))
    except TimeoutError as err:
        raise ValueError(
            f"pre-tokenization pattern {_short(pattern)} took over {_PROBE_TIMEOUT_S:g} s on probe texts of a "
            f"few hundred characters (catastrophic backtracking); simplify it or use a built-in pattern"
        ) from err
    if not all(isinstance(piece, str) for piece in pieces):
        raise ValueError(
            f"pre-tokenization pattern {_short(pattern)} has more than one capturing group, so its matches are "
            "not the pieces of the text; use non-capturing groups (?:...)"
        )
    joined = "".join(pieces)
    if joined != PATTERN_PROBE:
        dropped = _first_difference(joined, PATTERN_PROBE)
        raise ValueError(
            f"pre-tokenization pattern {_short(pattern)} does not cover every character: its pieces of a probe "
            f"text do not join back to it ({dropped}), so encoding would silently drop text; add an "
            r"alternative that matches everything else (e.g. end with '|\s+|[^\s]') or use a built-in pattern"
        )


def _run_probes(pattern: str) -> Iterator[str]:
    """Runs of :data:`_RUN` copies of each character the pattern spells (and of a letter, digit, space and
    newline), each followed by a character that ends it: the texts on which backtracking is slowest."""
    for char in sorted(set(pattern) | set("a1 \n")):
        yield char * _RUN + "\x00"


_QUANTIFIER = regex.compile(r"[*+?]|\{(\d*)(,(\d*))?\}")
_ESCAPE_WITH_BRACES = "pPNxu"  # \p{L}, \N{name}, \x{41}, ...
_INLINE_FLAGS = regex.compile(r"\(\?([a-zA-Z^-]*)([:)])")  # (?i) for the rest, or (?i:...) for a group


def unsafe_repetition(pattern: str) -> str | None:
    """Why ``pattern`` may backtrack catastrophically, or None: a group repeated (``+``, ``*``, ``{n,}``, ``{m,n}``
    with n > 1) whose body holds a quantifier or an alternation (``(a+)+``, ``(a|aa)+``, ``(?:(?:q|q)+)+r``),
    a repeated backreference, a recursive call, or verbose mode (not parsed here).

    Such a group can split a run of text among its repetitions in exponentially many ways. A pattern whose
    quantifiers all apply to a single character, class or escape (GPT-2's ``' ?\\p{L}+'``, GPT-4's
    ``\\p{N}{1,3}``) cannot: its work is polynomial in the text, and the timed run probes bound that. The rule
    reads the pattern's syntax only, so it also refuses some safe groups (``(?:ab|cd)+``); possessive
    repetition (``(...)++``) and atomic groups (``(?>...)``) never backtrack into the group and are allowed.
    """
    # each open group: [position, holds a quantifier or "|", atomic]; the bottom entry is the whole pattern
    stack: list[list] = [[0, False, False]]
    last: tuple[str, int, bool] | None = None  # the atom a quantifier would apply to: kind, position, risky
    i = 0
    while i < len(pattern):
        char, start = pattern[i], i
        if char == "\\":
            nxt = pattern[i + 1 : i + 2]
            if nxt in _ESCAPE_WITH_BRACES and pattern[i + 2 : i + 3] == "{":
                i = pattern.find("}", i) + 1 or len(pattern)
            elif nxt in ("g", "k") and pattern[i + 2 : i + 3] in ("<", "{"):
                i = pattern.find(">" if pattern[i + 2] == "<" else "}", i) + 1 or len(pattern)
                last = ("backreference", start, False)
                continue
            else:
                i += 2
            last = ("backreference", start, False) if nxt[:1].isdigit() and nxt != "0" else ("atom", start, False)
            continue
        if char == "[":
            i = _class_end(pattern, i)
            last = ("atom", start, False)
            continue
        if char == "(":
            head = pattern[i : i + 4]
            if head.startswith("(?#"):
                i = pattern.find(")", i) + 1 or len(pattern)
                continue
            if regex.match(r"\(\?(?:R|[+-]?\d+|&|P>)", pattern[i:]):
                return f"calls a group recursively (at position {i}), which can nest repetition"
            flags = _INLINE_FLAGS.match(pattern, i)
            if flags and "x" in flags.group(1):
                return "turns on verbose mode (?x), which this check does not read; write the pattern without it"
            if flags and flags.group(2) == ")":  # (?i) sets flags for the rest: no group
                i = flags.end()
                continue
            if head.startswith("(?P="):
                i = pattern.find(")", i) + 1 or len(pattern)
                last = ("backreference", start, False)
                continue
            stack.append([start, False, head.startswith("(?>")])
            i += 1
            last = None
            continue
        if char == ")" and len(stack) > 1:
            begin, risky, atomic = stack.pop()
            stack[-1][1] |= risky
            last = ("group", begin, risky and not atomic)
            i += 1
            continue
        if char == "|":
            stack[-1][1] = True
            last = None
            i += 1
            continue
        quantifier = _QUANTIFIER.match(pattern, i)
        if quantifier and quantifier.group() != "{}" and last is not None:
            i = quantifier.end()
            possessive = pattern[i : i + 1] == "+"
            if pattern[i : i + 1] in ("+", "?"):
                i += 1
            stack[-1][1] = True
            if _repeats(quantifier) and not possessive:
                kind, at, risky = last
                if kind == "backreference":
                    return f"repeats a backreference ({pattern[at:i]!r} at position {at})"
                if kind == "group" and risky:
                    what = f"{_short(pattern[at:i], 40)} at position {at}"
                    return f"repeats a group that holds a quantifier or an alternation ({what})"
            last = None
            continue
        last = ("atom", start, False)
        i += 1
    return None


def _repeats(quantifier: regex.Match[str]) -> bool:
    """Whether a quantifier allows more than one repetition (``?``, ``{1}`` and ``{0,1}`` do not)."""
    text = quantifier.group()
    if text in ("*", "+"):
        return True
    if text == "?":
        return False
    low, comma, high = quantifier.group(1), quantifier.group(2), quantifier.group(3)
    if comma is None:
        return int(low or 0) > 1
    return not high or int(high) > 1


def _class_end(pattern: str, i: int) -> int:
    """The position after the character class that starts at ``pattern[i] == "["``."""
    j = i + 1
    if pattern[j : j + 1] == "^":
        j += 1
    if pattern[j : j + 1] == "]":  # a "]" first is a literal
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        if pattern[j] == "\\":
            j += 1
        elif pattern.startswith("[:", j):  # a POSIX class such as [:alpha:]
            end = pattern.find(":]", j + 2)
            j = end + 1 if end >= 0 else j
        j += 1
    return j + 1


def _first_difference(joined: str, probe: str) -> str:
    """Where the pieces first part from the probe text, in words."""
    at = next((i for i, (a, b) in enumerate(zip(joined, probe, strict=False)) if a != b), len(joined))
    if at >= len(probe):
        return "the pieces are longer than the text"
    return f"the first character lost or changed is {probe[at]!r} at position {at}"


def _short(pattern: str, limit: int = 60) -> str:
    return repr(pattern) if len(pattern) <= limit else repr(pattern[:limit]) + "..."


def resolve_pattern(pattern: str | None) -> str | None:
    """Map a pattern name ("gpt2", "gpt4", "none") to its regex; any other string is returned as is.

    This only translates names: validate untrusted patterns with :func:`check_pattern` first.
    """
    if pattern is None:
        return None
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a name {sorted(PATTERNS)}, a regex string or None, got {pattern!r}")
    return PATTERNS.get(pattern, pattern)


@functools.lru_cache(maxsize=16)
def compile_pattern(pattern: str | None) -> regex.Pattern[str] | None:
    """The compiled regex for a pattern name or string (cached); ``None`` for no splitting."""
    resolved = resolve_pattern(pattern)
    if resolved is None:
        return None
    try:
        return regex.compile(resolved)
    except regex.error as err:
        raise ValueError(f"invalid pre-tokenization pattern {pattern!r}: {err}") from err


def pretokenize(text: str, pattern: str | None = "gpt2", allow_custom_pattern: bool = False) -> list[str]:
    """Split ``text`` into pre-tokens; their concatenation is ``text`` again.

    ``pattern`` names a built-in pattern; a custom regex needs ``allow_custom_pattern=True`` and is checked to
    cover every character first (see :func:`check_pattern`).
    """
    compiled = compile_pattern(check_pattern(pattern, allow_custom_pattern))
    if compiled is None:
        return [text] if text else []
    return compiled.findall(text)


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
