"""Notebook 01's graders: the reference passes, each named mistake (written here as its own small wrong
implementation) is caught with its name, and a stub, an exception, a wrong length or type get a clear line."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from grading_helpers import assert_fails, assert_passes, stub

from minillm.grading import nb01_tokenization as nb01
from minillm.tokenizer import BPETokenizer, pretokenize
from minillm.tokenizer.merges import merge_pair


# ------------------------------------------------------------------------------------------ pair counts
def counts_correct(chunks):
    counts = defaultdict(int)
    for ids in chunks:
        for i in range(len(ids) - 1):
            counts[ids[i], ids[i + 1]] += 1
    return counts


def counts_joined(chunks):
    flat = [i for ids in chunks for i in ids]  # one long list: pairs straddle the pre-tokens
    counts = {}
    for a, b in zip(flat, flat[1:], strict=False):
        counts[a, b] = counts.get((a, b), 0) + 1
    return counts


def counts_distinct(chunks):
    counts = {}
    for ids in chunks:
        for pair in {(ids[i], ids[i + 1]) for i in range(len(ids) - 1)}:
            counts[pair] = counts.get(pair, 0) + 1
    return counts


def counts_short_range(chunks):
    counts = {}
    for ids in chunks:
        for i in range(len(ids) - 2):  # off by one
            counts[ids[i], ids[i + 1]] = counts.get((ids[i], ids[i + 1]), 0) + 1
    return counts


def counts_stride_two(chunks):
    counts = {}
    for ids in chunks:
        for i in range(0, len(ids) - 1, 2):
            counts[ids[i], ids[i + 1]] = counts.get((ids[i], ids[i + 1]), 0) + 1
    return counts


def test_pair_counts_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb01.pair_counts, nb01.PAIR_COUNTS.truth, capsys)
    assert_passes(nb01.pair_counts, counts_correct, capsys)
    assert_passes(nb01.pair_counts, nb01.PAIR_COUNTS.fallback, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (counts_joined, "pairs counted across pre-token boundaries"),
        (counts_distinct, "each pair counted once per pre-token"),
        (counts_short_range, "the last pair of each pre-token left out"),
        (counts_stride_two, "pairs taken two ids at a time"),
    ],
)
def test_pair_counts_names_the_mistake(wrong, name, capsys):
    assert_fails(nb01.pair_counts, wrong, capsys, says=f"Looks like {name}", fallback=nb01.PAIR_COUNTS.fallback)


def test_pair_counts_stub_raising_and_wrong_type(capsys):
    assert_fails(nb01.pair_counts, stub("pair_counts"), capsys, says="pair_counts is not written yet")
    assert_fails(nb01.pair_counts, lambda chunks: chunks[0][99], capsys, says="raised IndexError")
    out = assert_fails(nb01.pair_counts, lambda chunks: list(counts_correct(chunks).items()), capsys, says="a list")
    assert "expected a dict" in out
    assert_fails(
        nb01.pair_counts,
        lambda chunks: {k: v + 0.5 for k, v in counts_correct(chunks).items()},
        capsys,
        says="expected the whole number",
    )


def test_pair_counts_fallback_works_in_the_notebooks_training_loop():
    fallback = nb01.PAIR_COUNTS.fallback
    assert fallback([[1, 2, 1, 2], [1, 2]]) == {(1, 2): 3, (2, 1): 1}  # the notebook's demo line
    assert not fallback([[5], [6]])  # train() stops when no pre-token has a pair left
    counts = fallback([list(piece.encode()) for piece in pretokenize("the cat and the hat", "gpt2")])
    assert max(counts, key=lambda p: (counts[p], bytes([p[0]]), bytes([p[1]]))) == (
        116,
        104,
    )  # (t, h): count 2, ties to the greater pair


# ---------------------------------------------------------------------------------------------- merge
def merge_correct(ids, pair, new_id):
    out, skip = [], False
    for i, token in enumerate(ids):
        if skip:
            skip = False
        elif tuple(ids[i : i + 2]) == pair:
            out.append(new_id)
            skip = True
        else:
            out.append(token)
    return out


def merge_no_skip(ids, pair, new_id):
    return [new_id if tuple(ids[i : i + 2]) == pair else ids[i] for i in range(len(ids))]


def merge_backwards(ids, pair, new_id):
    out = list(ids)
    i = len(out) - 2
    while i >= 0:
        if (out[i], out[i + 1]) == pair:
            out[i : i + 2] = [new_id]
            i -= 2
        else:
            i -= 1
    return out


def merge_once(ids, pair, new_id):
    ids = list(ids)
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == pair:
            ids[i : i + 2] = [new_id]
            break
    return ids


def merge_loses_tail(ids, pair, new_id):
    out, i = [], 0
    while i + 1 < len(ids):
        if ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def test_merge_reference_and_a_learners_version_pass(capsys):
    assert_passes(nb01.merge, merge_pair, capsys)
    assert_passes(nb01.merge, merge_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (merge_no_skip, "the pair's second id kept"),
        (merge_backwards, "merged right to left"),
        (merge_once, "only the first occurrence merged"),
        (merge_loses_tail, "the last id dropped"),
    ],
)
def test_merge_names_the_mistake(wrong, name, capsys):
    assert_fails(nb01.merge, wrong, capsys, says=f"Looks like {name}", fallback=merge_pair)


def test_merge_stub_raising_wrong_length_and_none(capsys):
    assert_fails(nb01.merge, stub("merge"), capsys, says="merge is not written yet", fallback=merge_pair)
    assert_fails(nb01.merge, lambda ids, pair, new_id: ids.index(new_id), capsys, says="raised ValueError")
    assert_fails(nb01.merge, lambda ids, pair, new_id: [*merge_correct(ids, pair, new_id), 0], capsys, says="items")

    def forgets_to_return(ids, pair, new_id):
        merge_correct(ids, pair, new_id)

    assert_fails(nb01.merge, forgets_to_return, capsys, says="returned None")


# --------------------------------------------------------------------------------------------- encode
def encode_correct(text, ranks):
    out = []
    for piece in pretokenize(text, "gpt2"):
        ids = list(piece.encode("utf-8"))
        while True:
            ranked = [(ranks[p][0], p) for p in zip(ids, ids[1:], strict=False) if p in ranks]
            if not ranked:
                break
            _, pair = min(ranked)
            ids = merge_correct(ids, pair, ranks[pair][1])
        out += ids
    return out


def _encode_by(text, ranks, choose, split=True):
    out = []
    for piece in pretokenize(text, "gpt2") if split else [text]:
        ids = list(piece.encode("utf-8"))
        while True:
            present = [p for p in zip(ids, ids[1:], strict=False) if p in ranks]
            if not present:
                break
            pair = choose(ids, present)
            ids = merge_correct(ids, pair, ranks[pair][1])
        out += ids
    return out


def encode_highest_rank(text, ranks):
    return _encode_by(text, ranks, lambda ids, present: max(present, key=lambda p: ranks[p][0]))


def encode_first_found(text, ranks):
    return _encode_by(text, ranks, lambda ids, present: present[0])


def encode_by_count(text, ranks):
    return _encode_by(text, ranks, lambda ids, present: Counter(present).most_common(1)[0][0])


def encode_whole_text(text, ranks):
    return _encode_by(text, ranks, lambda ids, present: min(present, key=lambda p: ranks[p][0]), split=False)


def encode_single_merge(text, ranks):
    out = []
    for piece in pretokenize(text, "gpt2"):
        ids = list(piece.encode("utf-8"))
        present = [p for p in zip(ids, ids[1:], strict=False) if p in ranks]
        if present:
            pair = min(present, key=lambda p: ranks[p][0])
            ids = merge_correct(ids, pair, ranks[pair][1])
        out += ids
    return out


def test_encode_reference_minillm_and_a_learners_version_pass(capsys):
    assert_passes(nb01.encode, nb01.ENCODE.truth, capsys)
    assert_passes(nb01.encode, nb01.ENCODE.fallback, capsys)
    assert_passes(nb01.encode, encode_correct, capsys)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (encode_highest_rank, "the latest-learned merge applied first"),
        (encode_first_found, "the leftmost known pair merged first"),
        (encode_by_count, "the most frequent pair merged first"),
        (encode_single_merge, "one merge per pre-token"),
        (encode_whole_text, "merges across pre-token boundaries"),
    ],
)
def test_encode_names_the_mistake(wrong, name, capsys):
    assert_fails(nb01.encode, wrong, capsys, says=f"Looks like {name}", fallback=nb01.ENCODE.fallback)


def test_encode_stub_raising_and_wrong_output(capsys):
    assert_fails(nb01.encode, stub("encode"), capsys, says="encode is not written yet")
    assert_fails(nb01.encode, lambda text, ranks: ranks[(0, 0)], capsys, says="raised KeyError")
    assert_fails(nb01.encode, lambda text, ranks: list(text.encode()), capsys, says="items, expected")
    assert_fails(nb01.encode, lambda text, ranks: " ".join(map(str, encode_correct(text, ranks))), capsys, says="a str")


def test_encode_fallback_matches_minillm_on_the_notebooks_ranks():
    text = "Once upon a time a little girl named Lily lived in a small house. " * 3
    tokenizer = BPETokenizer.train(text, 256 + 30, special_tokens=())
    token_id = {b: i for i, b in tokenizer.vocab.items()}
    ranks = {(token_id[a], token_id[b]): (r, token_id[a + b]) for r, (a, b) in enumerate(tokenizer.merges)}
    sentence = "Lily lived in a house, once."
    assert nb01.ENCODE.fallback(sentence, ranks) == tokenizer.encode(sentence) == nb01.ENCODE.truth(sentence, ranks)
