"""Write every course data file and its manifest: ``python -m minillm.datagen --out DIR [--seed N]``.

The output depends only on the seed: running it again reproduces each file byte for byte, and
``data/MANIFEST.sha256`` (``sha256sum`` format, so ``sha256sum -c MANIFEST.sha256`` works inside
``data/``) records what the committed files must hash to.

It writes only where told (``--out`` is required: run from any folder, it must not rewrite the
repository's ``data/`` by accident), and never replaces a file with different content unless asked
(``--overwrite``): ``--out data`` with the default seed rewrites the committed files byte for byte, while
another seed into ``data/`` is refused, naming the files it would change.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from minillm import corpus, tasks
from minillm.run_folder import DiskFullError, RunFolderError, refuse_to_replace, sha256_file, write_all_atomically

SEED = 0
N_STORIES = 8000
STORY_VAL_FRACTION = 0.05
N_SFT = 5000
N_PREFERENCES = 5000
TASK_VAL_FRACTION = 0.10
MANIFEST = "MANIFEST.sha256"


def _text_file(stories: list[str]) -> bytes:
    """One story per paragraph, stories separated by exactly one empty line."""
    return ("\n\n".join(stories) + "\n").encode("ascii")


def _jsonl_file(records: list[dict]) -> bytes:
    return "".join(json.dumps(record, ensure_ascii=True) + "\n" for record in records).encode("ascii")


def _split(records: list, val_fraction: float) -> tuple[list, list]:
    n_val = round(len(records) * val_fraction)
    return records[: len(records) - n_val], records[len(records) - n_val :]


def generate_files(seed: int = SEED) -> dict[str, bytes]:
    """File name → content of every generated data file (the manifest excluded)."""
    train, val = corpus.make_splits(N_STORIES, seed, STORY_VAL_FRACTION)
    sft_train, sft_val = _split(tasks.sft_set(N_SFT, seed), TASK_VAL_FRACTION)
    prefs_train, prefs_val = _split(tasks.preference_set(N_PREFERENCES, seed), TASK_VAL_FRACTION)
    return {
        "stories_train.txt": _text_file(train),
        "stories_val.txt": _text_file(val),
        "sft_train.jsonl": _jsonl_file(sft_train),
        "sft_val.jsonl": _jsonl_file(sft_val),
        "prefs_train.jsonl": _jsonl_file(prefs_train),
        "prefs_val.jsonl": _jsonl_file(prefs_val),
    }


def manifest(files: dict[str, bytes]) -> str:
    """``sha256sum``-style lines ("<hex>  <name>"), sorted by name."""
    return "".join(f"{hashlib.sha256(files[name]).hexdigest()}  {name}\n" for name in sorted(files))


def read_manifest(path: Path) -> dict[str, str]:
    """File name → expected SHA-256 from a manifest file."""
    entries = {}
    for number, line in enumerate(path.read_text(encoding="ascii").splitlines(), start=1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64:
            raise ValueError(f"{path}, line {number}: expected '<sha256>  <name>', got {line!r}")
        entries[name] = digest
    return entries


def changed_files(out_dir: Path, files: dict[str, bytes]) -> list[str]:
    """Names of the files (and manifest) in ``out_dir`` that writing ``files`` would change."""
    wanted = {**files, MANIFEST: manifest(files).encode("ascii")}
    return [
        name
        for name, content in wanted.items()
        if (out_dir / name).is_file() and sha256_file(out_dir / name) != hashlib.sha256(content).hexdigest()
    ]


def write_files(out_dir: Path, files: dict[str, bytes], overwrite: bool = False) -> None:
    """Write the files and their manifest into ``out_dir`` (created if needed).

    A file already there with other content (the committed data and another seed, or someone's own
    files) is replaced only with ``overwrite=True``; otherwise :class:`~minillm.run_folder.RunFolderError`
    names the folder and the files, and nothing is written. A full disk raises
    :class:`~minillm.run_folder.DiskFullError` and replaces no file.
    """
    if not overwrite:
        refuse_to_replace(
            out_dir,
            [out_dir / name for name in changed_files(out_dir, files)],
            what="files with other content",
            fix="pass --overwrite to replace them, or choose another --out",
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    # every file goes to a temporary file first and is renamed into place, the manifest last: a full disk or a
    # kill leaves no truncated data file, and a manifest only beside the files it lists
    staged = {out_dir / name: content for name, content in files.items()}
    write_all_atomically({**staged, out_dir / MANIFEST: manifest(files).encode("ascii")})


def describe(files: dict[str, bytes]) -> str:
    """A summary for the data card: bytes and records per file, and the corpus's distinct words."""
    lines = []
    for name in sorted(files):
        content = files[name].decode("ascii")
        n = content.count("\n\n") + 1 if name.endswith(".txt") else content.count("\n")
        unit = "stories" if name.endswith(".txt") else "records"
        lines.append(f"{name}: {len(files[name]):,} bytes, {n:,} {unit}")
    train_words = set(corpus.words(files["stories_train.txt"].decode("ascii")))
    lines.append(f"distinct words in stories_train.txt: {len(train_words):,}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Parse flags, generate, write; a refused write exits with ``error: ...`` and writes nothing."""
    parser = argparse.ArgumentParser(prog="python -m minillm.datagen", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        help="output folder (required; `--out data` from the repository root regenerates the committed data)",
    )
    parser.add_argument("--seed", type=int, default=SEED, help=f"generator seed (default {SEED}: the committed data)")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace files in --out whose content differs (refused otherwise)"
    )
    args = parser.parse_args(argv)
    if args.out is None:  # before the generator runs: no default folder to rewrite by accident
        parser.error(
            "--out is required: pass --out data (from the repository root) to regenerate the committed data, "
            "or --out DIR to write somewhere else"
        )
    files = generate_files(args.seed)
    try:
        write_files(args.out, files, overwrite=args.overwrite)
    except (RunFolderError, DiskFullError) as error:
        raise SystemExit(f"error: {error}") from error
    print(f"wrote {len(files)} files and {MANIFEST} to {args.out}")
    print(describe(files))


if __name__ == "__main__":
    main()
