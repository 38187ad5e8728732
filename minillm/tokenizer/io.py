"""Tokens as text: the course's readable JSON spelling, GPT-2's byte-to-unicode alphabet, and the JSON files.

Token byte strings are written as text a person can read: printable ASCII stays as it is (space
included) and every other byte, and the backslash itself, becomes ``\\xNN``. So ``b" the"`` is
``" the"`` and the first half of an emoji is ``"\\xf0\\x9f"``. The mapping is exact in both directions.

GPT-2's published files (and Hugging Face's byte-level tokenizers) spell bytes another way: every byte is one
printable character (:func:`byte_to_unicode`: a space is ``Ġ``), so a token is a plain string of such characters.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
_ESCAPE = re.compile(r"\\x([0-9a-f]{2})")


def token_to_text(token: bytes) -> str:
    """Readable, reversible text for a token's bytes (see the module docstring)."""
    return "".join(chr(b) if 0x20 <= b < 0x7F and b != 0x5C else f"\\x{b:02x}" for b in token)


def text_to_token(text: str) -> bytes:
    """Inverse of :func:`token_to_text`; raises ValueError on text it could not have produced."""
    if not isinstance(text, str):
        raise ValueError(f"a token must be written as a string, got {text!r}")
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            match = _ESCAPE.match(text, i)
            if match is None:
                raise ValueError(f"bad escape in token text {text!r} at position {i}")
            out.append(int(match.group(1), 16))
            i = match.end()
        elif 0x20 <= ord(ch) < 0x7F:
            out.append(ord(ch))
            i += 1
        else:
            raise ValueError(f"unexpected character {ch!r} in token text {text!r}")
    return bytes(out)


@functools.lru_cache(maxsize=1)
def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable character table."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def byte_level_text(token: bytes) -> str:
    """A token's bytes spelled in GPT-2's byte-to-unicode alphabet (``b" the"`` → ``"Ġthe"``)."""
    table = byte_to_unicode()
    return "".join(table[b] for b in token)


def write_json(path: str | os.PathLike, kind: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` tagged with its ``kind`` and the format version; returns the path."""
    path = Path(path)
    document = {"kind": kind, "format_version": FORMAT_VERSION, **payload}
    path.write_text(_one_item_per_line(document), encoding="utf-8")
    return path


def _one_item_per_line(document: dict[str, Any]) -> str:
    """JSON with one merge / vocabulary entry per line: compact, yet easy to read and diff."""

    def dump(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)

    fields = []
    for key, value in document.items():
        if isinstance(value, list) and value:
            body = ",\n".join(f"  {dump(item)}" for item in value)
            fields.append(f" {dump(key)}: [\n{body}\n ]")
        elif isinstance(value, dict) and value:
            body = ",\n".join(f"  {dump(k)}: {dump(v)}" for k, v in value.items())
            fields.append(f" {dump(key)}: {{\n{body}\n }}")
        else:
            fields.append(f" {dump(key)}: {dump(value)}")
    return "{\n" + ",\n".join(fields) + "\n}\n"


def read_json(path: str | os.PathLike, kind: str, required: tuple[str, ...]) -> dict[str, Any]:
    """Read a tokenizer file, checking that it is JSON, of the expected kind and has ``required`` keys."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not a tokenizer file (not UTF-8 text: {err})") from err
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not a tokenizer file (invalid JSON: {err})") from err
    if not isinstance(document, dict) or "kind" not in document:
        raise ValueError(f"{path}: not a minillm tokenizer file (no 'kind' field)")
    if document["kind"] != kind:
        raise ValueError(f"{path}: holds a {document['kind']!r} tokenizer, expected {kind!r}")
    if document.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{path}: format_version {document.get('format_version')!r} is not supported "
            f"(this minillm reads version {FORMAT_VERSION})"
        )
    missing = [key for key in required if key not in document]
    if missing:
        raise ValueError(f"{path}: corrupt tokenizer file, missing field(s) {missing}")
    return document
