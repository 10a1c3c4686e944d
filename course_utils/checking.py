"""The machinery behind every exercise check: run the learner's function, compare, name the mistake.

An :class:`Exercise` carries a reference solution, fixed input cases, a way to ``draw`` fresh cases, the edges
of its statement's domain, and a catalogue of :class:`Mistake` s, each with a small function that makes exactly
that mistake. Checking a learner's function (:func:`run_check`) goes in three phases:

1. Prepare the cases: the fixed ones, then those ``draw`` makes from a fresh seed (the environment variable
   ``COURSE_CHECK_SEED`` pins it, to reproduce a verdict). First, reject what cannot be checked, with a one-line
   verdict: ``None``, something not callable, a class, a generator or ``async`` function, a function whose
   parameters cannot take the exercise's arguments.
2. Run the learner's function on each case in order, until one it does not answer. Every argument is a fresh
   copy; each call has a time limit (``Exercise.time_limit`` seconds) and the learner's printing is captured
   (the first lines are shown with the verdict, the rest only counted).
3. Explain: compare each output with the solution's on value, shape, dtype and device (integers and booleans
   exactly, never cast from float), and each argument after the call with its value before it (an argument
   changed in place is a failure, except the ``Exercise.inplace`` argument, whose value after the call is
   compared with the solution's). Each phase says what it found as a kind of problem (a wrong shape, an
   exception, ...), and the verdict's words are chosen by that kind.

Naming a mistake, the same on every run. A catalogued mistake is named only when the function fails a fixed
case, and is chosen on the fixed cases alone: the first mistake that does there what the function does. On
each fixed case both answer alike (output, and arguments after the call) or both raise an exception of one
type; where the function raised, the cases compared are those up to the first it raised on, or else all of
them (it is then run on the later fixed cases too). An error worded otherwise than the mistake's (einsum's
where the mistake's matmul raises, for the same slip) counts only when the two also give the same wrong answer
on one of those cases; the same error word for word (type and message, numbers included) needs no more. The
name comes with its conceptual ``hint``, the exact ``fix`` only with ``hint=2``. A function that answers every
fixed case right and fails only on a drawn one is shown that case, with its seed, and no mistake is named
(every catalogued mistake fails some fixed case, so none does what it does there). Without a name, the verdict
says what differs on which case: the statement's edges the case holds (``Exercise.edges``), then its inputs'
shapes and dtypes, as in ``fixed case 3 (T != S, Dv == 1; q float32 (4, 8), ...)``.

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
import enum
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
    A failure names the edges its case holds; a predicate that raises on a case counts as not held there.
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


# ------------------------------------------------------------------------------------------ kinds of problem


class _Kind(enum.Enum):
    """What went wrong in a check: each phase says it in one of these, and the verdict is chosen by it (never by
    matching a message's words)."""

    CANNOT_CHECK = "cannot check"  # hint not 1 or 2, or something that cannot be run as the exercise's function
    NOT_ATTEMPTED = "not attempted"  # NotAttempted on the first case: the untouched stub
    OLD_IMPORT = "old import cell"  # the new stub under an import cell that predates NotAttempted
    TOO_SLOW = "too slow"  # a case ran past the time limit
    GAVE_UP = "gave up"  # NotAttempted after answering a case
    RAISED = "raised"  # any other exception
    CHANGED_INPUT = "changed an input"  # an argument (other than the inplace one) changed in place
    WRONG_DTYPE = "wrong dtype"
    WRONG_SHAPE = "wrong shape"
    WRONG_VALUE = "wrong value"  # values, a device, a type, a count of results: any other difference


@dataclass(frozen=True)
class _Difference:
    """One difference between an answer and the expected one: its kind and the sentence that says it."""

    kind: _Kind
    text: str

    def within(self, prefix: str) -> _Difference:
        """The same difference, said of a part of the answer (``result 1: ...``)."""
        return _Difference(self.kind, f"{prefix}{self.text}")


def _value(text: str | None) -> _Difference | None:
    return None if text is None else _Difference(_Kind.WRONG_VALUE, text)


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


def _tensor_difference(
    got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float, accept_dtypes: Sequence[torch.dtype]
) -> _Difference | None:
    if got.shape != expected.shape:
        return _Difference(_Kind.WRONG_SHAPE, f"expected shape {tuple(expected.shape)}, got {tuple(got.shape)}")
    if got.dtype != expected.dtype and not (expected.is_floating_point() and got.dtype in accept_dtypes):
        text = f"expected dtype {_dtype_name(expected.dtype)}, got {_dtype_name(got.dtype)}"
        return _Difference(_Kind.WRONG_DTYPE, text)
    return _value(_tensor_values_problem(got, expected, atol, rtol))


def _tensor_values_problem(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> str | None:
    """What differs between two tensors of one shape and comparable dtypes: the device, else the values."""
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
    difference = _compare(got, expected, atol, rtol, accept_dtypes)
    return None if difference is None else difference.text


def _compare(
    got: Any, expected: Any, atol: float, rtol: float, accept_dtypes: Sequence[torch.dtype] = ()
) -> _Difference | None:
    """:func:`compare_outputs`'s first difference, with its kind (a shape, a dtype, or anything else)."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            if expected.dim() == 0 and expected.is_floating_point() and _is_number(got):
                return _value(_scalar_problem(float(got), float(expected), atol, rtol))
            return _value(
                f"expected a tensor ({_dtype_name(expected.dtype)} {tuple(expected.shape)}), got {type(got).__name__}"
            )
        return _tensor_difference(got, expected, atol, rtol, accept_dtypes)
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            n = len(got) if isinstance(got, (tuple, list)) else 1
            return _value(f"expected {len(expected)} results, got {n}")
        for i, (g, e) in enumerate(zip(got, expected)):
            difference = _compare(g, e, atol, rtol, accept_dtypes)
            if difference:
                return difference.within(f"result {i}: ")
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            return _value(
                f"expected a dict with keys {sorted(map(str, expected))}, got {type(got).__name__}"
                + (f" with keys {sorted(map(str, got))}" if isinstance(got, dict) else "")
            )
        for k in expected:
            difference = _compare(got[k], expected[k], atol, rtol, accept_dtypes)
            if difference:
                return difference.within(f"[{k!r}]: ")
        return None
    return _value(_plain_problem(got, expected, atol, rtol))


def _plain_problem(got: Any, expected: Any, atol: float, rtol: float) -> str | None:
    """What differs where a plain value is expected: True or False, a number, an integer, anything else."""
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
    if _compare(a.output, b.output, ex.atol, ex.rtol, ex.accept_dtypes) is not None:
        return False
    return _compare(_state([a.args, a.kwargs]), _state([b.args, b.kwargs]), ex.atol, ex.rtol) is None


def _case_problem(ex: Exercise, case: tuple[tuple, dict], mine: _Run, ref: _Run) -> _Difference | None:
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
            return _Difference(
                _Kind.CHANGED_INPUT,
                f"your function changed its input `{changed}` in place. Leave the inputs as they are: "
                "work on new tensors (`x = x / t`, not `x /= t`; `masked_fill`, not `masked_fill_`)",
            )
    difference = _compare(mine.output, ref.output, ex.atol, ex.rtol, ex.accept_dtypes)
    if difference:
        return difference
    if inplace is not None:
        name, where = inplace
        difference = _compare(_state(_argument(mine, where)), _state(_argument(ref, where)), ex.atol, ex.rtol)
        if difference:
            return difference.within(f"after your call, `{name}` (which your function should write into) is wrong: ")
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
    if isinstance(e, NotImplementedError) and _MISSING_FORWARD in _text(e):
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


# ------------------------------------------------------------------------------------------ phase 1: the cases


def _edges_held(ex: Exercise, case: tuple[tuple, dict]) -> list[str]:
    """The names of the statement's edges (``Exercise.edges``) that ``case`` holds, in the order they are stated.

    Each predicate gets a copy of the case's arguments. One that raises on the case, or answers with something
    that is not a truth value, counts as not held: edges help a learner read a verdict and never change it.
    """
    try:
        edges = list(ex.edges.items())
    except Exception:  # not a dict: nothing to say
        return []
    held = []
    for name, holds in edges:
        try:
            if bool(holds(*_clone(case[0]), **_clone(case[1]))):
                held.append(str(name))
        except Exception:
            continue
    return held


@dataclass
class _Cases:
    """The cases of one check, in the order they run: the fixed ones, then those drawn from ``seed``."""

    ex: Exercise
    fixed: list[tuple[tuple, dict]]
    drawn: list[tuple[tuple, dict]]
    seed: int
    _solved: dict[int, _Run] = field(default_factory=dict)

    @property
    def all(self) -> list[tuple[tuple, dict]]:
        return self.fixed + self.drawn

    def solution(self, i: int) -> _Run:
        """The reference solution's run of case ``i`` (run once, on its own copy of the arguments)."""
        if i not in self._solved:
            self._solved[i] = _run(self.ex.solution, self.all[i])
        return self._solved[i]

    def is_fixed(self, i: int) -> bool:
        return i < len(self.fixed)

    def name(self, i: int) -> str:
        """Case ``i`` as a verdict names it: the edges it holds, then its inputs (a drawn one first its seed):
        ``fixed case 3 (T != S, Dv == 1; q float32 (4, 8), ...)``, ``drawn case 1 (seed 81723; n=512)``."""
        case = self.all[i]
        parts = [", ".join(_edges_held(self.ex, case)), describe_case(self.ex.solution, *case)]
        if self.is_fixed(i):
            head = f"fixed case {i + 1}"
        else:
            head = f"drawn case {i - len(self.fixed) + 1}"
            parts.insert(0, f"seed {self.seed}")
        return f"{head} ({'; '.join(p for p in parts if p)})"


def _prepare_cases(ex: Exercise, seed: int | None) -> _Cases:
    """Phase 1: the fixed cases, and the cases drawn from ``seed`` (see :func:`_draw_seed`)."""
    fixed = list(ex.cases())
    s = _draw_seed(seed)
    drawn = list(ex.draw(torch.Generator().manual_seed(s))) if ex.draw is not None else []
    return _Cases(ex, fixed, drawn, s)


def _why_unusable(ex: Exercise, fn: Any, cases: Sequence[tuple[tuple, dict]]) -> str | None:
    try:
        return _unusable(ex, fn, cases)
    except Exception as e:  # looking at the learner's object failed (a property that raises, say)
        return f"the check could not look at what you passed: {type(e).__name__}: {_text(e)[:200]}"


# ------------------------------------------------------------------------------------------ phase 2: running it


class _Session:
    """Where the learner's function runs during one check: each call under the time limit, its printing captured,
    and the global settings it changes put back after each call (and named in the verdict)."""

    def __init__(self, time_limit: float | None) -> None:
        self.time_limit = time_limit
        self.printed = _Printed()
        self.settings = _global_settings()
        self.put_back: list[str] = []  # global settings the learner's function changed

    def call(self, fn: Callable[..., Any], case: tuple[tuple, dict]) -> _Run:
        out, err = contextlib.redirect_stdout(self.printed), contextlib.redirect_stderr(self.printed)
        with out, err, _time_limit(self.time_limit):
            try:
                return _run(fn, case)
            finally:
                self.restore()

    def restore(self) -> None:
        self.put_back.extend(c for c in _restore_settings(self.settings) if c not in self.put_back)


@dataclass
class _Attempt:
    """What the learner's function did on the cases, in order: the runs it answered, then what stopped it (on case
    ``len(runs)``): ``TOO_SLOW``, ``NOT_ATTEMPTED``, ``GAVE_UP``, ``OLD_IMPORT`` or ``RAISED``; None if nothing."""

    runs: list[_Run]
    stop: _Kind | None = None
    error: BaseException | None = None


def _run_learner(fn: Any, cases: Sequence[tuple[tuple, dict]], session: _Session) -> _Attempt:
    """Phase 2: run the learner's function on each case in order, until the end or the first case it does not
    answer."""
    runs: list[_Run] = []
    for i, case in enumerate(cases):
        try:
            runs.append(session.call(fn, case))
        except _TimeLimit:
            return _Attempt(runs, _Kind.TOO_SLOW)
        except NotAttempted as e:
            return _Attempt(runs, _Kind.NOT_ATTEMPTED if i == 0 else _Kind.GAVE_UP, e)
        except (Exception, SystemExit) as e:  # the learner's code failing is a verdict, not a crash of the check
            return _Attempt(runs, _Kind.OLD_IMPORT if i == 0 and _is_old_import(e) else _Kind.RAISED, e)
    return _Attempt(runs)


# ------------------------------------------------------------------------------------------ phase 3: explaining


@dataclass(frozen=True)
class _Outcome:
    """What a function did on one case: answered (``run``), raised (``error``), or neither (stopped by the time
    limit before it could say)."""

    run: _Run | None = None
    error: BaseException | None = None


def _outcome(fn: Callable[..., Any], case: tuple[tuple, dict]) -> _Outcome:
    try:
        return _Outcome(run=_run(fn, case))
    except Exception as e:
        return _Outcome(error=e)


def _learner_outcomes(fn: Any, cases: Sequence[tuple[tuple, dict]], session: _Session) -> list[_Outcome]:
    """The learner's function's outcome on each of ``cases``, run as in phase 2 (the first case past the time
    limit, and every one after it, count as neither answered nor raised)."""
    outcomes = []
    for case in cases:
        try:
            outcomes.append(_Outcome(run=session.call(fn, case)))
        except _TimeLimit:
            break
        except (Exception, SystemExit) as e:
            outcomes.append(_Outcome(error=e))
    return outcomes + [_Outcome()] * (len(cases) - len(outcomes))


def _alike(a: _Outcome, b: _Outcome, ex: Exercise) -> bool:
    """One case's two outcomes agree: both answered the same (output, and arguments after the call), or both
    raised an exception of one type (the wording is weighed by :func:`_agree`)."""
    if a.run is not None and b.run is not None:
        return _same_run(a.run, b.run, ex)
    return a.error is not None and b.error is not None and type(a.error) is type(b.error)


def _agree(mine: Sequence[_Outcome], theirs: Sequence[_Outcome], ref: Sequence[_Run], ex: Exercise) -> bool:
    """Whether the learner's outcomes on some fixed cases are the mistake's (``ref``: the solution's runs on them).

    On every one of the cases both answer alike or both raise, with exceptions of one type. Where the wording of
    some pair differs (einsum's error where the mistake's matmul raises, for the same slip), the two must also give
    the same wrong answer on one of the cases: raising where a mistake raises is not, alone, evidence of that
    mistake (an answer that raises everywhere, or is right wherever it does not raise, is not named by an error's
    type). The same failure on every raising case (type and message, numbers included) needs no more.
    """
    if len(mine) != len(theirs) or not all(_alike(a, b, ex) for a, b in zip(mine, theirs)):
        return False
    raised = [(a.error, b.error) for a, b in zip(mine, theirs) if a.error is not None and b.error is not None]
    if all(_same_failure(x, y) for x, y in raised):
        return True
    return any(
        b.run is not None and not _same_run(b.run, r, ex) for a, b, r in zip(mine, theirs, ref) if a.run is not None
    )


def _mistake_on_fixed_cases(
    ex: Exercise, fn: Any, cases: _Cases, attempt: _Attempt, session: _Session
) -> Mistake | None:
    """The first catalogued mistake that did on the fixed cases what the learner's function did (:func:`_agree`).

    Where the function raised on a fixed case, the two are compared on the fixed cases up to that one; failing
    that, on all of them (the function is then run on the later fixed cases too, but only for a mistake that
    raised where it did). Drawn cases never enter, so the same answer is given the same name on every run.
    """
    n = len(cases.fixed)
    mine = [_Outcome(run=r) for r in attempt.runs[:n]]
    if len(mine) < n:  # it raised on fixed case len(mine)
        mine.append(_Outcome(error=attempt.error))
    known = len(mine)  # the cases compared first: every fixed case, or those up to the first it raised on
    ref = [cases.solution(i) for i in range(n)]
    for m in ex.mistakes:
        theirs = [_outcome(m.fn, case) for case in cases.fixed]
        if _agree(mine[:known], theirs[:known], ref[:known], ex):
            return m
        if known == n or not all(_alike(a, b, ex) for a, b in zip(mine[:known], theirs)):
            continue
        if len(mine) < n:  # see what the function does on the fixed cases after the one it raised on
            mine += _learner_outcomes(fn, cases.fixed[len(mine) :], session)
        if _agree(mine, theirs, ref, ex):
            return m
    return None


def _first_difference(ex: Exercise, cases: _Cases, runs: Sequence[_Run]) -> tuple[int, _Difference] | None:
    """The first case the learner's function answered differently from the solution, and what differs."""
    for i, (case, mine) in enumerate(zip(cases.all, runs)):
        difference = _case_problem(ex, case, mine, cases.solution(i))
        if difference is not None:
            return i, difference
    return None


_TAILS = {  # what a difference's verdict adds when no catalogued mistake is named
    _Kind.CHANGED_INPUT: ".",
    _Kind.WRONG_DTYPE: (
        ". The exercise states the dtype it wants: look for a step that changes it (a .double() or .long(), "
        "a tensor made from Python numbers without a dtype, arithmetic with a float64 tensor)."
    ),
    _Kind.WRONG_SHAPE: (
        ". Compare your result's shape with the one the exercise states: which axis did a sum, a "
        "transpose or a matrix product remove, add or swap?"
    ),
    _Kind.WRONG_VALUE: (
        ". It matches none of the common mistakes this check knows; compare your steps with the text above."
    ),
}
_DRAWN_TAIL = (  # a wrong value on a drawn case, after every fixed case was answered right
    ". Your function answers every fixed case right and this drawn one wrong, so no common mistake is named: "
    "look for what it assumes of its input (a size, a range of values, a number of axes) that this one breaks."
)


@dataclass(frozen=True)
class _Verdict:
    """What phase 3 concludes: the kind of problem (None: passed), the message, the mistake named if any."""

    kind: _Kind | None
    message: str
    mistake: Mistake | None = None


def _named(ex: Exercise, fn: Any, kind: _Kind, m: Mistake, hint: int, crash: str | None) -> _Verdict:
    if hint == 2:
        fix = f" The fix: {m.fix}" if m.fix else " (This check has no exact fix written for it.)"
    else:
        fix = f' (for the exact fix: check("{ex.key}", {function_name(fn)}, hint=2))' if m.fix else ""
    said = f" ({crash[0].lower()}{crash[1:]})" if crash else ""
    return _Verdict(kind, f"This looks like: {m.name}. {m.hint}{fix}{said}", m)


def _explain(ex: Exercise, fn: Any, cases: _Cases, attempt: _Attempt, session: _Session, hint: int) -> _Verdict:
    """Phase 3: the verdict on what the learner's function did.

    A catalogued mistake is named only when the function fails a fixed case (a wrong answer, or an exception),
    and only by the fixed cases (:func:`_mistake_on_fixed_cases`). A function that answers every fixed case
    right and fails a drawn one is told which drawn case, with its seed, and no mistake is named: every
    catalogued mistake fails some fixed case, so none agrees with it there.
    """
    stopped = _stopped(ex, cases, attempt)
    if stopped is not None:
        return stopped
    at = len(attempt.runs)  # the case it raised on, if it did
    crash = _exception_message(attempt.error, ex, cases.name(at), at == 0) if attempt.stop is _Kind.RAISED else None
    raised_on_fixed = crash is not None and cases.is_fixed(at)
    first = _first_difference(ex, cases, attempt.runs)
    if raised_on_fixed or (first is not None and cases.is_fixed(first[0])):
        m = _mistake_on_fixed_cases(ex, fn, cases, attempt, session)
        if m is not None:
            kind = _Kind.RAISED if raised_on_fixed else first[1].kind
            return _named(ex, fn, kind, m, hint, crash if raised_on_fixed else None)
    if raised_on_fixed or (first is None and crash is not None):
        return _Verdict(_Kind.RAISED, crash)
    if first is None:
        return _Verdict(None, "Well done.")
    i, difference = first
    tail = _TAILS[difference.kind]
    if difference.kind is _Kind.WRONG_VALUE and not cases.is_fixed(i):
        tail = _DRAWN_TAIL
    if hint == 2:
        tail += " (No exact fix to show: this check does not recognise the mistake.)"
    return _Verdict(difference.kind, f"on {cases.name(i)}: {difference.text}{tail}")


def _stopped(ex: Exercise, cases: _Cases, attempt: _Attempt) -> _Verdict | None:
    """The verdict when the function stopped the check before answering (other than by raising), else None."""
    at = len(attempt.runs)
    if attempt.stop is _Kind.TOO_SLOW:
        return _Verdict(
            _Kind.TOO_SLOW,
            f"your function took longer than {ex.time_limit:g} s on {cases.name(at)}, so the check stopped it: "
            "look for a loop that never ends, or work that grows faster than the input",
        )
    if attempt.stop is _Kind.NOT_ATTEMPTED:
        return _Verdict(_Kind.NOT_ATTEMPTED, f"Write {ex.signature}, then run this cell again.")
    if attempt.stop is _Kind.OLD_IMPORT:
        return _Verdict(
            _Kind.OLD_IMPORT,
            f"Write {ex.signature}, then run this cell again. (This notebook's import cell predates NotAttempted: "
            "make it `from course_utils.exercises import NotAttempted, check`.)",
        )
    if attempt.stop is _Kind.GAVE_UP:
        said = _text(attempt.error)
        said = f": {said.splitlines()[0]}" if said.strip() else ""
        return _Verdict(
            _Kind.GAVE_UP,
            f"on {cases.name(at)} your function raised NotAttempted{said}, after answering the cases before it: "
            "it must answer every case",
        )
    return None


# ------------------------------------------------------------------------------------------ the check


def run_check(ex: Exercise, fn: Any, *, hint: int = 1, seed: int | None = None) -> CheckResult:
    """Check ``fn`` against ``ex`` and return the verdict; prints nothing and raises nothing about ``fn``.

    The caller's random state is the same afterwards (cases that seed torch's global generator do not move
    the notebook's), and global settings the learner's function changes (default dtype, grad mode) are put
    back after each call, with a note in the verdict.
    """
    with torch.random.fork_rng(devices=[]):
        return _run_check(ex, fn, hint=hint, seed=seed)


def _run_check(ex: Exercise, fn: Any, *, hint: int = 1, seed: int | None = None) -> CheckResult:
    """Check ``fn`` against ``ex`` in three phases: prepare the cases, run the function, explain what it did.

    ``hint=2`` adds the exact fix of a recognised mistake. ``seed`` seeds the drawn cases (default: the
    environment variable COURSE_CHECK_SEED, else fresh entropy); it is in ``details["seed"]``, and the kind of
    problem found (``"wrong shape"``, ``"raised"``, ...; None when passed) in ``details["problem"]``.
    """
    session = _Session(ex.time_limit)
    details: dict[str, Any] = {}
    if isinstance(hint, bool) or hint not in (1, 2):
        call = f'check("{ex.key}", {function_name(fn)}, hint=2)'
        said = f"hint must be 1 (a hint) or 2 (the exact fix), got {hint!r}: {call}"
        return _result(ex, _Verdict(_Kind.CANNOT_CHECK, said), session, details)
    cases = _prepare_cases(ex, seed)
    details.update(seed=cases.seed, cases=len(cases.fixed), drawn=len(cases.drawn))
    unusable = _why_unusable(ex, fn, cases.all)
    if unusable:
        return _result(ex, _Verdict(_Kind.CANNOT_CHECK, unusable), session, details)
    attempt = _run_learner(fn, cases.all, session)
    return _result(ex, _explain(ex, fn, cases, attempt, session, hint), session, details)


def _result(ex: Exercise, verdict: _Verdict, session: _Session, details: dict[str, Any]) -> CheckResult:
    """The verdict as the learner sees it, with the printing it captured and the settings it put back."""
    lines, more = session.printed.finish()
    session.restore()
    message = verdict.message
    if session.put_back:
        message += (
            f" (Your function called {', '.join(session.put_back)}, which changes every later cell too; the "
            "check put it back. Leave global settings alone inside a function.)"
        )
    if verdict.kind is None:
        status = PASSED
    elif verdict.kind in (_Kind.NOT_ATTEMPTED, _Kind.OLD_IMPORT):
        status = NOT_ATTEMPTED
    else:
        status = FAILED
    details["problem"] = None if verdict.kind is None else verdict.kind.value
    mistake = None if verdict.mistake is None else verdict.mistake.name
    return CheckResult(ex.key, ex.title, status, message, mistake, details, lines, more)


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
