"""The committed data files match their manifest, and regenerating them reproduces every byte."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from minillm import corpus, datagen, tasks

DATA = Path(__file__).resolve().parents[1] / "data"
GENERATED = (
    "prefs_train.jsonl",
    "prefs_val.jsonl",
    "sft_train.jsonl",
    "sft_val.jsonl",
    "stories_train.txt",
    "stories_val.txt",
)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_manifest_lists_every_generated_file_in_sha256sum_format():
    lines = (DATA / datagen.MANIFEST).read_text(encoding="ascii").splitlines()
    assert [line.split("  ")[1] for line in lines] == list(GENERATED)
    assert all(len(line.split("  ")[0]) == 64 for line in lines)


def test_committed_files_match_the_manifest():
    for name, digest in datagen.read_manifest(DATA / datagen.MANIFEST).items():
        assert _sha256(DATA / name) == digest, f"{name} differs from MANIFEST.sha256"


@pytest.mark.slow
def test_regenerating_reproduces_every_file(tmp_path):
    """`python -m minillm.datagen --out DIR` writes files whose hashes equal the committed manifest."""
    subprocess.run([sys.executable, "-m", "minillm.datagen", "--out", str(tmp_path)], check=True, capture_output=True)
    expected = datagen.read_manifest(DATA / datagen.MANIFEST)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*GENERATED, datagen.MANIFEST])
    for name, digest in expected.items():
        assert _sha256(tmp_path / name) == digest, f"regenerated {name} differs"
    assert (tmp_path / datagen.MANIFEST).read_bytes() == (DATA / datagen.MANIFEST).read_bytes()


def test_task_sets_depend_on_the_seed_only():
    assert tasks.sft_set(30, seed=4) == tasks.sft_set(30, seed=4)
    assert tasks.sft_set(30, seed=4) != tasks.sft_set(30, seed=5)
    assert tasks.preference_set(30, seed=4) == tasks.preference_set(30, seed=4)
    assert tasks.preference_set(30, seed=4) != tasks.preference_set(30, seed=5)
    assert corpus.make_splits(100, seed=4) == corpus.make_splits(100, seed=4)
    assert corpus.make_splits(100, seed=4) != corpus.make_splits(100, seed=5)


def test_read_manifest_rejects_a_malformed_line(tmp_path):
    path = tmp_path / "MANIFEST.sha256"
    path.write_text("abc stories.txt\n", encoding="ascii")
    with pytest.raises(ValueError, match="line 1"):
        datagen.read_manifest(path)


def test_data_card_states_the_current_sizes_and_vocabulary():
    card = (DATA / "README.md").read_text(encoding="utf-8")
    for name in GENERATED:
        assert f"| `{name}` | {(DATA / name).stat().st_size:,} |" in card, f"data/README.md: size of {name}"
    train = (DATA / "stories_train.txt").read_text(encoding="ascii")
    assert f"**{len(set(corpus.words(train))):,} distinct words**" in card
    assert f"{len(train.split()):,} words in train" in card
