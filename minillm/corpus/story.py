"""Compose one story: draw a consistent plan (who, where, what), then fill the frames beat by beat.

Randomness comes only from the ``random.Random`` passed in, so a seed fixes every story. Lists are
always indexed in their written order (never sets or ``hash()``), which keeps output identical across
Python runs and platforms.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, fields

from minillm.corpus import frames, lexicon, objects, places

MIN_WORDS = 60
MAX_WORDS = 150
_WORD_RE = re.compile(r"[a-z]+(?:'[a-z]+)?")


def words(text: str) -> list[str]:
    """The lowercase words of ``text`` (letters, with an inner apostrophe kept: "don't")."""
    return _WORD_RE.findall(text.lower())


def article(word: str) -> str:
    """ "a" or "an" for the word that follows."""
    return "an" if word[:1].lower() in "aeiou" else "a"


@dataclass(frozen=True)
class Story:
    """A generated story and the facts it states (the plan), for building questions about it."""

    text: str
    hero: str
    he: str
    friend: str
    place: str
    obj: str
    finder: str
    plot: str
    feel_end: str

    @property
    def n_words(self) -> int:
        return len(words(self.text))


def _character(rng: random.Random, name: str | None, animal: bool | None, avoid: str = "") -> dict[str, str]:
    """A character's name, kind ("girl", "fox") and pronouns; a given name keeps its usual kind."""
    if name is None:
        if animal is None:
            animal = rng.random() < 0.3
        pool = lexicon.PET_NAMES if animal else (lexicon.GIRL_NAMES + lexicon.BOY_NAMES)
        name = rng.choice(pool)
        while name == avoid:
            name = rng.choice(pool)
    if name in lexicon.GIRL_NAMES:
        kind, he = "girl", "she"
    elif name in lexicon.BOY_NAMES:
        kind, he = "boy", "he"
    elif name in lexicon.PET_NAMES:
        kind, he = rng.choice(lexicon.ANIMALS), rng.choice(("he", "she"))
    else:  # a name the course does not know: a child of either kind
        kind, he = rng.choice((("girl", "she"), ("boy", "he")))
    his, him = ("her", "her") if he == "she" else ("his", "him")
    return {"name": name, "kind": kind, "he": he, "his": his, "him": him}


def _slots(rng: random.Random, hero_name: str | None, obj: str | None, plot: str | None) -> dict[str, str]:
    """Draw one story plan and return every slot the frames may use."""
    hero = _character(rng, hero_name, None)
    hero_is_animal = hero["kind"] not in ("girl", "boy")
    friend = _character(rng, None, True if hero_is_animal else rng.random() < 0.25, avoid=hero["name"])
    obj = obj if obj is not None else rng.choice(list(objects.OBJECTS))
    info = objects.OBJECTS[obj]
    place = rng.choice(list(places.PLACES))
    pinfo = places.PLACES[place]
    plot = plot if plot is not None else rng.choice(list(frames.PLOTS))
    _, feels_mid, feels_end, morals = frames.PLOTS[plot]
    finder, other = (hero, friend) if rng.random() < 0.6 else (friend, hero)
    parent, parent_he = rng.choice(lexicon.PARENTS)
    owner, owner_he = rng.choice(lexicon.OWNERS)
    adj = rng.choice(info.adjectives)
    use, used = rng.choice(info.uses)
    hobby, hobby_past = rng.choice(lexicon.HOBBIES)
    obstacles = frames.OBSTACLES if place not in places.INDOOR else frames.OBSTACLES[1:]  # [0]: rain
    obstacle, reason, fix = rng.choice(obstacles)
    slots = {
        "hero": hero["name"],
        "kind": hero["kind"],
        "he": hero["he"],
        "his": hero["his"],
        "him": hero["him"],
        "trait": rng.choice(lexicon.TRAITS),
        "home": rng.choice(lexicon.HOMES),
        "color": rng.choice(lexicon.COLORS),
        "friend": friend["name"],
        "friend_desc": f"{article(friend['kind'])} {friend['kind']} named {friend['name']}",
        "finder": finder["name"],
        "fin_he": finder["he"],
        "other": other["name"],
        "place": place,
        "spot": rng.choice(pinfo.spots),
        "activity": pinfo.activity[0],
        "activity_past": pinfo.activity[1],
        "obj": obj,
        "a_adj_obj": f"{article(adj)} {adj} {obj}",
        "parent": parent,
        "Parent": parent.capitalize(),
        "parent_he": parent_he,
        "owner": owner,
        "a_owner": f"{article(owner)} {owner}",
        "Owner_he": owner_he.capitalize(),
        "feel_mid": rng.choice(feels_mid) if feels_mid else "",
        "feel_end": rng.choice(feels_end),
        "moral": rng.choice(morals),
        "time": rng.choice(frames.TRIP_TIME),
        "end_time": rng.choice(frames.END_TIME),
        "snack": rng.choice(lexicon.SNACKS),
        "plot": plot,
    }
    # Second pass for lexicon phrases that themselves mention the hero ("wrap the scarf around her neck").
    for key, value in (("use", use), ("used", used), ("hobby", hobby), ("obstacle", obstacle)):
        slots[key] = value.format(**slots)
    slots["reason"] = reason.format(**slots)
    slots["fix"] = fix.format(**slots)
    for key in ("he", "his"):
        slots[key.capitalize()] = slots[key].capitalize()
    return slots


def _render(
    rng: random.Random, slots: dict[str, str], place_sights: tuple[str, ...], detail_range: tuple[float, float]
) -> str:
    """Fill the beats in story order; optional beats are included by chance.

    One "detail" draw per story scales every optional beat, so some stories are short and plain and
    others long and rich, instead of all clustering at the same length. ``detail_range`` (a part of
    [0, 1]) narrows that draw when only short or only long stories are wanted.
    """
    low, high = detail_range
    detail = 0.3 + 1.2 * (low + (high - low) * rng.random())

    def maybe(p: float) -> bool:
        return rng.random() < p * detail

    parts = [rng.choice(frames.INTRO)]
    if maybe(0.5):
        parts.append(rng.choice(frames.HOBBY))
    parts.append(rng.choice(frames.FRIEND))
    parts.append(rng.choice(frames.TRIP))
    if maybe(0.3):
        parts.append(rng.choice(lexicon.WEATHER))
    if maybe(0.6):
        parts.extend(rng.sample(list(place_sights), rng.choice((1, 1, 2))))
    if maybe(0.3):
        parts.append(rng.choice(frames.ACTIVITY))
    elif maybe(0.2):
        parts.append(rng.choice(frames.PICNIC))
    parts.append(rng.choice(frames.FIND))
    if maybe(0.6):
        parts.append(rng.choice(frames.REACTION))
    for beat in frames.PLOTS[slots["plot"]][0]:
        options = [option for option in beat if option]
        if len(options) == len(beat) or maybe(0.6):  # a beat with an "" option is optional
            parts.append(rng.choice(options))
    parts.append(rng.choice(frames.ENDING))
    if maybe(0.5):
        parts.append(rng.choice(frames.CLOSING))
    text = " ".join(part.format(**slots) for part in parts)
    return text[0].upper() + text[1:]


def generate_story(
    rng: random.Random,
    hero: str | None = None,
    obj: str | None = None,
    plot: str | None = None,
    min_words: int = MIN_WORDS,
    max_words: int = MAX_WORDS,
) -> Story:
    """One story of ``min_words``..``max_words`` words; ``hero``/``obj``/``plot`` fix those choices.

    Plans that come out too long or too short are redrawn from the same generator, so the result still
    depends only on its state.
    """
    if obj is not None and obj not in objects.OBJECTS:
        raise ValueError(f"unknown object {obj!r}; choose one of minillm.corpus.objects.OBJECTS")
    if plot is not None and plot not in frames.PLOTS:
        raise ValueError(f"unknown plot {plot!r}; choose one of {sorted(frames.PLOTS)}")
    if hero is not None and not re.fullmatch(r"[A-Z][a-z]+", hero):
        raise ValueError(f"hero must be one capitalised word like 'Lily', got {hero!r}")
    if not 0 < min_words <= max_words:
        raise ValueError(f"need 0 < min_words <= max_words, got {min_words} and {max_words}")
    # Aim the detail draw at the wanted length, so that fewer drafts are thrown away.
    detail_range = (0.4 if min_words > 100 else 0.0, 0.6 if max_words < 115 else 1.0)
    for _ in range(1000):
        slots = _slots(rng, hero, obj, plot)
        text = _render(rng, slots, places.PLACES[slots["place"]].sights, detail_range)
        n = len(words(text))
        if min_words <= n <= max_words:
            return Story(text=text, **{f.name: slots[f.name] for f in fields(Story) if f.name != "text"})
    raise ValueError(f"could not draw a story of {min_words}..{max_words} words; widen the range")
