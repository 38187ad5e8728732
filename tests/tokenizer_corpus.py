"""Text the tokenizer tests run on: slices of the course corpus and the SFT set."""

from __future__ import annotations

from minillm.data import load_jsonl
from minillm.paths import data_path


def course_text(chars: int, offset: int = 0) -> str:
    """``chars`` characters of the course's training stories, starting at ``offset``."""
    with open(data_path("stories_train.txt"), encoding="utf-8") as handle:
        text = handle.read(offset + chars)
    return text[offset:]


def sft_texts(limit: int) -> list[str]:
    """Chat turns of the SFT set (user and assistant contents)."""
    texts: list[str] = []
    for record in load_jsonl(data_path("sft_train.jsonl"))[:limit]:
        texts.extend(message["content"] for message in record["messages"])
    return texts
