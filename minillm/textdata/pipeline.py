"""The cleaning pipeline: normalise → exact dedup → near dedup → quality → language, one document at a time.

Each step either drops the document (and is charged for it in the report) or passes it on, possibly changed
(normalisation rewrites it; the quality step removes boilerplate lines). Cheap, certain steps come first:
after normalisation an exact hash catches every copy that differed only in spelling, and the MinHash index
then only has to look at texts that are not already known. The same :class:`Pipeline` serves a list in memory
(:func:`clean_documents`) and a file of any size (:func:`clean_file`, which holds one document at a time plus
the two dedup indexes).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from minillm.data import iter_documents
from minillm.textdata.exact import ExactDeduplicator
from minillm.textdata.language import is_english
from minillm.textdata.lsh import NearDuplicateIndex
from minillm.textdata.normalize import normalize_text
from minillm.textdata.quality import QualityConfig, quality_filter

#: The steps, in the order they run; a report counts the documents each one removed.
STEPS: tuple[str, ...] = ("normalise", "exact_dedup", "near_dedup", "quality", "language")


@dataclass
class CleanReport:
    """Documents (and characters) in and out, and how many documents each step removed."""

    documents_in: int = 0
    documents_out: int = 0
    chars_in: int = 0
    chars_out: int = 0
    removed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STEPS, 0))

    def lines(self) -> list[str]:
        """The report as printable lines."""
        out = [f"documents in: {self.documents_in:,} ({self.chars_in:,} characters)"]
        out += [f"  removed by {step:<12} {n:>8,}" for step, n in self.removed.items()]
        out.append(f"documents out: {self.documents_out:,} ({self.chars_out:,} characters)")
        return out


class Pipeline:
    """The five steps with their settings and their dedup indexes (state: the documents kept so far)."""

    def __init__(
        self,
        quality: QualityConfig | None = None,
        min_english_share: float = 0.15,
        bands: int = 32,
        rows: int = 4,
        near_threshold: float = 0.5,
        shingle_size: int = 5,
        seed: int = 0,
    ) -> None:
        if not 0.0 <= min_english_share <= 1.0:
            raise ValueError(f"min_english_share must be in [0, 1], got {min_english_share!r}")
        self.quality = QualityConfig() if quality is None else quality
        self.min_english_share = min_english_share
        self.exact = ExactDeduplicator()
        self.near = NearDuplicateIndex(bands, rows, near_threshold, shingle_size, seed)
        self.report = CleanReport()

    def process(self, text: str) -> tuple[str | None, str | None]:
        """``(cleaned text, None)`` for a kept document, ``(None, step)`` for one that ``step`` removed."""
        kept, step = self._decide(text)
        self.report.documents_in += 1
        self.report.chars_in += len(text)
        if kept is None:
            self.report.removed[step] += 1
        else:
            self.report.documents_out += 1
            self.report.chars_out += len(kept)
        return kept, step

    def _decide(self, text: str) -> tuple[str | None, str | None]:
        text = normalize_text(text)
        if not text:
            return None, "normalise"
        if self.exact.is_duplicate(text):
            return None, "exact_dedup"
        # junk that reaches the near-dup index before the quality step drops it costs index memory only: a
        # later copy of that junk is dropped here instead of by the quality step
        if self.near.is_duplicate(text):
            return None, "near_dedup"
        cleaned, _ = quality_filter(text, self.quality)
        if cleaned is None:
            return None, "quality"
        if not is_english(cleaned, self.min_english_share):
            return None, "language"
        return cleaned, None


def clean_documents(documents: Iterable[str], pipeline: Pipeline | None = None) -> tuple[list[str], CleanReport]:
    """The kept documents of an in-memory collection, cleaned, and the pipeline's report."""
    pipeline = Pipeline() if pipeline is None else pipeline
    kept = [cleaned for cleaned, _ in map(pipeline.process, documents) if cleaned is not None]
    return kept, pipeline.report


def clean_file(
    source: str | Path, target: str | Path, pipeline: Pipeline | None = None, overwrite: bool = False
) -> CleanReport:
    """Stream a UTF-8 text file (documents separated by blank lines) through the pipeline into ``target``.

    Memory holds one document and the two dedup indexes, however large the file. ``target`` appears only when
    the whole file is done (written next to it under a temporary name, then renamed); an existing ``target`` is
    replaced only with ``overwrite=True`` (it may be someone's finished work).
    """
    source, target = Path(source), Path(target)
    if target.resolve() == source.resolve():
        raise ValueError(f"{target}: write the cleaned text to another file than the input")
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} already exists; choose another file, or pass overwrite=True (--overwrite)")
    pipeline = Pipeline() if pipeline is None else pipeline
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as out:
            first = True
            for document in iter_documents(source):
                cleaned, _ = pipeline.process(document)
                if cleaned is not None:
                    out.write(cleaned if first else "\n\n" + cleaned)
                    first = False
            if not first:
                out.write("\n")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return pipeline.report
