"""The story grammar: determinism, consistency within a story, and the committed corpus's properties."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from minillm import corpus
from minillm.corpus import lexicon

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def train_text() -> str:
    return (DATA / "stories_train.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def val_text() -> str:
    return (DATA / "stories_val.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def sample() -> list[corpus.Story]:
    return corpus.generate_stories(300, seed=11)


def test_same_seed_same_stories_different_seed_different():
    first = [s.text for s in corpus.generate_stories(40, seed=5)]
    again = [s.text for s in corpus.generate_stories(40, seed=5)]
    other = [s.text for s in corpus.generate_stories(40, seed=6)]
    assert first == again
    assert not set(first) & set(other)


def test_global_random_state_does_not_matter():
    random.seed(1)
    first = [s.text for s in corpus.generate_stories(20, seed=0)]
    random.seed(2)
    random.random()
    second = [s.text for s in corpus.generate_stories(20, seed=0)]
    assert first == second


def test_requested_hero_object_and_plot_are_used():
    rng = random.Random(0)
    for hero, obj, plot in [("Lily", "kite", "share"), ("Tom", "apple", "night"), ("Zed", "egg", "owner")]:
        story = corpus.generate_story(rng, hero=hero, obj=obj, plot=plot)
        assert (story.hero, story.obj, story.plot) == (hero, obj, plot)
        assert re.search(rf"\b{hero}\b", story.text)
        assert story.text.count(obj) >= 2  # found, then used


def test_each_story_is_consistent(sample):
    """The plan's facts are what the text says: trip, find, use, final feeling, one hero pronoun."""
    pronoun_checks = 0
    for story in sample:
        text = story.text
        assert f" to the {story.place}" in text
        assert re.search(rf"\b{story.finder}\b[^.!?]*\bfound (?:a|an) [a-z]+ {story.obj}\b", text), text
        assert text.count(story.obj) >= 2, text
        feelings = re.findall(rf"\b{story.hero} (?:felt|was)(?: very| so)? ([a-z]+)", text)
        assert feelings and feelings[-1] == story.feel_end, text
        # Where a frame refers back to the hero by pronoun, it is the hero's pronoun.
        for pronoun in re.findall(rf"\b{story.hero} felt [a-z]+, and ([a-z]+) smiled", text):
            assert pronoun == story.he
            pronoun_checks += 1
        for pronoun in re.findall(rf"named {story.hero}\. ([A-Z][a-z]+) lived", text):
            assert pronoun == story.he.capitalize()
            pronoun_checks += 1
        if story.hero in lexicon.GIRL_NAMES + lexicon.BOY_NAMES:
            assert story.he == ("she" if story.hero in lexicon.GIRL_NAMES else "he")
    assert pronoun_checks >= 10


def test_stories_have_the_course_ingredients(train_text):
    stories = train_text.split("\n\n")
    share = lambda pattern: sum(bool(re.search(pattern, s)) for s in stories) / len(stories)  # noqa: E731
    assert share(r'"[^"]+[.!?,]"') > 0.5  # dialogue in quotes
    assert share(r"\bbecause\b") > 0.3 and share(r"\bso\b|\bSo\b") > 0.3  # cause and effect
    assert share(r"\b(?:day|morning|afternoon|evening|night|Saturday|breakfast)\b") == 1.0  # time
    assert share(r"\b(?:Then|then|After a while|The next|At last)\b") > 0.5  # sequence
    assert share(r"\bfelt\b|\bwas (?:very |so )?[a-z]+\.") > 0.95  # feelings


def test_words_are_all_in_the_course_vocabulary(train_text):
    used = set(corpus.words(train_text))
    assert used <= corpus.vocabulary(), sorted(used - corpus.vocabulary())[:10]


def test_committed_corpus_size_format_and_vocabulary(train_text, val_text):
    train_bytes, val_bytes = len(train_text.encode()), len(val_text.encode())
    assert 3_000_000 <= train_bytes <= 6_000_000
    assert 0.04 <= val_bytes / (train_bytes + val_bytes) <= 0.06
    for text in (train_text, val_text):
        assert text.isascii() and text.endswith("\n")
        assert "\n\n\n" not in text and not text.startswith("\n")
        for story in text.rstrip("\n").split("\n\n"):
            assert "\n" not in story and story == story.strip()
            assert 60 <= len(corpus.words(story)) <= 150
    assert len(set(corpus.words(train_text))) >= 800


def test_committed_corpus_has_no_duplicates_and_no_train_val_overlap(train_text, val_text):
    train = train_text.rstrip("\n").split("\n\n")
    val = val_text.rstrip("\n").split("\n\n")
    assert len(set(train)) == len(train) and len(set(val)) == len(val)
    assert not set(train) & set(val)


def test_names_of_each_kind_are_distinct():
    names = lexicon.GIRL_NAMES + lexicon.BOY_NAMES + lexicon.PET_NAMES
    assert len(set(names)) == len(names)


@pytest.mark.parametrize(
    "kwargs",
    [{"obj": "spaceship"}, {"plot": "heist"}, {"hero": "lily"}, {"hero": "Two Words"}, {"min_words": 200}],
)
def test_bad_arguments_raise_value_error(kwargs):
    with pytest.raises(ValueError, match=r"spaceship|heist|lily|Two Words|min_words"):
        corpus.generate_story(random.Random(0), **kwargs)


def test_generate_stories_rejects_negative_n():
    with pytest.raises(ValueError, match="-1"):
        corpus.generate_stories(-1, seed=0)
