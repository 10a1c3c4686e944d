"""What an exercise is, and what a verdict looks like: :class:`Exercise`, :class:`Mistake`, :class:`CheckResult`,
and :func:`report`, which shows a verdict once and fails the cell when it failed.

Part of the exercise engine (:mod:`course_utils.exercises._engine`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from course_utils.exercises._engine.domain import Domain

PASSED, FAILED, NOT_ATTEMPTED = "passed", "failed", "not attempted"
REPORT_ENV = "COURSE_EXERCISE_REPORT"  # set by `python3 course.py check`; each check appends a JSON line
SEED_ENV = "COURSE_CHECK_SEED"  # an integer pins the seed of the drawn cases (to reproduce a verdict)


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
    ``domain`` (:class:`course_utils.exercises._engine.domain.Domain`) states the facets of the inputs the statement
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
        shown = [self.line()]
        if self.printed:
            total = len(self.printed) + self.printed_more
            shown.append(
                f"  your function printed {total} lines during the check; the first {len(self.printed)}:"
                if self.printed_more
                else "  your function printed during the check:"
            )
            shown += [f"  | {ln}" for ln in self.printed]
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


def report(res: CheckResult) -> CheckResult:
    """Show the verdict once, append it to the report file if one is set, and raise if it failed.

    A verdict that passed (or was not attempted) is printed; a failed one is not printed but raised as
    :class:`ExerciseFailed`, which carries the same text, so that the cell fails and the learner reads it once.
    """
    if res.status != FAILED:
        print(res.text())
    path = os.environ.get(REPORT_ENV)
    if path:
        line = {k: getattr(res, k) for k in ("key", "title", "status", "mistake", "message")}
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({**line, "seed": res.details.get("seed")}) + "\n")
    if res.status == FAILED:
        raise ExerciseFailed(res.text())
    return res
