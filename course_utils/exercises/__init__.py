"""The exercises of every notebook, each with a check that names the likely mistake.

In a notebook::

    from course_utils.exercises import check
    check("03.1", my_causal_mask)

Keys are ``"NN.k"``: notebook NN, exercise k. Each topic module in this package (``dot_product`` for
notebook 01, ``masking`` for 03, ...) defines ``EXERCISES``, a tuple of
:class:`course_utils.checking.Exercise`; the machinery lives in :mod:`course_utils.checking`.

When the course split its second half into notebooks 08 to 11, exercises moved to new keys: ``MOVED`` maps each
old key to its new one. A learner's older notebook that checks an old key is told the new one in one line; some
old keys now name another exercise (08.2, 08.3, 09.1, 09.2, 09.3), and a function that fits the exercise which
moved away, not the one there now, gets a verdict that names the new key too.
"""

from __future__ import annotations

import dataclasses
import inspect
import pkgutil
from importlib import import_module

import torch

from course_utils.checking import (
    FAILED,
    CheckResult,
    Exercise,
    NotAttempted,
    UnknownExercise,
    fits,
    function_name,
    notebook_of,
    report,
    run_check,
)

__all__ = ["check", "NotAttempted", "all_exercises", "get_exercise", "topics", "MOVED"]

# Old key -> new key, for the exercises the course's renumbering moved (notebook 08's decoding became
# notebook 09, the tiny GPT 10, and its inside 11). 08.1 kept its key. 08.2, 08.3, 09.1, 09.2 and 09.3 now name
# other exercises.
MOVED = {
    "08.2": "09.1",  # nucleus (top-p) filtering
    "08.3": "09.2",  # KV-cache append
    "09.1": "10.1",  # training windows
    "09.2": "10.2",  # unigram baseline
    "09.3": "10.3",  # warm-up and cosine schedule
    "09.5": "11.1",  # value-weighted norms
    "09.4": "11.4",  # post-norm block
}


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
        if key in MOVED:
            raise UnknownExercise(
                f"exercise {key} moved when the course was renumbered: {_moved(key, exercises, 'your_function')}"
            )
        raise UnknownExercise(f"no exercise {key!r}; known exercises: {', '.join(exercises)}")
    return exercises[key]


def _moved(old: str, exercises: dict[str, Exercise], fn_name: str) -> str:
    """Where the exercise that had key ``old`` is now: its new key and title, its notebook, the call to write."""
    new = MOVED[old]
    title = f" ({exercises[new].title})" if new in exercises else ""
    return f'it is now {new}{title}, in {notebook_of(new)}; write check("{new}", {fn_name})'


def _resemblance(ex: Exercise, fn: object) -> int:
    """How much ``fn`` looks written for ``ex``: its name is the exercise's function name (2), plus one for each
    of its parameters named as the solution's are."""
    name = ex.signature.split("(", 1)[0].strip()
    try:
        body = fn.forward if isinstance(fn, torch.nn.Module) else fn
        mine = set(inspect.signature(body).parameters)
        theirs = set(inspect.signature(ex.solution).parameters)
    except (TypeError, ValueError):  # no signature to read
        mine, theirs = set(), set()
    return 2 * (function_name(fn) == name) + len(mine & theirs)


def _answers(earlier: Exercise, current: Exercise, fn: object) -> bool:
    """Whether ``fn`` answers ``earlier`` (the exercise that moved away) rather than ``current`` (the one there now):
    its parameters take the earlier's arguments, and either not the current's or it looks written for the earlier."""
    if not fits(earlier, fn):
        return False
    return not fits(current, fn) or _resemblance(earlier, fn) > _resemblance(current, fn)


def check(key: str, fn: object, *, hint: int = 1) -> CheckResult:
    """Check the learner's function for exercise ``key``; print the verdict and raise ExerciseFailed if wrong.

    ``hint=2`` adds the exact fix of a recognised mistake to the verdict. An unknown key raises KeyError
    (:class:`course_utils.checking.UnknownExercise`, shown in Jupyter as one line with the known keys, or with
    the new key of an exercise that moved: see ``MOVED``).
    """
    ex = get_exercise(key)
    res = run_check(ex, fn, hint=hint)
    if res.status == FAILED and key in MOVED:  # a key that now names another exercise than it did before
        exercises = all_exercises()
        earlier = exercises.get(MOVED[key])
        if earlier is not None and _answers(earlier, ex, fn):  # an older notebook's answer to the one that moved
            said = _moved(key, exercises, function_name(fn))
            moved = f"Your function looks written for the exercise that was {key} before the course was renumbered"
            moved += f": {said}."
            res = dataclasses.replace(res, message=f"{moved} (As {key} today: {res.message.rstrip('.')}.)")
    return report(res)
