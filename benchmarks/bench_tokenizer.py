"""Benchmark: minillm's BPE against `tokenizers` (training and encoding) and against the naive trainer.

Run from the repository root:  python benchmarks/bench_tokenizer.py [--quick] [--skip-naive]

Everything is timed side by side in one run, so the printed *ratios* are meaningful even on a busy
machine. Targets (issue 3): training at ~5 MB / vocab 4096 within 5x of `tokenizers`; at least 50x
faster than the naive trainer at 1 MB / vocab 1024 (the only naive run: it takes minutes); encoding
one long string at least as fast as `tokenizers`. Issue #16: 200 000 letters without a space (one
pre-token) encode in time close to `tokenizers`', not the seconds a rescan-per-merge loop takes.
`tokenizers` breaks ties between equally frequent pairs differently, so merge lists are compared and the
first difference reported. The course corpus has a small vocabulary of words: past ~2100 tokens every
pre-token is one token and training stops early (both libraries); the row then says which size was reached.
Issue #25: loading GPT-2's published format (``vocab.json`` + ``merges.txt``) of a 50k vocabulary (GPT-2's
size), against `tokenizers` loading the same two files and against minillm's own tiktoken loader on the same
ranks (the files are written by `tokenizers` from random words, since the course corpus cannot fill that many
tokens). The GPT-2 load took 4-5 s at 50k while it rebuilt the 256-entry byte table for every token.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import time
from collections import Counter

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from minillm.paths import data_path
from minillm.tokenizer import BPETokenizer, train_bpe_naive
from minillm.tokenizer.hf_export import to_tokenizers
from minillm.tokenizer.io import byte_to_unicode
from minillm.tokenizer.pretokenize import compile_pattern, pretokenize

SPECIALS = ["<|endoftext|>"]


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def hf_train(text: str, vocab_size: int) -> tuple[Tokenizer, list[tuple[bytes, bytes]]]:
    """`tokenizers`' BPE trainer, configured like ours: byte-level alphabet, GPT-2 split, no min count."""
    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=0,
        show_progress=False,
    )
    hf.train_from_iterator([text], trainer=trainer)
    inverse = {ch: b for b, ch in byte_to_unicode().items()}
    raw = json.loads(hf.to_str())["model"]["merges"]
    pairs = [m.split(" ") if isinstance(m, str) else m for m in raw]
    merges = [(bytes(inverse[c] for c in a), bytes(inverse[c] for c in b)) for a, b in pairs]
    return hf, merges


def pair_count_after(text: str, merges: list[tuple[bytes, bytes]], pairs: list[tuple[bytes, bytes]]) -> list[int]:
    """How often each of ``pairs`` occurs as adjacent tokens once ``merges`` are applied to ``text``."""
    partial = BPETokenizer(merges, special_tokens=())
    counts = dict.fromkeys(pairs, 0)
    for word, n in Counter(pretokenize(text)).items():
        tokens = [partial.id_to_token(i) for i in partial.encode_ordinary(word)]
        for pair in zip(tokens, tokens[1:], strict=False):
            if pair in counts:
                counts[pair] += n
    return [counts[p] for p in pairs]


def first_difference(ours: list, theirs: list, text: str | None = None) -> str:
    for i, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a != b:
            note = ""
            if text is not None:  # were the two pairs equally frequent at that point?
                count_a, count_b = pair_count_after(text, ours[:i], [a, b])
                note = f" (counts then: {count_a} vs {count_b}{', a tie' if count_a == count_b else ''})"
            return f"differ first at merge {i}: ours {a!r}, theirs {b!r}{note}"
    if len(ours) != len(theirs):
        return f"agree on the first {min(len(ours), len(theirs))}, lengths {len(ours)} vs {len(theirs)}"
    return f"identical ({len(ours)} merges)"


def bench_training(text: str, label: str, sizes: list[int], naive_sizes: list[int]) -> None:
    print(f"\n== training on {label} ({len(text.encode()) / 1e6:.2f} MB) ==")
    compile_pattern("gpt2")  # the regex is compiled once per process; not part of training
    for vocab_size in sizes:
        ours, t_ours = timed(BPETokenizer.train, text, vocab_size, special_tokens=SPECIALS)
        (hf, hf_merges), t_hf = timed(hf_train, text, vocab_size)
        versus_hf = first_difference(ours.merges, hf_merges, text)
        reached = (
            f" (reached {ours.vocab_size}/{hf.get_vocab_size()}: out of pairs)" if ours.vocab_size < vocab_size else ""
        )
        print(
            f"vocab {vocab_size:5d}{reached}: minillm {t_ours:7.2f} s | tokenizers {t_hf:6.2f} s | "
            f"minillm/tokenizers = {t_ours / t_hf:5.2f}x | merges vs tokenizers: {versus_hf}"
        )
        if vocab_size not in naive_sizes:
            continue
        naive, t_naive = timed(train_bpe_naive, text, vocab_size, SPECIALS)
        same = "identical" if naive == ours.merges else first_difference(ours.merges, naive)
        print(f"      naive {t_naive:7.2f} s | naive/minillm = {t_naive / t_ours:6.1f}x | merges vs naive: {same}")


def bench_encoding(text: str, vocab_size: int) -> None:
    print(f"\n== encoding ({len(text.encode()) / 1e6:.2f} MB, vocab {vocab_size}) ==")
    trained = BPETokenizer.train(text, vocab_size, special_tokens=SPECIALS)
    hf = to_tokenizers(trained)
    megabytes = len(text.encode()) / 1e6
    compile_pattern("gpt2")  # the regex is compiled once per process; not part of encoding

    cold = BPETokenizer(trained.merges, SPECIALS)  # empty pre-token cache: a fair first pass
    ids, t_ours = timed(cold.encode, text)
    hf_ids, t_hf = timed(lambda: hf.encode(text).ids)
    print(
        f"one long string: minillm {megabytes / t_ours:6.2f} MB/s | tokenizers {megabytes / t_hf:6.2f} MB/s | "
        f"minillm/tokenizers speed = {t_hf / t_ours:5.2f}x | identical ids: {ids == hf_ids}"
    )
    lines = [line for line in text.split("\n") if line]
    cold = BPETokenizer(trained.merges, SPECIALS)
    batch, t_ours = timed(cold.encode_batch, lines)
    hf_batch, t_hf = timed(lambda: [e.ids for e in hf.encode_batch(lines)])
    print(
        f"batch of {len(lines)} paragraphs: minillm {megabytes / t_ours:6.2f} MB/s | tokenizers "
        f"{megabytes / t_hf:6.2f} MB/s | minillm/tokenizers speed = {t_hf / t_ours:5.2f}x | "
        f"identical ids: {batch == hf_batch}"
    )
    bench_unspaced(trained, hf)


def bench_unspaced(trained: BPETokenizer, hf: Tokenizer, letters: int = 200_000) -> None:
    """One pre-token of ``letters`` pseudo-random a-z letters: the merge loop's worst case (issue #16).

    Prose splits into short words, so the per-word merge loop hardly matters there; a text without spaces
    (a long identifier, a base64 blob, a language written without spaces) is one long pre-token, and
    rescanning it for every merge that applies cost up to its length squared.
    """
    text = "".join(random.Random(0).choices(string.ascii_lowercase, k=letters))
    cold = BPETokenizer(trained.merges, SPECIALS)
    ids, t_ours = timed(cold.encode, text)
    hf_ids, t_hf = timed(lambda: hf.encode(text).ids)
    print(
        f"{letters} letters, no spaces: minillm {t_ours:6.3f} s | tokenizers {t_hf:6.3f} s | "
        f"minillm/tokenizers time = {t_ours / t_hf:6.2f}x | identical ids: {ids == hf_ids}"
    )


def bench_gpt2_load(vocab_size: int) -> None:
    """Time BPETokenizer.from_gpt2_files against tokenizers' ByteLevelBPETokenizer on the same two files, and
    against BPETokenizer.from_tiktoken_ranks on the same tokens and ids (the loader without the text alphabet)."""
    import tempfile
    from pathlib import Path

    from tokenizers import ByteLevelBPETokenizer

    rng = random.Random(0)
    words = (
        "".join(rng.choice("etaoinshrdlucmfwyp") for _ in range(rng.randint(2, 7))) for _ in range(vocab_size * 14)
    )
    hf = ByteLevelBPETokenizer()
    hf.train_from_iterator([" ".join(words)], vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        hf.save_model(tmp)
        vocab, merges = Path(tmp) / "vocab.json", Path(tmp) / "merges.txt"
        ours, t_ours = timed(BPETokenizer.from_gpt2_files, vocab, merges, special_tokens=SPECIALS)
        _, t_hf = timed(ByteLevelBPETokenizer, str(vocab), str(merges))
        ranks = ours.save_tiktoken_ranks(Path(tmp) / "ranks.tiktoken")  # the same tokens and ids
        tiktoken_style, t_ranks = timed(BPETokenizer.from_tiktoken_ranks, ranks)
    same = "same merges" if tiktoken_style.merges == ours.merges else "merges differ"
    print(
        f"\nGPT-2 files, {ours.vocab_size:,} tokens: minillm from_gpt2_files {t_ours:.2f} s | tokenizers "
        f"{t_hf:.3f} s ({t_ours / t_hf:.1f}x) | minillm from_tiktoken_ranks {t_ranks:.2f} s "
        f"(gpt2/tiktoken = {t_ours / t_ranks:.2f}x, {same})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small slices only (a smoke run)")
    parser.add_argument("--skip-naive", action="store_true", help="skip the naive trainer (minutes at 1 MB)")
    args = parser.parse_args()
    corpus = data_path("stories_train.txt").read_text(encoding="utf-8")
    print(f"course corpus: {len(corpus.encode()) / 1e6:.2f} MB; {time.strftime('%Y-%m-%d %H:%M')}")
    if args.quick:
        bench_training(corpus[:100_000], "a 100 kB slice", [512, 1024], [] if args.skip_naive else [512])
        bench_encoding(corpus[:200_000], 1024)
        bench_gpt2_load(5000)
        return
    one_mb = corpus[:1_000_000]
    bench_training(one_mb, "a 1 MB slice", [512, 1024, 4096], [] if args.skip_naive else [1024])
    bench_training(corpus, "the whole corpus (~5 MB)", [512, 1024, 4096], [])
    bench_encoding(corpus, 4096)
    bench_gpt2_load(50000)


if __name__ == "__main__":
    main()
