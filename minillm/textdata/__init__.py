"""From raw text to training data (notebook 13): normalise, deduplicate, near-deduplicate, filter, check contamination.

One module per idea:

* :mod:`~minillm.textdata.normalize` — NFKC, line ends, invisible characters, whitespace;
* :mod:`~minillm.textdata.exact` — exact dedup by a hash of the normalised text;
* :mod:`~minillm.textdata.minhash` — shingles, Jaccard and MinHash signatures;
* :mod:`~minillm.textdata.lsh` — banding (b × r), the S-curve, streaming near-dedup;
* :mod:`~minillm.textdata.quality` — boilerplate lines and Gopher/C4-style document rules;
* :mod:`~minillm.textdata.language` — stop-word shares: which language a page is in (English, Spanish, none);
* :mod:`~minillm.textdata.contamination` — train/test n-gram overlap (GPT-3's 13-grams);
* :mod:`~minillm.textdata.messy` — a seeded messy corpus whose documents know their true kind;
* :mod:`~minillm.textdata.pipeline` — the steps in order, for a list or a file (``python -m minillm.textdata``),
  each language routed to its own corpus.
"""

from minillm.textdata.contamination import Contamination, NgramIndex, contamination
from minillm.textdata.exact import ExactDeduplicator, exact_dedup, text_digest
from minillm.textdata.language import (
    ENGLISH_STOP_WORDS,
    SPANISH_STOP_WORDS,
    english_stop_word_share,
    identify_language,
    is_english,
    stop_word_shares,
)
from minillm.textdata.lsh import LSHIndex, NearDuplicateIndex, candidate_pairs, candidate_probability, lsh_threshold
from minillm.textdata.messy import KEEP_KINDS, KINDS, MessyDocument, corpus_text, messy_corpus
from minillm.textdata.minhash import PRIME, MinHasher, estimate_jaccard, jaccard, shingle_id, shingles
from minillm.textdata.normalize import normalize_text
from minillm.textdata.pipeline import STEPS, CleanReport, Pipeline, clean_documents, clean_file, route_documents
from minillm.textdata.quality import QualityConfig, quality_filter, quality_problems, strip_boilerplate_lines

__all__ = [
    "ENGLISH_STOP_WORDS",
    "KEEP_KINDS",
    "KINDS",
    "PRIME",
    "SPANISH_STOP_WORDS",
    "STEPS",
    "CleanReport",
    "Contamination",
    "ExactDeduplicator",
    "LSHIndex",
    "MessyDocument",
    "MinHasher",
    "NearDuplicateIndex",
    "NgramIndex",
    "Pipeline",
    "QualityConfig",
    "candidate_pairs",
    "candidate_probability",
    "clean_documents",
    "clean_file",
    "contamination",
    "corpus_text",
    "english_stop_word_share",
    "estimate_jaccard",
    "identify_language",
    "exact_dedup",
    "is_english",
    "jaccard",
    "lsh_threshold",
    "messy_corpus",
    "normalize_text",
    "quality_filter",
    "quality_problems",
    "route_documents",
    "shingle_id",
    "shingles",
    "stop_word_shares",
    "strip_boilerplate_lines",
    "text_digest",
]
