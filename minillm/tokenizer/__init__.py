"""Tokenization: text → integer ids and back (notebook 01).

* :class:`BPETokenizer` — byte-level BPE (train, encode, decode, save/load); the course's tokenizer. It also
  reads and writes GPT-2's ``vocab.json`` + ``merges.txt`` and tiktoken's ranks with their own id layouts
  (``from_gpt2_files``, ``from_tiktoken_ranks``; :mod:`minillm.tokenizer.vocab_files`).
* :class:`WordPieceTokenizer` — BERT's WordPiece, for comparison.
* :func:`train_bpe_naive` — the readable rescan-per-merge reference trainer.
* :func:`to_tokenizers` — export to a Hugging Face ``tokenizers.Tokenizer`` giving identical ids.
"""

from minillm.chat import ENDOFTEXT
from minillm.tokenizer.bpe import COURSE_SPECIAL_TOKENS, BPETokenizer
from minillm.tokenizer.bpe_naive import train_bpe_naive
from minillm.tokenizer.hf_export import to_tokenizers
from minillm.tokenizer.pretokenize import GPT2_PATTERN, GPT4_PATTERN, pretokenize
from minillm.tokenizer.wordpiece import WordPieceTokenizer

__all__ = [
    "BPETokenizer",
    "COURSE_SPECIAL_TOKENS",
    "ENDOFTEXT",
    "GPT2_PATTERN",
    "GPT4_PATTERN",
    "WordPieceTokenizer",
    "pretokenize",
    "to_tokenizers",
    "train_bpe_naive",
]
