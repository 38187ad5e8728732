"""Language identification by stop words: English text is full of "the", "and", "was", "to".

Function words make up a large share of any English text (about 40 % of the course stories) and almost none
of a text in another language or of junk. Gopher keeps a page only if it has at least two of eight such
words; here the *share* of words that are English stop words is the score, so a threshold can be chosen on a
plot. Words that are also common in Spanish ("a", "no", "me", "he", "son") are left out of the list, so a
Spanish page does not score by accident. A character n-gram model would handle short texts better; for
documents of a hundred words stop words are enough, and they explain themselves.
"""

from __future__ import annotations

import re

ENGLISH_STOP_WORDS = frozenset(
    "the and to of in was is it that with for on at they she his her you we but so had were be this not are all "
    "very went said their them there then from as by an or have has did do what when who would could into up out "
    "just my your our one day i".split()
)

_WORD = re.compile(r"[^\W\d_]+")  # runs of letters (any script)


def english_stop_word_share(text: str) -> float:
    """The fraction of a text's words that are English stop words (0.0 for a text with no words).

    Counted word by word: a list of a long document's words would cost many times the text.
    """
    words = stop = 0
    for match in _WORD.finditer(text.casefold()):
        words += 1
        stop += match.group() in ENGLISH_STOP_WORDS
    return stop / words if words else 0.0


def is_english(text: str, min_share: float = 0.15) -> bool:
    """True when at least ``min_share`` of the words are English stop words."""
    if not 0.0 <= min_share <= 1.0:
        raise ValueError(f"min_share must be in [0, 1], got {min_share!r}")
    return english_stop_word_share(text) >= min_share
