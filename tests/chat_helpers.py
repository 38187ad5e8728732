"""Test helper shared by the SFT and alignment tests: a character tokenizer that knows the chat markers."""

import re

from minillm import sft


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
