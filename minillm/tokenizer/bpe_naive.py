"""The naive BPE trainer: recount every pair of the whole corpus before each merge.

Kept small and readable, as notebook 01 builds it: it is the *definition* of the training rule, and the
fast trainer (:mod:`minillm.tokenizer.bpe_train`) is tested to produce exactly the same merges; both
apply a chosen merge with the same step, ``merge_pair``. It is far too slow for real corpora (each merge
rescans every pre-token occurrence).

Rule: the most frequent adjacent pair wins; ties go to the lexicographically greater pair of byte
strings ``(left, right)``. A merge whose result already is a token reuses that token's id.
"""

from __future__ import annotations

from collections.abc import Iterable

from minillm.tokenizer.merges import merge_pair
from minillm.tokenizer.pretokenize import pretokenize, special_regex, split_on_specials


def train_bpe_naive(
    text: str, vocab_size: int, special_tokens: Iterable[str] = (), pattern: str | None = "gpt2"
) -> list[tuple[bytes, bytes]]:
    """Learn merges from ``text`` until there are ``vocab_size`` tokens (bytes + merges + specials).

    Returns the ordered merge list as pairs of byte strings.
    """
    special_tokens = list(special_tokens)
    specials = special_regex(special_tokens)
    # every pre-token occurrence, as a list of byte values (special tokens are cut out and never merged)
    chunks = [
        list(piece.encode("utf-8"))
        for segment, is_special in split_on_specials(text, specials)
        if not is_special
        for piece in pretokenize(segment, pattern)
    ]
    vocab = {i: bytes([i]) for i in range(256)}
    token_id = {b: i for i, b in vocab.items()}
    merges: list[tuple[bytes, bytes]] = []
    while len(vocab) + len(special_tokens) < vocab_size:
        counts: dict[tuple[int, int], int] = {}
        for ids in chunks:
            for pair in zip(ids, ids[1:], strict=False):
                counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break  # every pre-token is a single token already
        best = max(counts, key=lambda p: (counts[p], vocab[p[0]], vocab[p[1]]))
        merged = vocab[best[0]] + vocab[best[1]]
        new_id = token_id.setdefault(merged, len(vocab))
        vocab[new_id] = merged
        merges.append((vocab[best[0]], vocab[best[1]]))
        chunks = [merge_pair(ids, best, new_id) for ids in chunks]
    return merges
