"""Phase 1 of a check: the cases, and how a verdict names one.

:class:`Cases` holds one check's cases in the order they run (the fixed ones, then those drawn from a seed) with
the solution's run of each; :class:`References` computes that reference side once for many checks of one exercise
(the seed sweep). :func:`describe_case` says a case's inputs in a few words.

Part of the exercise engine (:mod:`course_utils.exercises._engine`).
"""

from __future__ import annotations

import inspect
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from course_utils.exercises._engine.compare import dtype_name
from course_utils.exercises._engine.exercise import SEED_ENV, Exercise, Mistake
from course_utils.exercises._engine.sandbox import Outcome, Run, clone, identical, outcome, run_case


def parameter_names(fn: Callable[..., Any]) -> list[str] | None:
    try:
        params = inspect.signature(fn).parameters.values()
    except Exception:
        return None
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def named_arguments(solution: Callable[..., Any], args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """The case's arguments named by the solution's parameters (``argument 3`` where it has none)."""
    names = parameter_names(solution) or []
    out = [(names[i] if i < len(names) else f"argument {i + 1}", a) for i, a in enumerate(args)]
    return out + list(kwargs.items())


def _describe_value(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        where = "" if x.device.type == "cpu" else f" on {x.device}"
        return f"{dtype_name(x.dtype)} {tuple(x.shape)}{where}"
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
    for name, value in named_arguments(solution, args, kwargs):
        d = _describe_value(value)
        parts.append(f"{name}{d}" if d.startswith("=") else f"{name} {d}")
    return ", ".join(parts)


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
class Cases:
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

    def mistake(self, m: Mistake) -> list[Outcome]:
        """What catalogued mistake ``m`` does on each fixed case (apart from torch's global generator)."""
        with _apart():
            if self.references is not None and self.fixed is self.references.fixed:
                return self.references.mistake_outcomes(m)
            return [outcome(m.fn, case) for case in self.fixed]

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


def prepare_cases(
    ex: Exercise, seed: int | None, parts: tuple[str, ...] = ("fixed", "drawn"), references: References | None = None
) -> Cases:
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
    return Cases(ex, fixed, drawn, s, references)


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
        self._mistakes: dict[int, list[Outcome] | None] = {}  # by id(mistake); None: not deterministic
        self._seed: int | None = None
        self._drawn: list[tuple[tuple, dict]] = []
        self._drawn_runs: dict[int, Run] = {}
        self._tried_seed: int | None = None  # the seed whose draws were run twice

    def _solution_run(self, kept: dict[int, Run], i: int, case: tuple[tuple, dict], try_twice: bool) -> Run:
        """The solution's run of ``case``, kept as ``kept[i]`` while the solution is deterministic; the first time,
        made twice if ``try_twice`` and the two compared (where they differ, it is not deterministic)."""
        if not self.deterministic:
            return run_case(self.ex.solution, case)
        if i not in kept:
            kept[i] = run_case(self.ex.solution, case)
            if try_twice and not identical(kept[i], run_case(self.ex.solution, case)):
                self.deterministic = False
        return kept[i]

    def fixed_run(self, i: int) -> Run:
        """The solution's run of fixed case ``i``."""
        return self._solution_run(self._fixed_runs, i, self.fixed[i], try_twice=True)

    def drawn(self, seed: int) -> list[tuple[tuple, dict]]:
        """The cases drawn from ``seed`` (drawn once while it is the latest seed asked for)."""
        if seed != self._seed:
            self._seed, self._drawn, self._drawn_runs = seed, _draw(self.ex, seed), {}
            if self._tried_seed is None:
                self._tried_seed = seed
        return self._drawn

    def drawn_run(self, seed: int, j: int) -> Run:
        """The solution's run of drawn case ``j`` of ``seed``."""
        return self._solution_run(self._drawn_runs, j, self.drawn(seed)[j], try_twice=seed == self._tried_seed)

    def mistake_outcomes(self, m: Mistake) -> list[Outcome]:
        """What mistake ``m`` does on each fixed case (made twice the first time, and kept if the two agree)."""
        if id(m) not in self._mistakes:
            first = [outcome(m.fn, case) for case in self.fixed]
            again = [outcome(m.fn, case) for case in self.fixed]
            same = all(a.same_as(b) for a, b in zip(first, again))
            self._mistakes[id(m)] = first if same else None
            return first
        kept = self._mistakes[id(m)]
        return kept if kept is not None else [outcome(m.fn, case) for case in self.fixed]
