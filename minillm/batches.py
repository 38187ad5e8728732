"""The corpus as one token stream: text → token file → training batches of random windows.

Pretraining treats the corpus as one long stream of token ids (documents joined by ``<|endoftext|>``).
:func:`encode_documents` builds that stream from a string; :func:`encode_file` writes it from a text file
straight to a token file, one document at a time, so a corpus larger than memory can be encoded.
A batch is ``B`` windows of ``T + 1`` consecutive tokens starting at random offsets; the input is the
first ``T`` tokens and the target the same window shifted by one. Token arrays are stored as raw
``uint16``/``uint32`` files and opened with ``numpy.memmap``, so a corpus larger than memory costs only
the pages a batch touches.

Chat sequences (prompt + response, :class:`minillm.chat.ChatTokens`) of different lengths are padded on the
right by :func:`pad_chat`: a causal model never looks ahead, so pad tokens after the real ones change nothing
before them, and their mask is 0.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np
import torch

from minillm.chat import ChatTokens
from minillm.data import iter_documents, split_documents
from minillm.tokenizer import ENDOFTEXT

if TYPE_CHECKING:
    from minillm.tokenizer import BPETokenizer


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype that holds ids below ``vocab_size`` (uint16 up to 65,536 ids)."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    return np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)


@contextlib.contextmanager
def _atomic_file(path: Path) -> Iterator[BinaryIO]:
    """An open binary file that appears at ``path`` only when the block succeeds.

    Why: a run that is interrupted half way must not leave a truncated token file that the next run
    would take for a finished one. The bytes go to a uniquely named temporary file in the same folder
    (so two writers never share it, and the rename stays on one file system), which replaces ``path`` in
    one step at the end, or is deleted if anything goes wrong.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(tmp, "xb") as handle:
            yield handle
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def save_tokens(ids: np.ndarray | list[int] | torch.Tensor, path: str | os.PathLike, vocab_size: int) -> Path:
    """Write token ids as a raw array (dtype from :func:`token_dtype`), atomically (temp file + rename)."""
    dtype = token_dtype(vocab_size)
    array = np.asarray(ids.cpu() if torch.is_tensor(ids) else ids, dtype=np.int64)
    if array.ndim != 1:
        raise ValueError(f"token ids must be 1-D, got shape {array.shape}")
    if array.size and (array.min() < 0 or array.max() >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size}), got range [{array.min()}, {array.max()}]")
    path = Path(path)
    with _atomic_file(path) as handle:
        array.astype(dtype).tofile(handle)
    return path


_CHECK_IDS = 1 << 24  # ids read at a time when a token file is checked on load (32 MiB of uint16)


def load_tokens(path: str | os.PathLike, vocab_size: int) -> np.memmap:
    """Memory-map a token file written by :func:`save_tokens` (read-only), once its ids are checked.

    Why check here: the forward pass does not look at ids (their maximum is a host sync on a GPU), so an id
    the model has no row for, from a file written with another tokenizer, would surface as torch's bare
    IndexError in the middle of training. One pass over the file, a chunk at a time, names it instead.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: token file not found")
    dtype = token_dtype(vocab_size)
    size = path.stat().st_size
    redo = "delete it and it is encoded again from the text"
    if size == 0 or size % dtype.itemsize:
        raise ValueError(
            f"{path}: {size:,} bytes is not a whole, non-zero number of {dtype.itemsize}-byte token ids "
            f"({dtype} for vocab_size={vocab_size:,}): the file is truncated or was written for another vocabulary; "
            + redo
        )
    tokens = np.memmap(path, dtype=dtype, mode="r")
    if vocab_size <= np.iinfo(dtype).max:  # else every value of the dtype is an id
        for start in range(0, len(tokens), _CHECK_IDS):
            chunk = tokens[start : start + _CHECK_IDS]
            if chunk.max() >= vocab_size:
                at = int(np.argmax(chunk >= vocab_size))
                raise ValueError(
                    f"{path}: token id {int(chunk[at]):,} at position {start + at:,} is outside the vocabulary "
                    f"[0, {vocab_size:,}): the file was written with another tokenizer, or is damaged; " + redo
                )
    return tokens


def encode_documents(tokenizer: BPETokenizer, text: str) -> np.ndarray:
    """One token stream: every document followed by ``<|endoftext|>``, so the model learns where stories end.

    Documents are :func:`~minillm.data.split_documents` of ``text``; their content is encoded with special
    tokens off, so a story that contains the text ``<|endoftext|>`` cannot fake a document boundary.
    """
    return encode_stories(tokenizer, split_documents(text))


def encode_stories(tokenizer: BPETokenizer, stories: Iterable[str]) -> np.ndarray:
    """The token stream of documents already split (e.g. :func:`~minillm.data.load_stories`): each one's tokens,
    special tokens off, then ``<|endoftext|>`` — the stream :func:`encode_documents` builds from one string."""
    eot = tokenizer.special_tokens[ENDOFTEXT]
    ids: list[int] = []
    for document in stories:
        ids.extend(tokenizer.encode(document, allowed_special="none"))
        ids.append(eot)
    return np.asarray(ids, dtype=np.int64)


def encode_file(
    tokenizer: BPETokenizer,
    source: str | os.PathLike,
    target: str | os.PathLike,
    chunk_tokens: int = 1 << 20,
    workers: int = 1,
    part_bytes: int = 16 << 20,
) -> Path:
    """Encode a text file into a token file: the bytes of ``save_tokens(encode_documents(tokenizer, text))``.

    Why not that one-liner: it holds the whole text and every id of it in memory at once. This reads the
    file one document at a time (:func:`~minillm.data.iter_documents`: same UTF-8, BOM and line-end
    handling, same documents) and appends the ids to the file every ``chunk_tokens`` ids, so memory stays
    bounded by one document plus one chunk, whatever the file's size. The result appears at ``target``
    only when complete (see :func:`_atomic_file`); a missing, empty or non-UTF-8 ``source`` raises an
    error naming it and leaves no file behind.

    ``workers`` > 1: the file is cut at blank lines (document boundaries) into parts of about ``part_bytes``;
    each of ``workers`` processes reads, decodes and encodes whole parts on its own, and this process writes
    their ids in order, with at most two parts per worker in flight — the same bytes, memory still bounded.
    """
    if chunk_tokens <= 0 or workers <= 0 or part_bytes <= 0:
        raise ValueError(
            f"chunk_tokens, workers and part_bytes must be positive, got {chunk_tokens}, {workers}, {part_bytes}"
        )
    documents = iter_documents(source)  # a missing file fails here, before anything is written
    dtype = token_dtype(tokenizer.vocab_size)
    eot = tokenizer.special_tokens[ENDOFTEXT]
    target = Path(target)
    with _atomic_file(target) as handle:
        if workers > 1:
            written = 0
            for ids in _encode_parts(tokenizer, Path(source), workers, part_bytes):
                ids.tofile(handle)
                written += len(ids)
            if not written:
                raise ValueError(f"{source}: the file is empty")
            return target
        pending: list[int] = []
        for document in documents:
            pending.extend(tokenizer.encode(document, allowed_special="none"))
            pending.append(eot)
            if len(pending) >= chunk_tokens:
                np.asarray(pending, dtype=dtype).tofile(handle)
                pending = []
        np.asarray(pending, dtype=dtype).tofile(handle)
    return target


def file_parts(path: Path, part_bytes: int) -> list[tuple[int, int]]:
    """Byte ranges of about ``part_bytes`` that cover ``path``, each cut right after an empty line.

    Documents are separated by blank lines, so the documents of the parts, in order, are the documents of the
    whole file; a cut after a ``\\n`` byte is also never inside a UTF-8 character. A file without empty lines
    is one part.
    """
    size, cuts = path.stat().st_size, [0]
    with open(path, "rb") as handle:
        while (cut := _after_next_empty_line(handle, cuts[-1] + part_bytes)) is not None and cut < size:
            cuts.append(cut)
    return list(zip(cuts, [*cuts[1:], size], strict=True))


_EMPTY_LINE = re.compile(rb"\n\r?\n")  # an empty line, with Unix or Windows line ends


def _after_next_empty_line(handle: BinaryIO, position: int) -> int | None:
    """The offset right after the first empty line at or after ``position``; None when there is none."""
    handle.seek(position)
    carry = b""  # the previous block's last bytes: an empty line may straddle two blocks
    while block := handle.read(1 << 16):
        found = _EMPTY_LINE.search(carry + block)
        if found:
            return position - len(carry) + found.end()
        position += len(block)
        carry = block[-2:]
    return None


_WORKER_TOKENIZER: BPETokenizer | None = None


def _start_worker(tokenizer: BPETokenizer) -> None:
    global _WORKER_TOKENIZER
    _WORKER_TOKENIZER = tokenizer


def _encode_part(path: Path, start: int, end: int) -> np.ndarray:
    """In a worker: the ids of the documents in bytes ``start:end`` of ``path``, as ``iter_documents`` sees them."""
    tokenizer = _WORKER_TOKENIZER
    if tokenizer is None:
        raise RuntimeError("_encode_part runs in a worker started by _encode_parts")
    with open(path, "rb") as handle:
        handle.seek(start)
        raw = handle.read(end - start)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (byte {start + err.start}); save it as UTF-8 first") from None
    if start == 0:
        text = text.removeprefix("\ufeff")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return encode_documents(tokenizer, text).astype(token_dtype(tokenizer.vocab_size))


def _encode_parts(tokenizer: BPETokenizer, path: Path, workers: int, part_bytes: int) -> Iterator[np.ndarray]:
    """The ids of ``path``'s parts (:func:`file_parts`) in order, encoded in ``workers`` processes."""
    import multiprocessing
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")  # a clean interpreter: no forked torch threads or locks
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker, initargs=(tokenizer,)) as pool:
        in_flight: deque = deque()
        for start, end in file_parts(path, part_bytes):
            in_flight.append(pool.submit(_encode_part, path, start, end))
            if len(in_flight) >= 2 * workers:
                yield in_flight.popleft().result()
        while in_flight:
            yield in_flight.popleft().result()


def _as_array(tokens: np.ndarray | torch.Tensor | list[int]) -> np.ndarray:
    if torch.is_tensor(tokens):
        return tokens.detach().cpu().numpy()
    return tokens if isinstance(tokens, np.ndarray) else np.asarray(tokens, dtype=np.int64)


def _windows(tokens: np.ndarray, starts: np.ndarray, context_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of the windows of T + 1 tokens at ``starts``: the targets are the inputs shifted by one."""
    windows = torch.from_numpy(tokens[starts[:, None] + np.arange(context_length + 1)].astype(np.int64))
    return windows[:, :-1], windows[:, 1:]


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

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's ``(inputs, targets)``, each a LongTensor ``[batch_size // world_size, T]``."""
        n_starts = len(self.tokens) - self.context_length
        starts = torch.randint(0, n_starts, (self.batch_size,), generator=self.generator).numpy()
        per_rank = self.batch_size // self.world_size
        mine = starts[self.rank * per_rank : (self.rank + 1) * per_rank]
        self.batches_drawn += 1
        return _windows(self.tokens, mine, self.context_length)

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
    for first in range(0, n_windows, batch_size):
        starts = np.arange(first, min(first + batch_size, n_windows)) * context_length
        yield _windows(array, starts, context_length)


# --------------------------------------------------------------------------- padding chat sequences
def right_pad(rows: Sequence[Sequence[int]], value: int, width: int | None = None) -> torch.Tensor:
    """``[len(rows), width]`` long tensor: each row followed by ``value`` (width: the longest row)."""
    if not rows:
        raise ValueError("right_pad needs at least one row")
    width = max(len(r) for r in rows) if width is None else width
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for b, row in enumerate(rows):
        if len(row) > width:
            raise ValueError(f"row {b} has {len(row)} tokens, more than the width {width}")
        out[b, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def pad_chat(
    sequences: Sequence[ChatTokens], pad_id: int, max_len: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad conversations to ``[B, T]`` ids and response mask (0 on padding); ``max_len`` truncates.

    Reward models, DPO and RLHF score whole ``prompt + response`` sequences this way.
    """
    if not sequences:
        raise ValueError("pad_chat needs at least one sequence")
    ids = right_pad([s.ids[:max_len] for s in sequences], pad_id)
    mask = right_pad([s.loss_mask[:max_len] for s in sequences], 0)
    if torch.any(mask.sum(1) == 0):
        raise ValueError("a sequence has no response token left (empty response, or truncated away)")
    return ids, mask
