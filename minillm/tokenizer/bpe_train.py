"""Fast byte-level BPE training: pair counts updated incrementally, merges chosen from a heap.

The corpus is reduced to its distinct pre-tokens with their counts ("the" seen 40 000 times is one word
with count 40 000). Each merge then touches only the words that contain the merged pair: their old pairs
are subtracted, their new pairs added, and the changed counts pushed onto a heap. Nothing rescans the
corpus, so a merge costs time proportional to how often its pair occurs, not to the corpus size.

Rule for choosing a merge (shared with the naive reference trainer, which must agree exactly): the most
frequent adjacent pair wins; among pairs with the same count, the lexicographically greater pair of
byte strings ``(left_bytes, right_bytes)`` wins (compare left first, then right). A merge whose result
equals bytes that are already a token reuses that token's id (this is rare; the vocabulary then grows by
zero for that merge, and training continues until the vocabulary reaches its target size).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from tqdm.auto import tqdm

from minillm.tokenizer.merges import merge_pair


def descending_key(token: bytes) -> tuple[int, ...]:
    """A key whose ascending order is the *descending* lexicographic order of byte strings.

    Bytes are negated and a terminator 1 (greater than any negated byte) is appended, so a proper prefix
    sorts after its extensions, exactly as it sorts before them in ascending byte order.
    """
    return (*(-b for b in token), 1)


def train_merges(
    word_counts: Mapping[bytes, int], target_size: int, show_progress: bool = False
) -> tuple[list[tuple[int, int]], list[bytes]]:
    """Learn merges until the vocabulary (256 bytes + merged tokens) has ``target_size`` entries.

    ``word_counts`` maps each distinct pre-token (as UTF-8 bytes) to its count. Returns the merges as id
    pairs in order, and the vocabulary (id → bytes). Stops early when no adjacent pair is left.
    """
    vocab: list[bytes] = [bytes([i]) for i in range(256)]
    token_id: dict[bytes, int] = {b: i for i, b in enumerate(vocab)}
    keys: list[tuple[int, ...]] = [descending_key(b) for b in vocab]
    words: list[list[int]] = [list(word) for word in word_counts]
    counts: list[int] = list(word_counts.values())

    pair_counts: dict[tuple[int, int], int] = {}
    where: dict[tuple[int, int], set[int]] = {}
    for index, (word, count) in enumerate(zip(words, counts, strict=True)):
        for pair in zip(word, word[1:], strict=False):
            pair_counts[pair] = pair_counts.get(pair, 0) + count
            where.setdefault(pair, set()).add(index)
    heap = [(-c, keys[a], keys[b], a, b) for (a, b), c in pair_counts.items()]
    heapq.heapify(heap)

    merges: list[tuple[int, int]] = []
    progress = tqdm(total=max(0, target_size - len(vocab)), desc="BPE merges", disable=not show_progress)
    while len(vocab) < target_size and heap:
        neg_count, _, _, a, b = heapq.heappop(heap)
        if pair_counts.get((a, b)) != -neg_count:
            continue  # stale heap entry: this pair's count has changed since it was pushed
        merged = vocab[a] + vocab[b]
        new_id = token_id.get(merged)
        if new_id is None:
            new_id = len(vocab)
            vocab.append(merged)
            token_id[merged] = new_id
            keys.append(descending_key(merged))
            progress.update(1)
        merges.append((a, b))

        delta: dict[tuple[int, int], int] = {}
        for index in where.pop((a, b)):
            word = words[index]
            new_word = merge_pair(word, (a, b), new_id)
            if len(new_word) == len(word):
                continue  # the pair left this word in an earlier merge
            count = counts[index]
            for pair in zip(word, word[1:], strict=False):
                delta[pair] = delta.get(pair, 0) - count
            for pair in zip(new_word, new_word[1:], strict=False):
                delta[pair] = delta.get(pair, 0) + count
                where.setdefault(pair, set()).add(index)
            words[index] = new_word
        for pair, change in delta.items():
            if change == 0:
                continue
            total = pair_counts.get(pair, 0) + change
            if total > 0:
                pair_counts[pair] = total
                heapq.heappush(heap, (-total, keys[pair[0]], keys[pair[1]], pair[0], pair[1]))
            else:
                pair_counts.pop(pair, None)
    progress.close()
    return merges, vocab
