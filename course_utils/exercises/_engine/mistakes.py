"""Phase 3 of a check: the verdict on what the learner's function did, and the name of its mistake.

A catalogued mistake is named only when the function fails a fixed case, and is chosen on the fixed cases alone
(:func:`_mistake_on_fixed_cases`); without a name, the verdict says what differs on which case (:data:`_TAILS`).

Part of the exercise engine (:mod:`course_utils.exercises._engine`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from course_utils.exercises._engine.cases import Cases, named_arguments, parameter_names
from course_utils.exercises._engine.compare import Difference, Kind, compare
from course_utils.exercises._engine.exercise import Exercise, Mistake
from course_utils.exercises._engine.sandbox import (
    Attempt,
    Outcome,
    Run,
    Session,
    TooLarge,
    first_change,
    learner_outcomes,
    same_failure,
    state_of,
    text_of,
)

# ------------------------------------------------------------------------------------------ naming the mistake


def _alike(a: Outcome, b: Outcome, ex: Exercise) -> bool:
    """One case's two outcomes agree: both answered the same (output, and arguments after the call), or both
    raised an exception of one type (the wording is weighed by :func:`_agree`)."""
    if a.run is not None and b.run is not None:
        return _same_run(a.run, b.run, ex)
    return a.error is not None and b.error is not None and type(a.error) is type(b.error)


def _agree(mine: Sequence[Outcome], theirs: Sequence[Outcome], ref: Sequence[Run], ex: Exercise) -> bool:
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
    if all(same_failure(x, y) for x, y in raised):
        return True
    return any(
        b.run is not None and not _same_run(b.run, r, ex) for a, b, r in zip(mine, theirs, ref) if a.run is not None
    )


def _mistake_on_fixed_cases(ex: Exercise, fn: Any, cases: Cases, attempt: Attempt, session: Session) -> Mistake | None:
    """The first catalogued mistake that did on the fixed cases what the learner's function did (:func:`_agree`).

    Where the function raised on a fixed case, the two are compared on the fixed cases up to that one; failing
    that, on all of them (the function is then run on the later fixed cases too, but only for a mistake that
    raised where it did). Drawn cases never enter, so the same answer is given the same name on every run.
    """
    n = len(cases.fixed)
    mine = [Outcome(run=r) for r in attempt.runs[:n]]
    if len(mine) < n:  # it raised on fixed case len(mine)
        mine.append(Outcome(error=attempt.error))
    known = len(mine)  # the cases compared first: every fixed case, or those up to the first it raised on
    ref = [cases.solution(i) for i in range(n)]
    for m in ex.mistakes:
        theirs = cases.mistake(m)
        if _agree(mine[:known], theirs[:known], ref[:known], ex):
            return m
        if known == n or not all(_alike(a, b, ex) for a, b in zip(mine[:known], theirs)):
            continue
        if len(mine) < n:  # see what the function does on the fixed cases after the one it raised on
            mine += learner_outcomes(fn, cases.fixed[len(mine) :], session)
        if _agree(mine, theirs, ref, ex):
            return m
    return None


# ------------------------------------------------------------------------------------------ what differs


def _resolve_inplace(ex: Exercise, args: tuple, kwargs: dict) -> tuple[str, int | str] | None:
    """The inplace argument of this case as (its name, its position in args or its key in kwargs)."""
    if ex.inplace is None:
        return None
    names = parameter_names(ex.solution) or []
    if isinstance(ex.inplace, int):
        name = names[ex.inplace] if ex.inplace < len(names) else f"argument {ex.inplace + 1}"
        if ex.inplace < len(args):
            return name, ex.inplace
        return (name, name) if name in kwargs else None
    if ex.inplace in kwargs:
        return ex.inplace, ex.inplace
    pos = names.index(ex.inplace) if ex.inplace in names else None
    return (ex.inplace, pos) if pos is not None and pos < len(args) else None


def _argument(run: Run, where: int | str) -> Any:
    return run.args[where] if isinstance(where, int) else run.kwargs[where]


def _same_run(a: Run, b: Run, ex: Exercise) -> bool:
    """Whether two runs gave the same output and left the arguments in the same state (within tolerance)."""
    if compare(a.output, b.output, ex.atol, ex.rtol, ex.accept_dtypes) is not None:
        return False
    return compare(state_of([a.args, a.kwargs]), state_of([b.args, b.kwargs]), ex.atol, ex.rtol) is None


def _case_problem(ex: Exercise, case: tuple[tuple, dict], mine: Run, ref: Run) -> Difference | None:
    """What is wrong with the learner's run of one case (an input changed in place first), or None."""
    args, kwargs = case
    inplace = _resolve_inplace(ex, args, kwargs)
    for (name, before), (_, after) in zip(
        named_arguments(ex.solution, args, kwargs), named_arguments(ex.solution, mine.args, mine.kwargs)
    ):
        if inplace is not None and name == inplace[0]:
            continue
        changed = first_change(state_of(before), state_of(after), name)
        if changed:
            return Difference(
                Kind.CHANGED_INPUT,
                f"your function changed its input `{changed}` in place. Leave the inputs as they are: "
                "work on new tensors (`x = x / t`, not `x /= t`; `masked_fill`, not `masked_fill_`)",
            )
    difference = compare(mine.output, ref.output, ex.atol, ex.rtol, ex.accept_dtypes)
    if difference:
        return _named_result(ex, difference)
    if inplace is not None:
        name, where = inplace
        difference = compare(state_of(_argument(mine, where)), state_of(_argument(ref, where)), ex.atol, ex.rtol)
        if difference:
            return difference.within(f"after your call, `{name}` (which your function should write into) is wrong: ")
    return None


def _first_difference(ex: Exercise, cases: Cases, runs: Sequence[Run]) -> tuple[int, Difference] | None:
    """The first case the learner's function answered differently from the solution, and what differs."""
    for i, (case, mine) in enumerate(zip(cases.all, runs)):
        difference = _case_problem(ex, case, mine, cases.solution(i))
        if difference is not None:
            return i, difference
    return None


def result_names(ex: Exercise) -> tuple[str, ...]:
    """The names of the values ``ex`` returns, as its statement names them: ``results``, else the names in its
    signature's ``-> (out, weights)`` (empty when it returns one value or names none)."""
    if ex.results:
        return ex.results
    found = re.search(r"->\s*\(([^()]*)\)", ex.signature)
    names = tuple(part.strip() for part in found.group(1).split(",")) if found else ()
    return names if names and all(re.fullmatch(r"[a-z_][a-z0-9_]*", n) for n in names) else ()


def _named_result(ex: Exercise, difference: Difference) -> Difference:
    """The difference with ``result 1: `` said as the statement names that result (``weights: ``)."""
    names = result_names(ex)
    found = re.match(r"result (\d+): ", difference.text)
    if not found or int(found.group(1)) >= len(names):
        return difference
    return Difference(difference.kind, f"`{names[int(found.group(1))]}`: " + difference.text[found.end() :])


# ------------------------------------------------------------------------------------------ the verdict


_TAILS = {  # what a difference's verdict adds when no catalogued mistake is named
    Kind.CHANGED_INPUT: ".",
    Kind.WRONG_DTYPE: (
        ". The exercise states the dtype it wants: look for a step that changes it (a .double() or .long(), "
        "a tensor made from Python numbers without a dtype, arithmetic with a float64 tensor)."
    ),
    Kind.WRONG_SHAPE: (
        ". Compare your result's shape with the one the exercise states: which axis did a sum, a "
        "transpose or a matrix product remove, add or swap?"
    ),
    Kind.WRONG_VALUE: (
        ". It matches none of the common mistakes this check knows; compare your steps with the text above."
    ),
}


_DRAWN_TAIL = (  # a wrong value on a drawn case, after every fixed case was answered right
    ". Your function answers every fixed case right and this drawn one wrong, so no common mistake is named: "
    "look for what it assumes of its input (a size, a range of values, a number of axes) that this one breaks."
)


def _rounded_short(mine: Any, expected: Any) -> str | None:
    """The verdict's tail when ``mine`` is one float32, float16 or bfloat16 value where a Python float or float64 was
    expected, within a thousandth of it (the right formula, rounded too early); None otherwise."""
    digits = {torch.float32: 7, torch.float16: 3, torch.bfloat16: 2}
    if not (isinstance(mine, torch.Tensor) and mine.numel() == 1 and mine.dtype in digits):
        return None
    if not isinstance(expected, float) and not (isinstance(expected, torch.Tensor) and expected.dtype == torch.float64):
        return None
    want, got = float(expected), float(mine)
    if not (math.isfinite(got) and abs(got - want) <= 1e-3 * abs(want)):
        return None
    return (f". Your answer is a {str(mine.dtype).removeprefix('torch.')} tensor, which keeps about "
            f"{digits[mine.dtype]} significant digits, and this case needs more (a difference of two nearly equal "
            "numbers loses most of them): compute in Python floats (math.cos, say) or float64.")  # fmt: skip


_MISSING_FORWARD = 'missing the required "forward" function'  # torch's message for a Module without forward


@dataclass(frozen=True)
class Verdict:
    """What phase 3 concludes: the kind of problem (None: passed), the message, the mistake named if any."""

    kind: Kind | None
    message: str
    mistake: Mistake | None = None


def explain(ex: Exercise, fn: Any, cases: Cases, attempt: Attempt, session: Session, hint: int) -> Verdict:
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
    crash = _exception_message(attempt.error, ex, cases.name(at), at == 0) if attempt.stop is Kind.RAISED else None
    raised_on_fixed = crash is not None and cases.is_fixed(at)
    first = _first_difference(ex, cases, attempt.runs)
    if raised_on_fixed or (first is not None and cases.is_fixed(first[0])):
        m = _mistake_on_fixed_cases(ex, fn, cases, attempt, session)
        if m is not None:
            kind = Kind.RAISED if raised_on_fixed else first[1].kind
            return _named(ex, fn, kind, m, hint, crash if raised_on_fixed else None)
    if raised_on_fixed or (first is None and crash is not None):
        return Verdict(Kind.RAISED, crash)
    if first is None:
        return Verdict(None, "Well done.")
    i, difference = first
    tail = _TAILS[difference.kind]
    if difference.kind is Kind.WRONG_VALUE and not cases.is_fixed(i):
        tail = _DRAWN_TAIL
    if difference.kind is Kind.WRONG_VALUE:
        tail = _rounded_short(attempt.runs[i].output, cases.solution(i).output) or tail
    if hint >= 2:
        tail += " (No exact fix to show: this check does not recognise the mistake.)"
    return Verdict(difference.kind, f"on {cases.name(i)}: {difference.text}{tail}")


def _stopped(ex: Exercise, cases: Cases, attempt: Attempt) -> Verdict | None:
    """The verdict when the function stopped the check before answering (other than by raising), else None."""
    at = len(attempt.runs)
    if attempt.stop is Kind.TOO_SLOW:
        return Verdict(
            Kind.TOO_SLOW,
            f"your function took longer than {ex.time_limit:g} s on {cases.name(at)}, so the check stopped it: "
            "look for a loop that never ends, or work that grows faster than the input",
        )
    if attempt.stop is Kind.NOT_ATTEMPTED:
        return Verdict(Kind.NOT_ATTEMPTED, f"Write {ex.signature}, then run this cell again.")
    if attempt.stop is Kind.OLD_IMPORT:
        return Verdict(
            Kind.OLD_IMPORT,
            f"Write {ex.signature}, then run this cell again. (This notebook's import cell predates NotAttempted: "
            "make it `from course_utils.exercises import NotAttempted, check`.)",
        )
    if attempt.stop is Kind.GAVE_UP:
        said = text_of(attempt.error)
        said = f": {said.splitlines()[0]}" if said.strip() else ""
        return Verdict(
            Kind.GAVE_UP,
            f"on {cases.name(at)} your function raised NotAttempted{said}, after answering the cases before it: "
            "it must answer every case",
        )
    return None


def _named(ex: Exercise, fn: Any, kind: Kind, m: Mistake, hint: int, crash: str | None) -> Verdict:
    if hint >= 2:
        fix = f" The fix: {m.fix}" if m.fix else " (This check has no exact fix written for it.)"
    else:
        fix = f' (for the exact fix: check("{ex.key}", {function_name(fn)}, hint=2))' if m.fix else ""
    said = f" ({crash[0].lower()}{crash[1:]})" if crash else ""
    return Verdict(kind, f"This looks like: {m.name}. {m.hint}{fix}{said}", m)


def _exception_message(e: BaseException, ex: Exercise, case_name: str, first_case: bool) -> str:
    first = text_of(e).splitlines()[0] if text_of(e).strip() else ""
    if isinstance(e, NotImplementedError) and _MISSING_FORWARD in text_of(e):
        return (
            f"on {case_name} your module has no `forward` method (torch: {first}). Check its spelling and "
            "indentation: `def forward(self, ...)` inside the class"
        )
    if isinstance(e, TooLarge):
        return f"on {case_name} your function computed {first}: {ex.largest_why}"
    said = f"raised {type(e).__name__}" + (f": {first}" if first else "")
    msg = f"on {case_name} your function {said}"
    if not ex.autograd and isinstance(e, RuntimeError) and ("grad" in first or "inference" in first.lower()):
        msg += ". The check runs your function without autograd (torch.inference_mode()), as the exercise asks"
    if isinstance(e, NotImplementedError) and first_case and not first:
        nb = notebook_of(ex.key)
        msg += (
            f". If this is the untouched stub of an older copy of the notebook, run "
            f"`python3 course.py reset {nb} --exercise {ex.key}` for the current one (your other cells "
            "are kept, and a backup is made)"
        )
    return msg


def notebook_of(key: str) -> str:
    """The learner notebook of exercise ``key``, as a path from the course folder (``notebooks/03_masking.ipynb``)."""
    folder = Path(__file__).resolve().parents[3] / "notebooks"  # the course folder's
    found = sorted(folder.glob(f"{key.split('.')[0]}_*.ipynb"))
    return f"notebooks/{found[0].name}" if found else f"notebooks/{key.split('.')[0]}_*.ipynb"


def function_name(fn: Any) -> str:
    """The name to write in a suggested call: the function's own, else ``your_function`` (a lambda, an object)."""
    try:
        name = getattr(fn, "__name__", "")
    except Exception:
        name = ""
    return name if isinstance(name, str) and name.isidentifier() else "your_function"
