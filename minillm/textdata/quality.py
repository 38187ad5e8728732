"""Quality filters: cheap rules, in the spirit of Gopher's and C4's, that drop text a model should not learn.

Two levels, as C4 does it: first *lines* that are boilerplate (cookie banners, newsletter prompts, navigation
menus, "all rights reserved") are removed from a page, then the *document* is judged on what is left —
too short, too few real words, words too short or too long (symbols, mash), too many repeated lines, too much
markup. Each rule is one number against one threshold, so a learner can see which rule fired and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Phrases that mark a line as boilerplate (lower case). "cookies" alone would not do: children in the course
#: stories bake cookies, and a line rule that matched them would delete whole stories.
BOILERPLATE_PHRASES: tuple[str, ...] = (
    "cookie policy",
    "use cookies",
    "uses cookies",
    "accept all cookies",
    "cookie settings",
    "subscribe",
    "newsletter",
    "sign up",
    "log in",
    "all rights reserved",
    "privacy policy",
    "terms of use",
    "javascript",
    "click here",
    "share on",
    "advertisement",
)

#: Characters that ordinary prose hardly uses but markup, code and junk do.
MARKUP_CHARS = frozenset("<>{}[]=&|#@$%^*_~/\\")


@dataclass(frozen=True)
class QualityConfig:
    """The thresholds of :func:`quality_problems` (defaults close to Gopher's where it has one)."""

    min_words: int = 20  # Gopher: 50; the course stories are short (73-150 words), junk pages shorter still
    max_words: int = 100_000
    min_alpha_word_fraction: float = 0.8  # Gopher: 80 % of words contain a letter
    min_mean_word_length: float = 3.0  # Gopher: mean word length between 3 and 10 characters
    max_mean_word_length: float = 10.0
    max_duplicate_line_fraction: float = 0.3  # Gopher: at most 30 % of lines repeat an earlier line
    max_markup_fraction: float = 0.02  # of the non-space characters
    boilerplate_phrases: tuple[str, ...] = BOILERPLATE_PHRASES
    min_menu_separators: int = 3  # a line with this many "|" or "·" is a navigation menu


def is_boilerplate_line(line: str, config: QualityConfig = QualityConfig()) -> bool:
    """A line that names a boilerplate phrase or looks like a menu (``Home | About | Contact``)."""
    lower = line.casefold()
    if any(phrase in lower for phrase in config.boilerplate_phrases):
        return True
    return line.count("|") + line.count("·") >= config.min_menu_separators


def strip_boilerplate_lines(text: str, config: QualityConfig = QualityConfig()) -> str:
    """The text without its boilerplate lines (C4's line-level rule); the rest is kept as it was."""
    return "\n".join(line for line in text.split("\n") if not is_boilerplate_line(line, config))


_WORD = re.compile(r"\S+")  # what str.split() returns: re's \s is str.isspace()
_LINE = re.compile(r"[^\n]+")


def quality_stats(text: str) -> dict[str, float]:
    """The numbers the rules look at: words, alphabetic-word fraction, mean word length, repeated lines, markup.

    Counted word by word and line by line rather than from lists of them: a list of a long document's words
    or characters costs 8 bytes a pointer plus an object each, many times the text itself.
    """
    words = alpha_words = word_chars = 0  # word_chars: the non-space characters (words are their maximal runs)
    for match in _WORD.finditer(text):
        word = match.group()
        words += 1
        word_chars += len(word)
        alpha_words += any(c.isalpha() for c in word)
    lines, distinct = 0, set()
    for match in _LINE.finditer(text):
        line = match.group().strip()
        if line:
            lines += 1
            distinct.add(line)
    markup = sum(text.count(c) for c in MARKUP_CHARS)
    return {
        "words": words,
        "alpha_word_fraction": alpha_words / words if words else 0.0,
        "mean_word_length": word_chars / words if words else 0.0,
        "duplicate_line_fraction": 1.0 - len(distinct) / lines if lines else 0.0,
        "markup_fraction": markup / word_chars if word_chars else 0.0,
    }


def quality_problems(text: str, config: QualityConfig = QualityConfig()) -> list[str]:
    """The names of the rules ``text`` breaks (empty: it passes). Judge the text after boilerplate lines go."""
    s = quality_stats(text)
    checks = {
        "too_short": s["words"] < config.min_words,
        "too_long": s["words"] > config.max_words,
        "few_alphabetic_words": s["alpha_word_fraction"] < config.min_alpha_word_fraction,
        "odd_word_length": not config.min_mean_word_length <= s["mean_word_length"] <= config.max_mean_word_length,
        "repeated_lines": s["duplicate_line_fraction"] > config.max_duplicate_line_fraction,
        "markup": s["markup_fraction"] > config.max_markup_fraction,
    }
    return [name for name, failed in checks.items() if failed]


def quality_filter(text: str, config: QualityConfig = QualityConfig()) -> tuple[str | None, list[str]]:
    """``(cleaned text, [])`` when the page passes after its boilerplate lines go, else ``(None, problems)``."""
    cleaned = strip_boilerplate_lines(text, config)
    problems = quality_problems(cleaned, config)
    return (None, problems) if problems else (cleaned, [])
