"""The merge step of BPE (and WordPiece), written once, and the merge-by-rank loop that encodes with it.

* :func:`merge_pair` replaces every occurrence of one pair: what a trainer does after choosing a merge
  (the naive and the fast BPE trainer, and WordPiece's trainer, all call it).
* :func:`apply_merges` encodes one pre-token: merge the pair learned earliest, repeat. It follows the
  rule "lowest rank, all occurrences, left to right" exactly, with a heap instead of rescans (GPT-2's rule).
* :func:`apply_token_ranks` is tiktoken's rule: join the adjacent pair whose joined bytes rank lowest.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")


def merge_pair(symbols: Sequence[T], pair: tuple[T, T], merged: T) -> list[T]:
    """Replace every non-overlapping occurrence of ``pair`` in ``symbols`` by ``merged``, left to right.

    The step every trainer repeats once it has chosen a merge ("aaa" with pair (a, a) gives [aa, a]).
    Symbols are ids for BPE and ``##`` pieces (strings) for WordPiece.
    """
    first, second = pair
    out: list[T] = []
    i, n = 0, len(symbols)
    while i < n:
        if i + 1 < n and symbols[i] == first and symbols[i + 1] == second:
            out.append(merged)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def apply_merges(ids: Sequence[int], ranks: Mapping[tuple[int, int], tuple[int, int]]) -> list[int]:
    """Merge adjacent pairs by rank until none is left: ``ranks[(left, right)] = (rank, merged id)``.

    The rule is notebook 01's loop "find the pair of lowest rank, replace all its occurrences left to
    right (:func:`merge_pair`), repeat". That loop rescans the whole pre-token for every merge that
    applies, up to n² work, which a long pre-token without spaces exposes (200 000 letters: seconds).
    So the rule is run with a heap of candidate pairs ``(rank, position)`` and the symbols in a doubly
    linked list: a merge joins two list nodes and pushes only the two new pairs it creates, so n bytes
    cost O(n log n). Entries whose pair has changed since they were pushed are skipped when popped.

    All occurrences of one rank are taken off the heap together, left to right, before any pair the
    merges create is considered. That keeps the simple loop's order even when a merge re-creates an
    existing token whose pairs rank *earlier* (it then merges first, as in the simple loop's next round).
    """
    n = len(ids)
    if n < 2:
        return list(ids)
    ids = list(ids)  # ids[i] is the symbol that starts at byte i; -1 once merged into its left neighbour
    after = list(range(1, n + 1))  # next live position (n: none)
    before = list(range(-1, n - 1))  # previous live position (-1: none)
    heap: list[tuple[int, int]] = []
    for i in range(n - 1):
        found = ranks.get((ids[i], ids[i + 1]))
        if found is not None:
            heap.append((found[0], i))
    heapq.heapify(heap)
    while heap:
        rank = heap[0][0]
        batch = []
        while heap and heap[0][0] == rank:
            batch.append(heapq.heappop(heap)[1])
        for i in batch:  # ascending positions: left to right, as merge_pair scans
            j = after[i]
            if ids[i] < 0 or j == n:
                continue
            found = ranks.get((ids[i], ids[j]))
            if found is None or found[0] != rank:
                continue  # stale: a merge since this entry was pushed changed the pair at i
            ids[i], ids[j] = found[1], -1
            k = after[i] = after[j]
            if k < n:
                before[k] = i
                right = ranks.get((ids[i], ids[k]))
                if right is not None:
                    heapq.heappush(heap, (right[0], i))
            h = before[i]
            if h >= 0:
                left = ranks.get((ids[h], ids[i]))
                if left is not None:
                    heapq.heappush(heap, (left[0], h))
    return [token for token in ids if token >= 0]


def apply_token_ranks(data: bytes, ranks: Mapping[bytes, int], max_rank: int | None = None) -> list[bytes]:
    """tiktoken's merge rule on one pre-token: join the adjacent pair whose *joined bytes* have the lowest
    rank (the leftmost such pair on a tie), one join at a time, until no joined pair is a token.

    Returns the parts as bytes. Unlike :func:`apply_merges` no merge list is consulted: any two adjacent
    parts whose concatenation is in ``ranks`` may join. Pairs ranked ``max_rank`` or higher are ignored
    (how a token's own merge is recovered from ranks: the parts left just before it forms).
    The same heap and linked list as :func:`apply_merges` keep it O(n log n) for n bytes.
    """
    n = len(data)
    if n < 2:
        return [data] if data else []
    limit = float("inf") if max_rank is None else max_rank
    after = list(range(1, n + 1))  # where the part starting at i ends (= the next part's start); n: none
    before = list(range(-1, n - 1))
    alive = [True] * n

    def pair_rank(i: int) -> int | None:
        j = after[i]
        if j >= n:
            return None
        rank = ranks.get(data[i : after[j]])
        return rank if rank is not None and rank < limit else None

    heap = [(rank, i) for i in range(n - 1) if (rank := pair_rank(i)) is not None]
    heapq.heapify(heap)
    while heap:
        rank, i = heapq.heappop(heap)
        if not alive[i] or pair_rank(i) != rank:
            continue  # stale: the part at i has changed since this entry was pushed
        j = after[i]
        alive[j] = False
        k = after[i] = after[j]
        if k < n:
            before[k] = i
        for start in (i, before[i]):
            if start >= 0 and (new := pair_rank(start)) is not None:
                heapq.heappush(heap, (new, start))
    parts = []
    i = 0
    while i < n:
        parts.append(data[i : after[i]])
        i = after[i]
    return parts
