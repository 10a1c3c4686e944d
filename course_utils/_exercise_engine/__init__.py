"""The exercise engine: run the learner's function, compare, name the mistake (the machinery behind every check).

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
name comes with its conceptual ``hint``, the exact ``fix`` only with ``hint=2`` (``hint=3`` also shows the course's
solution, :func:`course_utils.exercises.check`). A function that answers every
fixed case right and fails only on a drawn one is shown that case, with its seed, and no mistake is named
(every catalogued mistake fails some fixed case, so none does what it does there). Without a name, the verdict
says what differs on which case: the statement's edges the case holds (``Exercise.edges``), then its inputs'
shapes and dtypes, as in ``fixed case 3 (T != S, Dv == 1; q float32 (4, 8), ...)``.

The two parts of a check can also run apart: :func:`check_fixed` (the fixed cases alone, which alone name a
mistake) and :func:`check_drawn` (the draws of one seed alone); :class:`References` computes the reference side
(the fixed cases, the solution's and the mistakes' runs of them, a seed's draws and the solution's runs of those)
once for many checks of one exercise. The seed sweep (``tests/test_exercise_domains.py``) uses them so that each
answer's fixed cases run once and each seed's draws once for all answers; a learner's ``check`` does not.

Statuses: ``"passed"``, ``"failed"`` (with the reason, and the mistake's name when one matches), and
``"not attempted"``: the function raised :class:`NotAttempted`, as the learner copy's untouched stub does,
before answering any case. Any other exception, ``NotImplementedError`` included, is a failure.

The time limit uses ``signal.setitimer`` and so works only on POSIX systems and in the main thread (where a
notebook runs its cells). On Windows, or when a check runs in another thread, the function runs without a
limit: a function that never returns then hangs the check until the kernel is interrupted. Even with the
limit, one long torch operation (a huge matmul) is stopped only when it returns, as Python signals wait for it.
Its parts: :mod:`.compare` (comparing values), :mod:`.sandbox` (running the learner's function safely),
:mod:`.domain` (an exercise's domain as data); this module prepares the cases, runs them and names the mistake.
It lives beside :mod:`course_utils.exercises` (the catalogues and ``check``), which imports it.
``tests/test_checking.py`` tests this machinery; ``tests/test_exercises.py`` tests each exercise's catalogue.
"""

from __future__ import annotations

import inspect
import json
import os
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from course_utils._exercise_engine.compare import Difference, Kind, compare, compare_outputs
from course_utils._exercise_engine.domain import Domain
from course_utils._exercise_engine.sandbox import (
    PRINTED_LINES,
    PRINTED_WIDTH,
    Run,
    Session,
    TimeLimit,
    TooLarge,
    clone,
    first_change,
    run_case,
    state_of,
    text_of,
)

__all__ = [
    "NotAttempted",
    "Mistake",
    "Exercise",
    "CheckResult",
    "ExerciseFailed",
    "UnknownExercise",
    "run_check",
    "check_fixed",
    "check_drawn",
    "References",
    "report",
    "function_name",
    "notebook_of",
    "compare_outputs",
    "describe_case",
    "PRINTED_LINES",
    "PRINTED_WIDTH",
]

PASSED, FAILED, NOT_ATTEMPTED = "passed", "failed", "not attempted"
REPORT_ENV = "COURSE_EXERCISE_REPORT"  # set by `python3 course.py check`; each check appends a JSON line
SEED_ENV = "COURSE_CHECK_SEED"  # an integer pins the seed of the drawn cases (to reproduce a verdict)
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
    ``domain`` (:class:`course_utils._exercise_engine.domain.Domain`) states the facets of the inputs the statement
    allows (leading axes, integer dtypes, magnitudes, views); ``fixed_cases()`` adds a case built for each facet
    value no hand-written case holds. ``autograd=False`` runs the learner's function under
    ``torch.inference_mode()`` (an exercise that asks for the formulas, not autograd; a graph recorded where the
    function leaves that mode raises at its first saved tensor). ``largest`` takes a case's arguments like the
    solution and returns the most elements one tensor computed in the learner's function may hold (an exercise that
    asks for tiles: never the whole score matrix); ``largest_why`` says so in the verdict of a function that computes
    a larger one. ``results`` names the returned values as the statement does (by default read from the signature's
    ``-> (out, weights)``), so a verdict says ``weights: ...``, not ``result 1: ...``. ``core`` is False for an
    optional exercise; its heading in the notebook says so beside its minutes (``size()``).
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
    domain: Domain = field(default_factory=Domain)
    results: tuple[str, ...] = ()
    autograd: bool = True
    largest: Callable[..., int] | None = None
    largest_why: str = ""
    core: bool = True

    def size(self) -> str:
        """What the exercise's heading says of it: ``8 min, core`` or ``15 min, optional``."""
        return f"{self.minutes} min, {'core' if self.core else 'optional'}"

    def fixed_cases(self) -> list[tuple[tuple, dict]]:
        """``cases()``, then a case built for each facet value of ``domain`` that none of them holds."""
        return self.domain.complete(self.solution, list(self.cases()))

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
    solution: str = ""  # the course's own solution, shown after the verdict when asked for with hint=3

    def _ipython_display_(self) -> None:
        """Show nothing when a check is the last line of a cell: the verdict line is already printed."""

    def line(self) -> str:
        mark = {PASSED: "✓", FAILED: "✗", NOT_ATTEMPTED: "·"}[self.status]
        return f"{mark} Exercise {self.key} ({self.title}): {self.status}. {self.message}".rstrip()

    def text(self) -> str:
        """The verdict line, then the first lines the learner's function printed during the check."""
        if not self.printed:
            return "\n".join([self.line(), self.solution] if self.solution else [self.line()])
        total = len(self.printed) + self.printed_more
        head = (
            f"  your function printed {total} lines during the check; the first {len(self.printed)}:"
            if self.printed_more
            else "  your function printed during the check:"
        )
        shown = [self.line(), head, *(f"  | {ln}" for ln in self.printed)]
        return "\n".join([*shown, self.solution] if self.solution else shown)


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
        _named_arguments(ex.solution, args, kwargs), _named_arguments(ex.solution, mine.args, mine.kwargs)
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


def _same_failure(a: BaseException, b: BaseException) -> bool:
    """Whether two exceptions are the same failure: one type and one message, numbers (shapes) included.

    Both ran on the same case, so the same mistake fails with the same sizes. Setting the numbers aside
    would let any broadcasting error stand for any other ("size of tensor a (6) must match ... (3)" for
    "... (6) must match ... (4)"), and name a catalogued mistake the learner did not make. Only memory
    addresses (``0x7f...``), which differ from run to run, are set aside.
    """

    def gist(e: BaseException) -> str:
        return re.sub(r"0x[0-9a-fA-F]+", "0x", text_of(e)).strip()

    return type(a) is type(b) and gist(a) == gist(b)


def notebook_of(key: str) -> str:
    """The learner notebook of exercise ``key``, as a path from the course folder (``notebooks/03_masking.ipynb``)."""
    folder = Path(__file__).resolve().parent.parent / "notebooks"
    found = sorted(folder.glob(f"{key.split('.')[0]}_*.ipynb"))
    return f"notebooks/{found[0].name}" if found else f"notebooks/{key.split('.')[0]}_*.ipynb"


def _is_old_import(e: BaseException) -> bool:
    """The new stub in a notebook whose import cell predates NotAttempted."""
    return isinstance(e, NameError) and getattr(e, "name", None) == NotAttempted.__name__


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
            if bool(holds(*clone(case[0]), **clone(case[1]))):
                held.append(str(name))
        except Exception:
            continue
    views = [v for v in [*case[0], *case[1].values()] if isinstance(v, torch.Tensor) and not v.clone().is_contiguous()]
    return held + (["a non-contiguous view"] if views and ex.domain.views else [])


@dataclass
class _Cases:
    """The cases of one check, in the order they run: the fixed ones, then those drawn from ``seed``."""

    ex: Exercise
    fixed: list[tuple[tuple, dict]]
    drawn: list[tuple[tuple, dict]]
    seed: int
    references: References | None = None  # runs of the solution and the mistakes shared with other checks
    _solved: dict[int, Run] = field(default_factory=dict)

    @property
    def all(self) -> list[tuple[tuple, dict]]:
        return self.fixed + self.drawn

    def solution(self, i: int) -> Run:
        """The reference solution's run of case ``i`` (run once, on its own copy of the arguments), apart from
        torch's global generator (:func:`_apart`)."""
        if i not in self._solved:
            with _apart():
                if self.references is None:
                    self._solved[i] = run_case(self.ex.solution, self.all[i])
                elif self.is_fixed(i):
                    self._solved[i] = self.references.fixed_run(i)
                else:
                    self._solved[i] = self.references.drawn_run(self.seed, i - len(self.fixed))
        return self._solved[i]

    def mistake(self, m: Mistake) -> list[_Outcome]:
        """What catalogued mistake ``m`` does on each fixed case (apart from torch's global generator)."""
        with _apart():
            if self.references is not None and self.fixed is self.references.fixed:
                return self.references.mistake_outcomes(m)
            return [_outcome(m.fn, case) for case in self.fixed]

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


def _apart() -> Any:
    """A block whose use of torch's global generator is undone after it: making the cases and the reference side's
    runs. What the learner's function draws from it is then the same with :class:`References` (made once, outside
    the check) as without (made inside each check, where cases that seed it, as 05.1's do, would fix its draws)."""
    return torch.random.fork_rng(devices=[])


def _draw(ex: Exercise, seed: int) -> list[tuple[tuple, dict]]:
    with _apart():
        return list(ex.draw(torch.Generator().manual_seed(seed))) if ex.draw is not None else []


def _prepare_cases(
    ex: Exercise, seed: int | None, parts: tuple[str, ...] = ("fixed", "drawn"), references: References | None = None
) -> _Cases:
    """Phase 1: the fixed cases, and the cases drawn from ``seed`` (see :func:`_draw_seed`); only the ``parts``
    asked for, taken from ``references`` where given."""
    s = _draw_seed(seed)
    if references is None:
        with _apart():
            fixed = ex.fixed_cases() if "fixed" in parts else []
        drawn = _draw(ex, s) if "drawn" in parts else []
    else:
        fixed = references.fixed if "fixed" in parts else []
        drawn = references.drawn(s) if "drawn" in parts else []
    return _Cases(ex, fixed, drawn, s, references)


class References:
    """The reference side of many checks of one exercise, computed once and shared (the seed sweep,
    ``tests/test_exercise_domains.py``): the fixed cases, the solution's run of each, what each catalogued mistake
    does on them, and the cases drawn from the latest seed asked for with the solution's run of each.

    A check given ``references=`` runs only the learner's function afresh; its verdict is the one it would get
    without them, as long as the solution and the mistakes answer the same case the same way every time. That is
    tried, not assumed: the first time a case's reference run is made (the fixed cases, and every drawn case of
    the first seed), it is made twice and the two compared; where they differ the exercise's reference is marked
    not deterministic and is run afresh for every check from then on (a mistake likewise, on the fixed cases).
    Only one seed's draws are kept: run the checks of one seed together, then the next.
    """

    def __init__(self, ex: Exercise) -> None:
        self.ex = ex
        with _apart():
            self.fixed = ex.fixed_cases()
        self.deterministic = True  # whether the solution answered each case it was tried on twice alike
        self._fixed_runs: dict[int, Run] = {}
        self._mistakes: dict[int, list[_Outcome] | None] = {}  # by id(mistake); None: not deterministic
        self._seed: int | None = None
        self._drawn: list[tuple[tuple, dict]] = []
        self._drawn_runs: dict[int, Run] = {}
        self._tried_seed: int | None = None  # the seed whose draws were run twice

    def _reference(self, case: tuple[tuple, dict], try_twice: bool) -> Run:
        if not self.deterministic:
            return run_case(self.ex.solution, case)
        run = run_case(self.ex.solution, case)
        if try_twice and not _identical(run, run_case(self.ex.solution, case), self.ex):
            self.deterministic = False
        return run

    def fixed_run(self, i: int) -> Run:
        """The solution's run of fixed case ``i``."""
        if not self.deterministic:
            return run_case(self.ex.solution, self.fixed[i])
        if i not in self._fixed_runs:
            self._fixed_runs[i] = self._reference(self.fixed[i], try_twice=True)
        return self._fixed_runs[i]

    def drawn(self, seed: int) -> list[tuple[tuple, dict]]:
        """The cases drawn from ``seed`` (drawn once while it is the latest seed asked for)."""
        if seed != self._seed:
            self._seed, self._drawn, self._drawn_runs = seed, _draw(self.ex, seed), {}
            if self._tried_seed is None:
                self._tried_seed = seed
        return self._drawn

    def drawn_run(self, seed: int, j: int) -> Run:
        """The solution's run of drawn case ``j`` of ``seed``."""
        cases = self.drawn(seed)
        if not self.deterministic:
            return run_case(self.ex.solution, cases[j])
        if j not in self._drawn_runs:
            self._drawn_runs[j] = self._reference(cases[j], try_twice=seed == self._tried_seed)
        return self._drawn_runs[j]

    def mistake_outcomes(self, m: Mistake) -> list[_Outcome]:
        """What mistake ``m`` does on each fixed case (made twice the first time, and kept if the two agree)."""
        if id(m) not in self._mistakes:
            first = [_outcome(m.fn, case) for case in self.fixed]
            again = [_outcome(m.fn, case) for case in self.fixed]
            same = all(_same_outcome(a, b, self.ex) for a, b in zip(first, again))
            self._mistakes[id(m)] = first if same else None
            return first
        kept = self._mistakes[id(m)]
        return kept if kept is not None else [_outcome(m.fn, case) for case in self.fixed]


def _identical(a: Run, b: Run, ex: Exercise) -> bool:
    """Two runs of one function on one case identical (output and arguments after the call, exactly; NaN = NaN).

    Not merely within the exercise's tolerance: a run kept in place of fresh ones must judge every answer as they
    would, and one near the tolerance's edge is judged otherwise by two runs that differ within it."""
    try:
        pairs = ((a.output, b.output), (a.args, b.args), (a.kwargs, b.kwargs))
        return all(first_change(state_of(x), state_of(y), "") is None for x, y in pairs)
    except Exception:  # outputs that cannot be compared: not known to be alike
        return False


def _same_outcome(a: _Outcome, b: _Outcome, ex: Exercise) -> bool:
    """Two outcomes of one function on one case alike: the same answer, or the same failure word for word."""
    if a.run is not None and b.run is not None:
        return _identical(a.run, b.run, ex)
    if a.error is not None and b.error is not None:
        return _same_failure(a.error, b.error)
    return False


def _why_unusable(ex: Exercise, fn: Any, cases: Sequence[tuple[tuple, dict]]) -> str | None:
    try:
        return _unusable(ex, fn, cases)
    except Exception as e:  # looking at the learner's object failed (a property that raises, say)
        return f"the check could not look at what you passed: {type(e).__name__}: {text_of(e)[:200]}"


@dataclass
class _Attempt:
    """What the learner's function did on the cases, in order: the runs it answered, then what stopped it (on case
    ``len(runs)``): ``TOO_SLOW``, ``NOT_ATTEMPTED``, ``GAVE_UP``, ``OLD_IMPORT`` or ``RAISED``; None if nothing."""

    runs: list[Run]
    stop: Kind | None = None
    error: BaseException | None = None


def _run_learner(fn: Any, cases: Sequence[tuple[tuple, dict]], session: Session) -> _Attempt:
    """Phase 2: run the learner's function on each case in order, until the end or the first case it does not
    answer."""
    runs: list[Run] = []
    for i, case in enumerate(cases):
        try:
            runs.append(session.call(fn, case))
        except TimeLimit:
            return _Attempt(runs, Kind.TOO_SLOW)
        except TooLarge as e:
            return _Attempt(runs, Kind.RAISED, e)
        except NotAttempted as e:
            return _Attempt(runs, Kind.NOT_ATTEMPTED if i == 0 else Kind.GAVE_UP, e)
        except (Exception, SystemExit) as e:  # the learner's code failing is a verdict, not a crash of the check
            return _Attempt(runs, Kind.OLD_IMPORT if i == 0 and _is_old_import(e) else Kind.RAISED, e)
    return _Attempt(runs)


# ------------------------------------------------------------------------------------------ phase 3: explaining


@dataclass(frozen=True)
class _Outcome:
    """What a function did on one case: answered (``run``), raised (``error``), or neither (stopped by the time
    limit before it could say)."""

    run: Run | None = None
    error: BaseException | None = None


def _outcome(fn: Callable[..., Any], case: tuple[tuple, dict]) -> _Outcome:
    try:
        return _Outcome(run=run_case(fn, case))
    except Exception as e:
        return _Outcome(error=e)


def _learner_outcomes(fn: Any, cases: Sequence[tuple[tuple, dict]], session: Session) -> list[_Outcome]:
    """The learner's function's outcome on each of ``cases``, run as in phase 2 (the first case past the time
    limit, and every one after it, count as neither answered nor raised)."""
    outcomes = []
    for case in cases:
        try:
            outcomes.append(_Outcome(run=session.call(fn, case)))
        except TimeLimit:
            break
        except (Exception, SystemExit, TooLarge) as e:
            outcomes.append(_Outcome(error=e))
    return outcomes + [_Outcome()] * (len(cases) - len(outcomes))


def _alike(a: _Outcome, b: _Outcome, ex: Exercise) -> bool:
    """One case's two outcomes agree: both answered the same (output, and arguments after the call), or both
    raised an exception of one type (the wording is weighed by :func:`_agree`)."""
    if a.run is not None and b.run is not None:
        return _same_run(a.run, b.run, ex)
    return a.error is not None and b.error is not None and type(a.error) is type(b.error)


def _agree(mine: Sequence[_Outcome], theirs: Sequence[_Outcome], ref: Sequence[Run], ex: Exercise) -> bool:
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
    ex: Exercise, fn: Any, cases: _Cases, attempt: _Attempt, session: Session
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
        theirs = cases.mistake(m)
        if _agree(mine[:known], theirs[:known], ref[:known], ex):
            return m
        if known == n or not all(_alike(a, b, ex) for a, b in zip(mine[:known], theirs)):
            continue
        if len(mine) < n:  # see what the function does on the fixed cases after the one it raised on
            mine += _learner_outcomes(fn, cases.fixed[len(mine) :], session)
        if _agree(mine, theirs, ref, ex):
            return m
    return None


def _first_difference(ex: Exercise, cases: _Cases, runs: Sequence[Run]) -> tuple[int, Difference] | None:
    """The first case the learner's function answered differently from the solution, and what differs."""
    for i, (case, mine) in enumerate(zip(cases.all, runs)):
        difference = _case_problem(ex, case, mine, cases.solution(i))
        if difference is not None:
            return i, difference
    return None


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


@dataclass(frozen=True)
class _Verdict:
    """What phase 3 concludes: the kind of problem (None: passed), the message, the mistake named if any."""

    kind: Kind | None
    message: str
    mistake: Mistake | None = None


def _named(ex: Exercise, fn: Any, kind: Kind, m: Mistake, hint: int, crash: str | None) -> _Verdict:
    if hint >= 2:
        fix = f" The fix: {m.fix}" if m.fix else " (This check has no exact fix written for it.)"
    else:
        fix = f' (for the exact fix: check("{ex.key}", {function_name(fn)}, hint=2))' if m.fix else ""
    said = f" ({crash[0].lower()}{crash[1:]})" if crash else ""
    return _Verdict(kind, f"This looks like: {m.name}. {m.hint}{fix}{said}", m)


def _explain(ex: Exercise, fn: Any, cases: _Cases, attempt: _Attempt, session: Session, hint: int) -> _Verdict:
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
        return _Verdict(Kind.RAISED, crash)
    if first is None:
        return _Verdict(None, "Well done.")
    i, difference = first
    tail = _TAILS[difference.kind]
    if difference.kind is Kind.WRONG_VALUE and not cases.is_fixed(i):
        tail = _DRAWN_TAIL
    if hint >= 2:
        tail += " (No exact fix to show: this check does not recognise the mistake.)"
    return _Verdict(difference.kind, f"on {cases.name(i)}: {difference.text}{tail}")


def _stopped(ex: Exercise, cases: _Cases, attempt: _Attempt) -> _Verdict | None:
    """The verdict when the function stopped the check before answering (other than by raising), else None."""
    at = len(attempt.runs)
    if attempt.stop is Kind.TOO_SLOW:
        return _Verdict(
            Kind.TOO_SLOW,
            f"your function took longer than {ex.time_limit:g} s on {cases.name(at)}, so the check stopped it: "
            "look for a loop that never ends, or work that grows faster than the input",
        )
    if attempt.stop is Kind.NOT_ATTEMPTED:
        return _Verdict(Kind.NOT_ATTEMPTED, f"Write {ex.signature}, then run this cell again.")
    if attempt.stop is Kind.OLD_IMPORT:
        return _Verdict(
            Kind.OLD_IMPORT,
            f"Write {ex.signature}, then run this cell again. (This notebook's import cell predates NotAttempted: "
            "make it `from course_utils.exercises import NotAttempted, check`.)",
        )
    if attempt.stop is Kind.GAVE_UP:
        said = text_of(attempt.error)
        said = f": {said.splitlines()[0]}" if said.strip() else ""
        return _Verdict(
            Kind.GAVE_UP,
            f"on {cases.name(at)} your function raised NotAttempted{said}, after answering the cases before it: "
            "it must answer every case",
        )
    return None


# ------------------------------------------------------------------------------------------ the check


def run_check(
    ex: Exercise, fn: Any, *, hint: int = 1, seed: int | None = None, references: References | None = None
) -> CheckResult:
    """Check ``fn`` against ``ex`` and return the verdict; prints nothing and raises nothing about ``fn``.

    The caller's random state is the same afterwards (cases that seed torch's global generator do not move
    the notebook's), and global settings the learner's function changes (default dtype, grad mode) are put
    back after each call, with a note in the verdict. ``references`` (:class:`References` of ``ex``) shares the
    solution's and the mistakes' runs between many checks; the verdict is the same without it.
    """
    return _checked(ex, fn, hint, seed, ("fixed", "drawn"), references)


def check_fixed(ex: Exercise, fn: Any, *, hint: int = 1, references: References | None = None) -> CheckResult:
    """:func:`run_check` on the fixed cases alone (no draws).

    A function that fails a fixed case gets this verdict (status and mistake named) from the whole check too,
    on every seed (a mistake is named by the fixed cases alone, and they run first), unless a drawn case stops it
    first (the time limit, or NotAttempted raised there): the seed sweep tries the whole check on a few seeds.
    """
    return _checked(ex, fn, hint, 0, ("fixed",), references)


def check_drawn(
    ex: Exercise, fn: Any, seed: int, *, hint: int = 1, references: References | None = None
) -> CheckResult:
    """:func:`run_check` on the cases drawn from ``seed`` alone (no fixed cases).

    A function that answers every fixed case right gets this verdict's status from the whole check with ``seed``
    (no mistake is named on a drawn case). With ``references``, the draws of a seed and the solution's runs of
    them are made once for all the functions checked on that seed.
    """
    return _checked(ex, fn, hint, seed, ("drawn",), references)


def _checked(
    ex: Exercise, fn: Any, hint: int, seed: int | None, parts: tuple[str, ...], references: References | None
) -> CheckResult:
    if references is not None and references.ex is not ex:
        raise ValueError(f"references are of exercise {references.ex.key}, but the check is of exercise {ex.key}")
    with torch.random.fork_rng(devices=[]):
        return _run_check(ex, fn, hint=hint, seed=seed, parts=parts, references=references)


def _run_check(
    ex: Exercise,
    fn: Any,
    *,
    hint: int = 1,
    seed: int | None = None,
    parts: tuple[str, ...] = ("fixed", "drawn"),
    references: References | None = None,
) -> CheckResult:
    """Check ``fn`` against ``ex`` in three phases: prepare the cases, run the function, explain what it did.

    ``hint=2`` adds the exact fix of a recognised mistake. ``seed`` seeds the drawn cases (default: the
    environment variable COURSE_CHECK_SEED, else fresh entropy); it is in ``details["seed"]``, and the kind of
    problem found (``"wrong shape"``, ``"raised"``, ...; None when passed) in ``details["problem"]``. ``parts``
    says which cases run (the fixed, the drawn, or both in that order).
    """
    session = Session(ex.time_limit, ex.autograd, ex.largest)
    details: dict[str, Any] = {}
    if isinstance(hint, bool) or hint not in (1, 2, 3):
        call = f'check("{ex.key}", {function_name(fn)}, hint=2)'
        said = (
            f"hint must be 1 (a hint), 2 (the exact fix) or 3 (the fix and the course's solution), got {hint!r}: {call}"
        )
        return _result(ex, _Verdict(Kind.CANNOT_CHECK, said), session, details)
    cases = _prepare_cases(ex, seed, parts, references)
    details.update(seed=cases.seed, cases=len(cases.fixed), drawn=len(cases.drawn))
    unusable = _why_unusable(ex, fn, cases.all)
    if unusable:
        return _result(ex, _Verdict(Kind.CANNOT_CHECK, unusable), session, details)
    attempt = _run_learner(fn, cases.all, session)
    verdict = _explain(ex, fn, cases, attempt, session, hint)
    return _result(ex, verdict, session, details)


def _result(ex: Exercise, verdict: _Verdict, session: Session, details: dict[str, Any]) -> CheckResult:
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
