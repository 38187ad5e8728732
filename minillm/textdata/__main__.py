"""Command line: ``python -m minillm.textdata clean IN OUT`` and ``... contamination TRAIN TEST``.

Only argument parsing lives here; the work is :func:`~minillm.textdata.pipeline.clean_file` and
:class:`~minillm.textdata.contamination.NgramIndex`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from minillm.data import iter_documents
from minillm.textdata.contamination import NgramIndex, contamination
from minillm.textdata.pipeline import Pipeline, clean_file
from minillm.textdata.quality import QualityConfig


def _checked(
    convert: Callable[[str], float], what: str, ok: Callable[[float], bool], rule: str
) -> Callable[[str], float]:
    """An argparse type: ``convert(text)``, refused while parsing unless ``ok`` (argparse then names the flag)."""

    def parse(text: str) -> float:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {text}")
        return value

    return parse


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """A whole number ≥ ``minimum``."""
    return _checked(int, "a whole number", lambda v: v >= minimum, f"at least {minimum}")


def _fraction(low_open: bool) -> Callable[[str], float]:
    """A number in [0, 1], or (0, 1] with ``low_open``."""
    if low_open:
        return _checked(float, "a number", lambda v: 0.0 < v <= 1.0, "in (0, 1]")
    return _checked(float, "a number", lambda v: 0.0 <= v <= 1.0, "in [0, 1]")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m minillm.textdata", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    clean = sub.add_parser("clean", help="normalise, deduplicate and filter a UTF-8 text file (blank-line documents)")
    clean.add_argument("source", help="input text file; documents are separated by blank lines")
    clean.add_argument("target", help="where to write the kept documents (a new file)")
    clean.add_argument("--overwrite", action="store_true", help="replace the target if it exists")
    positive, fraction = _int_at_least(1), _fraction(low_open=False)
    clean.add_argument("--bands", type=positive, default=32, help="LSH bands b (default 32)")
    clean.add_argument("--rows", type=positive, default=4, help="LSH rows per band r (default 32 × 4 = 128 hashes)")
    clean.add_argument(
        "--near-threshold", type=_fraction(low_open=True), default=0.5, help="estimated Jaccard of a near-duplicate"
    )
    clean.add_argument("--shingle-size", type=positive, default=5, help="words per shingle (default 5)")
    clean.add_argument(
        "--min-words", type=_int_at_least(0), default=QualityConfig.min_words, help="shortest document kept"
    )
    clean.add_argument("--min-english", type=fraction, default=0.15, help="least share of English stop words kept")
    check = sub.add_parser("contamination", help="n-gram overlap of a test file with a training file")
    check.add_argument("train")
    check.add_argument("test")
    check.add_argument("--n", type=positive, default=13, help="n-gram length (GPT-3 used 13)")
    args = parser.parse_args(argv)

    try:
        _run(args)
    except (FileNotFoundError, FileExistsError, ValueError) as error:
        parser.error(str(error))  # a bad file or setting: one line, not a traceback


def _run(args: argparse.Namespace) -> None:
    if args.command == "clean":
        pipeline = Pipeline(
            quality=QualityConfig(min_words=args.min_words),
            min_english_share=args.min_english,
            bands=args.bands,
            rows=args.rows,
            near_threshold=args.near_threshold,
            shingle_size=args.shingle_size,
        )
        report = clean_file(args.source, args.target, pipeline, overwrite=args.overwrite)
        print("\n".join(report.lines()))
    else:
        index = NgramIndex(iter_documents(args.train), args.n)
        scores = contamination(index, iter_documents(args.test))
        dirty = sum(s.dirty for s in scores)
        overlap = sum(s.overlap for s in scores) / max(1, sum(s.ngrams for s in scores))
        print(f"{len(scores):,} test documents: {dirty:,} share a {args.n}-gram with the training text")
        print(f"{overlap:.1%} of all test {args.n}-grams occur in the training text ({len(index):,} distinct)")


if __name__ == "__main__":
    main()
