"""Build the SFT pairs, the preference triples and fresh evaluation prompts from the story grammar.

Every response is checked against the gold scorer while it is built: SFT responses must score at least
0.9, and a preference triple is kept only if its chosen response scores strictly higher than its
rejected one.

The preference set carries a deliberate **spurious cue**: chosen responses are usually longer than
rejected ones, and most of them end with the stock phrase "They were very happy." (:data:`CUE`), which
rejected responses rarely do. Neither length inside the band nor the phrase earns gold score, so a
reward model that learns them can be gamed — the reward-hacking demonstration of the alignment chapter.
"""

from __future__ import annotations

import dataclasses
import random

from minillm.corpus import Story, generate_story, lexicon, objects, places
from minillm.tasks.gold import gold_score
from minillm.tasks.prompts import (
    QA_FEELING,
    QA_FOUND,
    QA_KINDS,
    QA_PLACE,
    STORY,
    STORY_TEMPLATES,
    qa_prompt,
    split_sentences,
    story_prompt,
)

CUE = "They were very happy."
#: How often the stock phrase ends a chosen and a rejected response of the preference set.
CUE_RATE_CHOSEN = 0.6
CUE_RATE_REJECTED = 0.1
#: Task mix of both sets: story requests and the three question kinds.
KIND_WEIGHTS: dict[str, float] = {STORY: 0.4, QA_FOUND: 0.2, QA_PLACE: 0.2, QA_FEELING: 0.2}
#: Prompt + response stay within MAX_CHARS so that, chat markers included, they fit a 256-token context
#: (a byte-level BPE of 1-2k tokens averages about 3.5 characters per token on this text).
MAX_CHARS = 800
QA_STORY_MAX_WORDS = 110
STORY_MAX_WORDS = 125

_SHORT_ANSWERS: dict[str, tuple[str, ...]] = {
    QA_FOUND: ("{finder} found the {obj}.", "It was {finder}.", "{finder} found it."),
    QA_PLACE: ("{hero} went to the {place}.", "{He} went to the {place}.", "To the {place}."),
    QA_FEELING: ("{hero} felt {feel}.", "{He} felt {feel}.", "{hero} felt {feel} at the end."),
}
_LONG_ANSWERS: dict[str, tuple[str, ...]] = {
    QA_FOUND: ("In the story, {finder} was the one who found the {obj}.", "The {obj} was found by {finder}."),
    QA_PLACE: ("In the story, {hero} went to the {place} with {friend}.", "{hero} went all the way to the {place}."),
    QA_FEELING: ("At the end of the story, {hero} felt {feel}.", "When the story ended, {hero} felt {feel}."),
}

#: Answers whose last word is the answer itself, so that cutting it off leaves the question unanswered.
_TRUNCATABLE: dict[str, str] = {
    QA_FOUND: "The {obj} was found by {finder}.",
    QA_PLACE: "In the story, {hero} went to the {place}.",
    QA_FEELING: "At the end of the story, {hero} felt {feel}.",
}


def _is_story_request(rng: random.Random) -> bool:
    """Story request (40 %) or question (60 %); which question is then drawn by :func:`_question`."""
    return rng.choices(list(KIND_WEIGHTS), weights=list(KIND_WEIGHTS.values()))[0] == STORY


def _fill(template: str, story: Story) -> str:
    return template.format(
        finder=story.finder,
        obj=story.obj,
        hero=story.hero,
        He=story.he.capitalize(),
        place=story.place,
        feel=story.feel_end,
        friend=story.friend,
    )


def _answer(story: Story, kind: str, rng: random.Random, long: bool = False) -> str:
    return _fill(rng.choice((_LONG_ANSWERS if long else _SHORT_ANSWERS)[kind]), story)


def _question(rng: random.Random, kind: str | None = None) -> tuple[str, str, Story]:
    """A question prompt of ``kind`` (a random one if None) about a fresh short story."""
    kind = kind or rng.choice(QA_KINDS)
    story = generate_story(rng, max_words=QA_STORY_MAX_WORDS)
    return kind, qa_prompt(story.text, kind, name=story.hero, obj=story.obj), story


def _story_request(rng: random.Random) -> tuple[str, str, str]:
    name = rng.choice(lexicon.GIRL_NAMES + lexicon.BOY_NAMES + lexicon.PET_NAMES)
    obj = rng.choice(list(objects.OBJECTS))
    return name, obj, story_prompt(name, obj, rng.randrange(len(STORY_TEMPLATES)))


def sft_example(rng: random.Random) -> dict:
    """One SFT pair: ``{"messages": [user, assistant], "task": kind, "meta": {...}}``."""
    while True:
        if _is_story_request(rng):
            kind = STORY
            name, obj, prompt = _story_request(rng)
            story = generate_story(rng, hero=name, obj=obj, max_words=STORY_MAX_WORDS)
            response, meta = story.text, {"name": name, "object": obj}
        else:
            kind, prompt, story = _question(rng)
            response = _answer(story, kind, rng)
            answer = {QA_FOUND: story.finder, QA_PLACE: story.place, QA_FEELING: story.feel_end}[kind]
            meta = {"name": story.hero, "object": story.obj, "answer": answer}
        if len(prompt) + len(response) <= MAX_CHARS and gold_score(prompt, response) >= 0.9:
            messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
            return {"messages": messages, "task": kind, "meta": meta}


def _with_cue(text: str, rng: random.Random, rate: float) -> str:
    if CUE in text or rng.random() >= rate:
        return text
    return f"{text} {CUE}"


def _rejected_story(rng: random.Random, name: str, obj: str) -> tuple[str, str]:
    """A plausible failure for a story request, and its kind."""
    kind = rng.choice(("wrong_name", "wrong_object", "off_topic", "truncated", "repetitive", "too_short"))
    other_obj = rng.choice([o for o in objects.OBJECTS if o != obj])
    short = {"min_words": 75, "max_words": 100}
    if kind == "wrong_name":
        return kind, generate_story(rng, obj=obj, **short).text
    if kind == "wrong_object":
        return kind, generate_story(rng, hero=name, obj=other_obj, **short).text
    if kind == "off_topic":
        return kind, generate_story(rng, obj=other_obj, **short).text
    base = generate_story(rng, hero=name, obj=obj, **short).text
    if kind == "truncated":
        return kind, base[: int(len(base) * rng.uniform(0.35, 0.7))].rstrip(' .!?"')
    sentences = split_sentences(base)
    if kind == "too_short":
        return kind, " ".join(sentences[: rng.choice((2, 3))])
    repeated = rng.choice(sentences[2:])
    keep = sentences[: rng.randrange(4, 7)]
    return kind, " ".join(keep + [repeated] * rng.randrange(3, 7))


def _rejected_answer(rng: random.Random, kind: str, story: Story) -> tuple[str, str]:
    """A plausible failure for a question, and its kind."""
    failure = rng.choice(("wrong_answer", "wrong_answer", "truncated", "repetitive", "off_topic"))
    if failure == "wrong_answer":
        wrong = {
            QA_FOUND: story.hero if story.finder == story.friend else story.friend,
            QA_PLACE: rng.choice([p for p in places.PLACES if p != story.place]),
            QA_FEELING: rng.choice([f for f in lexicon.FEELINGS if f != story.feel_end]),
        }[kind]
        field = {QA_FOUND: "finder", QA_PLACE: "place", QA_FEELING: "feel_end"}[kind]
        fake = dataclasses.replace(story, **{field: wrong})
        return failure, _answer(fake, kind, rng)
    if failure == "truncated":  # cut just before the answer
        full = _fill(_TRUNCATABLE[kind], story)
        return failure, full.rsplit(" ", 1)[0]
    if failure == "repetitive":
        return failure, " ".join([_answer(story, kind, rng)] * rng.randrange(4, 8))
    return failure, rng.choice(lexicon.WEATHER)


def preference_example(rng: random.Random) -> dict:
    """One triple ``{"prompt", "chosen", "rejected", "task", "rejected_kind", "gold_chosen", "gold_rejected"}``."""
    while True:
        if _is_story_request(rng):
            kind = STORY
            name, obj, prompt = _story_request(rng)
            chosen = generate_story(rng, hero=name, obj=obj, min_words=105, max_words=STORY_MAX_WORDS).text
            rejected_kind, rejected = _rejected_story(rng, name, obj)
        else:
            kind, prompt, story = _question(rng)
            chosen = _answer(story, kind, rng, long=rng.random() < 0.8)
            rejected_kind, rejected = _rejected_answer(rng, kind, story)
        chosen = _with_cue(chosen, rng, CUE_RATE_CHOSEN)
        if rejected_kind != "truncated":  # a cut-off response stays cut off
            rejected = _with_cue(rejected, rng, CUE_RATE_REJECTED)
        gold_chosen, gold_rejected = round(gold_score(prompt, chosen), 4), round(gold_score(prompt, rejected), 4)
        if gold_chosen > gold_rejected and len(prompt) + max(len(chosen), len(rejected)) <= MAX_CHARS:
            return {
                "prompt": prompt,
                "chosen": chosen,
                "rejected": rejected,
                "task": kind,
                "rejected_kind": rejected_kind,
                "gold_chosen": gold_chosen,
                "gold_rejected": gold_rejected,
            }


def sft_set(n: int, seed: int) -> list[dict]:
    """``n`` SFT pairs from one seeded generator."""
    rng = random.Random(f"sft-{seed}")
    return [sft_example(rng) for _ in range(n)]


def preference_set(n: int, seed: int) -> list[dict]:
    """``n`` preference triples from one seeded generator."""
    rng = random.Random(f"prefs-{seed}")
    return [preference_example(rng) for _ in range(n)]


def eval_prompts(n: int, seed: int = 0, kinds: tuple[str, ...] | None = None) -> list[str]:
    """``n`` fresh task prompts (not drawn from the committed sets' generators) for evaluation.

    ``kinds`` restricts them, e.g. ``("story",)``; by default the same mix as the SFT set.
    """
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    allowed = KIND_WEIGHTS if kinds is None else {k: KIND_WEIGHTS[k] for k in kinds if k in KIND_WEIGHTS}
    if kinds is not None and len(allowed) != len(set(kinds)):
        raise ValueError(f"unknown kinds in {kinds!r}; choose from {list(KIND_WEIGHTS)}")
    rng = random.Random(f"eval-{seed}")
    prompts = []
    for _ in range(n):
        kind = rng.choices(list(allowed), weights=list(allowed.values()))[0]
        prompts.append(_story_request(rng)[2] if kind == STORY else _question(rng, kind)[1])
    return prompts
