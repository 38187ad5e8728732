"""Loaders for the course's text files: the story corpus, the JSONL task sets, or any UTF-8 text of yours.

Every loader fails loudly, naming the file (and line) and what is wrong: a missing file raises
FileNotFoundError; an empty file, bytes that are not UTF-8, a JSONL line that is not a JSON object or
lacks a required key raise ValueError.

All of them read through one decoder (:func:`_text_chunks`): UTF-8, a leading byte-order mark dropped,
Windows (``\\r\\n``) and old Mac (``\\r``) line ends turned into ``\\n``. A text file is split into
*documents* by one rule (:func:`split_documents`), whether it is loaded whole (:func:`load_stories`) or
streamed one document at a time (:func:`iter_documents`, for files larger than memory).
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

#: Keys each line of the course's JSONL files must have (pass one as ``required``).
SFT_KEYS: tuple[str, ...] = ("messages", "task")
PREFERENCE_KEYS: tuple[str, ...] = ("prompt", "chosen", "rejected")

_CHUNK_BYTES = 1 << 20  # read files in 1 MiB pieces: memory stays flat however large the file is


def _existing_file(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "not found"
        raise FileNotFoundError(f"{path}: {what}")
    return path


def _text_chunks(path: Path) -> Iterator[str]:
    """The file's text in pieces, decoded and normalised exactly as if it were read whole.

    Why pieces: a corpus may be larger than memory. Why an incremental decoder: a multi-byte character or
    a ``\\r\\n`` may straddle two pieces; the decoder keeps the first bytes of a split character, and a
    trailing ``\\r`` waits for the next piece to see whether a ``\\n`` follows.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    bytes_before = newlines_before = 0  # bytes read before this piece, and the b"\n" among them
    at_start, held_cr = True, ""
    with open(path, "rb") as handle:
        while True:
            raw = handle.read(_CHUNK_BYTES)
            held_bytes = decoder.getstate()[0]  # the start of a character split by the previous piece
            try:
                text = decoder.decode(raw, final=not raw)
            except UnicodeDecodeError as err:
                position = bytes_before - len(held_bytes) + err.start
                line = newlines_before + err.object[: err.start].count(b"\n") + 1
                bad = err.object[err.start : err.start + 1]
                raise ValueError(
                    f"{path}: not UTF-8 text (byte {position}, line {line}: {bad!r}); save it as UTF-8 first"
                ) from None
            bytes_before += len(raw)
            newlines_before += raw.count(b"\n")
            if at_start and text:
                text, at_start = text.removeprefix("\ufeff"), False
            text = held_cr + text
            held_cr = ""
            if raw and text.endswith("\r"):
                text, held_cr = text[:-1], "\r"
            if text:
                yield text.replace("\r\n", "\n").replace("\r", "\n")
            if not raw:
                return


def load_text(path: str | Path, max_chars: int | None = None) -> str:
    """The whole file as a string (Windows line ends become ``\\n``); it must be non-empty UTF-8.

    ``max_chars``: only the first ``max_chars`` characters, reading no more of the file than that (a
    tokenizer trains on the start of a corpus that may not fit in memory).
    """
    path = _existing_file(path)
    pieces: list[str] = []
    kept, cut = 0, False
    for text in _text_chunks(path):
        pieces.append(text)
        kept += len(text)
        if max_chars is not None and kept >= max_chars:
            cut = True
            break
    text = "".join(pieces)
    if cut:
        text = text[:max_chars]
    if not text.strip():
        raise ValueError(f"{path}: the first {max_chars} characters are blank" if cut else f"{path}: the file is empty")
    return text


def split_documents(text: str) -> list[str]:
    """Documents of a text: blocks separated by one or more blank lines, each stripped.

    A blank line holds nothing but whitespace (spaces, tabs, a stray ``\\r``, a non-breaking space: what
    ``str.strip`` removes), because a line that looks empty must not glue two stories together. The
    course corpus has one story per block; a text with no blank line is one document.
    """
    return list(_documents(text.split("\n")))


def _documents(lines: Iterable[str]) -> Iterator[str]:
    """Group lines into documents (see :func:`split_documents`), holding one document at a time."""
    block: list[str] = []
    for line in lines:
        if line.strip():
            block.append(line)
        elif block:
            document, block = "\n".join(block).strip(), []  # the lines are released before the consumer runs
            yield document
    if block:
        document, block = "\n".join(block).strip(), []
        yield document


def _lines(path: Path) -> Iterator[str]:
    """The file's lines (without ``\\n``), reassembled across the pieces :func:`_text_chunks` reads."""
    partial: list[str] = []  # the start of a line that continues in the next piece
    for text in _text_chunks(path):
        *complete, rest = text.split("\n")
        for piece in complete:
            partial.append(piece)
            yield "".join(partial)
            partial = []
        if rest:
            partial.append(rest)
    if partial:
        yield "".join(partial)


def iter_documents(path: str | Path) -> Iterator[str]:
    """The documents of a text file one at a time: ``split_documents(load_text(path))`` in bounded memory.

    Only one document (and one read buffer) is held at once, so a corpus larger than memory can be
    encoded (:func:`minillm.batches.encode_file`). The file is checked now (missing, a folder); bytes
    that are not UTF-8 raise when reached, and a file with no document raises at the end.
    """
    path = _existing_file(path)

    def documents() -> Iterator[str]:
        found = False
        for document in _documents(_lines(path)):
            found = True
            yield document
        if not found:
            raise ValueError(f"{path}: the file is empty")

    return documents()


def load_stories(path: str | Path) -> list[str]:
    """Documents of a text file: blocks separated by one or more blank lines, each stripped.

    The course corpus has one story per paragraph; a text of your own splits into its paragraphs (a
    file with no empty line is one document).
    """
    return split_documents(load_text(path))


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
