"""The README's "Use it as a library" snippets run as written, in order, in one namespace.

A snippet that goes stale (a renamed function, a changed signature, a claim that no longer holds) fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def library_snippets() -> list[str]:
    text = README.read_text(encoding="utf-8")
    return re.findall(r"<!-- library -->\n```python\n(.*?)```", text, flags=re.DOTALL)


def test_the_readme_has_the_library_snippets():
    snippets = library_snippets()
    assert len(snippets) >= 5
    assert any("export_pretrained" in s for s in snippets) and any("BPETokenizer.train" in s for s in snippets)


@pytest.mark.slow
def test_library_snippets_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    for number, snippet in enumerate(library_snippets(), start=1):
        try:
            exec(compile(snippet, f"README library snippet {number}", "exec"), namespace)
        except Exception as err:  # name the snippet: the traceback's file name says it too
            raise AssertionError(f"README library snippet {number} failed: {type(err).__name__}: {err}") from err
    printed = capsys.readouterr().out
    assert "parameters; loss" in printed
    assert (tmp_path / "hf_model" / "config.json").is_file()
