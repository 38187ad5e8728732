"""The cleaning pipeline: normalise → exact dedup → near dedup → quality → language, one document at a time.

Each step either drops the document (and is charged for it in the report) or passes it on, possibly changed
(normalisation rewrites it; the quality step removes boilerplate lines). The language step *routes* rather than
judges: a page in a known language is training data for that language, so :meth:`Pipeline.route` says which
language each kept document is in, and a pipeline that keeps only English counts the pages of other known
languages it set aside (``report.set_aside``) apart from the ones in no language at all. The dedup steps and the
filters (quality + language) can be switched off one at a time, to measure what each buys.

Cheap, certain steps come first: after normalisation an exact hash catches every copy that differed only in
spelling, and the MinHash index then only has to look at texts that are not already known. The same
:class:`Pipeline` serves a list in memory (:func:`clean_documents`, :func:`route_documents`) and a file of any
size (:func:`clean_file`, which holds one document at a time plus the two dedup indexes).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from minillm.data import iter_documents
from minillm.textdata.exact import ExactDeduplicator
from minillm.textdata.language import STOP_WORDS, identify_language
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
    languages: dict[str, int] = field(default_factory=dict)  # documents kept, by language
    set_aside: dict[str, int] = field(default_factory=dict)  # of those the language step removed: known languages

    def lines(self) -> list[str]:
        """The report as printable lines."""
        out = [f"documents in: {self.documents_in:,} ({self.chars_in:,} characters)"]
        out += [f"  removed by {step:<12} {n:>8,}" for step, n in self.removed.items()]
        if self.set_aside:
            aside = ", ".join(f"{n:,} in {language}" for language, n in sorted(self.set_aside.items()))
            out.append(f"    (of those by language: {aside}, set aside for their own corpus)")
        out.append(f"documents out: {self.documents_out:,} ({self.chars_out:,} characters)")
        if len(self.languages) > 1:
            out.append("  by language: " + ", ".join(f"{lang} {n:,}" for lang, n in sorted(self.languages.items())))
        return out


class Pipeline:
    """The five steps with their settings and their dedup indexes (state: the documents kept so far).

    ``languages``: the languages kept (codes of :data:`~minillm.textdata.language.STOP_WORDS`); ``("en", "es")``
    keeps both and lets :meth:`route` sort them. ``dedup=False`` skips exact and near dedup, ``filters=False``
    skips quality and language (every document that normalises to some text is then kept, language unknown).
    """

    def __init__(
        self,
        quality: QualityConfig | None = None,
        min_english_share: float = 0.15,
        bands: int = 32,
        rows: int = 4,
        near_threshold: float = 0.5,
        shingle_size: int = 5,
        seed: int = 0,
        languages: tuple[str, ...] = ("en",),
        dedup: bool = True,
        filters: bool = True,
    ) -> None:
        if not 0.0 <= min_english_share <= 1.0:
            raise ValueError(f"min_english_share must be in [0, 1], got {min_english_share!r}")
        unknown = sorted(set(languages) - set(STOP_WORDS))
        if unknown or not languages or isinstance(languages, str):
            raise ValueError(f"languages must be a tuple of codes from {sorted(STOP_WORDS)}, got {languages!r}")
        self.quality = QualityConfig() if quality is None else quality
        self.min_english_share = min_english_share  # the least stop-word share of the language a page is in
        self.languages = tuple(languages)
        self.dedup, self.filters = dedup, filters
        self.exact = ExactDeduplicator()
        self.near = NearDuplicateIndex(bands, rows, near_threshold, shingle_size, seed)
        self.report = CleanReport()

    def route(self, text: str) -> tuple[str | None, str]:
        """``(cleaned text, language)`` for a kept document (language ``"?"`` when filters are off), else
        ``(None, step)`` for one that ``step`` removed."""
        kept, where = self._decide(text)
        report = self.report
        report.documents_in += 1
        report.chars_in += len(text)
        if kept is None:
            report.removed[where] += 1
        else:
            report.documents_out += 1
            report.chars_out += len(kept)
            report.languages[where] = report.languages.get(where, 0) + 1
        return kept, where

    def process(self, text: str) -> tuple[str | None, str | None]:
        """``(cleaned text, None)`` for a kept document, ``(None, step)`` for one that ``step`` removed."""
        kept, where = self.route(text)
        return (kept, None) if kept is not None else (None, where)

    def _decide(self, text: str) -> tuple[str | None, str]:
        text = normalize_text(text)
        if not text:
            return None, "normalise"
        if self.dedup:
            if self.exact.is_duplicate(text):
                return None, "exact_dedup"
            # junk that reaches the near-dup index before the quality step drops it costs index memory only: a
            # later copy of that junk is dropped here instead of by the quality step
            if self.near.is_duplicate(text):
                return None, "near_dedup"
        if not self.filters:
            return text, "?"
        cleaned, _ = quality_filter(text, self.quality)
        if cleaned is None:
            return None, "quality"
        language = identify_language(cleaned, self.min_english_share)
        if language not in self.languages:
            if language is not None:  # a page in a language this pipeline does not keep: not junk, elsewhere
                self.report.set_aside[language] = self.report.set_aside.get(language, 0) + 1
            return None, "language"
        return cleaned, language


def clean_documents(documents: Iterable[str], pipeline: Pipeline | None = None) -> tuple[list[str], CleanReport]:
    """The kept documents of an in-memory collection, cleaned, and the pipeline's report."""
    pipeline = Pipeline() if pipeline is None else pipeline
    kept = [cleaned for cleaned, _ in map(pipeline.process, documents) if cleaned is not None]
    return kept, pipeline.report


def route_documents(
    documents: Iterable[str], pipeline: Pipeline | None = None
) -> tuple[dict[str, list[str]], CleanReport]:
    """The kept documents, cleaned, sorted by language (default: a pipeline keeping English and Spanish)."""
    pipeline = Pipeline(languages=tuple(STOP_WORDS)) if pipeline is None else pipeline
    by_language: dict[str, list[str]] = {}
    for cleaned, where in map(pipeline.route, documents):
        if cleaned is not None:
            by_language.setdefault(where, []).append(cleaned)
    return by_language, pipeline.report


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
