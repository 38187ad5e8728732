"""Language identification by stop words: English text is full of "the", "and", "was"; Spanish of "el", "la", "que".

Function words make up a large share of any text in a language (about 40 % of a course story's words are English
stop words, about 40 % of a generated Spanish story's are Spanish ones) and almost none of a text in another
language or of junk. Gopher keeps a page only if it has at least two of eight English stop words; here the
*share* of words that are stop words of a language is the score, so a threshold can be chosen on a plot. The two
lists leave out the words both languages use ("a", "no", "me", "he", "son"), so a page does not score for the
wrong language by accident.

A page in another language is not junk: it is training data for that language. :func:`identify_language` names
the language (or None: no language we know, which is what garbage and menus look like), so a pipeline can
*route* each document to its language's corpus instead of throwing it away. A character n-gram model would handle
short texts and more languages better; for documents of a hundred words stop words are enough, and they explain
themselves.
"""

from __future__ import annotations

import re

ENGLISH_STOP_WORDS = frozenset(
    "the and to of in was is it that with for on at they she his her you we but so had were be this not are all "
    "very went said their them there then from as by an or have has did do what when who would could into up out "
    "just my your our one day i".split()
)

SPANISH_STOP_WORDS = frozenset(
    "el la los las de del al y que en un una unos unas por con para se su sus lo como más pero le les ya o este "
    "esta estos estas ese esa eso esto sí porque entre cuando muy sin sobre también hasta hay donde quien desde "
    "todo toda todos nos ni otro otra otros era fue había estaba estaban eran fueron está están".split()
)

#: The languages :func:`identify_language` knows, by ISO 639-1 code.
STOP_WORDS: dict[str, frozenset[str]] = {"en": ENGLISH_STOP_WORDS, "es": SPANISH_STOP_WORDS}

_WORD = re.compile(r"[^\W\d_]+")  # runs of letters (any script)


def stop_word_shares(text: str) -> dict[str, float]:
    """For each known language, the fraction of the text's words that are its stop words (0.0 without words).

    Counted word by word: a list of a long document's words would cost many times the text.
    """
    words, stop = 0, dict.fromkeys(STOP_WORDS, 0)
    for match in _WORD.finditer(text.casefold()):
        words += 1
        for language, stop_words in STOP_WORDS.items():
            stop[language] += match.group() in stop_words
    return {language: n / words if words else 0.0 for language, n in stop.items()}


def english_stop_word_share(text: str) -> float:
    """The fraction of a text's words that are English stop words (0.0 for a text with no words)."""
    return stop_word_shares(text)["en"]


def _check_share(min_share: float) -> None:
    if not 0.0 <= min_share <= 1.0:
        raise ValueError(f"min_share must be in [0, 1], got {min_share!r}")


def is_english(text: str, min_share: float = 0.15) -> bool:
    """True when at least ``min_share`` of the words are English stop words."""
    _check_share(min_share)
    return english_stop_word_share(text) >= min_share


def identify_language(text: str, min_share: float = 0.15) -> str | None:
    """The known language (``"en"``, ``"es"``) whose stop words make the largest share of the text, when that
    share is at least ``min_share``; None when no language reaches it (an unknown language, or junk)."""
    _check_share(min_share)
    shares = stop_word_shares(text)
    best = max(shares, key=shares.get)
    return best if shares[best] >= min_share and shares[best] > 0 else None
