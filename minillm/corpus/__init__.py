"""The pretraining corpus: simple English stories generated from a small grammar (the TinyStories idea).

A story has a hero (same name and pronoun throughout), a friend, a trip to a place, an object one of
them finds and later uses, a small plot (a problem, sharing, a lost owner, a gift, a noise at night)
and a feeling at the end. The grammar is regular enough for a ~1 M-parameter model to learn in minutes
and varied enough (hundreds of words, many frames) that it cannot simply recite.

    >>> import random
    >>> from minillm import corpus
    >>> story = corpus.generate_story(random.Random(0), hero="Lily", obj="kite")
    >>> "Lily" in story.text and "kite" in story.text
    True
"""

from __future__ import annotations

import random
import re
from functools import lru_cache

from minillm.corpus import frames, lexicon, objects, places
from minillm.corpus.story import MAX_WORDS, MIN_WORDS, Story, article, generate_story, words

__all__ = [
    "MAX_WORDS",
    "MIN_WORDS",
    "Story",
    "article",
    "generate_stories",
    "generate_story",
    "make_splits",
    "vocabulary",
    "words",
]


def generate_stories(n: int, seed: int, **story_kwargs) -> list[Story]:
    """``n`` distinct stories from one seeded generator (a repeated text is drawn again)."""
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    rng = random.Random(f"stories-{seed}")
    stories: list[Story] = []
    seen: set[str] = set()  # membership only; the output order comes from the list
    while len(stories) < n:
        story = generate_story(rng, **story_kwargs)
        if story.text not in seen:
            seen.add(story.text)
            stories.append(story)
    return stories


def make_splits(n: int, seed: int, val_fraction: float = 0.05) -> tuple[list[str], list[str]]:
    """Train and validation story texts: ``n`` distinct stories, the last ``val_fraction`` held out."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction!r}")
    texts = [story.text for story in generate_stories(n, seed)]
    n_val = max(1, round(n * val_fraction))
    return texts[: n - n_val], texts[n - n_val :]


def _strings(value: object) -> list[str]:
    """All strings inside nested tuples, lists and dicts (dict keys included), in written order."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in _strings(key) + _strings(item)]
    if isinstance(value, (tuple, list)):
        return [s for item in value for s in _strings(item)]
    return []


@lru_cache(maxsize=1)
def vocabulary() -> frozenset[str]:
    """Every lowercase word the grammar can produce: the "course vocabulary" the gold scorer checks."""
    modules = (lexicon, objects, places, frames)
    tables = [getattr(module, name) for module in modules for name in dir(module) if name.isupper()]
    tables.remove(frames.PLOTS)
    tables.append(list(frames.PLOTS.values()))  # the plot names themselves are not story words
    texts = [s for table in tables for s in _strings(table)]
    # Strip "{slot}" names so that only words that can appear in a story remain.
    return frozenset(words(re.sub(r"\{\w+\}", " ", " ".join(texts))) + ["a", "an", "named"])
