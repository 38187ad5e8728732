"""Text the tokenizer tests run on: slices of the course corpus and the SFT set."""

from __future__ import annotations

from minillm.data import load_jsonl
from minillm.paths import data_path
from minillm.tokenizer.merges import merge_pair


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


def rescan_encode(ids: list[int], ranks: dict) -> list[int]:
    """The definition of encoding (notebook 01's loop): merge the lowest-ranked pair everywhere, repeat.

    Each round rescans the whole sequence, so n symbols cost up to n² lookups: the reference the fast
    heap-based encode is checked against, and the slow behaviour it replaced.
    """
    while True:
        candidates = [pair for pair in zip(ids, ids[1:], strict=False) if pair in ranks]
        if not candidates:
            return ids
        pair = min(candidates, key=lambda p: ranks[p][0])
        ids = merge_pair(ids, pair, ranks[pair][1])
