"""The machinery behind every exercise check: run the learner's function, compare, name the mistake.

An :class:`Exercise` carries a reference solution, a few fixed input cases and a catalogue of
:class:`Mistake` s, each with a small function that makes exactly that mistake. Checking a learner's
function runs it on the cases and compares its outputs with the solution's; when they differ, it
compares them with each catalogued mistake's outputs and names the one they match. The catalogue
is therefore honest by construction, and ``tests/test_exercises.py`` proves each check fails on the
unsolved stub and on every catalogued mistake, and passes on the solution.

Statuses: ``"passed"``, ``"failed"`` (with the reason, and the mistake's name when one matches),
``"not attempted"`` (the function still raises ``NotImplementedError``, as the learner copy's stub does).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["NotAttempted", "Mistake", "Exercise", "CheckResult", "ExerciseFailed", "run_check", "compare_outputs"]

PASSED, FAILED, NOT_ATTEMPTED = "passed", "failed", "not attempted"
REPORT_ENV = "COURSE_EXERCISE_REPORT"  # set by `python3 course.py check`; each check appends a JSON line


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

    ``cases()`` returns a list of ``(args, kwargs)``; it must build its tensors from a fixed seed so a
    check gives the same verdict every time. ``solution`` and each mistake take the same arguments
    as the learner's function.
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
    time_limit: float = 10.0


@dataclass
class CheckResult:
    key: str
    title: str
    status: str
    message: str
    mistake: str | None = None
    details: dict = field(default_factory=dict)

    def _ipython_display_(self) -> None:
        """Show nothing when a check is the last line of a cell: the verdict line is already printed."""

    def line(self) -> str:
        mark = {PASSED: "✓", FAILED: "✗", NOT_ATTEMPTED: "·"}[self.status]
        return f"{mark} Exercise {self.key} ({self.title}): {self.status}. {self.message}".rstrip()


class ExerciseFailed(AssertionError):
    """Raised by a failed check so that nbval (and the learner's eye) sees the cell fail.

    In Jupyter it shows as the one-line reason, without a traceback into the checking code.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31m{self.args[0]}\x1b[0m"]


def _clone(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(i) for i in x)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


def compare_outputs(got: Any, expected: Any, atol: float, rtol: float) -> str | None:
    """None when ``got`` matches ``expected``; otherwise one sentence on the first difference."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"expected a tensor, got {type(got).__name__}"
        if got.shape != expected.shape:
            return f"expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
        if expected.dtype == torch.bool or got.dtype == torch.bool:
            if got.dtype != expected.dtype:
                return f"expected dtype {expected.dtype}, got {got.dtype}"
            wrong = (got != expected).sum().item()
            return None if wrong == 0 else f"{wrong} of {expected.numel()} entries differ"
        try:
            torch.testing.assert_close(got.to(expected.dtype), expected, atol=atol, rtol=rtol, equal_nan=True)
        except AssertionError as e:
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip().startswith(("Mismatched", "Greatest absolute"))]
            return "values differ: " + "; ".join(lines) if lines else "values differ"
        return None
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            n = len(got) if isinstance(got, (tuple, list)) else 1
            return f"expected {len(expected)} results, got {n}"
        for i, (g, e) in enumerate(zip(got, expected)):
            problem = compare_outputs(g, e, atol, rtol)
            if problem:
                return f"result {i}: {problem}"
        return None
    if isinstance(expected, float):
        if not isinstance(got, (int, float)) and not (isinstance(got, torch.Tensor) and got.numel() == 1):
            return f"expected a number, got {type(got).__name__}"
        g = float(got)
        if g == expected or (math.isnan(g) and math.isnan(expected)):  # equal infinities, or NaN for NaN
            return None
        if not (math.isfinite(g) and math.isfinite(expected)):  # the tolerance below would accept anything
            return f"expected {expected:.6g}, got {g:.6g}"
        return None if abs(g - expected) <= atol + rtol * abs(expected) else f"expected {expected:.6g}, got {g:.6g}"
    return None if got == expected else f"expected {expected!r}, got {got!r}"


def _outputs(fn: Callable[..., Any], cases: Sequence[tuple[tuple, dict]]) -> list[Any]:
    return [fn(*_clone(args), **_clone(kwargs)) for args, kwargs in cases]


def _matches(got: list[Any], expected: list[Any], ex: Exercise) -> bool:
    return all(compare_outputs(g, e, ex.atol, ex.rtol) is None for g, e in zip(got, expected))


def run_check(ex: Exercise, fn: Any, *, hint: int = 1, seed: int | None = None) -> CheckResult:
    """Check ``fn`` against ``ex`` and return the verdict; prints and raises nothing."""
    def result(status: str, message: str, mistake: str | None = None) -> CheckResult:
        return CheckResult(ex.key, ex.title, status, message, mistake)

    if not callable(fn):
        return result(FAILED, f"expected a function {ex.signature}, got {type(fn).__name__}")
    cases = ex.cases()
    expected = _outputs(ex.solution, cases)
    got = []
    for i, (args, kwargs) in enumerate(cases):
        try:
            got.append(fn(*_clone(args), **_clone(kwargs)))
        except (NotImplementedError, NotAttempted):
            return result(NOT_ATTEMPTED, f"Write {ex.signature}, then run this cell again.")
        except Exception as e:  # the learner's code failing is a verdict, not a crash of the check
            first = str(e).splitlines()[0] if str(e) else ""
            return result(FAILED, f"on test case {i + 1} your function raised {type(e).__name__}: {first}")
    if _matches(got, expected, ex):
        return result(PASSED, "Well done.")
    for m in ex.mistakes:
        try:
            wrong = _outputs(m.fn, cases)
        except Exception:
            continue
        if _matches(got, wrong, ex):
            return result(FAILED, f"This looks like: {m.name}. {m.hint}", mistake=m.name)
    for i, (g, e) in enumerate(zip(got, expected)):
        problem = compare_outputs(g, e, ex.atol, ex.rtol)
        if problem:
            return result(FAILED, f"on test case {i + 1}: {problem}. It matches none of the common mistakes "
                                  "this check knows; compare your steps with the text above.")
    raise AssertionError("unreachable: outputs matched case by case but not as a whole")


def report(res: CheckResult) -> CheckResult:
    """Print the verdict, append it to the report file if one is set, and raise if it failed."""
    print(res.line())
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"key": res.key, "title": res.title, "status": res.status,
                                "mistake": res.mistake, "message": res.message}) + "\n")
    if res.status == FAILED:
        raise ExerciseFailed(res.line())
    return res
