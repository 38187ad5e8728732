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
