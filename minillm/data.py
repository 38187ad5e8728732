"""Loaders for the course's text files: the story corpus, the JSONL task sets, or any UTF-8 text of yours.

Every loader fails loudly, naming the file (and line) and what is wrong: a missing file raises
FileNotFoundError; an empty file, bytes that are not UTF-8, a JSONL line that is not a JSON object or
lacks a required key raise ValueError.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

#: Keys each line of the course's JSONL files must have (pass one as ``required``).
SFT_KEYS: tuple[str, ...] = ("messages", "task")
PREFERENCE_KEYS: tuple[str, ...] = ("prompt", "chosen", "rejected")


def load_text(path: str | Path) -> str:
    """The whole file as a string (Windows line ends become ``\\n``); it must be non-empty UTF-8."""
    path = Path(path)
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "not found"
        raise FileNotFoundError(f"{path}: {what}")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise ValueError(
            f"{path}: not UTF-8 text (byte {err.start}, line {line}: {raw[err.start : err.start + 1]!r}); "
            "save it as UTF-8 first"
        ) from None
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise ValueError(f"{path}: the file is empty")
    return text


def load_stories(path: str | Path) -> list[str]:
    """Documents of a text file: blocks separated by one or more empty lines, each stripped.

    The course corpus has one story per paragraph; a text of your own splits into its paragraphs (a
    file with no empty line is one document).
    """
    return [block.strip() for block in re.split(r"\n[ \t]*\n", load_text(path)) if block.strip()]


def load_jsonl(path: str | Path, required: Sequence[str] = ()) -> list[dict]:
    """One dict per non-empty line; every line must be a JSON object holding the ``required`` keys."""
    records = []
    for number, line in enumerate(load_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}, line {number}: not valid JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}, line {number}: expected a JSON object, got {type(record).__name__}")
        missing = [key for key in required if key not in record]
        if missing:
            raise ValueError(f"{path}, line {number}: missing key(s) {missing}; the line has {list(record)}")
        records.append(record)
    return records
