"""The machinery behind every exercise check: run the learner's function, compare, name the mistake.

An :class:`Exercise` carries a reference solution, fixed input cases, a way to ``draw`` fresh cases, and a
catalogue of :class:`Mistake` s, each with a small function that makes exactly that mistake. Checking a
learner's function (:func:`run_check`) does, in order:

1. Reject what cannot be checked, with a one-line verdict: ``None``, something not callable, a class, a
   generator or ``async`` function, a function whose parameters cannot take the exercise's arguments.
2. Run the function on the fixed cases, then on the cases ``draw`` makes from a fresh seed (the environment
   variable ``COURSE_CHECK_SEED`` pins it, to reproduce a verdict). Every argument is a fresh copy; each call
   has a time limit (``Exercise.time_limit`` seconds) and the learner's printing is captured (the first lines
   are shown with the verdict, the rest only counted).
3. Compare each output with the solution's on value, shape, dtype and device (integers and booleans exactly,
   never cast from float), and each argument after the call with its value before it: an argument changed in
   place is a failure, except the ``Exercise.inplace`` argument, whose value after the call is compared with
   the solution's.
4. When something differs, compare the outputs (and arguments after the call) with each catalogued mistake's
   on the same cases and name the one they match: its name and conceptual ``hint`` first, its exact ``fix``
   only with ``hint=2``. Otherwise say what differs on which case, with the case's input shapes and dtypes.

Statuses: ``"passed"``, ``"failed"`` (with the reason, and the mistake's name when one matches), and
``"not attempted"``: the function raised :class:`NotAttempted`, as the learner copy's untouched stub does,
before answering any case. Any other exception, ``NotImplementedError`` included, is a failure.

The time limit uses ``signal.setitimer`` and so works only on POSIX systems and in the main thread (where a
notebook runs its cells). On Windows, or when a check runs in another thread, the function runs without a
limit: a function that never returns then hangs the check until the kernel is interrupted. Even with the
limit, one long torch operation (a huge matmul) is stopped only when it returns, as Python signals wait for it.
``tests/test_checking.py`` tests this machinery; ``tests/test_exercises.py`` tests each exercise's catalogue.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import json
import math
import numbers
import os
import random
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "NotAttempted",
    "Mistake",
    "Exercise",
    "CheckResult",
    "ExerciseFailed",
    "UnknownExercise",
    "run_check",
    "fits",
    "report",
    "function_name",
    "notebook_of",
    "compare_outputs",
    "describe_case",
]

PASSED, FAILED, NOT_ATTEMPTED = "passed", "failed", "not attempted"
REPORT_ENV = "COURSE_EXERCISE_REPORT"  # set by `python3 course.py check`; each check appends a JSON line
SEED_ENV = "COURSE_CHECK_SEED"  # an integer pins the seed of the drawn cases (to reproduce a verdict)
PRINTED_LINES, PRINTED_WIDTH = 5, 200  # the learner's printing kept and shown with the verdict
_MISSING_FORWARD = 'missing the required "forward" function'  # torch's message for a Module without forward


class NotAttempted(Exception):
    """Raised by the learner copy's stub; the only thing the check reports as 'not attempted'."""


@dataclass(frozen=True)
class Mistake:
    """A common mistake: a short name, a conceptual hint, a function that makes it, and the exact fix.

    ``hint`` is shown at the first failure and never gives the code of the fix; ``fix`` is shown only
    when the learner asks for it with ``check(key, fn, hint=2)``.
    """

    name: str
    hint: str
    fn: Callable[..., Any]
    fix: str = ""


@dataclass(frozen=True)
class Exercise:
    """One exercise: what to write, the reference answer, the inputs it is checked on, the mistakes it knows.

    ``cases()`` returns a list of ``(args, kwargs)`` built from a fixed seed; every catalogued mistake must
    be told apart on them alone, so a notebook's printed verdict never depends on a draw. ``draw(gen)``
    returns more cases drawn with ``gen`` (a ``torch.Generator`` seeded afresh for every check); they run
    after the fixed ones and defeat lookup tables and hard-coded sizes. ``solution`` and each mistake take
    the same arguments as the learner's function.

    ``inplace`` names the argument (position, or keyword name) the exercise asks the learner to write into:
    its value after the call is compared with the solution's. Every other argument must be left unchanged.
    ``time_limit`` is in seconds per case (``None``: no limit). ``accept_dtypes`` lists floating dtypes
    accepted besides the solution's own (compared in float64 with the same tolerance); by default a
    floating result must have exactly the solution's dtype. ``minutes`` is the time a learner is given for it:
    the stated time of a notebook adds its exercises' minutes to its reading time (``course_tools.pacing``).
    ``edges`` is the statement's domain in one form: each edge the statement allows (``"T != S"``,
    ``"Dv == 1"``, ``"empty length"``, ...) with a predicate that takes a case's arguments like the solution
    and says whether the case holds that edge; some fixed case must hold each (tests/test_exercise_domains.py).
    """

    key: str
    title: str
    signature: str
    solution: Callable[..., Any]
    cases: Callable[[], list[tuple[tuple, dict]]]
    mistakes: tuple[Mistake, ...] = ()
    atol: float = 1e-5
    rtol: float = 1e-4
    draw: Callable[[torch.Generator], list[tuple[tuple, dict]]] | None = None
    inplace: int | str | None = None
    time_limit: float | None = 10.0
    accept_dtypes: tuple[torch.dtype, ...] = ()
    minutes: int = 8
    edges: dict[str, Callable[..., bool]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.inplace is not None and (isinstance(self.inplace, bool) or not isinstance(self.inplace, (int, str))):
            raise TypeError(
                f"Exercise {self.key}: inplace must be an argument's position (int) or name (str), got {self.inplace!r}"
            )
        if self.time_limit is not None and not self.time_limit > 0:
            raise ValueError(
                f"Exercise {self.key}: time_limit must be a positive number of seconds or None, got {self.time_limit!r}"
            )
        bad = [d for d in self.accept_dtypes if not (isinstance(d, torch.dtype) and d.is_floating_point)]
        if bad:
            raise TypeError(f"Exercise {self.key}: accept_dtypes must be floating torch dtypes, got {bad}")


@dataclass
class CheckResult:
    key: str
    title: str
    status: str
    message: str
    mistake: str | None = None
    details: dict = field(default_factory=dict)
    printed: tuple[str, ...] = ()  # the first lines the learner's function printed during the check
    printed_more: int = 0  # how many more lines it printed

    def _ipython_display_(self) -> None:
        """Show nothing when a check is the last line of a cell: the verdict line is already printed."""

    def line(self) -> str:
        mark = {PASSED: "✓", FAILED: "✗", NOT_ATTEMPTED: "·"}[self.status]
        return f"{mark} Exercise {self.key} ({self.title}): {self.status}. {self.message}".rstrip()

    def text(self) -> str:
        """The verdict line, then the first lines the learner's function printed during the check."""
        if not self.printed:
            return self.line()
        total = len(self.printed) + self.printed_more
        head = (
            f"  your function printed {total} lines during the check; the first {len(self.printed)}:"
            if self.printed_more
            else "  your function printed during the check:"
        )
        return "\n".join([self.line(), head, *(f"  | {ln}" for ln in self.printed)])


class ExerciseFailed(AssertionError):
    """Raised by a failed check so that nbval, ``course.py check`` and the learner's eye see the cell fail.

    It carries the whole verdict (its line, then what the learner's function printed), which is shown once:
    :func:`report` prints nothing for a failure. In Jupyter it shows as that verdict, its line in red, without
    a traceback into the checking code.
    """

    def _render_traceback_(self) -> list[str]:
        first, *rest = str(self.args[0]).split("\n")
        return [f"\x1b[31m{first}\x1b[0m", *rest]


class UnknownExercise(KeyError):
    """A key that names no exercise. Shown in Jupyter as its one line, listing the known keys."""

    def __str__(self) -> str:
        return str(self.args[0])

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31mKeyError: {self.args[0]}\x1b[0m"]


# ------------------------------------------------------------------------------------------ copies and states


def _clone(x: Any) -> Any:
    """A deep copy of an argument: tensors, modules and generators copied, containers rebuilt."""
    if isinstance(x, torch.Tensor):
        return x.detach().clone().requires_grad_(x.requires_grad) if x.is_leaf else x.detach().clone()
    if isinstance(x, torch.nn.Module):
        return copy.deepcopy(x)
    if isinstance(x, torch.Generator):
        g = torch.Generator(device=x.device)
        g.set_state(x.get_state())
        return g
    if isinstance(x, (list, tuple)):
        items = [_clone(i) for i in x]
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


def _state(x: Any) -> Any:
    """What an argument holds, as plain tensors and containers (a module as its state_dict)."""
    if isinstance(x, torch.Tensor):
        return x.detach()
    if isinstance(x, torch.nn.Module):
        return _module_state(x)
    if isinstance(x, torch.Generator):
        return "a generator"  # drawing from a generator argument is what it is for: not an in-place change
    if isinstance(x, (list, tuple)):
        return [_state(i) for i in x]
    if isinstance(x, dict):
        return {k: _state(v) for k, v in x.items()}
    return x


class _Attributes(dict):
    """A module's state, by attribute path: a change is named ``m.out_proj.weight``, not ``m['...']``."""


_PLAIN = (bool, int, float, str, type(None))
_HOOKS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_state_dict_hooks",
    "_load_state_dict_pre_hooks",
)


def _module_state(m: torch.nn.Module) -> _Attributes:
    """Everything a function could change in a module: each parameter's and buffer's values, dtype, device and
    requires_grad; each submodule's training flag, plain attributes (bool, int, float, str, None, tuples of
    them) and number of hooks."""
    state = _Attributes()
    for name, t in [*m.named_parameters(), *m.named_buffers()]:
        state[name] = t.detach()
        state[f"{name}.requires_grad"] = t.requires_grad
    for prefix, sub in m.named_modules():
        at = f"{prefix}." if prefix else ""
        state[f"{at}training"] = sub.training
        for key, value in vars(sub).items():
            if key.startswith("_"):
                continue
            if isinstance(value, _PLAIN) or (isinstance(value, tuple) and all(isinstance(v, _PLAIN) for v in value)):
                state[f"{at}{key}"] = value
        state[f"{at}hooks"] = sum(len(getattr(sub, h, None) or ()) for h in _HOOKS)
    return state


def _first_change(before: Any, after: Any, name: str) -> str | None:
    """The name of the first part of an argument that differs (exactly, NaN = NaN) after the call, or None."""
    if isinstance(before, torch.Tensor):
        if (
            not isinstance(after, torch.Tensor)
            or after.shape != before.shape
            or after.dtype != before.dtype
            or after.device != before.device
        ):
            return name
        a, b = before.cpu(), after.detach().cpu()
        same = a == b
        if a.is_floating_point() or a.is_complex():
            same = same | (a.isnan() & b.isnan())
        return None if bool(same.all()) else name
    if isinstance(before, (list, tuple)):
        if not isinstance(after, (list, tuple)) or len(after) != len(before):
            return name
        return next(
            (c for i, (x, y) in enumerate(zip(before, after)) if (c := _first_change(x, y, f"{name}[{i}]"))), None
        )
    if isinstance(before, _Attributes):
        if not isinstance(after, dict):
            return name
        for k in before:
            if k not in after:
                return f"{name}.{k}"
            if _first_change(before[k], after[k], f"{name}.{k}"):
                plain = isinstance(before[k], _PLAIN)
                return f"{name}.{k}" + (f" ({before[k]!r} -> {after[k]!r})" if plain else "")
        extra = sorted(set(after) - set(before))
        return f"{name}.{extra[0]}" if extra else None
    if isinstance(before, dict):
        if not isinstance(after, dict) or set(after) != set(before):
            return name
        return next((c for k in before if (c := _first_change(before[k], after[k], f"{name}[{k!r}]"))), None)
    try:
        return None if bool(before == after) else name
    except Exception:  # an object that cannot say whether it equals its copy: nothing to compare
        return None


# ------------------------------------------------------------------------------------------ describing cases


def _parameter_names(fn: Callable[..., Any]) -> list[str] | None:
    try:
        params = inspect.signature(fn).parameters.values()
    except Exception:
        return None
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _named_arguments(solution: Callable[..., Any], args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """The case's arguments named by the solution's parameters (``argument 3`` where it has none)."""
    names = _parameter_names(solution) or []
    out = [(names[i] if i < len(names) else f"argument {i + 1}", a) for i, a in enumerate(args)]
    return out + list(kwargs.items())


def _describe_value(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        where = "" if x.device.type == "cpu" else f" on {x.device}"
        return f"{str(x.dtype).removeprefix('torch.')} {tuple(x.shape)}{where}"
    if isinstance(x, torch.nn.Module):
        return type(x).__name__
    if isinstance(x, (bool, int, float)) or x is None or (isinstance(x, str) and len(x) <= 20):
        return f"={x!r}"
    if isinstance(x, (list, tuple)):
        return f"{type(x).__name__} of {len(x)}"
    return type(x).__name__


def describe_case(solution: Callable[..., Any], args: tuple, kwargs: dict) -> str:
    """The case's inputs in a few words: ``scores float32 (2, 3, 5), mask bool (2, 1, 5), T=4``."""
    parts = []
    for name, value in _named_arguments(solution, args, kwargs):
        d = _describe_value(value)
        parts.append(f"{name}{d}" if d.startswith("=") else f"{name} {d}")
    return ", ".join(parts)


# ------------------------------------------------------------------------------------------ comparing


def _fmt(x: float, digits: int) -> str:
    return f"{x:.{digits}g}"


def _distinct_digits(a: float, b: float, least: int) -> int:
    """The fewest significant digits (at least ``least``) at which ``a`` and ``b`` print differently."""
    for d in range(least, 18):
        if _fmt(a, d) != _fmt(b, d):
            return d
    return 17


def _scalar_problem(g: float, e: float, atol: float, rtol: float) -> str | None:
    """None when the number ``g`` is close enough to ``e``; otherwise how far off it is.

    The expected number is never printed to many digits: when a few digits do not tell the two apart,
    the learner's value is shown with enough digits, with how far off it is.
    """
    if g == e or (math.isnan(g) and math.isnan(e)):  # equal infinities, or NaN for NaN
        return None
    if not (math.isfinite(g) and math.isfinite(e)):  # the tolerance below would accept anything
        return f"expected {_fmt(e, 3)}, got {_fmt(g, 3)}"
    err = abs(g - e)
    if err <= atol + rtol * abs(e):
        return None
    rel = f"relative error {err / abs(e):.1e}, " if e != 0 else ""
    allowed = f"the check allows {atol:g} + {rtol:g} * |expected|"
    digits = _distinct_digits(g, e, 2)
    if digits <= 3:
        return f"expected about {_fmt(e, digits)}, got {_fmt(g, digits)} ({rel}{allowed})"
    way = "too high" if g > e else "too low"
    return f"your value {_fmt(g, digits)} is {err:.2g} {way} ({rel}{allowed})"


def _dtype_name(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _index(flat: int, shape: torch.Size) -> list[int]:
    idx = []
    for n in reversed(shape):
        idx.append(flat % n)
        flat //= n
    return idx[::-1]


def _tensor_problem(
    got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float, accept_dtypes: Sequence[torch.dtype]
) -> str | None:
    if got.shape != expected.shape:
        return f"expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
    if got.dtype != expected.dtype and not (expected.is_floating_point() and got.dtype in accept_dtypes):
        return f"expected dtype {_dtype_name(expected.dtype)}, got {_dtype_name(got.dtype)}"
    if got.device != expected.device:
        return f"expected a tensor on {expected.device}, got one on {got.device}"
    g, e = got.detach().cpu(), expected.detach().cpu()
    if g.is_sparse or e.is_sparse:
        g, e = g.to_dense(), e.to_dense()
    if not (e.is_floating_point() or e.is_complex()):  # integers and booleans: exactly
        wrong = g != e
        n = int(wrong.sum())
        if n == 0:
            return None
        if e.dim() == 0:
            return f"expected {e.item()!r}, got {g.item()!r}"
        first = int(wrong.flatten().nonzero()[0])
        at = _index(first, e.shape)
        return (
            f"{n} of the {e.numel()} entries of the {_dtype_name(e.dtype)} {tuple(e.shape)} tensor differ; "
            f"the first at {at}: "
            f"expected {e.flatten()[first].item()!r}, got {g.flatten()[first].item()!r}"
        )
    if e.dim() == 0 and not e.is_complex():
        return _scalar_problem(float(g), float(e), atol, rtol)
    g64 = g.to(torch.complex128 if e.is_complex() else torch.float64)
    e64 = e.to(g64.dtype)
    both_nan = g64.isnan() & e64.isnan()
    same = (g64 == e64) | both_nan  # equal infinities count as equal
    finite = g64.isfinite() & e64.isfinite()
    diff = torch.where(finite, (g64 - e64).abs(), torch.full_like(g64.real if g64.is_complex() else g64, math.inf))
    allowed = torch.where(finite, atol + rtol * e64.abs(), torch.zeros_like(diff))
    bad = ~same & (diff > allowed)  # a NaN or an infinity where the other has neither is always bad
    excess = torch.where(bad, diff - allowed, torch.full_like(diff, -math.inf))
    n = int(bad.sum())
    if n == 0:
        return None
    worst = int(excess.flatten().argmax())
    at = _index(worst, e.shape)
    ev, gv = e64.flatten()[worst].item(), g64.flatten()[worst].item()
    if isinstance(ev, complex) or isinstance(gv, complex):
        shown = f"expected {ev}, got {gv}"
    else:
        d = _distinct_digits(gv, ev, 4) if math.isfinite(gv) and math.isfinite(ev) else 4
        shown = f"expected {_fmt(ev, d)}, got {_fmt(gv, d)}"
    return (
        f"values differ at {n} of the {e.numel()} entries of the {_dtype_name(e.dtype)} {tuple(e.shape)} tensor "
        f"(the check allows {atol:g} + {rtol:g} * |expected|); "
        f"the worst at {at}: {shown}"
    )


def compare_outputs(
    got: Any, expected: Any, atol: float, rtol: float, accept_dtypes: Sequence[torch.dtype] = ()
) -> str | None:
    """None when ``got`` matches ``expected``; otherwise one sentence on the first difference.

    Tensors must match in shape, dtype (or one of ``accept_dtypes`` for a floating result), device and value:
    integers and booleans exactly, floating values within ``atol + rtol * |expected|`` (NaN matches NaN).
    Where a number is expected (a Python float, or a 0-d floating tensor), a Python number or a 0-d floating
    tensor is accepted; a float32 one within at least float32's own tolerance.
    """
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            if expected.dim() == 0 and expected.is_floating_point() and _is_number(got):
                return _scalar_problem(float(got), float(expected), atol, rtol)
            return (
                f"expected a tensor ({_dtype_name(expected.dtype)} {tuple(expected.shape)}), got {type(got).__name__}"
            )
        return _tensor_problem(got, expected, atol, rtol, accept_dtypes)
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            n = len(got) if isinstance(got, (tuple, list)) else 1
            return f"expected {len(expected)} results, got {n}"
        for i, (g, e) in enumerate(zip(got, expected)):
            problem = compare_outputs(g, e, atol, rtol, accept_dtypes)
            if problem:
                return f"result {i}: {problem}"
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            return f"expected a dict with keys {sorted(map(str, expected))}, got {type(got).__name__}" + (
                f" with keys {sorted(map(str, got))}" if isinstance(got, dict) else ""
            )
        for k in expected:
            problem = compare_outputs(got[k], expected[k], atol, rtol, accept_dtypes)
            if problem:
                return f"[{k!r}]: {problem}"
        return None
    if isinstance(expected, bool):
        if isinstance(got, torch.Tensor) and got.dim() == 0 and got.dtype == torch.bool:
            got = bool(got)
        if not isinstance(got, bool):
            return f"expected True or False, got {type(got).__name__}"
        return None if got == expected else f"expected {expected}, got {got}"
    if isinstance(expected, float):
        if isinstance(got, torch.Tensor) and got.dim() == 0 and got.is_floating_point():
            if got.dtype == torch.float32:  # a float32 answer is held to float32's own precision at least
                atol, rtol = max(atol, 1e-5), max(rtol, 1.3e-6)
            got = float(got)
        if not _is_number(got):
            what = (
                f"a {_dtype_name(got.dtype)} tensor of shape {tuple(got.shape)}"
                if isinstance(got, torch.Tensor)
                else type(got).__name__
            )
            return f"expected a number (a Python float or a 0-d floating tensor), got {what}"
        try:
            value = float(got)
        except (OverflowError, ValueError, TypeError):
            return f"expected a number near {_fmt(expected, 3)}, got one too large for a float ({str(got)[:20]}...)"
        return _scalar_problem(value, expected, atol, rtol)
    if isinstance(expected, int):
        if isinstance(got, torch.Tensor) and got.dim() == 0 and not got.is_floating_point() and got.dtype != torch.bool:
            got = int(got)
        if not isinstance(got, numbers.Integral) or isinstance(got, bool):
            return f"expected an integer, got {type(got).__name__} {got!r}"[:200]
        return None if got == expected else f"expected {expected}, got {got}"
    try:
        same = bool(got == expected)
    except Exception:
        same = False
    return None if same else f"expected {expected!r}, got {got!r}"[:300]


# ------------------------------------------------------------------------------------------ running


class _TimeLimit(BaseException):
    """Raised in the learner's function when its time is up (a BaseException, so `except Exception` lets it by)."""


class _Printed(io.TextIOBase):
    """A stream that keeps the first few lines written to it (each cut to a width) and counts the rest."""

    def __init__(self, lines: int = PRINTED_LINES, width: int = PRINTED_WIDTH) -> None:
        super().__init__()
        self.lines, self.width = lines, width
        self.kept: list[str] = []
        self.more = 0
        self._current = ""
        self._started = False  # a line is under way (even an empty one)

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        parts = s.split("\n")
        for i, part in enumerate(parts):
            if part or i < len(parts) - 1:
                self._started = True
            if len(self._current) <= self.width:
                self._current += part[: self.width + 1 - len(self._current)]
            if i < len(parts) - 1:
                self._end_line()
        return len(s)

    def _end_line(self) -> None:
        line = self._current if len(self._current) <= self.width else self._current[: self.width] + " ..."
        if len(self.kept) < self.lines:
            self.kept.append(line)
        else:
            self.more += 1
        self._current, self._started = "", False

    def finish(self) -> tuple[tuple[str, ...], int]:
        if self._started:
            self._end_line()
        return tuple(self.kept), self.more


def _can_time() -> bool:
    """Whether a time limit can be set: POSIX, the main thread, and no SIGALRM handler set outside Python."""
    return (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGALRM) is not None
    )


@contextlib.contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    """Raise _TimeLimit in the block after ``seconds`` (POSIX main thread only; elsewhere no limit).

    A timer that was already running (pytest-timeout's, say) is put back afterwards with its remaining time.
    """
    if seconds is None or not _can_time():
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise _TimeLimit

    old_handler = signal.signal(signal.SIGALRM, on_alarm)
    start = time.monotonic()
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay > 0:
            signal.setitimer(signal.ITIMER_REAL, max(old_delay - (time.monotonic() - start), 1e-6), old_interval)


@dataclass
class _Run:
    """What one function did on one case: its output and its arguments after the call."""

    output: Any
    args: tuple
    kwargs: dict


def _run(fn: Callable[..., Any], case: tuple[tuple, dict]) -> _Run:
    args, kwargs = _clone(case[0]), _clone(case[1])
    return _Run(fn(*args, **kwargs), args, kwargs)


def _resolve_inplace(ex: Exercise, args: tuple, kwargs: dict) -> tuple[str, int | str] | None:
    """The inplace argument of this case as (its name, its position in args or its key in kwargs)."""
    if ex.inplace is None:
        return None
    names = _parameter_names(ex.solution) or []
    if isinstance(ex.inplace, int):
        name = names[ex.inplace] if ex.inplace < len(names) else f"argument {ex.inplace + 1}"
        if ex.inplace < len(args):
            return name, ex.inplace
        return (name, name) if name in kwargs else None
    if ex.inplace in kwargs:
        return ex.inplace, ex.inplace
    pos = names.index(ex.inplace) if ex.inplace in names else None
    return (ex.inplace, pos) if pos is not None and pos < len(args) else None


def _argument(run: _Run, where: int | str) -> Any:
    return run.args[where] if isinstance(where, int) else run.kwargs[where]


def _same_run(a: _Run, b: _Run, ex: Exercise) -> bool:
    """Whether two runs gave the same output and left the arguments in the same state (within tolerance)."""
    if compare_outputs(a.output, b.output, ex.atol, ex.rtol, ex.accept_dtypes) is not None:
        return False
    return compare_outputs(_state([a.args, a.kwargs]), _state([b.args, b.kwargs]), ex.atol, ex.rtol) is None


def _case_problem(ex: Exercise, case: tuple[tuple, dict], mine: _Run, ref: _Run) -> str | None:
    """What is wrong with the learner's run of one case (an input changed in place first), or None."""
    args, kwargs = case
    inplace = _resolve_inplace(ex, args, kwargs)
    for (name, before), (_, after) in zip(
        _named_arguments(ex.solution, args, kwargs), _named_arguments(ex.solution, mine.args, mine.kwargs)
    ):
        if inplace is not None and name == inplace[0]:
            continue
        changed = _first_change(_state(before), _state(after), name)
        if changed:
            return (
                f"your function changed its input `{changed}` in place. Leave the inputs as they are: "
                "work on new tensors (`x = x / t`, not `x /= t`; `masked_fill`, not `masked_fill_`)"
            )
    problem = compare_outputs(mine.output, ref.output, ex.atol, ex.rtol, ex.accept_dtypes)
    if problem:
        return problem
    if inplace is not None:
        name, where = inplace
        problem = compare_outputs(_state(_argument(mine, where)), _state(_argument(ref, where)), ex.atol, ex.rtol)
        if problem:
            return f"after your call, `{name}` (which your function should write into) is wrong: {problem}"
    return None


def _draw_seed(seed: int | None) -> int:
    if seed is not None:
        return seed
    pinned = os.environ.get(SEED_ENV, "").strip()
    if pinned:
        try:
            return int(pinned)
        except ValueError:
            raise ValueError(f"{SEED_ENV} must be an integer seed, got {pinned!r}") from None
    return random.SystemRandom().randrange(1, 1_000_000)


def function_name(fn: Any) -> str:
    """The name to write in a suggested call: the function's own, else ``your_function`` (a lambda, an object)."""
    try:
        name = getattr(fn, "__name__", "")
    except Exception:
        name = ""
    return name if isinstance(name, str) and name.isidentifier() else "your_function"


def _signature_text(fn: Callable[..., Any]) -> str:
    try:
        params = inspect.signature(fn).parameters.values()
    except Exception:  # no signature, or a learner's object whose __signature__ itself fails
        return "(...)"
    shown = []
    for p in params:
        s = {p.VAR_POSITIONAL: f"*{p.name}", p.VAR_KEYWORD: f"**{p.name}"}.get(p.kind, p.name)
        shown.append(s if p.default is p.empty else f"{s}={p.default!r}")
    return f"({', '.join(shown)})"


def fits(ex: Exercise, fn: Any) -> bool:
    """Whether ``fn`` can be checked against ``ex`` at all: callable, and its parameters take every fixed case's
    arguments (nothing is run). ``check`` uses it to tell an exercise that moved to a new key from its new owner."""
    try:
        return _unusable(ex, fn, list(ex.cases())) is None
    except Exception:  # looking at the learner's object failed
        return False


def _unusable(ex: Exercise, fn: Any, cases: Sequence[tuple[tuple, dict]]) -> str | None:
    """Why ``fn`` cannot be checked at all (None, not callable, a class, a generator, wrong parameters)."""
    want = f"expected a function {ex.signature}"
    if fn is None:
        return f"{want}, got None (is the name right, and does the cell that defines it run first?)"
    if inspect.isclass(fn) and not inspect.isclass(ex.solution):
        callable_instances = any("__call__" in vars(c) for c in fn.__mro__ if c is not object)
        tip = f"; pass an instance, {fn.__name__}(...), whose call does the work" if callable_instances else ""
        return f"{want}, got the class {fn.__name__}{tip}"
    if isinstance(fn, torch.Tensor):
        return f'{want}, got a tensor: pass the function itself, check("{ex.key}", my_function), not what it returns'
    if not callable(fn):
        what = (
            f"an instance of {type(fn).__name__}, which cannot be called"
            if not isinstance(fn, (int, float, str, bool, torch.Tensor, list, tuple, dict))
            else type(fn).__name__
        )
        return f"{want}, got {what}"
    body = fn.forward if isinstance(fn, torch.nn.Module) else fn
    if inspect.isgeneratorfunction(body) or inspect.isasyncgenfunction(body):
        return f"{want}, got a generator function (it uses `yield`): return the result instead of yielding it"
    if inspect.iscoroutinefunction(body):
        return f"{want}, got an `async` function: define it with a plain `def`"
    try:
        sig = inspect.signature(body)  # a module's forward, not its generic __call__
    except Exception:  # a builtin without a signature, or a broken __signature__: let the call say
        return None
    for args, kwargs in cases:
        try:
            sig.bind(*args, **kwargs)
        except TypeError as e:
            given = f"{len(args)} argument{'s' * (len(args) != 1)}" + (
                f" and the keyword{'s' * (len(kwargs) != 1)} {', '.join(kwargs)}" if kwargs else ""
            )
            return (
                f"your function takes {_signature_text(body)}, but the check calls it with {given} ({e}); "
                f"expected parameters {_signature_text(ex.solution)}"
            )
    return None


def _text(e: BaseException) -> str:
    try:
        return str(e)
    except Exception:  # an exception whose own __str__ fails
        return ""


def _exception_message(e: BaseException, ex: Exercise, case_name: str, first_case: bool) -> str:
    first = _text(e).splitlines()[0] if _text(e).strip() else ""
    if isinstance(e, NotImplementedError) and _MISSING_FORWARD in str(e):
        return (
            f"on {case_name} your module has no `forward` method (torch: {first}). Check its spelling and "
            "indentation: `def forward(self, ...)` inside the class"
        )
    said = f"raised {type(e).__name__}" + (f": {first}" if first else "")
    msg = f"on {case_name} your function {said}"
    if isinstance(e, NotImplementedError) and first_case and not first:
        nb = notebook_of(ex.key)
        msg += (
            f". If this is the untouched stub of an older copy of the notebook, run "
            f"`python3 course.py reset {nb} --exercise {ex.key}` for the current one (your other cells "
            "are kept, and a backup is made)"
        )
    return msg


def _same_failure(a: BaseException, b: BaseException) -> bool:
    """Whether two exceptions are the same failure: one type and one message, numbers (shapes) included.

    Both ran on the same case, so the same mistake fails with the same sizes. Setting the numbers aside
    would let any broadcasting error stand for any other ("size of tensor a (6) must match ... (3)" for
    "... (6) must match ... (4)"), and name a catalogued mistake the learner did not make. Only memory
    addresses (``0x7f...``), which differ from run to run, are set aside.
    """

    def gist(e: BaseException) -> str:
        return re.sub(r"0x[0-9a-fA-F]+", "0x", _text(e)).strip()

    return type(a) is type(b) and gist(a) == gist(b)


def _mistake_that_raises(
    ex: Exercise, before: Sequence[tuple[tuple, dict]], mine: Sequence[_Run], case: tuple[tuple, dict], e: BaseException
) -> Mistake | None:
    """The catalogued mistake that answers ``before`` as the learner did and then fails on ``case`` the same way.

    A mistake that cannot run at all (weights in the other layout: a shape error) is named this way.
    """
    for m in ex.mistakes:
        try:
            wrong = [_run(m.fn, c) for c in before]
        except Exception:
            continue
        if not all(_same_run(a, b, ex) for a, b in zip(mine, wrong)):
            continue
        try:
            _run(m.fn, case)
        except Exception as err:
            if _same_failure(err, e):
                return m
    return None


def notebook_of(key: str) -> str:
    """The learner notebook of exercise ``key``, as a path from the course folder (``notebooks/03_masking.ipynb``)."""
    folder = Path(__file__).resolve().parent.parent / "notebooks"
    found = sorted(folder.glob(f"{key.split('.')[0]}_*.ipynb"))
    return f"notebooks/{found[0].name}" if found else f"notebooks/{key.split('.')[0]}_*.ipynb"


def _is_old_import(e: BaseException) -> bool:
    """The new stub in a notebook whose import cell predates NotAttempted."""
    return isinstance(e, NameError) and getattr(e, "name", None) == NotAttempted.__name__


def _global_settings() -> tuple[torch.dtype, bool]:
    return torch.get_default_dtype(), torch.is_grad_enabled()


def _restore_settings(saved: tuple[torch.dtype, bool]) -> list[str]:
    """Put back the default dtype and grad mode if the learner's function changed them; say which it changed."""
    dtype, grad = saved
    changed = []
    if torch.get_default_dtype() != dtype:
        changed.append(f"torch.set_default_dtype({torch.get_default_dtype()})")
        torch.set_default_dtype(dtype)
    if torch.is_grad_enabled() != grad:
        changed.append(f"torch.set_grad_enabled({torch.is_grad_enabled()})")
        torch.set_grad_enabled(grad)
    return changed


def run_check(ex: Exercise, fn: Any, *, hint: int = 1, seed: int | None = None) -> CheckResult:
    """Check ``fn`` against ``ex`` and return the verdict; prints nothing and raises nothing about ``fn``.

    The caller's random state is the same afterwards (cases that seed torch's global generator do not move
    the notebook's), and global settings the learner's function changes (default dtype, grad mode) are put
    back after each call, with a note in the verdict.
    """
    with torch.random.fork_rng(devices=[]):
        return _run_check(ex, fn, hint=hint, seed=seed)


def _run_check(ex: Exercise, fn: Any, *, hint: int = 1, seed: int | None = None) -> CheckResult:
    """Check ``fn`` against ``ex`` and return the verdict; prints nothing and raises nothing about ``fn``.

    ``hint=2`` adds the exact fix of a recognised mistake. ``seed`` seeds the drawn cases (default: the
    environment variable COURSE_CHECK_SEED, else fresh entropy); it is in ``details["seed"]``.
    """
    printed = _Printed()
    details: dict[str, Any] = {}
    settings = _global_settings()
    put_back: list[str] = []  # global settings the learner's function changed

    def result(status: str, message: str, mistake: str | None = None) -> CheckResult:
        lines, more = printed.finish()
        put_back.extend(c for c in _restore_settings(settings) if c not in put_back)
        if put_back:
            message += (
                f" (Your function called {', '.join(put_back)}, which changes every later cell too; the "
                "check put it back. Leave global settings alone inside a function.)"
            )
        return CheckResult(ex.key, ex.title, status, message, mistake, details, lines, more)

    if isinstance(hint, bool) or hint not in (1, 2):
        return result(
            FAILED,
            f"hint must be 1 (a hint) or 2 (the exact fix), got {hint!r}: "
            f'check("{ex.key}", {function_name(fn)}, hint=2)',
        )
    fixed = list(ex.cases())
    details["seed"] = s = _draw_seed(seed)
    drawn = list(ex.draw(torch.Generator().manual_seed(s))) if ex.draw is not None else []
    details["cases"], details["drawn"] = len(fixed), len(drawn)
    cases = fixed + drawn
    names = [f"fixed case {i + 1}" for i in range(len(fixed))] + [
        f"drawn case {i + 1} (seed {s}; " for i in range(len(drawn))
    ]

    def case_name(i: int) -> str:
        inputs = describe_case(ex.solution, *cases[i])
        return f"{names[i]}{inputs})" if i >= len(fixed) else f"{names[i]} ({inputs})"

    try:
        unusable = _unusable(ex, fn, cases)
    except Exception as e:  # looking at the learner's object failed (a property that raises, say)
        unusable = f"the check could not look at what you passed: {type(e).__name__}: {_text(e)[:200]}"
    if unusable:
        return result(FAILED, unusable)

    def _named(m: Mistake, crash: str | None = None) -> CheckResult:
        if hint == 2:
            fix = f" The fix: {m.fix}" if m.fix else " (This check has no exact fix written for it.)"
        else:
            fix = f' (for the exact fix: check("{ex.key}", {function_name(fn)}, hint=2))' if m.fix else ""
        said = f" ({crash[0].lower()}{crash[1:]})" if crash else ""
        return result(FAILED, f"This looks like: {m.name}. {m.hint}{fix}{said}", mistake=m.name)

    mine: list[_Run] = []
    crash = None  # what the function raised on a drawn case, after answering every fixed one
    for i, case in enumerate(cases):
        try:
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed), _time_limit(ex.time_limit):
                try:
                    mine.append(_run(fn, case))
                finally:
                    put_back.extend(c for c in _restore_settings(settings) if c not in put_back)
        except _TimeLimit:
            return result(
                FAILED,
                f"your function took longer than {ex.time_limit:g} s on {case_name(i)}, so "
                "the check stopped it: look for a loop that never ends, or work that grows "
                "faster than the input",
            )
        except NotAttempted as e:
            if i == 0:
                return result(NOT_ATTEMPTED, f"Write {ex.signature}, then run this cell again.")
            return result(
                FAILED,
                f"on {case_name(i)} your function raised NotAttempted"
                f"{': ' + str(e).splitlines()[0] if str(e).strip() else ''}, after answering "
                "the cases before it: it must answer every case",
            )
        except (Exception, SystemExit) as e:  # the learner's code failing is a verdict, not a crash of the check
            if i == 0 and _is_old_import(e):
                return result(
                    NOT_ATTEMPTED,
                    f"Write {ex.signature}, then run this cell again. (This notebook's "
                    "import cell predates NotAttempted: make it "
                    "`from course_utils.exercises import NotAttempted, check`.)",
                )
            crash = _exception_message(e, ex, case_name(i), i == 0)
            if i < len(fixed):
                m = _mistake_that_raises(ex, cases[:i], mine, cases[i], e)
                return result(FAILED, crash) if m is None else _named(m, crash)
            break  # a mistake seen on the cases before may still be named: the verdict stays deterministic

    ran = cases[: len(mine)]
    ref = [_run(ex.solution, case) for case in ran]
    problems = [_case_problem(ex, case, m, r) for case, m, r in zip(ran, mine, ref)]
    if all(p is None for p in problems):
        return result(PASSED, "Well done.") if crash is None else result(FAILED, crash)
    for m in ex.mistakes:
        try:
            wrong = [_run(m.fn, case) for case in ran]
        except Exception:
            continue
        if all(_same_run(a, b, ex) for a, b in zip(mine, wrong)):
            return _named(m)
    i = next(i for i, p in enumerate(problems) if p is not None)
    problem = problems[i]
    if problem.startswith("your function changed its input"):
        tail = "."
    elif "expected dtype" in problem:
        tail = (
            ". The exercise states the dtype it wants: look for a step that changes it (a .double() or .long(), "
            "a tensor made from Python numbers without a dtype, arithmetic with a float64 tensor)."
        )
    elif "expected shape" in problem:
        tail = (
            ". Compare your result's shape with the one the exercise states: which axis did a sum, a "
            "transpose or a matrix product remove, add or swap?"
        )
    else:
        tail = ". It matches none of the common mistakes this check knows; compare your steps with the text above."
    if hint == 2:
        tail += " (No exact fix to show: this check does not recognise the mistake.)"
    return result(FAILED, f"on {case_name(i)}: {problems[i]}{tail}")


def report(res: CheckResult) -> CheckResult:
    """Show the verdict once, append it to the report file if one is set, and raise if it failed.

    A verdict that passed (or was not attempted) is printed; a failed one is not printed but raised as
    :class:`ExerciseFailed`, which carries the same text, so that the cell fails and the learner reads it once.
    """
    if res.status != FAILED:
        print(res.text())
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(
                json.dumps(
                    {
                        "key": res.key,
                        "title": res.title,
                        "status": res.status,
                        "mistake": res.mistake,
                        "message": res.message,
                        "seed": res.details.get("seed"),
                    }
                )
                + "\n"
            )
    if res.status == FAILED:
        raise ExerciseFailed(res.text())
    return res
