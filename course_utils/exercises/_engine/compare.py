"""Comparing an answer with the reference's: values, shapes, dtypes and devices, said in one sentence.

Part of the exercise engine (:mod:`course_utils.exercises._engine`). Integers and booleans are compared exactly,
floats within ``atol + rtol * |expected|`` (NaN matches NaN); each difference comes with its :class:`Kind`, and
the verdict's words are chosen by it.
"""

from __future__ import annotations

import enum
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

# ------------------------------------------------------------------------------------------ kinds of problem


class Kind(enum.Enum):
    """What went wrong in a check: each phase says it in one of these, and the verdict is chosen by it (never by
    matching a message's words)."""

    CANNOT_CHECK = "cannot check"  # hint not 1, 2 or 3, or something that cannot be run as the exercise's function
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
class Difference:
    """One difference between an answer and the expected one: its kind and the sentence that says it."""

    kind: Kind
    text: str

    def within(self, prefix: str) -> Difference:
        """The same difference, said of a part of the answer (``result 1: ...``)."""
        return Difference(self.kind, f"{prefix}{self.text}")


def _value(text: str | None) -> Difference | None:
    return None if text is None else Difference(Kind.WRONG_VALUE, text)


# ------------------------------------------------------------------------------------------ comparing


def fmt(x: float, digits: int) -> str:
    return f"{x:.{digits}g}"


def _distinct_digits(a: float, b: float, least: int) -> int:
    """The fewest significant digits (at least ``least``) at which ``a`` and ``b`` print differently."""
    for d in range(least, 18):
        if fmt(a, d) != fmt(b, d):
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
        return f"expected {fmt(e, 3)}, got {fmt(g, 3)}"
    err = abs(g - e)
    if err <= atol + rtol * abs(e):
        return None
    rel = f"relative error {err / abs(e):.1e}, " if e != 0 else ""
    allowed = f"the check allows {atol:g} + {rtol:g} * |expected|"
    digits = _distinct_digits(g, e, 2)
    if digits <= 3:
        return f"expected about {fmt(e, digits)}, got {fmt(g, digits)} ({rel}{allowed})"
    way = "too high" if g > e else "too low"
    return f"your value {fmt(g, digits)} is {err:.2g} {way} ({rel}{allowed})"


def dtype_name(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _index(flat: int, shape: torch.Size) -> list[int]:
    idx = []
    for n in reversed(shape):
        idx.append(flat % n)
        flat //= n
    return idx[::-1]


FLOAT64_TOLERANCE = (1e-10, 1e-9)  # (atol, rtol) at most, where a float64 result is expected and given


def _tensor_difference(
    got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float, accept_dtypes: Sequence[torch.dtype]
) -> Difference | None:
    if got.shape != expected.shape:
        return Difference(Kind.WRONG_SHAPE, f"expected shape {tuple(expected.shape)}, got {tuple(got.shape)}")
    if got.dtype != expected.dtype and not (expected.is_floating_point() and got.dtype in accept_dtypes):
        text = f"expected dtype {dtype_name(expected.dtype)}, got {dtype_name(got.dtype)}"
        return Difference(Kind.WRONG_DTYPE, text)
    if expected.dtype == torch.float64 and got.dtype == torch.float64:  # float64 promised: float64's precision
        atol, rtol = min(atol, FLOAT64_TOLERANCE[0]), min(rtol, FLOAT64_TOLERANCE[1])
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
            f"{n} of the {e.numel()} entries of the {dtype_name(e.dtype)} {tuple(e.shape)} tensor differ; "
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
        shown = f"expected {fmt(ev, d)}, got {fmt(gv, d)}"
    return (
        f"values differ at {n} of the {e.numel()} entries of the {dtype_name(e.dtype)} {tuple(e.shape)} tensor "
        f"(the check allows {atol:g} + {rtol:g} * |expected|); "
        f"the worst at {at}: {shown}"
    )


def compare(
    got: Any, expected: Any, atol: float, rtol: float, accept_dtypes: Sequence[torch.dtype] = ()
) -> Difference | None:
    """None when ``got`` matches ``expected``; otherwise the first difference: its kind, and one sentence.

    Tensors must match in shape, dtype (or one of ``accept_dtypes`` for a floating result), device and value:
    integers and booleans exactly, floating values within ``atol + rtol * |expected|`` (NaN matches NaN).
    Where a number is expected (a Python float, or a 0-d floating tensor), a Python number or a 0-d floating
    tensor is accepted; a float32 one within at least float32's own tolerance.
    """
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            if expected.dim() == 0 and expected.is_floating_point() and _is_number(got):
                return _value(_scalar_problem(float(got), float(expected), atol, rtol))
            return _value(
                f"expected a tensor ({dtype_name(expected.dtype)} {tuple(expected.shape)}), got {type(got).__name__}"
            )
        return _tensor_difference(got, expected, atol, rtol, accept_dtypes)
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            n = len(got) if isinstance(got, (tuple, list)) else 1
            return _value(f"expected {len(expected)} results, got {n}")
        for i, (g, e) in enumerate(zip(got, expected)):
            difference = compare(g, e, atol, rtol, accept_dtypes)
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
            difference = compare(got[k], expected[k], atol, rtol, accept_dtypes)
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
            if got.dtype == torch.float32:  # float32 rounds at ~6e-8 relative: allow that much more, no more
                rtol = max(rtol, 1.3e-6)
            got = float(got)
        if not _is_number(got):
            what = (
                f"a {dtype_name(got.dtype)} tensor of shape {tuple(got.shape)}"
                if isinstance(got, torch.Tensor)
                else type(got).__name__
            )
            return f"expected a number (a Python float or a 0-d floating tensor), got {what}"
        try:
            value = float(got)
        except (OverflowError, ValueError, TypeError):
            return f"expected a number near {fmt(expected, 3)}, got one too large for a float ({str(got)[:20]}...)"
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
