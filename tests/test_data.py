"""Loaders: the course files, a learner's own text, and a clear error for every kind of bad file."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minillm import data

DATA = Path(__file__).resolve().parents[1] / "data"


def test_load_stories_reads_the_committed_corpus():
    stories = data.load_stories(DATA / "stories_val.txt")
    raw = (DATA / "stories_val.txt").read_text(encoding="utf-8")
    assert stories == raw.rstrip("\n").split("\n\n")
    assert len(stories) == 400


def test_load_jsonl_reads_the_committed_sets_with_their_keys():
    sft = data.load_jsonl(DATA / "sft_val.jsonl", required=data.SFT_KEYS)
    prefs = data.load_jsonl(DATA / "prefs_val.jsonl", required=data.PREFERENCE_KEYS)
    assert len(sft) == 500 and len(prefs) == 500
    assert [m["role"] for m in sft[0]["messages"]] == ["user", "assistant"]


def test_a_learners_own_text(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_bytes("\ufeffFirst para,\r\nstill first.\r\n\r\n\r\n  Second: caf\u00e9 \u2014 ok.  \n\n".encode())
    assert data.load_text(path) == "First para,\nstill first.\n\n\n  Second: caf\u00e9 \u2014 ok.  \n\n"
    assert data.load_stories(path) == ["First para,\nstill first.", "Second: caf\u00e9 \u2014 ok."]
    one = tmp_path / "one.txt"
    one.write_text("no empty line here\nat all", encoding="utf-8")
    assert data.load_stories(one) == ["no empty line here\nat all"]


@pytest.mark.parametrize("loader", [data.load_text, data.load_stories, data.load_jsonl])
def test_missing_file_names_the_file(tmp_path, loader):
    path = tmp_path / "nowhere.txt"
    with pytest.raises(FileNotFoundError, match="nowhere.txt: not found"):
        loader(path)


def test_folder_is_not_a_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="is a folder"):
        data.load_text(tmp_path)


@pytest.mark.parametrize("content", [b"", b"  \n\n\t\n"])
@pytest.mark.parametrize("loader", [data.load_text, data.load_stories, data.load_jsonl])
def test_empty_file_is_an_error(tmp_path, loader, content):
    path = tmp_path / "empty.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="empty.txt: the file is empty"):
        loader(path)


def test_non_utf8_file_names_file_line_and_byte(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("line one\nna\u00efve\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.txt: not UTF-8 text \(byte 11, line 2"):
        data.load_stories(path)


def test_jsonl_bad_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2,}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.jsonl, line 3: not valid JSON"):
        data.load_jsonl(path)


def test_jsonl_line_must_be_an_object(tmp_path):
    path = tmp_path / "list.jsonl"
    path.write_text('{"a": 1}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"list.jsonl, line 2: expected a JSON object, got list"):
        data.load_jsonl(path)


def test_jsonl_missing_keys_are_named(tmp_path):
    path = tmp_path / "prefs.jsonl"
    rows = [{"prompt": "p", "chosen": "c", "rejected": "r"}, {"prompt": "p", "chosen": "c"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(ValueError, match=r"prefs.jsonl, line 2: missing key\(s\) \['rejected'\]"):
        data.load_jsonl(path, required=data.PREFERENCE_KEYS)
    assert len(data.load_jsonl(path)) == 2  # without required keys both lines load


def test_jsonl_skips_blank_lines_and_keeps_order(tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_text('{"i": 0}\n\n{"i": 1}\r\n{"i": 2}', encoding="utf-8")
    assert [r["i"] for r in data.load_jsonl(path)] == [0, 1, 2]


# ------------------------------------------------------------------ documents: one rule, whole or streamed

# Characters that make line ends, blank lines and chunk borders interesting: CR/LF, spaces and tabs, other
# whitespace (form feed, no-break space, NEL, line separator), a byte-order mark, multi-byte letters.
_ALPHABET = ["a", "b", " ", "\t", "\n", "\n", "\r", "\r\n", "\x0c", "\xa0", "\x85", "\u2028", "\ufeff", "é", "€", "🙂"]
_texts = st.lists(st.sampled_from(_ALPHABET), max_size=40).map("".join)


def _reference_documents(text: str) -> list[str]:
    """The rule as a regex: a run of blank lines (only whitespace, as ``str.strip`` sees it) separates."""
    return [block.strip() for block in re.split(r"\n\s*\n", text) if block.strip()]


def _reference_load_text(raw: bytes) -> str:
    return raw.decode("utf-8").removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


@given(_texts)
def test_split_documents_is_the_blank_line_rule(text):
    assert data.split_documents(text) == _reference_documents(text)


def test_blank_lines_may_hold_spaces_and_tabs():
    text = "one\nstill one\n \t \nTwo\n\n\n\t\nthree  \n"
    assert data.split_documents(text) == ["one\nstill one", "Two", "three"]
    assert data.split_documents("a\r\n\r\nb") == ["a", "b"]  # a raw Windows text splits too
    assert data.split_documents("no blank line\n  indented") == ["no blank line\n  indented"]


@settings(max_examples=150, deadline=None)
@given(_texts, st.sampled_from([1, 2, 3, 5, 1 << 20]))
def test_streamed_documents_equal_the_whole_file_split(text, chunk_bytes):
    """Read in pieces of any size (a character, CRLF or BOM cut in two), the file yields the same documents."""
    raw = text.encode()
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        path = Path(folder) / "t.txt"
        path.write_bytes(raw)
        patch.setattr(data, "_CHUNK_BYTES", chunk_bytes)
        expected = _reference_load_text(raw)
        if not expected.strip():
            with pytest.raises(ValueError, match="t.txt: the file is empty"):
                list(data.iter_documents(path))
            return
        assert data.load_text(path) == expected
        if expected[:7].strip():
            assert data.load_text(path, max_chars=7) == expected[:7]
        assert list(data.iter_documents(path)) == data.load_stories(path) == _reference_documents(expected)


def test_iter_documents_of_the_course_corpus_equal_load_stories():
    assert list(data.iter_documents(DATA / "stories_val.txt")) == data.load_stories(DATA / "stories_val.txt")


def test_iter_documents_checks_the_file_before_the_first_document(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.txt: not found"):
        data.iter_documents(tmp_path / "nowhere.txt")  # raised at the call, not at the first next()
    with pytest.raises(FileNotFoundError, match="is a folder"):
        data.iter_documents(tmp_path)


@pytest.mark.parametrize("chunk_bytes", [1, 2, 4, 1 << 20])
def test_non_utf8_error_is_the_same_whatever_the_read_size(tmp_path, monkeypatch, chunk_bytes):
    monkeypatch.setattr(data, "_CHUNK_BYTES", chunk_bytes)
    path = tmp_path / "latin1.txt"
    path.write_bytes("€uro\nline one\n\n".encode() + "na\u00efve\n".encode("latin-1"))  # ï at byte 19
    with pytest.raises(ValueError, match=r"latin1.txt: not UTF-8 text \(byte 19, line 4: b'\\xef'\)"):
        data.load_text(path)
    with pytest.raises(ValueError, match=r"latin1.txt: not UTF-8 text \(byte 19, line 4"):
        list(data.iter_documents(path))


def test_load_text_max_chars_reads_only_the_start(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "_CHUNK_BYTES", 4)
    path = tmp_path / "t.txt"
    path.write_bytes(b"\xef\xbb\xbfab\r\ncd\r\n\r\nef" + b"\xff" * 10)  # invalid bytes after the start
    assert data.load_text(path, max_chars=6) == "ab\ncd\n"
    blank = tmp_path / "blank.txt"
    blank.write_text("   \n\n\n   x", encoding="utf-8")
    with pytest.raises(ValueError, match="blank.txt: the first 3 characters are blank"):
        data.load_text(blank, max_chars=3)
