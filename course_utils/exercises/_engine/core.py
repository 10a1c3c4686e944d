"""A check put together: reject what cannot be checked, then the three phases (prepare the cases, run the learner's
function, explain what it did), and the verdict as the learner reads it.

Part of the exercise engine (:mod:`course_utils.exercises._engine`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch

from course_utils._validate import check_choice
from course_utils.exercises._engine.cases import References, prepare_cases
from course_utils.exercises._engine.compare import Kind
from course_utils.exercises._engine.exercise import FAILED, NOT_ATTEMPTED, PASSED, CheckResult, Exercise
from course_utils.exercises._engine.mistakes import Verdict, explain
from course_utils.exercises._engine.sandbox import Session, run_learner, text_of


def run_check(
    ex: Exercise, fn: Any, *, hint: int = 1, seed: int | None = None, references: References | None = None
) -> CheckResult:
    """Check ``fn`` against ``ex`` and return the verdict; prints nothing and raises nothing about ``fn`` (what is
    wrong with it is the verdict), but a ``hint`` other than 1, 2 or 3 is a TypeError/ValueError of the call.

    The caller's random state is the same afterwards (cases that seed torch's global generator do not move
    the notebook's), and global settings the learner's function changes (default dtype, grad mode) are put
    back after each call, with a note in the verdict. ``references`` (:class:`References` of ``ex``) shares the
    solution's and the mistakes' runs between many checks; the verdict is the same without it.
    """
    return _judge(ex, fn, hint, seed, ("fixed", "drawn"), references)


def check_fixed(ex: Exercise, fn: Any, *, hint: int = 1, references: References | None = None) -> CheckResult:
    """:func:`run_check` on the fixed cases alone (no draws).

    A function that fails a fixed case gets this verdict (status and mistake named) from the whole check too,
    on every seed (a mistake is named by the fixed cases alone, and they run first), unless a drawn case stops it
    first (the time limit, or NotAttempted raised there): the seed sweep tries the whole check on a few seeds.
    """
    return _judge(ex, fn, hint, 0, ("fixed",), references)


def check_drawn(
    ex: Exercise, fn: Any, seed: int, *, hint: int = 1, references: References | None = None
) -> CheckResult:
    """:func:`run_check` on the cases drawn from ``seed`` alone (no fixed cases).

    A function that answers every fixed case right gets this verdict's status from the whole check with ``seed``
    (no mistake is named on a drawn case). With ``references``, the draws of a seed and the solution's runs of
    them are made once for all the functions checked on that seed.
    """
    return _judge(ex, fn, hint, seed, ("drawn",), references)


def _judge(
    ex: Exercise, fn: Any, hint: int, seed: int | None, parts: tuple[str, ...], references: References | None
) -> CheckResult:
    """Judge ``fn`` against ``ex`` in three phases: prepare the cases, run the function, explain what it did.

    ``hint=2`` adds the exact fix of a recognised mistake. ``seed`` seeds the drawn cases (None: the environment
    variable COURSE_CHECK_SEED, else fresh entropy); it is in ``details["seed"]``, and the kind of problem found
    (``"wrong shape"``, ``"raised"``, ...; None when passed) in ``details["problem"]``. ``parts`` says which cases
    run (the fixed, the drawn, or both in that order). The caller's random state is the same afterwards.
    """
    check_choice("hint", hint, (1, 2, 3), " (1: a hint, 2: the exact fix, 3: the fix and the course's solution)")
    if references is not None and references.ex is not ex:
        raise ValueError(f"references are of exercise {references.ex.key}, but the check is of exercise {ex.key}")
    with torch.random.fork_rng(devices=[]):
        session = Session(ex.time_limit, ex.autograd, ex.largest)
        details: dict[str, Any] = {}
        cases = prepare_cases(ex, seed, parts, references)
        details.update(seed=cases.seed, cases=len(cases.fixed), drawn=len(cases.drawn))
        try:
            unusable = _unusable(ex, fn, cases.all)
        except Exception as e:  # looking at the learner's object failed (a property that raises, say)
            unusable = f"the check could not look at what you passed: {type(e).__name__}: {text_of(e)[:200]}"
        if unusable:
            return _result(ex, Verdict(Kind.CANNOT_CHECK, unusable), session, details)
        attempt = run_learner(fn, cases.all, session)
        verdict = explain(ex, fn, cases, attempt, session, hint)
        return _result(ex, verdict, session, details)


def _result(ex: Exercise, verdict: Verdict, session: Session, details: dict[str, Any]) -> CheckResult:
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
    elif verdict.kind in (Kind.NOT_ATTEMPTED, Kind.OLD_IMPORT):
        status = NOT_ATTEMPTED
    else:
        status = FAILED
    details["problem"] = None if verdict.kind is None else verdict.kind.value
    mistake = None if verdict.mistake is None else verdict.mistake.name
    return CheckResult(ex.key, ex.title, status, message, mistake, details, lines, more)


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
