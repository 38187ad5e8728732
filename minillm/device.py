"""Device choice: a GPU when one is present, otherwise the CPU. GPU use is always optional."""

from __future__ import annotations

import torch


def pick_device(prefer: str | None = None) -> torch.device:
    """Return the device to compute on.

    ``prefer`` may name a device ("cpu", "cuda", "mps"); by default CUDA is used when available, then
    Apple's MPS, then the CPU. The committed notebook outputs come from the CPU.
    """
    if prefer is not None:
        device = torch.device(prefer)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' was requested but torch.cuda.is_available() is False")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def run_device(requested: str = "auto", local_rank: int | None = None) -> torch.device:
    """The device one process of a training run computes on.

    ``requested`` is a run's ``device`` setting: a device name is used as given, ``"auto"`` chooses. Under
    data parallelism (``local_rank`` given) each process takes its own GPU, ``cuda:<local_rank>``, so
    that N processes on one machine do not all land on GPU 0; without GPUs every rank uses the CPU.
    A single process takes :func:`pick_device`'s choice.
    """
    if requested != "auto":
        return torch.device(requested)
    if local_rank is not None:
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    return pick_device()
