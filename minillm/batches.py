"""Training batches for a causal LM: random contiguous windows of a long token array.

Pretraining treats the corpus as one long stream of token ids (documents joined by ``<|endoftext|>``).
A batch is ``B`` windows of ``T + 1`` consecutive tokens starting at random offsets; the input is the
first ``T`` tokens and the target the same window shifted by one. Token arrays are stored as raw
``uint16``/``uint32`` files and opened with ``numpy.memmap``, so a corpus larger than memory costs only
the pages a batch touches.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

_DTYPES = {"uint16": np.uint16, "uint32": np.uint32}


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype that holds ids below ``vocab_size`` (uint16 up to 65,536 ids)."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    return np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)


def save_tokens(ids: np.ndarray | list[int] | torch.Tensor, path: str | os.PathLike, vocab_size: int) -> Path:
    """Write token ids as a raw array (dtype from :func:`token_dtype`), atomically (temp file + rename)."""
    dtype = token_dtype(vocab_size)
    array = np.asarray(ids.cpu() if torch.is_tensor(ids) else ids, dtype=np.int64)
    if array.ndim != 1:
        raise ValueError(f"token ids must be 1-D, got shape {array.shape}")
    if array.size and (array.min() < 0 or array.max() >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size}), got range [{array.min()}, {array.max()}]")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    array.astype(dtype).tofile(tmp)
    os.replace(tmp, path)
    return path


def load_tokens(path: str | os.PathLike, vocab_size: int) -> np.memmap:
    """Memory-map a token file written by :func:`save_tokens` (read-only, nothing loaded up front)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: token file not found")
    return np.memmap(path, dtype=token_dtype(vocab_size), mode="r")


def _as_array(tokens: np.ndarray | torch.Tensor | list[int]) -> np.ndarray:
    if torch.is_tensor(tokens):
        return tokens.detach().cpu().numpy()
    return tokens if isinstance(tokens, np.ndarray) else np.asarray(tokens, dtype=np.int64)


class RandomWindows:
    """Draw ``(inputs, targets)`` batches of random contiguous windows, reproducibly and resumably.

    ``batch_size`` is the *global* number of windows per draw. Under data parallelism every rank draws the
    same global batch from an identically seeded generator and keeps its own slice of
    ``batch_size // world_size`` rows, so N processes see exactly the windows one process would see. The
    generator state is the data position: :meth:`state_dict` / :meth:`load_state_dict` resume the stream.
    """

    def __init__(
        self,
        tokens: np.ndarray | torch.Tensor | list[int],
        batch_size: int,
        context_length: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.tokens = _as_array(tokens)
        if self.tokens.ndim != 1:
            raise ValueError(f"tokens must be 1-D, got shape {self.tokens.shape}")
        if batch_size <= 0 or context_length <= 0:
            raise ValueError(f"batch_size and context_length must be positive, got {batch_size}, {context_length}")
        if len(self.tokens) < context_length + 1:
            raise ValueError(f"need at least context_length + 1 = {context_length + 1} tokens, got {len(self.tokens)}")
        if world_size <= 0 or not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
        if batch_size % world_size:
            raise ValueError(f"batch_size={batch_size} is not divisible by world_size={world_size}")
        self.batch_size, self.context_length = batch_size, context_length
        self.rank, self.world_size = rank, world_size
        self.generator = torch.Generator().manual_seed(seed)
        self.batches_drawn = 0
        self._offsets = np.arange(context_length + 1)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's ``(inputs, targets)``, each a LongTensor ``[batch_size // world_size, T]``."""
        n_starts = len(self.tokens) - self.context_length
        starts = torch.randint(0, n_starts, (self.batch_size,), generator=self.generator).numpy()
        per_rank = self.batch_size // self.world_size
        mine = starts[self.rank * per_rank : (self.rank + 1) * per_rank]
        windows = torch.from_numpy(self.tokens[mine[:, None] + self._offsets].astype(np.int64))
        self.batches_drawn += 1
        return windows[:, :-1], windows[:, 1:]

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            yield self.next_batch()

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state(), "batches_drawn": self.batches_drawn}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
        self.batches_drawn = int(state["batches_drawn"])


def sequential_windows(
    tokens: np.ndarray | torch.Tensor | list[int],
    batch_size: int,
    context_length: int,
    max_batches: int | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Non-overlapping windows from the start of ``tokens``, in order: a fixed evaluation set.

    Every evaluation sees the same windows, so validation losses of different steps are comparable.
    The last partial batch is kept; a tail shorter than one window is dropped.
    """
    array = _as_array(tokens)
    n_windows = (len(array) - 1) // context_length
    if n_windows == 0:
        raise ValueError(f"need at least context_length + 1 = {context_length + 1} tokens, got {len(array)}")
    if max_batches is not None:
        n_windows = min(n_windows, max_batches * batch_size)
    offsets = np.arange(context_length + 1)
    for first in range(0, n_windows, batch_size):
        starts = np.arange(first, min(first + batch_size, n_windows)) * context_length
        windows = torch.from_numpy(array[starts[:, None] + offsets].astype(np.int64))
        yield windows[:, :-1], windows[:, 1:]
