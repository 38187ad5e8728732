"""Notebook 13's graders: the reference passes, each named mistake (written here as its own small wrong
implementation) is caught with its name, and a stub, an exception, a wrong length, type or NaN get a clear line."""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections import defaultdict

import numpy as np
import pytest
from grading_helpers import assert_fails, assert_passes, stub

from minillm import textdata
from minillm.grading import nb13_data as nb13

P = (1 << 31) - 1


# --------------------------------------------------------------------------------------------- shingles
def normalise(text):
    """The notebook's my_normalize, written again for these tests."""
    text = unicodedata.normalize("NFKC", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = "".join(c for c in text if c in "\n\t" or unicodedata.category(c) not in ("Cc", "Cf"))
    return "\n".join(line for line in (" ".join(raw.split()) for raw in text.split("\n")) if line)


def shingles_correct(text, n=5):
    words = re.findall(r"\w+", normalise(text).casefold())
    return set(zip(*(words[k:] for k in range(n)), strict=False))


def shingles_list(text, n=5):
    words = re.findall(r"\w+", normalise(text).casefold())
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def shingles_chunks(text, n=5):
    words = re.findall(r"\w+", normalise(text).casefold())
    return {tuple(words[i : i + n]) for i in range(0, len(words) - n + 1, n)}


def shingles_short(text, n=5):
    words = re.findall(r"\w+", normalise(text).casefold())
    return {tuple(words[i : i + n]) for i in range(len(words) - n)}


def shingles_with_case(text, n=5):
    words = re.findall(r"\w+", normalise(text))
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def shingles_split(text, n=5):
    words = normalise(text).casefold().split()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def shingles_raw(text, n=5):
    words = re.findall(r"\w+", text.casefold())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def shingles_of_characters(text, n=5):
    s = normalise(text).casefold()
    return {s[i : i + n] for i in range(len(s) - n + 1)}


def test_shingles_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb13.my_shingles, textdata.shingles, capsys)
    assert_passes(nb13.my_shingles, shingles_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (shingles_list, "shingles kept as a list"),
        (shingles_chunks, "shingles taken every n words"),
        (shingles_short, "the last shingle left out"),
        (shingles_with_case, "words not case-folded"),
        (shingles_split, "punctuation kept in the words"),
        (shingles_raw, "text not normalised first"),
        (shingles_of_characters, "shingles of characters, not words"),
    ],
)
def test_shingles_names_the_mistake(wrong, name, capsys):
    assert_fails(nb13.my_shingles, wrong, capsys, says=f"Looks like {name}", fallback=textdata.shingles)


def test_shingles_stub_raising_and_ignoring_n(capsys):
    assert_fails(nb13.my_shingles, stub("my_shingles"), capsys, says="my_shingles is not written yet")
    assert_fails(nb13.my_shingles, lambda text, n=5: text.words, capsys, says="raised AttributeError")
    out = assert_fails(nb13.my_shingles, lambda text, n=5: shingles_correct(text), capsys, says="on look-alike")
    assert "Looks like" not in out  # n ignored: no named mistake, but the probe that shows it


# ---------------------------------------------------------------------------------------------- Jaccard
def jaccard_correct(a, b):
    inter = sum(1 for x in a if x in b)
    return inter / (len(a) + len(b) - inter)


def jaccard_plus(a, b):
    return len(a & b) / (len(a) + len(b))


def jaccard_dice(a, b):
    return 2 * len(a.intersection(b)) / (len(a) + len(b))


def jaccard_smaller(a, b):
    return len(a & b) / min(len(a), len(b)) if min(len(a), len(b)) else 0.0


def jaccard_first(a, b):
    return len(a & b) / len(a) if len(a) else 0.0


def jaccard_floor(a, b):
    return len(a & b) // len(a | b)


def test_jaccard_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb13.my_jaccard, textdata.jaccard, capsys)
    assert_passes(nb13.my_jaccard, jaccard_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (jaccard_plus, "|A ∩ B| divided by |A| + |B|"),
        (jaccard_dice, "Dice's coefficient"),
        (jaccard_smaller, "the overlap coefficient"),
        (jaccard_first, "|A ∩ B| divided by |A|"),
        (jaccard_floor, "integer division"),
    ],
)
def test_jaccard_names_the_mistake(wrong, name, capsys):
    assert_fails(nb13.my_jaccard, wrong, capsys, says=f"Looks like {name}", fallback=textdata.jaccard)


def test_jaccard_stub_raising_nan_and_wrong_type(capsys):
    assert_fails(nb13.my_jaccard, stub("my_jaccard"), capsys, says="my_jaccard is not written yet")
    assert_fails(nb13.my_jaccard, lambda a, b: len(a - a) / len(b - b), capsys, says="raised ZeroDivisionError")
    assert_fails(nb13.my_jaccard, lambda a, b: float("nan"), capsys, says="returned NaN")
    assert_fails(nb13.my_jaccard, lambda a, b: a & b, capsys, says="expected a number")


# -------------------------------------------------------------------------------------------- signature
def signature_correct(shingle_ids, a, b):
    x = np.array(shingle_ids, dtype=object)
    return [int(((int(ai) * x + int(bi)) % P).min()) for ai, bi in zip(a, b, strict=True)]


def signature_numpy(shingle_ids, a, b):
    x = np.asarray(shingle_ids, dtype=np.uint64)
    return ((a[:, None] * x[None, :] + b[:, None]) % np.uint64(P)).min(axis=1)  # an array: accepted


def signature_one_function(shingle_ids, a, b):
    best = min((int(a[0]) * x + int(b[0])) % P for x in shingle_ids)
    return [best for _ in a]


def signature_max(shingle_ids, a, b):
    return [max((int(ai) * x + int(bi)) % P for x in shingle_ids) for ai, bi in zip(a, b, strict=True)]


def signature_of_min_id(shingle_ids, a, b):
    smallest = min(shingle_ids)
    return [(int(ai) * smallest + int(bi)) % P for ai, bi in zip(a, b, strict=True)]


def signature_no_mod(shingle_ids, a, b):
    return [min(int(ai) * x + int(bi) for x in shingle_ids) for ai, bi in zip(a, b, strict=True)]


def signature_where(shingle_ids, a, b):
    out = []
    for ai, bi in zip(a, b, strict=True):
        hashes = [(int(ai) * x + int(bi)) % P for x in shingle_ids]
        out.append(hashes.index(min(hashes)))
    return out


def test_signature_reference_minillm_and_learners_versions_pass(capsys):
    assert_passes(nb13.my_signature, nb13.SIGNATURE.fallback, capsys)
    assert_passes(nb13.my_signature, signature_correct, capsys)
    assert_passes(nb13.my_signature, signature_numpy, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (signature_one_function, "one hash for every row"),
        (signature_max, "the maximum, not the minimum"),
        (signature_of_min_id, "the hash of the smallest id"),
        (signature_no_mod, "the hash without mod p"),
        (signature_where, "the position of the minimum, not its value"),
    ],
)
def test_signature_names_the_mistake(wrong, name, capsys):
    assert_fails(nb13.my_signature, wrong, capsys, says=f"Looks like {name}", fallback=nb13.SIGNATURE.fallback)


def test_signature_stub_raising_and_wrong_length(capsys):
    assert_fails(nb13.my_signature, stub("my_signature"), capsys, says="my_signature is not written yet")
    assert_fails(nb13.my_signature, lambda ids, a, b: [ids[len(ids)]], capsys, says="raised IndexError")
    assert_fails(nb13.my_signature, lambda ids, a, b: signature_correct(ids, a, b)[:-1], capsys, says="items, expected")


def test_signature_fallback_works_in_the_notebook():
    hasher = textdata.MinHasher(num_hashes=128, seed=0)
    text = "Once upon a time a little girl named Lily found a shiny red ball in the park near her house."
    ids = [textdata.shingle_id(s) for s in textdata.shingles(text)]
    sig = nb13.SIGNATURE.fallback(ids, hasher.a, hasher.b)
    assert isinstance(sig, list) and int(np.sum(np.array(sig) != hasher.signature(text))) == 0


# -------------------------------------------------------------------------------------------------- LSH
def lsh_correct(sigs, bands, rows):
    found = set()
    for band in range(bands):
        seen = defaultdict(list)
        for j, sig in enumerate(sigs):
            key = bytes(np.asarray(sig[band * rows : (band + 1) * rows]).tobytes())
            found.update((i, j) for i in seen[key])
            seen[key].append(j)
    return found


def lsh_every_band(sigs, bands, rows):
    return {(i, j) for i, j in itertools.combinations(range(len(sigs)), 2) if list(sigs[i]) == list(sigs[j])}


def lsh_one_table(sigs, bands, rows):
    table = defaultdict(list)
    for j, sig in enumerate(sigs):
        for band in range(bands):
            table[tuple(sig[band * rows : band * rows + rows])].append(j)
    return {(i, j) for ids in table.values() for i, j in itertools.combinations(ids, 2)}


def lsh_sliding(sigs, bands, rows):
    table = defaultdict(list)
    for j, sig in enumerate(sigs):
        for band in range(bands):
            table[band, tuple(sig[band : band + rows])].append(j)
    return {(i, j) for ids in table.values() for i, j in itertools.combinations(ids, 2)}


def lsh_ordered(sigs, bands, rows):
    pairs = set()
    for i, j in lsh_correct(sigs, bands, rows):
        pairs |= {(i, j), (j, i)}
    return pairs


def test_lsh_reference_minillm_and_a_learners_version_pass(capsys):
    assert_passes(nb13.my_lsh_candidates, textdata.candidate_pairs, capsys)
    assert_passes(nb13.my_lsh_candidates, lsh_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (lsh_every_band, "all bands required to match"),
        (lsh_one_table, "buckets not keyed by the band"),
        (lsh_sliding, "bands that overlap"),
        (lsh_ordered, "each pair in both orders"),
    ],
)
def test_lsh_names_the_mistake(wrong, name, capsys):
    assert_fails(nb13.my_lsh_candidates, wrong, capsys, says=f"Looks like {name}", fallback=textdata.candidate_pairs)


def test_lsh_stub_raising_and_wrong_type(capsys):
    assert_fails(nb13.my_lsh_candidates, stub("my_lsh_candidates"), capsys, says="my_lsh_candidates is not written yet")
    assert_fails(nb13.my_lsh_candidates, lambda sigs, bands, rows: sigs[99], capsys, says="raised IndexError")
    assert_fails(
        nb13.my_lsh_candidates,
        lambda sigs, bands, rows: sorted(lsh_correct(sigs, bands, rows)),
        capsys,
        says="returned a list, expected a set of",
    )


# ------------------------------------------------------------------------- Exercise 2: choosing the banding
def found(s, b, r):
    return 1 - (1 - s**r) ** b


def banding_by_hashes(high=0.8, p_high=0.99, low=0.3, p_low=0.05, max_hashes=256):
    """A learner's answer that walks k = 1, 2, … and tries every split of k."""
    for k in range(1, max_hashes + 1):
        for b in range(1, k + 1):
            if k % b == 0 and found(high, b, k // b) >= p_high and found(low, b, k // b) <= p_low:
                return b, k // b
    return None


def banding_rows_first(high=0.8, p_high=0.99, low=0.3, p_low=0.05, max_hashes=256):
    ok = [(b * r, b, r) for r in range(1, 64) for b in range(1, max_hashes // r + 1)]
    ok = [t for t in ok if textdata.candidate_probability(high, t[1], t[2]) >= p_high]
    ok = [t for t in ok if textdata.candidate_probability(low, t[1], t[2]) <= p_low]
    return min(ok)[1:]


def banding_swapped(high=0.8, p_high=0.99, low=0.3, p_low=0.05, max_hashes=256):
    ok = [
        (b * r, b, r)
        for b in range(1, max_hashes + 1)
        for r in range(1, max_hashes // b + 1)
        if 1 - (1 - high**b) ** r >= p_high and 1 - (1 - low**b) ** r <= p_low
    ]
    return min(ok)[1:]


def banding_answer_as_r_b(high=0.8, p_high=0.99, low=0.3, p_low=0.05, max_hashes=256):
    b, r = banding_by_hashes(high, p_high, low, p_low, max_hashes)
    return r, b


def banding_only_high(high=0.8, p_high=0.99, low=0.3, p_low=0.05, max_hashes=256):
    ok = [(b * r, b, r) for b in range(1, 20) for r in range(1, 20) if found(high, b, r) >= p_high]
    return min(ok)[1:]


def banding_only_low(high=0.8, p_high=0.99, low=0.3, p_low=0.05, max_hashes=256):
    ok = [(b * r, b, r) for b in range(1, 20) for r in range(1, 20) if found(low, b, r) <= p_low]
    return min(ok)[1:]


def banding_last_match(high=0.8, p_high=0.99, low=0.3, p_low=0.05, max_hashes=256):
    best = None
    for b in range(1, max_hashes + 1):
        for r in range(1, max_hashes + 1):
            if b * r <= max_hashes and found(high, b, r) >= p_high and found(low, b, r) <= p_low:
                best = (b, r)
    return best


def test_banding_reference_and_a_learners_answers_pass(capsys):
    assert_passes(nb13.choose_banding, banding_by_hashes, capsys)
    assert_passes(nb13.choose_banding, banding_rows_first, capsys)
    assert_passes(nb13.choose_banding, nb13.BANDING.fallback, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (banding_swapped, "bands and rows swapped"),
        (banding_answer_as_r_b, "bands and rows swapped"),
        (banding_only_high, "the low-similarity target left out"),
        (banding_only_low, "the high-similarity target left out"),
        (banding_last_match, "the last match kept instead of the fewest hashes"),
    ],
)
def test_banding_names_the_mistake(wrong, name, capsys):
    assert_fails(nb13.choose_banding, wrong, capsys, says=f"Looks like {name}")


def test_banding_stub_raise_type_and_nan(capsys):
    assert_fails(
        nb13.choose_banding,
        stub("choose_banding"),
        capsys,
        says="choose_banding is not written yet",
        fallback=nb13.BANDING.fallback,
    )

    def empty_search(high=0.8, p_high=0.99, low=0.3, p_low=0.05, max_hashes=256):
        k, b, r = min([])
        return b, r

    assert_fails(nb13.choose_banding, empty_search, capsys, says="raised ValueError")
    assert_fails(
        nb13.choose_banding, lambda **targets: "12 bands of 5", capsys, says="returned a str, expected a tuple"
    )
    assert_fails(nb13.choose_banding, lambda **targets: (60, 12, 5), capsys, says="returned 3 items, expected 2")
    assert_fails(nb13.choose_banding, lambda **targets: (12, "5"), capsys, says="item 1: returned a str")
    assert_fails(nb13.choose_banding, lambda **targets: (12, float("nan")), capsys, says="returned NaN")
    assert_fails(nb13.choose_banding, lambda **targets: (12, 5.5), capsys, says="expected the whole number 5")
    assert_fails(nb13.choose_banding, lambda **targets: (12, 5), capsys, says="on P(0.9) ≥ 0.95")


def test_banding_fallback_answers_the_exercise(capsys):
    returned, _ = nb13.choose_banding(stub("choose_banding")), capsys.readouterr()
    b, r = returned()
    assert (b, r) == (12, 5) and isinstance(b, int) and isinstance(r, int)
    assert textdata.candidate_probability(0.8, b, r) >= 0.99 and textdata.candidate_probability(0.3, b, r) <= 0.05
