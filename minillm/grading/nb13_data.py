"""Graders for notebook 13: word shingles, the Jaccard similarity, MinHash signatures and LSH banding, and
Exercise 2's answer (the banding that meets both probability targets with the fewest hashes).

Each grader takes what the learner defined in the notebook and returns what the rest of the notebook should
use: the learner's own version when it passes, ``minillm``'s otherwise. The wrong variants below are the
mistakes the graders recognise by their results; they are written here only to be recognised.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from typing import Any

import numpy as np

from minillm.grading.core import Build, Mistake, Probe, grade
from minillm.textdata import MinHasher, candidate_pairs, candidate_probability, jaccard, normalize_text, shingles
from minillm.textdata.minhash import PRIME

BUILDS = ("my_shingles", "my_jaccard", "my_signature", "my_lsh_candidates", "choose_banding")


# --------------------------------------------------------------------------------------------------- shingles
def _shingles_case(name: str, text: str, n: int | None = None) -> Probe:
    def run(my_shingles: Any) -> Any:
        return my_shingles(text) if n is None else my_shingles(text, n)

    return Probe(name, run)


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", normalize_text(text).casefold())


def _runs(words: list[str], n: int, step: int = 1, stop: int = 1) -> list[tuple[str, ...]]:
    return [tuple(words[i : i + n]) for i in range(0, len(words) - n + stop, step)]


def _not_casefolded(text, n=5):
    return set(_runs(re.findall(r"\w+", normalize_text(text)), n))


def _punctuation_kept(text, n=5):
    return set(_runs(normalize_text(text).casefold().split(), n))


def _not_normalised(text, n=5):
    return set(_runs(re.findall(r"\w+", text.casefold()), n))


def _last_shingle_missed(text, n=5):
    return set(_runs(_words(text), n, stop=0))


def _every_n_words(text, n=5):
    return set(_runs(_words(text), n, step=n))


def _as_a_list(text, n=5):
    return _runs(_words(text), n)


def _characters(text, n=5):
    chars = normalize_text(text).casefold()
    return {chars[i : i + n] for i in range(len(chars) - n + 1)}


_REPEATS = (
    "Once upon a time, a girl named Lily found a red ball. Once upon a time, a girl named Lily found a red ball! "
    "She played with the ball all day."
)
_LOOKALIKES = (
    "Tom\u00a0had a ｂｉｇ dog. The dog was won\u00adderful, and Tom loved the dog. They ran to the park and "
    "played with a stick."
)

SHINGLES = Build(
    name="my_shingles",
    what="the shingle set",
    truth=shingles,
    truth_name="minillm.textdata.shingles",
    fallback=shingles,
    fallback_name="minillm.textdata.shingles",
    probes=(
        _shingles_case("a story with a repeated sentence, capitals and punctuation (n = 5)", _REPEATS),
        _shingles_case(
            "look-alike characters: no-break space, full-width letters, a soft hyphen (n = 3)", _LOOKALIKES, 3
        ),
        _shingles_case("the same story, shingles of 2 words", _REPEATS + " " + _LOOKALIKES, 2),
    ),
    mistakes=(
        Mistake(
            "shingles kept as a list",
            "return a set: a shingle that occurs twice counts once, and order does not matter for Jaccard.",
            _as_a_list,
        ),
        Mistake(
            "shingles taken every n words",
            "shingles overlap: one starts at every word, words[i:i + n] for i in range(len(words) − n + 1).",
            _every_n_words,
        ),
        Mistake(
            "the last shingle left out",
            "n words fit len(words) − n + 1 times: range(len(words) − n + 1).",
            _last_shingle_missed,
        ),
        Mistake("words not case-folded", "casefold() the normalised text before finding the words.", _not_casefolded),
        Mistake(
            "punctuation kept in the words",
            "take the words with re.findall(r'\\w+', …), not split(): 'ball.' and 'ball!' are both 'ball'.",
            _punctuation_kept,
        ),
        Mistake(
            "text not normalised first",
            "run my_normalize (NFKC, invisible characters out) before finding the words.",
            _not_normalised,
        ),
        Mistake("shingles of characters, not words", "a shingle is a tuple of n consecutive words.", _characters),
    ),
    what_is_compared="shingle set",
)


def my_shingles(learner: Any) -> Any:
    """Grade ``my_shingles(text, n=5) -> set of n-word tuples`` (normalised, case-folded, punctuation dropped)."""
    return grade(SHINGLES, learner)


# ---------------------------------------------------------------------------------------------------- Jaccard
def _indicator_jaccard(a: set, b: set) -> float:
    """The reference: indicator vectors over A ∪ B (numpy), the share of the union's elements that are in both."""
    union = list(a | b)
    in_a = np.array([x in a for x in union])
    in_b = np.array([x in b for x in union])
    return float((in_a & in_b).sum() / len(union))


def _words_set(text: str) -> set[str]:
    return set(text.split())


_JACCARD_PAIRS = {
    "six and four elements, three shared": [
        (_words_set("the cat sat on a mat"), _words_set("the cat ate a"))
    ],  # 6 and 4, shared: the cat a
    "shingle sets of an edited copy": [
        (shingles(_REPEATS, 3), shingles(_REPEATS.replace("red", "blue"), 3)),
    ],
    "disjoint, identical, one inside the other, one empty": [
        ({1, 2, 3}, {4, 5}),
        ({("a", "b"), ("b", "c")}, {("a", "b"), ("b", "c")}),
        (set(range(10)), set(range(3))),
        (set(), {7, 8}),
    ],
}


def _jaccard_case(name: str) -> Probe:
    pairs = _JACCARD_PAIRS[name]

    def run(my_jaccard: Any) -> Any:
        values = tuple(my_jaccard(set(a), set(b)) for a, b in pairs)
        return values[0] if len(values) == 1 else values

    return Probe(name, run)


def _over_sum_of_sizes(a, b):
    return len(a & b) / (len(a) + len(b))


def _dice(a, b):
    return 2 * len(a & b) / (len(a) + len(b))


def _overlap_coefficient(a, b):
    return len(a & b) / min(len(a), len(b)) if a and b else 0.0


def _over_first_set(a, b):
    return len(a & b) / len(a) if a else 0.0


def _integer_division(a, b):
    return len(a & b) // len(a | b)


JACCARD = Build(
    name="my_jaccard",
    what="the Jaccard similarity",
    truth=_indicator_jaccard,
    truth_name="indicator vectors over A ∪ B (numpy)",
    fallback=jaccard,
    fallback_name="minillm.textdata.jaccard",
    probes=tuple(_jaccard_case(name) for name in _JACCARD_PAIRS),
    mistakes=(
        Mistake(
            "|A ∩ B| divided by |A| + |B|",
            "the union counts the shared elements once: |A ∪ B| = |A| + |B| − |A ∩ B|.",
            _over_sum_of_sizes,
        ),
        Mistake("Dice's coefficient", "Jaccard is |A ∩ B| / |A ∪ B|, not 2|A ∩ B| / (|A| + |B|).", _dice),
        Mistake(
            "the overlap coefficient",
            "divide by the union, not by the smaller set: a set inside a bigger one is not a near-duplicate of it.",
            _overlap_coefficient,
        ),
        Mistake("|A ∩ B| divided by |A|", "divide by |A ∪ B|, which treats A and B alike.", _over_first_set),
        Mistake(
            "integer division",
            "use / (true division): // rounds every similarity below 1 down to 0.",
            _integer_division,
        ),
    ),
    rtol=1e-12,
    atol=1e-15,
    what_is_compared="similarity",
)


def my_jaccard(learner: Any) -> Any:
    """Grade ``my_jaccard(a, b) -> float``: |A ∩ B| / |A ∪ B| for two sets, not both empty."""
    return grade(JACCARD, learner)


# -------------------------------------------------------------------------------------------------- signature
def _hash_family(seed: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """k functions (a_i x + b_i) mod p drawn as MinHasher draws them (uint64 arrays), from their own seed."""
    rng = np.random.default_rng(seed)
    return rng.integers(1, PRIME, size=k, dtype=np.uint64), rng.integers(0, PRIME, size=k, dtype=np.uint64)


def _as_list(value: Any) -> Any:
    return value.tolist() if isinstance(value, np.ndarray) else value


def _signature_case(name: str, seed: int, k: int, n_ids: int) -> Probe:
    a, b = _hash_family(seed, k)
    ids = [int(x) for x in np.random.default_rng(seed + 100).choice(PRIME, size=n_ids, replace=False)]

    def run(my_signature: Any) -> Any:
        return _as_list(my_signature(list(ids), a.copy(), b.copy()))

    return Probe(name, run)


def _numpy_minima(shingle_ids, a, b):
    """The reference: the [k, n] table (a_i x_j + b_i) mod p in uint64 (< 2^62, exact), minimum over the ids."""
    x = np.asarray(shingle_ids, dtype=np.uint64)
    table = (
        np.asarray(a, dtype=np.uint64)[:, None] * x[None, :] + np.asarray(b, dtype=np.uint64)[:, None]
    ) % np.uint64(PRIME)
    return [int(v) for v in table.min(axis=1)]


def _minhasher_signature(shingle_ids, a, b):
    """minillm's MinHasher.signature_of_ids with the given a, b, as a list (the notebook's interface)."""
    hasher = MinHasher(num_hashes=len(a))
    hasher.a, hasher.b = np.asarray(a, dtype=np.uint64), np.asarray(b, dtype=np.uint64)
    return [int(v) for v in hasher.signature_of_ids(shingle_ids)]


def _hashes(shingle_ids, ai, bi):
    return [(int(ai) * x + int(bi)) % PRIME for x in shingle_ids]


def _one_hash(shingle_ids, a, b):
    return [min(_hashes(shingle_ids, a[0], b[0]))] * len(a)


def _maxima(shingle_ids, a, b):
    return [max(_hashes(shingle_ids, ai, bi)) for ai, bi in zip(a, b, strict=True)]


def _hash_of_smallest_id(shingle_ids, a, b):
    return [(int(ai) * min(shingle_ids) + int(bi)) % PRIME for ai, bi in zip(a, b, strict=True)]


def _no_modulus(shingle_ids, a, b):
    return [min(int(ai) * x + int(bi) for x in shingle_ids) for ai, bi in zip(a, b, strict=True)]


def _argmin(shingle_ids, a, b):
    return [int(np.argmin(_hashes(shingle_ids, ai, bi))) for ai, bi in zip(a, b, strict=True)]


SIGNATURE = Build(
    name="my_signature",
    what="the MinHash signature",
    truth=_numpy_minima,
    truth_name="min over ids of (a·x + b) mod p in numpy uint64",
    fallback=_minhasher_signature,
    fallback_name="minillm.textdata.MinHasher.signature_of_ids",
    probes=(
        _signature_case("16 hash functions, 40 shingle ids", 1, 16, 40),
        _signature_case("128 hash functions, 200 shingle ids", 2, 128, 200),
        _signature_case("8 hash functions, a single shingle id", 3, 8, 1),
    ),
    mistakes=(
        Mistake(
            "one hash for every row",
            "each position i of the signature uses its own function: (a[i]·x + b[i]) mod p.",
            _one_hash,
        ),
        Mistake("the maximum, not the minimum", "a signature holds each function's SMALLEST hash.", _maxima),
        Mistake(
            "the hash of the smallest id",
            "hash every shingle id first, then take the minimum of the hashes (not the hash of min(ids)).",
            _hash_of_smallest_id,
        ),
        Mistake(
            "the hash without mod p",
            "(a·x + b) mod p: without the modulus the minimum is just a·min(x) + b.",
            _no_modulus,
        ),
        Mistake(
            "the position of the minimum, not its value",
            "keep the smallest hash value itself (min), not where it is (argmin).",
            _argmin,
        ),
    ),
    rtol=0.0,
    atol=0.0,
    what_is_compared="signature",
)


def my_signature(learner: Any) -> Any:
    """Grade ``my_signature(shingle_ids, a, b) -> list of k ints``: position i is min over x of (a_i x + b_i) mod p."""
    return grade(SIGNATURE, learner)


# ------------------------------------------------------------------------------------------------------- LSH
def _brute_force_pairs(sigs, bands, rows):
    """The reference, straight from the definition: (i, j), i < j, when ANY band's r values are all equal."""
    sigs = [np.asarray(s) for s in sigs]
    return {
        (i, j)
        for i, j in itertools.combinations(range(len(sigs)), 2)
        if any(
            np.array_equal(sigs[i][k * rows : (k + 1) * rows], sigs[j][k * rows : (k + 1) * rows]) for k in range(bands)
        )
    }


def _buckets_to_pairs(buckets) -> set[tuple[int, int]]:
    return {(i, j) for ids in buckets.values() for i, j in itertools.combinations(ids, 2)}


def _all_bands(sigs, bands, rows):
    return {(i, j) for i, j in itertools.combinations(range(len(sigs)), 2) if np.array_equal(sigs[i], sigs[j])}


def _not_keyed_by_band(sigs, bands, rows):
    buckets = defaultdict(list)
    for j, sig in enumerate(sigs):
        for band in range(bands):
            buckets[tuple(sig[band * rows : (band + 1) * rows])].append(j)
    return _buckets_to_pairs(buckets)


def _overlapping_bands(sigs, bands, rows):
    buckets = defaultdict(list)
    for j, sig in enumerate(sigs):
        for band in range(bands):
            buckets[band, tuple(sig[band : band + rows])].append(j)
    return _buckets_to_pairs(buckets)


def _both_orders(sigs, bands, rows):
    buckets = defaultdict(list)
    for j, sig in enumerate(sigs):
        for band in range(bands):
            buckets[band, tuple(sig[band * rows : (band + 1) * rows])].append(j)
    return {(i, j) for ids in buckets.values() for i, j in itertools.permutations(ids, 2)}


def _lsh_case(name: str, sigs: list[np.ndarray], bands: int, rows: int) -> Probe:
    def run(my_lsh_candidates: Any) -> Any:
        found = my_lsh_candidates([s.copy() for s in sigs], bands, rows)
        return {tuple(int(i) for i in p) for p in found} if isinstance(found, set | frozenset) else found

    return Probe(name, run)


def _handmade() -> list[np.ndarray]:
    """Six signatures of 3 bands × 2 rows, each pair built to tell one wrong banding from the right one."""
    rows = [
        [1, 2, 3, 4, 5, 6],
        [1, 2, 9, 9, 9, 9],  # shares band 0 with doc 0 only: a candidate (not when all bands must match)
        [7, 7, 1, 2, 8, 8],  # its band 1 holds doc 0's band-0 values: NOT a candidate, unless bands share buckets
        [0, 2, 3, 0, 0, 0],  # rows 1-2 = doc 0's rows 1-2, across a band edge: only overlapping bands match
        [1, 2, 3, 4, 5, 6],  # a copy of doc 0: every band matches
        [5, 5, 5, 5, 5, 5],
    ]
    return [np.array(r, dtype=np.uint32) for r in rows]


def _random_signatures(seed: int, n: int, bands: int, rows: int, values: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, values, size=bands * rows).astype(np.uint32) for _ in range(n)]


def _minhash_signatures() -> list[np.ndarray]:
    base = _REPEATS + " " + _LOOKALIKES
    words = base.split()
    texts = [base, base.replace("red", "blue"), " ".join(words[3:]), " ".join(reversed(words)), _LOOKALIKES]
    texts += [" ".join(words[: 10 + 2 * i]) for i in range(5)]
    hasher = MinHasher(num_hashes=32, shingle_size=2, seed=5)
    return [hasher.signature(t) for t in texts]


LSH = Build(
    name="my_lsh_candidates",
    what="the LSH banding",
    truth=_brute_force_pairs,
    truth_name="every pair checked band by band (brute force)",
    fallback=candidate_pairs,
    fallback_name="minillm.textdata.candidate_pairs",
    probes=(
        _lsh_case("six hand-made signatures, 3 bands × 2 rows", _handmade(), 3, 2),
        _lsh_case("30 random signatures over 3 values, 4 bands × 2 rows", _random_signatures(0, 30, 4, 2, 3), 4, 2),
        _lsh_case("MinHash signatures of ten edited texts, 8 bands × 4 rows", _minhash_signatures(), 8, 4),
    ),
    mistakes=(
        Mistake(
            "all bands required to match",
            "a pair is a candidate when ANY band matches: put each document in one bucket per band.",
            _all_bands,
        ),
        Mistake(
            "buckets not keyed by the band",
            "key a bucket by (band, its r values): equal values in different bands are not a match.",
            _not_keyed_by_band,
        ),
        Mistake(
            "bands that overlap",
            "band k is rows k·r … (k + 1)·r − 1: sig[k * r:(k + 1) * r], not sig[k:k + r].",
            _overlapping_bands,
        ),
        Mistake(
            "each pair in both orders",
            "return each pair once as (i, j) with i < j: itertools.combinations, not permutations.",
            _both_orders,
        ),
    ),
    what_is_compared="candidate pairs",
)


def my_lsh_candidates(learner: Any) -> Any:
    """Grade ``my_lsh_candidates(sigs, bands, rows) -> set of (i, j), i < j`` sharing at least one band."""
    return grade(LSH, learner)


# ------------------------------------------------------------------------- Exercise 2: choosing the banding
def _banding_case(high: float, p_high: float, low: float, p_low: float, max_hashes: int) -> Probe:
    def run(choose_banding: Any) -> Any:
        return choose_banding(high=high, p_high=p_high, low=low, p_low=p_low, max_hashes=max_hashes)

    return Probe(f"P({high:g}) ≥ {p_high:g}, P({low:g}) ≤ {p_low:g}, b·r ≤ {max_hashes}", run)


def _bandings(max_hashes: int) -> list[tuple[int, int]]:
    """Every (b, r) with b·r ≤ max_hashes, fewest hashes first, then fewest bands."""
    every = [(b, r) for b in range(1, max_hashes + 1) for r in range(1, max_hashes // b + 1)]
    return sorted(every, key=lambda br: (br[0] * br[1], br[0]))


def _found(s: float, b: int, r: int) -> float:
    """The chance that a pair of Jaccard s shares at least one of b bands of r rows, 1 − (1 − s^r)^b (math)."""
    return 1.0 - (1.0 - s**r) ** b


def _first_banding(max_hashes, meets, order=_bandings):
    return next(((b, r) for b, r in order(max_hashes) if meets(b, r)), None)


def _banding_by_search(high=0.8, p_high=0.99, low=0.3, p_low=0.05, max_hashes=256):
    """The reference: every (b, r) in order of b·r, the first to meet both targets (its own closed form)."""
    return _first_banding(max_hashes, lambda b, r: _found(high, b, r) >= p_high and _found(low, b, r) <= p_low)


def _library_banding(high=0.8, p_high=0.99, low=0.3, p_low=0.05, max_hashes=256):
    """The same search with minillm.textdata.candidate_probability (the notebook's fallback)."""
    meets = lambda b, r: (  # noqa: E731
        candidate_probability(high, b, r) >= p_high and candidate_probability(low, b, r) <= p_low
    )
    return _first_banding(max_hashes, meets)


def _banding_swapped(high=0.8, p_high=0.99, low=0.3, p_low=0.05, max_hashes=256):
    return _first_banding(max_hashes, lambda b, r: _found(high, r, b) >= p_high and _found(low, r, b) <= p_low)


def _banding_high_only(high=0.8, p_high=0.99, low=0.3, p_low=0.05, max_hashes=256):
    return _first_banding(max_hashes, lambda b, r: _found(high, b, r) >= p_high)


def _banding_low_only(high=0.8, p_high=0.99, low=0.3, p_low=0.05, max_hashes=256):
    return _first_banding(max_hashes, lambda b, r: _found(low, b, r) <= p_low)


def _banding_last_match(high=0.8, p_high=0.99, low=0.3, p_low=0.05, max_hashes=256):
    in_loop_order = lambda k: [(b, r) for b in range(1, k + 1) for r in range(1, k // b + 1)][::-1]  # noqa: E731
    return _first_banding(
        max_hashes, lambda b, r: _found(high, b, r) >= p_high and _found(low, b, r) <= p_low, order=in_loop_order
    )


BANDING = Build(
    name="choose_banding",
    what="the banding with the fewest hashes",
    truth=_banding_by_search,
    truth_name="a search over every (b, r) in order of b·r with 1 − (1 − s^r)^b",
    fallback=_library_banding,
    fallback_name="a search over every (b, r) with minillm.textdata.candidate_probability",
    probes=(
        _banding_case(0.8, 0.99, 0.3, 0.05, 256),
        _banding_case(0.9, 0.95, 0.5, 0.1, 200),
        _banding_case(0.7, 0.9, 0.2, 0.01, 400),
    ),
    mistakes=(
        Mistake(
            "bands and rows swapped",
            "b is the number of bands and r the rows in each: P(s) = 1 − (1 − s^r)^b, and the answer is (b, r).",
            _banding_swapped,
        ),
        Mistake(
            "the low-similarity target left out",
            "a banding must also keep pairs of Jaccard `low` out: P(low) ≤ p_low as well as P(high) ≥ p_high.",
            _banding_high_only,
        ),
        Mistake(
            "the high-similarity target left out",
            "a banding must also find the near-duplicates: P(high) ≥ p_high as well as P(low) ≤ p_low.",
            _banding_low_only,
        ),
        Mistake(
            "the last match kept instead of the fewest hashes",
            "among the bandings that meet both targets keep the one with the smallest b·r (e.g. min over (b·r, b, r)).",
            _banding_last_match,
        ),
    ),
    what_is_compared="(b, r)",
)


def choose_banding(learner: Any) -> Any:
    """Grade ``choose_banding(high, p_high, low, p_low, max_hashes) -> (b, r)``: the fewest hashes b·r that work."""
    return grade(BANDING, learner)
