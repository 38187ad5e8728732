"""Test helper shared by the SFT and alignment tests: a character tokenizer that knows the chat markers."""

import re

from minillm.chat import CHAT_SPECIAL_TOKENS


class CharTokenizer:
    """Characters a–z, space, '?' and '.', plus the course's chat special tokens (one id each)."""

    specials = list(CHAT_SPECIAL_TOKENS)
    chars = "abcdefghijklmnopqrstuvwxyz ?."

    def __init__(self):
        self.vocab = self.specials + list(self.chars)
        self.index = {t: i for i, t in enumerate(self.vocab)}
        self.pattern = re.compile("(" + "|".join(map(re.escape, self.specials)) + ")")

    def encode(self, text, allowed_special="all"):
        if allowed_special == "none":  # markers typed as text are characters (and these have no ids here)
            return [self.index[c] for c in text]
        ids = []
        for piece in self.pattern.split(text):
            ids += [self.index[piece]] if piece in self.specials else [self.index[c] for c in piece]
        return ids

    def decode(self, ids):
        return "".join(self.vocab[i] for i in ids)


TOK = CharTokenizer()
TOK = CharTokenizer()
