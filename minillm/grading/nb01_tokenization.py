"""Graders for notebook 01: BPE's pair counts, one merge over a token sequence, and encoding with learned merges.

Each grader takes what the learner defined in the notebook and returns what the rest of the notebook should
use: the learner's own version when it passes, ``minillm``'s otherwise. The wrong variants below are the
mistakes the graders recognise by their results; they are written here only to be recognised.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from itertools import chain
from typing import Any

from minillm.grading.core import Build, Mistake, Probe, grade
from minillm.tokenizer import BPETokenizer, pretokenize, to_tokenizers
from minillm.tokenizer.merges import apply_merges, merge_pair

BUILDS = ("pair_counts", "merge", "encode")

Ranks = Mapping[tuple[int, int], tuple[int, int]]


# ------------------------------------------------------------------------------------------------ pair counts
def _chunks_of(text: str) -> list[list[int]]:
    return [list(piece.encode("utf-8")) for piece in pretokenize(text, "gpt2")]


def _pair_counts_case(name: str, chunks: list[list[int]]) -> Probe:
    def run(pair_counts: Any) -> Any:
        counts = pair_counts([list(ids) for ids in chunks])  # a fresh copy: a learner may consume the lists
        return dict(counts) if isinstance(counts, Mapping) else counts

    return Probe(name, run)


def _counter_pairs(chunks):
    """The reference: every adjacent pair inside each pre-token, counted with collections.Counter."""
    return Counter(pair for ids in chunks for pair in zip(ids, ids[1:], strict=False))


def _pair_counts_minillm(chunks):
    """minillm's naive trainer's count (``train_bpe_naive``), as a function with the notebook's interface."""
    counts: dict[tuple[int, int], int] = {}
    for ids in chunks:
        for pair in zip(ids, ids[1:], strict=False):
            counts[pair] = counts.get(pair, 0) + 1
    return counts


def _across_chunks(chunks):
    joined = list(chain.from_iterable(chunks))
    return Counter(zip(joined, joined[1:], strict=False))


def _once_per_chunk(chunks):
    return Counter(pair for ids in chunks for pair in set(zip(ids, ids[1:], strict=False)))


def _last_pair_missed(chunks):
    return Counter((ids[i], ids[i + 1]) for ids in chunks for i in range(len(ids) - 2))


def _two_at_a_time(chunks):
    return Counter(pair for ids in chunks for pair in zip(ids[::2], ids[1::2], strict=False))


PAIR_COUNTS = Build(
    name="pair_counts",
    what="counting adjacent pairs",
    truth=_counter_pairs,
    truth_name="collections.Counter of the pairs inside each pre-token",
    fallback=_pair_counts_minillm,
    fallback_name="minillm's pair count (train_bpe_naive)",
    probes=(
        _pair_counts_case(
            "three pre-tokens [[1, 2, 3, 1, 2], [3, 1], [2, 2, 2]]", [[1, 2, 3, 1, 2], [3, 1], [2, 2, 2]]
        ),
        _pair_counts_case("runs of one byte ('aaaa', 'a', 'aaa')", [[97] * 4, [97], [97] * 3, [98, 97, 97]]),
        _pair_counts_case("the pre-tokens of a sentence", _chunks_of("Once upon a time, Lily's cat sat on a mat!!")),
    ),
    mistakes=(
        Mistake(
            "pairs counted across pre-token boundaries",
            "count the pairs inside each pre-token (each list) separately: merges never cross a boundary.",
            _across_chunks,
        ),
        Mistake(
            "each pair counted once per pre-token",
            "count every occurrence (no set()): 'abab' holds the pair (a, b) twice.",
            _once_per_chunk,
        ),
        Mistake(
            "the last pair of each pre-token left out",
            "a list of n ids has n − 1 adjacent pairs: i runs over range(len(ids) − 1).",
            _last_pair_missed,
        ),
        Mistake(
            "pairs taken two ids at a time",
            "pairs overlap: (ids[0], ids[1]), (ids[1], ids[2]), … — zip(ids, ids[1:]) or itertools.pairwise.",
            _two_at_a_time,
        ),
    ),
    rtol=0.0,
    atol=0.0,
    what_is_compared="counts",
)


def pair_counts(learner: Any) -> Any:
    """Grade ``pair_counts(chunks) -> {(id, id): count}`` (chunks: a list of lists of ids, one per pre-token)."""
    return grade(PAIR_COUNTS, learner)


# ------------------------------------------------------------------------------------------------------ merge
def _merge_case(name: str, cases: list[tuple[list[int], tuple[int, int], int]]) -> Probe:
    def run(merge: Any) -> Any:
        results = tuple(merge(list(ids), pair, new_id) for ids, pair, new_id in cases)
        return results[0] if len(results) == 1 else results

    return Probe(name, run)


def _second_id_kept(ids, pair, new_id):
    out = []
    for i in range(len(ids)):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)  # but the loop still visits ids[i + 1] and copies it
        else:
            out.append(ids[i])
    return out


def _right_to_left(ids, pair, new_id):
    out, i = [], len(ids) - 1
    while i >= 0:
        if i > 0 and (ids[i - 1], ids[i]) == pair:
            out.append(new_id)
            i -= 2
        else:
            out.append(ids[i])
            i -= 1
    return out[::-1]


def _first_only(ids, pair, new_id):
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == pair:
            return ids[:i] + [new_id] + ids[i + 2 :]
    return list(ids)


def _last_id_dropped(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids) - 1:
        if (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


MERGE = Build(
    name="merge",
    what="merging a pair",
    truth=merge_pair,
    truth_name="minillm.tokenizer.merges.merge_pair",
    fallback=merge_pair,
    fallback_name="minillm.tokenizer.merges.merge_pair",
    probes=(
        _merge_case("[5, 6, 5, 6, 7, 5] with the pair (5, 6)", [([5, 6, 5, 6, 7, 5], (5, 6), 256)]),
        _merge_case(
            "overlapping runs: 'aaa b aaaa' with the pair (a, a)",
            [([97, 97, 97, 98, 97, 97, 97, 97], (97, 97), 300), ([97, 97, 97], (97, 97), 300)],
        ),
        _merge_case(
            "no occurrence, an empty list, one id, the pair at the end",
            [([1, 2, 3], (3, 1), 9), ([], (1, 2), 9), ([4], (4, 4), 9), ([32, 98, 97, 110, 97, 110], (97, 110), 270)],
        ),
    ),
    mistakes=(
        Mistake(
            "the pair's second id kept",
            "after writing new_id, skip both ids of the pair (i += 2), so the second is not copied again.",
            _second_id_kept,
        ),
        Mistake(
            "merged right to left",
            "scan from the left: 'aaa' with the pair (a, a) becomes [aa, a], not [a, aa].",
            _right_to_left,
        ),
        Mistake(
            "only the first occurrence merged",
            "keep scanning after a merge: every non-overlapping occurrence is replaced.",
            _first_only,
        ),
        Mistake(
            "the last id dropped",
            "when the loop stops one short of the end, the last id still has to be copied.",
            _last_id_dropped,
        ),
    ),
    rtol=0.0,
    atol=0.0,
    what_is_compared="ids after the merge",
)


def merge(learner: Any) -> Any:
    """Grade ``merge(ids, pair, new_id) -> list`` (every occurrence of ``pair``, left to right, no overlaps)."""
    return grade(MERGE, learner)


# ----------------------------------------------------------------------------------------------------- encode
def _ranks_of(merges: list[tuple[bytes, bytes]]) -> dict[tuple[int, int], tuple[int, int]]:
    """{(left id, right id): (rank, merged id)} for a merge list, with ids as BPETokenizer numbers them."""
    token_id = {token: i for i, token in BPETokenizer(merges, special_tokens=()).vocab.items()}
    return {(token_id[a], token_id[b]): (rank, token_id[a + b]) for rank, (a, b) in enumerate(merges)}


def _hf_encode(text: str, ranks: Ranks) -> list[int]:
    """Hugging Face ``tokenizers`` (its own regex split and merge loop) given the merges ``ranks`` holds."""
    vocab = {i: bytes([i]) for i in range(256)}
    merges = []
    for (left, right), (_, new_id) in sorted(ranks.items(), key=lambda item: item[1][0]):
        vocab[new_id] = vocab[left] + vocab[right]
        merges.append((vocab[left], vocab[right]))
    tokenizer = BPETokenizer(merges, special_tokens=())
    ours = {token: i for i, token in vocab.items()}
    return [ours[tokenizer.vocab[i]] for i in to_tokenizers(tokenizer).encode(text).ids]


def _encode_minillm(text: str, ranks: Ranks) -> list[int]:
    """minillm's encoder (pretokenize, then apply_merges inside each pre-token) with the notebook's interface."""
    return [i for piece in pretokenize(text, "gpt2") for i in apply_merges(list(piece.encode("utf-8")), ranks)]


def _encode_case(name: str, text: str, merges: list[tuple[bytes, bytes]]) -> Probe:
    ranks = _ranks_of(merges)

    def run(encode: Any) -> Any:
        return encode(text, dict(ranks))

    return Probe(name, run)


# Merges chosen so that each wrong order of applying them cuts a different word differently:
# "abc" (bc learned before ab), "xyz" (xy before yz), "cdcde" (de before cd, cd more frequent), "pqrqr".
_ORDER_MERGES = [
    (b"b", b"c"),
    (b"a", b"b"),
    (b"x", b"y"),
    (b"y", b"z"),
    (b"d", b"e"),
    (b"c", b"d"),
    (b"p", b"q"),
    (b"q", b"r"),
    (b"z", b"!"),
    (b"o", b"n"),
    (b"on", b"'"),
]
_STORY = (
    "Tom had a red ball. Tom and his dog played with the ball in the sun. The dog ran and ran, and Tom "
    "laughed. Then the ball rolled into the pond, and the dog jumped in to get it. Tom was happy."
)


def _trained(text: str, merges: int) -> list[tuple[bytes, bytes]]:
    return BPETokenizer.train(text, 256 + merges, special_tokens=()).merges


def _latest_first(text, ranks):
    return _encode_choosing(text, ranks, lambda ids, candidates: max(candidates, key=lambda p: ranks[p][0]))


def _leftmost_first(text, ranks):
    return _encode_choosing(text, ranks, lambda ids, candidates: candidates[0])


def _most_frequent_first(text, ranks):
    def choose(ids, candidates):
        counts = Counter(zip(ids, ids[1:], strict=False))
        return max(candidates, key=lambda p: counts[p])

    return _encode_choosing(text, ranks, choose)


def _one_merge_only(text, ranks):
    out = []
    for piece in pretokenize(text, "gpt2"):
        ids = list(piece.encode("utf-8"))
        candidates = [p for p in zip(ids, ids[1:], strict=False) if p in ranks]
        if candidates:
            pair = min(candidates, key=lambda p: ranks[p][0])
            ids = merge_pair(ids, pair, ranks[pair][1])
        out.extend(ids)
    return out


def _not_pretokenized(text, ranks):
    return _encode_choosing(
        text, ranks, lambda ids, candidates: min(candidates, key=lambda p: ranks[p][0]), pieces=[text] if text else []
    )


def _encode_choosing(text, ranks, choose, pieces=None):
    out = []
    for piece in pretokenize(text, "gpt2") if pieces is None else pieces:
        ids = list(piece.encode("utf-8"))
        while len(ids) > 1:
            candidates = [p for p in zip(ids, ids[1:], strict=False) if p in ranks]
            if not candidates:
                break
            pair = choose(ids, candidates)
            ids = merge_pair(ids, pair, ranks[pair][1])
        out.extend(ids)
    return out


ENCODE = Build(
    name="encode",
    what="encoding with the learned merges",
    truth=_hf_encode,
    truth_name="Hugging Face tokenizers with the same merges",
    fallback=_encode_minillm,
    fallback_name="minillm's encoder (pretokenize + apply_merges)",
    probes=(
        _encode_case(
            "hand-picked merges on 'abc xyz cdcde pqrqr xyz! don't'", " abc xyz cdcde pqrqr xyz! don't", _ORDER_MERGES
        ),
        _encode_case(
            "40 merges learned from a short story, on new sentences",
            "The dog and Tom played in the pond. Then Tom ran!",
            _trained(_STORY, 40),
        ),
        _encode_case(
            "'aaaa aaa' with (a, a) then (aa, aa); emoji and accents as bytes",
            "aaaa aaa 😀 héllo aa",
            [(b"a", b"a"), (b"aa", b"aa"), (b"l", b"l")],
        ),
    ),
    mistakes=(
        Mistake(
            "the latest-learned merge applied first",
            "among the pairs present, merge the one with the LOWEST rank (learned earliest): min, not max.",
            _latest_first,
        ),
        Mistake(
            "the leftmost known pair merged first",
            "choose by rank, not by position: the earliest-learned merge among all pairs present goes first.",
            _leftmost_first,
        ),
        Mistake(
            "the most frequent pair merged first",
            "encoding replays the training order: choose the pair by its rank, not by how often it occurs here.",
            _most_frequent_first,
        ),
        Mistake(
            "one merge per pre-token",
            "repeat: after one merge look again for the lowest-ranked pair, until no pair has a rank.",
            _one_merge_only,
        ),
        Mistake(
            "merges across pre-token boundaries",
            "split the text with pretokenize(text, 'gpt2') first and merge inside each piece only.",
            _not_pretokenized,
        ),
    ),
    rtol=0.0,
    atol=0.0,
    what_is_compared="ids",
)


def encode(learner: Any) -> Any:
    """Grade ``encode(text, ranks) -> list of ids`` (ranks: {(left id, right id): (rank, merged id)})."""
    return grade(ENCODE, learner)
