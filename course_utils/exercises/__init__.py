"""The exercises of every notebook, each with a check that names the likely mistake.

In a notebook::

    from course_utils.exercises import check
    check("03.1", my_causal_mask)

Keys are ``"NN.k"``: notebook NN, exercise k. Each topic module in this package (``dot_product`` for
notebook 01, ``masking`` for 03, ...) defines ``EXERCISES``, a tuple of
:class:`course_utils.checking.Exercise`; the machinery lives in :mod:`course_utils.checking`.
"""

from __future__ import annotations

import pkgutil
from importlib import import_module

from course_utils.checking import CheckResult, Exercise, NotAttempted, UnknownExercise, report, run_check

__all__ = ["check", "NotAttempted", "all_exercises", "get_exercise", "topics"]


def topics() -> list[str]:
    """The topic modules of this package (one per notebook), found on disk so a new notebook needs no registration."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def all_exercises() -> dict[str, Exercise]:
    """Every exercise of the course, by key, in course order ("01.1", "01.2", ..., "02.1", ...)."""
    found: dict[str, Exercise] = {}
    for topic in topics():
        for ex in import_module(f"course_utils.exercises.{topic}").EXERCISES:
            if ex.key in found:
                raise RuntimeError(f"exercise key {ex.key} is defined twice")
            found[ex.key] = ex
    return dict(sorted(found.items(), key=lambda kv: tuple(int(p) for p in kv[0].split("."))))


def get_exercise(key: str) -> Exercise:
    """The exercise with this key; a clear KeyError listing the known keys otherwise (one line in Jupyter)."""
    exercises = all_exercises()
    if not isinstance(key, str):
        raise UnknownExercise(
            f'an exercise key is a string such as "03.1", got {type(key).__name__} {key!r:.60}; '
            f'write check("NN.K", your_function)'
        )
    if key not in exercises:
        raise UnknownExercise(f"no exercise {key!r}; known exercises: {', '.join(exercises)}")
    return exercises[key]


def check(key: str, fn: object, *, hint: int = 1) -> CheckResult:
    """Check the learner's function for exercise ``key``; print the verdict and raise ExerciseFailed if wrong.

    ``hint=2`` adds the exact fix of a recognised mistake to the verdict. An unknown key raises KeyError
    (:class:`course_utils.checking.UnknownExercise`, shown in Jupyter as one line with the known keys).
    """
    return report(run_check(get_exercise(key), fn, hint=hint))
