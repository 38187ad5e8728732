"""Device choice: a GPU when one is present, otherwise the CPU. GPU use is always optional."""

from __future__ import annotations

import torch

#: The device types the course runs on; a run's ``device`` setting is "auto" or one of these (with an index).
DEVICE_TYPES = ("cpu", "cuda", "mps")


class DeviceError(RuntimeError):
    """A device was asked for by name that this machine does not have."""


def check_available(device: torch.device) -> torch.device:
    """Return ``device`` if this machine can compute on it; otherwise raise :class:`DeviceError` saying what to use.

    Without this, ``--device cuda`` on a CPU-only machine ends in a torch traceback ("Torch not compiled with
    CUDA enabled") after the run has started.
    """
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                f"device {str(device)!r} was requested but torch sees no CUDA GPU here "
                "(torch.cuda.is_available() is False); use --device cpu, or auto to take what is there"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise DeviceError(
                f"device {str(device)!r} was requested but this machine has {torch.cuda.device_count()} CUDA GPU(s) "
                f"(cuda:0 .. cuda:{torch.cuda.device_count() - 1})"
            )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise DeviceError(
            f"device {str(device)!r} was requested but Apple's MPS is not available here; use --device cpu"
        )
    return device


def check_device_name(name: str) -> str:
    """Validate a run's ``device`` setting ("auto", "cpu", "cuda", "cuda:1", "mps") and return it.

    Checked when a config is built, so that ``--device tpu`` is refused with the choices listed before any
    work starts, instead of surfacing as a torch traceback once the run has begun.
    """
    choices = "'auto', 'cpu', 'cuda', 'cuda:<index>' or 'mps'"
    if not isinstance(name, str):
        raise ValueError(f"device must be a string ({choices}), got {name!r}")
    if name == "auto":
        return name
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as err:
        raise ValueError(f"device {name!r} is not a device name; use {choices}") from err
    if device.type not in DEVICE_TYPES:
        raise ValueError(f"device {name!r} is not one the course runs on; use {choices}")
    return name


def pick_device(prefer: str | None = None) -> torch.device:
    """Return the device to compute on.

    ``prefer`` may name a device ("cpu", "cuda", "mps"; :class:`DeviceError` if it is not here); by default
    CUDA is used when available, then Apple's MPS, then the CPU. The committed notebook outputs come from the CPU.
    """
    if prefer is not None:
        return check_available(torch.device(prefer))
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
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
        return check_available(torch.device(requested))
    if local_rank is not None:
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    return pick_device()
