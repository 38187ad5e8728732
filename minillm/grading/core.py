"""The grading engine: run a learner's build on probe cases, compare with a reference, name the mistake.

A chapter's grader module describes each build as a :class:`Build` — the probe cases, the reference that says
what the right answer is (PyTorch, float64, a closed form, ``minillm``), the implementation the notebook falls
back to, and the known wrong variants (:class:`Mistake`). :func:`grade` does the rest, the same way for every
chapter: it never raises and never prints a traceback from inside itself; on failure it says which probe
failed and how, names the mistake when the learner's result equals a known wrong variant, and hands back the
fallback so the rest of the notebook still runs.

Grading must not change what the notebook computes afterwards, so it restores the random number generators,
the default dtype and the thread count whatever the learner's code did with them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from minillm.grading import progress

__all__ = [
    "Build",
    "Mistake",
    "NotWrittenYet",
    "Probe",
    "Result",
    "differences",
    "grade",
    "summary",
    "start_notebook",
]


class NotWrittenYet(Exception):
    """Raised by a workbook stub: the learner has not written this part yet."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"{what} is not written yet: replace the `raise NotWrittenYet(...)` line with your code, "
            "run the cell, then run the grading cell below it"
        )
        self.what = what


@dataclass(frozen=True)
class Probe:
    """One case a build is tried on.

    ``run(implementation)`` calls the build (a function, a class, whatever the notebook asks for) on this case
    and returns what can be observed: a tensor, a number, a tuple or dict of them. It must build its inputs from
    its own seeded ``torch.Generator`` so every implementation sees the same case.
    """

    name: str
    run: Callable[[Any], Any]


@dataclass(frozen=True)
class Mistake:
    """A known wrong way to write the build: the grader names it when the learner's result equals it."""

    name: str  # what the mistake is, e.g. "AdamW without bias correction"
    advice: str  # how to fix it, one sentence
    variant: Any  # a wrong implementation with the build's interface


@dataclass(frozen=True)
class Build:
    """Everything the engine needs to grade one learner build."""

    name: str  # the name the learner defines in the notebook
    what: str  # what it computes, for the ✓ line ("AdamW's update")
    truth: Any  # the implementation whose results are right (an independent reference where one exists)
    truth_name: str  # how messages call it ("torch.optim.AdamW")
    fallback: Any  # what the notebook uses when the learner's build fails (same interface as the learner's)
    fallback_name: str  # how messages call it ("minillm.optim.AdamW")
    probes: Sequence[Probe]
    mistakes: Sequence[Mistake] = ()
    rtol: float = 1e-6
    atol: float = 1e-9
    what_is_compared: str = "result"  # "weights after the steps", "loss and gradient", …


@dataclass
class Result:
    """What :func:`grade` found; printed as one ✓ line or a few ✗ lines."""

    build: str
    passed: bool
    message: str
    mistake: str | None = None
    lines: list[str] = field(default_factory=list)


def differences(got: Any, want: Any, rtol: float, atol: float, *, equal_nan: bool = False) -> str | None:
    """None when ``got`` matches ``want`` within the tolerance; otherwise the first difference, in words."""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"returned {_kind(got)}, expected a tensor"
        if tuple(got.shape) != tuple(want.shape):
            return f"returned shape {tuple(got.shape)}, expected {tuple(want.shape)}"
        if got.dtype != want.dtype:
            return f"returned dtype {got.dtype}, expected {want.dtype}"
        if want.is_floating_point() or want.is_complex():
            g, w = got.detach().to(torch.float64), want.detach().to(torch.float64)
            if not equal_nan:
                bad = ~torch.isfinite(g) & torch.isfinite(w)
                if bad.any():
                    what = "NaN" if torch.isnan(g[bad]).any() else "inf"
                    return f"returned {what} in {int(bad.sum())} of {g.numel()} entries"
            if torch.allclose(g, w, rtol=rtol, atol=atol, equal_nan=equal_nan):
                return None
            finite = torch.isfinite(g) & torch.isfinite(w)
            gap = (g[finite] - w[finite]).abs().max().item() if finite.any() else math.inf
            return f"differs by up to {gap:.3g} (tolerance {atol:g} + {rtol:g}·|expected|)"
        if torch.equal(got, want):
            return None
        wrong = int((got != want).sum())
        return f"{wrong} of {want.numel()} entries differ"
    if isinstance(want, bool) or want is None or isinstance(want, str):
        return None if got == want else f"returned {_show(got)}, expected {_show(want)}"
    if isinstance(want, int | float):
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, int | float):
            return f"returned {_kind(got)}, expected a number"
        if math.isnan(got) and not (equal_nan and isinstance(want, float) and math.isnan(want)):
            return "returned NaN"
        if isinstance(want, int) and isinstance(got, float) and not got.is_integer():
            return f"returned {got!r}, expected the whole number {want}"
        if equal_nan and isinstance(want, float) and math.isnan(want):
            return None if math.isnan(got) else f"returned {got:.6g}, expected NaN"
        if math.isclose(got, want, rel_tol=rtol, abs_tol=atol):
            return None
        return f"returned {got:.6g}, expected {want:.6g}"
    if isinstance(want, set | frozenset):
        if not isinstance(got, set | frozenset):
            return f"returned {_kind(got)}, expected a set of {len(want)}"
        missing, extra = [x for x in want if x not in got], [x for x in got if x not in want]
        if not missing and not extra:
            return None
        parts = [f"{len(missing)} expected items missing (e.g. {_few(sorted(missing, key=repr))})"] if missing else []
        parts += [f"{len(extra)} unexpected (e.g. {_few(sorted(extra, key=repr))})"] if extra else []
        return f"returned a set of {len(got)}, expected {len(want)}: " + "; ".join(parts)
    if isinstance(want, Mapping):
        if not isinstance(got, Mapping):
            return f"returned {_kind(got)}, expected a dict"
        missing, extra = [k for k in want if k not in got], [k for k in got if k not in want]
        if missing or extra:
            parts = [f"missing keys {_few(missing)}"] if missing else []
            parts += [f"unexpected keys {_few(extra)}"] if extra else []
            return "; ".join(parts)
        for key in want:
            problem = differences(got[key], want[key], rtol, atol, equal_nan=equal_nan)
            if problem:
                return f"at key {key!r}: {problem}"
        return None
    if isinstance(want, Sequence):
        if not isinstance(got, Sequence) or isinstance(got, str):
            return f"returned {_kind(got)}, expected a {type(want).__name__} of {len(want)}"
        if len(got) != len(want):
            return f"returned {len(got)} items, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            problem = differences(g, w, rtol, atol, equal_nan=equal_nan)
            if problem:
                return f"item {i}: {problem}"
        return None
    return None if got == want else f"returned {_show(got)}, expected {_show(want)}"


def _kind(value: Any) -> str:
    return "None" if value is None else f"a {type(value).__name__}"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _few(keys: list) -> str:
    return ", ".join(repr(k) for k in keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")


@contextmanager
def _notebook_state_kept():
    """Whatever the probes do, the notebook's random streams, default dtype and threads are as before."""
    torch_rng, py_rng = torch.get_rng_state(), random.getstate()
    try:
        import numpy as np

        np_rng = np.random.get_state()
    except ImportError:  # pragma: no cover - numpy ships with torch's usual installs
        np, np_rng = None, None
    dtype, threads, grad = torch.get_default_dtype(), torch.get_num_threads(), torch.is_grad_enabled()
    try:
        yield
    finally:
        torch.set_rng_state(torch_rng)
        random.setstate(py_rng)
        if np is not None:
            np.random.set_state(np_rng)
        torch.set_default_dtype(dtype)
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        torch.set_grad_enabled(grad)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    text = text if len(text) <= 160 else text[:157] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _observe(implementation: Any, probe: Probe) -> tuple[Any, BaseException | None]:
    try:
        return probe.run(implementation), None
    except Exception as error:  # the learner's code may raise anything; say what, never a traceback
        return None, error


def _check(build: Build, learner: Any) -> Result:
    if learner is None:
        return Result(build.name, False, f"{build.name} is not written yet")
    for probe in build.probes:
        want, error = _observe(build.truth, probe)
        if error is not None:  # a broken grader is the course's bug: say so plainly, still never block
            return Result(build.name, False, f"the grader's reference failed on {probe.name!r}: {_one_line(error)}")
        got, error = _observe(learner, probe)
        if isinstance(error, NotWrittenYet):
            return Result(build.name, False, f"{error.what} is not written yet")
        if error is not None:
            return Result(build.name, False, f"on {probe.name}: raised {_one_line(error)}")
        problem = differences(got, want, build.rtol, build.atol)
        if problem is None:
            continue
        result = Result(
            build.name,
            False,
            f"on {probe.name}: the {build.what_is_compared} — {problem} (reference: {build.truth_name})",
        )
        for mistake in build.mistakes:
            wrong, error = _observe(mistake.variant, probe)
            if error is None and differences(got, wrong, build.rtol, build.atol, equal_nan=True) is None:
                result.mistake = mistake.name
                result.lines.append(f"  Looks like {mistake.name}: {mistake.advice}")
                break
        return result
    cases = len(build.probes)
    return Result(
        build.name, True, f"{build.what} matches {build.truth_name} on {cases} probe case{'s' * (cases != 1)}"
    )


def grade(build: Build, learner: Any) -> Any:
    """Grade the learner's ``learner`` for ``build``, print the verdict, return what the notebook should use.

    Returns the learner's own implementation when it passes, otherwise ``build.fallback``.
    """
    with _notebook_state_kept():
        try:
            result = _check(build, learner)
        except Exception as error:  # pragma: no cover - the engine itself must never stop a notebook
            result = Result(build.name, False, f"the grader failed: {_one_line(error)}")
    _report(result, build)
    return learner if result.passed else build.fallback


def _report(result: Result, build: Build) -> None:
    _session.results[result.build] = result.passed
    if _session.edition == "workbook":
        progress.record(_session.notebook, result.build, result.passed)
    if result.passed:
        print(f"✓ {result.build}: {result.message}")
        return
    print(f"✗ {result.build}: {result.message}")
    for line in result.lines:
        print(line)
    print(f"  The rest of this notebook uses {build.fallback_name} until yours passes.")


@dataclass
class _Session:
    notebook: str = ""
    edition: str = "complete"
    builds: tuple[str, ...] = ()
    results: dict[str, bool] = field(default_factory=dict)


_session = _Session()

EDITIONS = ("complete", "workbook")


def start_notebook(notebook: str, edition: str, builds: Sequence[str] = ()) -> None:
    """Called once near the top of a notebook: which notebook this is, which edition, and its graded builds.

    Only the workbook edition records progress: in the complete edition the builds are the course's own.
    """
    global _session
    if edition not in EDITIONS:
        raise ValueError(f"edition must be one of {EDITIONS}, got {edition!r}")
    _session = _Session(notebook=notebook, edition=edition, builds=tuple(builds))


def summary() -> list[tuple[str, bool | None]]:
    """This notebook's builds in order with True (✓), False (✗) or None (not graded in this kernel yet)."""
    names = list(_session.builds) + [name for name in _session.results if name not in _session.builds]
    return [(name, _session.results.get(name)) for name in names]


def current_notebook() -> tuple[str, str]:
    """(notebook, edition) of the running session, for the progress display."""
    return _session.notebook, _session.edition


def probe_inputs(seed: int, *shape: int, dtype: torch.dtype = torch.float64, scale: float = 1.0) -> torch.Tensor:
    """A seeded random tensor for a probe case (its own generator: the notebook's streams are not touched)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=dtype) * scale
