"""Tokenising a large text file: one process vs worker processes, and Hugging Face ``tokenizers``, same run.

    python benchmarks/bench_tokenize_file.py                 # a 1 GB file (the course stories, repeated)
    python benchmarks/bench_tokenize_file.py --mb 200        # smaller

The file is the course's training stories repeated to ``--mb`` megabytes, written once to ``--folder``. It is
tokenised three ways with the course tokenizer (``data/base``): ``minillm.batches.encode_file`` in one process
on its first ``--prefix-mb`` megabytes (the baseline rate), the same with ``--workers`` worker processes on the
whole file, and ``tokenizers``' batch encoder (the same merges, exported by ``minillm.tokenizer.to_tokenizers``)
on the prefix. Targets: the parallel run at least 2× the one-process rate, and peak memory of every process
below 1 GB, whatever the file's size (it never holds the file). Peak memory is each process's maximum resident
set (``getrusage``): this process, and the largest worker. Both outputs of the prefix are compared byte for byte.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from pathlib import Path

import numpy as np

from minillm.batches import encode_file
from minillm.checkpoint import load_pretrained
from minillm.data import iter_documents
from minillm.tokenizer import to_tokenizers

ROOT = Path(__file__).resolve().parents[1]


def make_file(path: Path, megabytes: int) -> Path:
    """The course stories repeated to ``megabytes`` MB (blank line between copies), written once."""
    if path.is_file() and path.stat().st_size >= megabytes * 10**6:
        return path
    stories = (ROOT / "data" / "stories_train.txt").read_bytes().strip() + b"\n\n"
    with open(path, "wb") as handle:
        written = 0
        while written < megabytes * 10**6:
            handle.write(stories)
            written += len(stories)
    return path


def prefix(path: Path, target: Path, megabytes: int) -> Path:
    with open(path, "rb") as src:
        data = src.read(megabytes * 10**6)
    target.write_bytes(data[: data.rfind(b"\n\n")])  # end at a document boundary
    return target


def rss_mb(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # kilobytes on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=1000, help="size of the test file in MB")
    parser.add_argument("--prefix-mb", type=int, default=100, help="MB for the one-process and tokenizers runs")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/minillm_bench_tokenize"))
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    _, tokenizer, _ = load_pretrained(ROOT / "data" / "base")
    big = make_file(args.folder / f"stories_{args.mb}mb.txt", args.mb)
    small = prefix(big, args.folder / "prefix.txt", args.prefix_mb)
    mb_big, mb_small = big.stat().st_size / 1e6, small.stat().st_size / 1e6

    start = time.perf_counter()
    one = encode_file(tokenizer, small, args.folder / "one.bin")
    one_rate = mb_small / (time.perf_counter() - start)
    print(f"one process:   {mb_small:7.1f} MB in {mb_small / one_rate:6.1f} s = {one_rate:5.2f} MB/s")

    many = encode_file(tokenizer, small, args.folder / "many_prefix.bin", workers=args.workers)
    assert many.read_bytes() == one.read_bytes(), "worker processes must write the same token file"
    start = time.perf_counter()
    encode_file(tokenizer, big, args.folder / "many.bin", workers=args.workers)
    many_rate = mb_big / (time.perf_counter() - start)
    print(f"{args.workers} workers:     {mb_big:7.1f} MB in {mb_big / many_rate:6.1f} s = {many_rate:5.2f} MB/s")
    peak_self, peak_worker = rss_mb(resource.RUSAGE_SELF), rss_mb(resource.RUSAGE_CHILDREN)

    fast = to_tokenizers(tokenizer)
    documents = list(iter_documents(small))
    start = time.perf_counter()
    for i in range(0, len(documents), 1000):
        fast.encode_batch(documents[i : i + 1000])
    hf_rate = mb_small / (time.perf_counter() - start)
    print(f"tokenizers:    {mb_small:7.1f} MB in {mb_small / hf_rate:6.1f} s = {hf_rate:5.2f} MB/s (batch encoder)")
    del documents

    tokens = np.memmap(args.folder / "many.bin", dtype=np.uint16, mode="r")
    print(f"\n{len(tokens):,} tokens from {mb_big:.0f} MB, memory-mapped ({tokens.nbytes / 1e6:.0f} MB of uint16)")
    print(
        f"peak memory while tokenising: this process {peak_self:.0f} MB, largest worker {peak_worker:.0f} MB "
        f"(target < 1000 MB each; the file is {mb_big:.0f} MB)"
    )
    print(
        f"ratio {args.workers} workers / one process = {many_rate / one_rate:.2f} (target >= 2.0) "
        f"{'OK' if many_rate / one_rate >= 2.0 else 'BELOW TARGET'}"
    )
    print(f"ratio minillm with {args.workers} workers / tokenizers batch encoder = {many_rate / hf_rate:.2f}")


if __name__ == "__main__":
    main()
