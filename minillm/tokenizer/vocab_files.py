"""Other libraries' vocabulary files, read and written as data: GPT-2's ``vocab.json`` + ``merges.txt`` and
tiktoken's ``.tiktoken`` ranks.

Both formats give every token an id of the file's choosing, so a loaded tokenizer keeps that layout rather
than the course's (bytes 0..255, then merges in order). They are parsed strictly: a line or entry that does
not fit the format is a ValueError naming the file (and, for line-based files, the line), never a guess.
Nothing here evaluates or unpickles anything.

* GPT-2 (also Hugging Face's ``BPE.from_file``): ``vocab.json`` maps each token, spelled in GPT-2's
  byte-to-unicode alphabet (``io.byte_to_unicode``: a space is ``Ġ``), to its id; ``merges.txt`` has an
  optional ``#version`` first line, then one merge ``left right`` per line, earliest first. Special tokens
  sit in ``vocab.json`` under their own text (``"<|endoftext|>": 50256``).
* tiktoken: one ``base64(token bytes) rank`` per line; the rank is the id, and also the merge priority.
  Special tokens are not in the file.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from minillm.tokenizer.io import byte_level_text, byte_to_unicode
from minillm.tokenizer.merges import apply_token_ranks

_RANK = re.compile(r"0|[1-9][0-9]*")
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?')  # a string or a number

#: Ids must stay below ``ID_FACTOR × entries + ID_SLACK`` (:func:`id_limit`). A vocabulary is a list indexed by
#: id, and a model has an embedding row per id, so one id far beyond the others costs memory for ids that do not
#: exist: a single id of 10^8 made a 100,000,001-entry list (0.8 GB), 10^13 a MemoryError. Gaps within the
#: limit are fine (tiktoken puts its special tokens after a gap).
ID_FACTOR, ID_SLACK = 8, 1024
_MAX_ID_DIGITS = 18  # longer is beyond any limit; int() of over 4,300 digits is refused by Python itself


def id_limit(entries: int) -> int:
    """The first id a vocabulary of ``entries`` tokens may not use (see :data:`ID_FACTOR`)."""
    return ID_FACTOR * entries + ID_SLACK


def far_id_message(what: str, token_id: int | str, entries: int | None) -> str:
    """The error for an id beyond :func:`id_limit` (``token_id`` as digits when too long to be an int)."""
    if isinstance(token_id, str):
        shown, beyond = f"{token_id[:12]}... ({len(token_id):,} digits)", "far beyond any vocabulary's size"
    else:
        shown = f"{token_id:,}"
        beyond = f"far beyond the {entries:,} entries of the vocabulary (ids must stay below {id_limit(entries):,})"
    return (
        f"{what} has id {shown}, {beyond}: a vocabulary is a list indexed by id, so that id would make room for "
        "every id below it; renumber the tokens"
    )


class _HugeNumber(ValueError):
    """A JSON number too long to be any id (raised while parsing, before Python's own int-size error)."""

    def __init__(self, digits: str) -> None:
        super().__init__(digits)
        self.digits = digits


def _parse_id(digits: str) -> int:
    if len(digits) > _MAX_ID_DIGITS:
        raise _HugeNumber(digits)
    return int(digits)


def _line_of_number(text: str, digits: str) -> int | None:
    """The line of the first JSON number spelled ``digits`` (outside strings): where a bad id sits in the file."""
    for match in _JSON_TOKEN.finditer(text):
        if match.group() == digits:
            return text.count("\n", 0, match.start()) + 1
    return None


def _where(path: str | os.PathLike, line: int | None) -> str:
    return f"{path}, line {line}" if line is not None else str(path)


@functools.lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    """GPT-2's alphabet read backwards, built once: rebuilding it per token was most of a 50k-vocabulary load."""
    return {ch: b for b, ch in byte_to_unicode().items()}


def _from_gpt2_text(text: str, where: str) -> bytes:
    table = _unicode_to_byte()
    try:
        return bytes(table[ch] for ch in text)
    except KeyError as err:
        raise ValueError(
            f"{where}: token {text!r} has the character {err.args[0]!r}, which is not in GPT-2's byte-to-unicode "
            "alphabet (is it a special token? then name it in special_tokens)"
        ) from None


def _read_text(path: str | os.PathLike) -> str:
    try:
        return Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err})") from err


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    seen: dict[str, object] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"the token {key!r} appears twice")
        seen[key] = value
    return seen


def read_gpt2_files(
    vocab_json: str | os.PathLike, merges_txt: str | os.PathLike, special_tokens: Iterable[str] = ()
) -> tuple[dict[bytes, int], dict[str, int], list[tuple[bytes, bytes]], list[int]]:
    """Parse GPT-2 files: (ordinary token bytes → id, special token → id, merges in rank order, the line of
    ``merges.txt`` each merge came from). Only the form is checked here; that the pieces fit together
    (every merge's parts and result in the vocabulary, ids unique) is checked when the tokenizer is built."""
    if isinstance(special_tokens, str):
        raise TypeError(f"special_tokens must be a sequence of strings, not the string {special_tokens!r}")
    specials = list(special_tokens)
    document = _read_text(vocab_json)
    try:
        entries = json.loads(document, object_pairs_hook=_no_duplicate_keys, parse_int=_parse_id)
    except json.JSONDecodeError as err:
        raise ValueError(f"{vocab_json}, line {err.lineno}: not valid JSON ({err.msg})") from err
    except _HugeNumber as err:
        where = _where(vocab_json, _line_of_number(document, err.digits))
        raise ValueError(f"{where}: {far_id_message('a token', err.digits, None)}") from None
    except ValueError as err:
        raise ValueError(f"{vocab_json}: {err}") from err
    if not isinstance(entries, dict):
        raise ValueError(f"{vocab_json}: expected a JSON object of token → id, got {type(entries).__name__}")
    missing = [token for token in specials if token not in entries]
    if missing:
        raise ValueError(f"{vocab_json}: special token(s) {missing} are not in the vocabulary")
    token_ids: dict[bytes, int] = {}
    special_ids: dict[str, int] = {}
    for text, token_id in entries.items():
        if isinstance(token_id, bool) or not isinstance(token_id, int) or token_id < 0:
            raise ValueError(f"{vocab_json}: token {text!r} has id {token_id!r}; ids must be non-negative ints")
        if text in specials:
            special_ids[text] = token_id
            continue
        token = _from_gpt2_text(text, str(vocab_json))
        if not token:
            raise ValueError(f"{vocab_json}: the empty string is not a token")
        token_ids[token] = token_id  # the alphabet is a bijection, so distinct texts are distinct bytes
    if entries:
        text_of_top, top = max(entries.items(), key=lambda item: item[1])
        if top >= id_limit(len(entries)):
            where = _where(vocab_json, _line_of_number(document, str(top)))
            raise ValueError(f"{where}: {far_id_message(f'token {text_of_top!r}', top, len(entries))}")
    merges, lines = _read_merges(merges_txt)
    return token_ids, {token: special_ids[token] for token in specials}, merges, lines


def _read_merges(path: str | os.PathLike) -> tuple[list[tuple[bytes, bytes]], list[int]]:
    text = _read_text(path)
    rows = text.split("\n")
    if rows and rows[-1] == "":
        rows.pop()  # the newline that ends the last line
    merges: list[tuple[bytes, bytes]] = []
    lines: list[int] = []
    for number, row in enumerate(rows, start=1):
        if number == 1 and row.startswith("#version"):
            continue
        where = f"{path}, line {number}"
        if row.endswith("\r"):
            raise ValueError(f"{where}: ends in '\\r' (Windows line ends); merges.txt lines end in '\\n' only")
        parts = row.split(" ")
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"{where}: expected one merge 'left right' (two tokens, one space), got {row!r}")
        merges.append((_from_gpt2_text(parts[0], where), _from_gpt2_text(parts[1], where)))
        lines.append(number)
    return merges, lines


def write_gpt2_files(
    vocab_json: str | os.PathLike,
    merges_txt: str | os.PathLike,
    token_ids: Mapping[bytes, int],
    special_ids: Mapping[str, int],
    merges: Sequence[tuple[bytes, bytes]],
) -> tuple[Path, Path]:
    """Write GPT-2's two files (``vocab.json`` one entry per line, in id order; ``merges.txt`` with a
    ``#version: 0.2`` header, as GPT-2's and Hugging Face's are)."""
    entries = {byte_level_text(token): token_id for token, token_id in token_ids.items()}
    clash = sorted(set(entries) & set(special_ids))
    if clash:
        raise ValueError(f"special token(s) {clash} are spelled like ordinary tokens; vocab.json cannot hold both")
    entries.update(special_ids)
    ordered = sorted(entries.items(), key=lambda item: item[1])
    body = ",\n".join(f" {json.dumps(text, ensure_ascii=False)}: {token_id}" for text, token_id in ordered)
    vocab_path, merges_path = Path(vocab_json), Path(merges_txt)
    vocab_path.write_text("{\n" + body + "\n}\n", encoding="utf-8")
    rows = [f"{byte_level_text(left)} {byte_level_text(right)}\n" for left, right in merges]
    merges_path.write_text("#version: 0.2\n" + "".join(rows), encoding="utf-8")
    return vocab_path, merges_path


def read_tiktoken_ranks(source: str | os.PathLike | Mapping[bytes, int]) -> dict[bytes, int]:
    """Token bytes → rank from a ``.tiktoken`` file or an in-memory dict, checked: non-empty byte tokens,
    non-negative int ranks, no token or rank twice."""
    if isinstance(source, Mapping):
        ranks: dict[bytes, int] = {}
        for token, rank in source.items():
            if not isinstance(token, bytes) or not token:
                raise ValueError(f"ranks: tokens must be non-empty bytes, got {token!r}")
            if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
                raise ValueError(f"ranks: token {token!r} has rank {rank!r}; ranks must be non-negative ints")
            ranks[token] = rank
        _check_unique_ranks(ranks, "ranks")
        token, top = max(ranks.items(), key=lambda item: item[1], default=(b"", -1))
        if top >= id_limit(len(ranks)):
            raise ValueError(f"ranks: {far_id_message(f'token {token!r}', top, len(ranks))}")
        return ranks
    try:
        text = Path(source).read_bytes().decode("ascii")
    except UnicodeDecodeError as err:
        raise ValueError(f"{source}: not a .tiktoken file (not ASCII text: {err})") from err
    rows = text.split("\n")
    if rows and rows[-1] == "":
        rows.pop()
    ranks = {}
    owner: dict[int, int] = {}  # rank → the line that gave it
    for number, row in enumerate(rows, start=1):
        where = f"{source}, line {number}"
        parts = row.split(" ")
        if len(parts) != 2 or not _BASE64.fullmatch(parts[0]) or not _RANK.fullmatch(parts[1]):
            raise ValueError(f"{where}: expected 'base64(token) rank', got {row[:80]!r}")
        try:
            token = base64.b64decode(parts[0], validate=True)
        except binascii.Error as err:
            raise ValueError(f"{where}: invalid base64 {parts[0]!r} ({err})") from None
        if base64.b64encode(token).decode("ascii") != parts[0]:  # one spelling per token: no stray padding
            raise ValueError(f"{where}: invalid base64 {parts[0]!r} (not the canonical encoding of {token!r})")
        if len(parts[1]) > _MAX_ID_DIGITS:
            raise ValueError(f"{where}: {far_id_message(f'token {token!r}', parts[1], None)}")
        rank = int(parts[1])
        if token in ranks:
            raise ValueError(f"{where}: token {token!r} was already given rank {ranks[token]}")
        if rank in owner:
            raise ValueError(f"{where}: rank {rank} was already given on line {owner[rank]}")
        ranks[token], owner[rank] = rank, number
    if not ranks:
        raise ValueError(f"{source}: no tokens")
    top = max(owner)
    if top >= id_limit(len(ranks)):
        token = next(token for token, rank in ranks.items() if rank == top)
        raise ValueError(f"{source}, line {owner[top]}: {far_id_message(f'token {token!r}', top, len(ranks))}")
    return ranks


def _check_unique_ranks(ranks: Mapping[bytes, int], where: str) -> None:
    seen: dict[int, bytes] = {}
    for token, rank in ranks.items():
        if rank in seen:
            raise ValueError(f"{where}: rank {rank} is given to both {seen[rank]!r} and {token!r}")
        seen[rank] = token


def write_tiktoken_ranks(path: str | os.PathLike, ranks: Mapping[bytes, int]) -> Path:
    """Write ``base64(token) rank`` lines in rank order (tiktoken's ``load_tiktoken_bpe`` reads them)."""
    path = Path(path)
    ordered = sorted(ranks.items(), key=lambda item: item[1])
    path.write_text("".join(f"{base64.b64encode(t).decode('ascii')} {r}\n" for t, r in ordered), encoding="ascii")
    return path


def merges_from_ranks(ranks: Mapping[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The merge list that tiktoken ranks encode, in rank order: each token of two or more bytes is what
    tiktoken's rule makes of its own bytes with only lower-ranked tokens, and that must be two parts.

    This is the assumption that the ranks come from BPE training (each token formed by joining two older
    ones); a file that breaks it is refused, naming the token, rather than encoded some third way.
    """
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) < 2:
            continue
        parts = apply_token_ranks(token, ranks, max_rank=rank)
        if len(parts) != 2:
            raise ValueError(
                f"token {token!r} (rank {rank}) is not the join of two lower-ranked tokens (lower ranks make "
                f"{len(parts)} parts of it: {parts[:4]}), so these ranks are not a BPE merge order"
            )
        merges.append((parts[0], parts[1]))
    return merges
