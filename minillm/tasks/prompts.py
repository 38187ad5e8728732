"""The task prompts of the SFT and preference sets, and how to read them back.

Two kinds of prompt: a story request ("Write a short story about Lily and a kite.") and a question about
a story given in the prompt ("Read the story and answer. <story> Question: Who found the kite?").
:func:`parse_prompt` recovers the kind and its slots, and for a question it works out the true answer
from the story text by fixed rules (see :func:`answer_from_story`), never from a table of generated data.
"""

from __future__ import annotations

import re
from functools import cache

from minillm.chat import strip_markers
from minillm.corpus import article, lexicon, places

STORY = "story"
QA_FOUND = "qa_found"
QA_PLACE = "qa_place"
QA_FEELING = "qa_feeling"
KINDS: tuple[str, ...] = (STORY, QA_FOUND, QA_PLACE, QA_FEELING)
QA_KINDS: tuple[str, ...] = (QA_FOUND, QA_PLACE, QA_FEELING)

STORY_TEMPLATES: tuple[str, ...] = (
    "Write a short story about {name} and {a_obj}.",
    "Tell me a story about {name} and {a_obj}.",
    "Write a story where {name} finds {a_obj}.",
    "Can you write a short story about {name} and {a_obj}?",
)
QA_TEMPLATE = "Read the story and answer.\n{story}\nQuestion: {question}"
QUESTIONS: dict[str, str] = {
    QA_FOUND: "Who found the {obj}?",
    QA_PLACE: "Where did {name} go?",
    QA_FEELING: "How did {name} feel at the end?",
}

_STORY_RE = re.compile(
    r"\bstory (?:about|where) (?P<name>[A-Z][a-z]+) (?:and|finds|who finds) (?:(?:a|an|the) )?(?P<object>[a-z]+)\b"
)
_QA_RE = re.compile(
    r"^\s*Read the story and answer[^\n]*?[.:]?\s*(?P<story>.+?)\s*Question:\s*(?P<question>.+?)\s*$", re.S
)
_QUESTION_RES: dict[str, re.Pattern[str]] = {
    QA_FOUND: re.compile(r"^Who found the (?P<object>[a-z]+)\?$"),
    QA_PLACE: re.compile(r"^Where did (?P<name>[A-Z][a-z]+) go\?$"),
    QA_FEELING: re.compile(r"^How did (?P<name>[A-Z][a-z]+) feel at the end\?$"),
}
_SENTENCE_SPLIT_RE = re.compile(r'(?<=[.!?])\s+(?=["A-Z])|(?<=[.!?]")\s+(?=["A-Z])')
_VERBS = "|".join(lexicon.MOTION_VERBS)
_PLACES = "|".join(places.PLACES)
_FEELINGS = "|".join(lexicon.FEELINGS)


def story_prompt(name: str, obj: str, template: int = 0) -> str:
    """A story request for ``name`` and ``obj`` in one of the :data:`STORY_TEMPLATES`."""
    return STORY_TEMPLATES[template].format(name=name, a_obj=f"{article(obj)} {obj}")


def qa_prompt(story: str, kind: str, name: str = "", obj: str = "") -> str:
    """A question prompt: the story, then the question of ``kind`` about ``name`` or ``obj``."""
    if kind not in QUESTIONS:
        raise ValueError(f"unknown question kind {kind!r}; choose one of {list(QUESTIONS)}")
    return QA_TEMPLATE.format(story=story, question=QUESTIONS[kind].format(name=name, obj=obj))


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``: a split after . ! ? (or a closing quote) before a capital or a quote."""
    return [s for s in _SENTENCE_SPLIT_RE.split(text.strip()) if s]


@cache
def _pattern(kind: str, key: str) -> re.Pattern[str]:
    """The compiled rule of :func:`answer_from_story` for one object or name (cached: few distinct keys)."""
    key = re.escape(key)
    if kind == QA_FOUND:
        return re.compile(rf"\bfound (?:a|an|the) (?:[a-z]+ )?{key}\b")
    if kind == QA_PLACE:
        subject = rf"(?:\b{key}(?: and [A-Z][a-z]+)?|\b[A-Z][a-z]+ and {key})"
        return re.compile(rf"{subject} (?:{_VERBS}) to the (?:[a-z]+ )?({_PLACES})\b")
    return re.compile(rf"\b{key}(?: and [A-Z][a-z]+)? (?:felt|was)(?: very| so| really)? ({_FEELINGS})\b")


def answer_from_story(story: str, kind: str, name: str = "", obj: str = "") -> str | None:
    """The true answer to a question, read from the story by these rules (``None`` if they find none):

    - who found the <obj>: the first sentence with "found a/an/the [adjective] <obj>"; the finder is the
      last capitalised word before "found" in it (not "I", so dialogue like "I found ..." is skipped);
    - where did <name> go: the first "<name> [and X] <went|walked|ran|...> to the [adjective] <place>"
      (or "X and <name> ..."), with <place> a course place noun;
    - how did <name> feel at the end: the last "<name> [and X] felt/was [very|so|really] <feeling>".
    """
    if kind == QA_FOUND:
        found_re = _pattern(QA_FOUND, obj)
        for sentence in split_sentences(story):
            match = found_re.search(sentence)
            if match:
                names = re.findall(r"\b[A-Z][a-z]+\b", sentence[: match.start()])  # never "I": two letters or more
                if names:
                    return names[-1]
        return None
    if kind == QA_PLACE:
        match = _pattern(QA_PLACE, name).search(story)
        return match.group(1) if match else None
    if kind == QA_FEELING:
        matches = _pattern(QA_FEELING, name).findall(story)
        return matches[-1] if matches else None
    raise ValueError(f"unknown question kind {kind!r}; choose one of {list(QUESTIONS)}")


def parse_prompt(prompt: str) -> dict[str, str | None]:
    """The kind of a task prompt and its slots.

    Returns ``{"kind": "story", "name": ..., "object": ...}`` for a story request, and for a question
    ``{"kind": "qa_found" | "qa_place" | "qa_feeling", "story": ..., "question": ..., "name" or "object":
    ..., "answer": ...}`` where ``answer`` is worked out from the story (``None`` if the rules find none).
    Chat markers (:data:`minillm.chat.CHAT_SPECIAL_TOKENS`) are ignored. Raises ValueError for a prompt of neither kind.
    """
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
    prompt = strip_markers(prompt)
    qa = _QA_RE.match(prompt)
    if qa:
        story, question = qa.group("story"), qa.group("question")
        for kind, question_re in _QUESTION_RES.items():
            match = question_re.match(question)
            if match:
                slots = match.groupdict()
                answer = answer_from_story(story, kind, name=slots.get("name", ""), obj=slots.get("object", ""))
                return {"kind": kind, "story": story, "question": question, **slots, "answer": answer}
        raise ValueError(f"unknown question {question!r}; expected one of {list(QUESTIONS.values())}")
    match = _STORY_RE.search(prompt)
    if match:
        return {"kind": STORY, "name": match.group("name"), "object": match.group("object")}
    shown = prompt if len(prompt) < 80 else prompt[:77] + "..."
    raise ValueError(f"not a course task prompt: {shown!r} (expected a story request or 'Read the story ...')")
