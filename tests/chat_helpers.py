"""Test helpers shared by the SFT and alignment tests: a character tokenizer that knows the chat markers,
and a one-thread fixture (tiny models run fastest on one thread)."""

import re

import pytest
import torch

from minillm import sft


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread (thread hand-offs dominate), especially on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class CharTokenizer:
    """Characters a–z, space, '?' and '.', plus the course's chat special tokens (one id each)."""

    specials = list(sft.CHAT_SPECIAL_TOKENS)
    chars = "abcdefghijklmnopqrstuvwxyz ?."

    def __init__(self):
        self.vocab = self.specials + list(self.chars)
        self.index = {t: i for i, t in enumerate(self.vocab)}
        self.pattern = re.compile("(" + "|".join(map(re.escape, self.specials)) + ")")

    def encode(self, text):
        ids = []
        for piece in self.pattern.split(text):
            ids += [self.index[piece]] if piece in self.specials else [self.index[c] for c in piece]
        return ids

    def decode(self, ids):
        return "".join(self.vocab[i] for i in ids)


TOK = CharTokenizer()
TOK = CharTokenizer()
