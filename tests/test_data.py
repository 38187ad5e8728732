"""Loaders: the course files, a learner's own text, and a clear error for every kind of bad file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
