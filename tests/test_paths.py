"""``data_path``: a missing file's error names the command that makes it, not one command for everything."""

from __future__ import annotations

import pytest

from minillm import paths


@pytest.fixture
def empty_data(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "data_dir", lambda: tmp_path)
    return tmp_path


@pytest.mark.parametrize("name", ["stories_train.txt", "sft_val.jsonl"])
def test_a_missing_generated_file_names_the_generator(empty_data, name):
    with pytest.raises(FileNotFoundError, match=r"minillm\.datagen"):
        paths.data_path(name)


@pytest.mark.parametrize("name", ["base", "base/tokenizer.json", "posttrain/sft", "modern/modern_llm.json"])
def test_a_missing_model_or_result_points_to_the_data_readme_not_the_generator(empty_data, name):
    with pytest.raises(FileNotFoundError, match=r"data/README\.md") as error:
        paths.data_path(name)
    assert "datagen" not in str(error.value)


def test_a_present_file_is_returned(empty_data):
    (empty_data / "stories_val.txt").write_text("x")
    assert paths.data_path("stories_val.txt") == empty_data / "stories_val.txt"
