"""The exercises of every notebook, each with a check that names the likely mistake.

In a notebook::

    from course_utils.exercises import check
    check("03.1", my_causal_mask)

Keys are ``"NN.k"``: notebook NN, exercise k. Each topic module in this package (``dot_product`` for
notebook 01, ``masking`` for 03, ...) defines ``EXERCISES``, a tuple of :class:`Exercise`. The engine behind
them is the private package ``_engine`` beside them: ``compare`` (comparing values), ``sandbox`` (running the
learner's function safely), ``mistakes`` (naming the mistake, and the verdict), ``domain`` (each exercise's domain
as data), ``core`` (a check put together).

``check(key, fn, hint=3)`` shows the course's own solution of the exercise after the verdict, read from
``solutions/`` (a room set up for a graded session may leave it out, and then says so).

A key names one exercise for good. Keys left without an exercise (by the renumbering of notebooks 08 to 11, or an
exercise moved to another notebook with the section that teaches it) are in ``RETIRED``, with where that exercise
went; ``check`` says so in one line. Five keys were given to new
exercises before this rule (``REUSED``): a failed check of one of them says in one plain sentence what the key
meant before, whatever the function passed.
"""

from __future__ import annotations

import dataclasses
import json
import pkgutil
from importlib import import_module
from pathlib import Path

from course_utils.exercises._engine import (
    FAILED,
    CheckResult,
    Exercise,
    NotAttempted,
    UnknownExercise,
    report,
    run_check,
)
from course_utils.exercises._engine.mistakes import function_name

__all__ = ["check", "NotAttempted", "all_exercises", "get_exercise", "topics", "RETIRED", "REUSED", "solution_source"]

# Keys that name no exercise any more, with where their exercise went. A key is never given to another exercise.
RETIRED = {
    "09.4": "the post-norm block is now 11.4, in notebook 11",
    "09.5": "the value-weighted norms are now 11.1, in notebook 11",
    "07.4": "the recurrent step of linear attention is now 13.4, in notebook 13",
    "11.2": "the induction score is now 12.1, in notebook 12 (induction heads moved there from notebook 11)",
    "11.3": "one head ablated is now 12.2, in notebook 12 (induction heads moved there from notebook 11)",
}
# Keys that the renumbering of notebooks 08 to 11 gave to new exercises (before the rule above), with what they
# meant before: a failed check of one says so, whatever the function passed.
REUSED = {
    "08.2": "nucleus (top-p) sampling, now 09.1",
    "08.3": "the KV-cache append, now 09.2",
    "09.1": "the training windows, now 10.1",
    "09.2": "the unigram baseline, now 10.2",
    "09.3": "the warm-up and cosine schedule, now 10.3",
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
    if key in RETIRED:
        raise UnknownExercise(f"no exercise {key} in this version of the course: {RETIRED[key]}")
    if key not in exercises:
        raise UnknownExercise(f"no exercise {key!r}; known exercises: {', '.join(exercises)}")
    return exercises[key]


def check(key: str, fn: object, *, hint: int = 1) -> CheckResult:
    """Check the learner's function for exercise ``key``; print the verdict and raise ExerciseFailed if wrong.

    ``hint=2`` adds the exact fix of a recognised mistake to the verdict; ``hint=3`` adds the course's own
    solution too (:func:`solution_source`). An unknown key raises KeyError (:class:`UnknownExercise`, shown in
    Jupyter as one line with the known keys, or where a retired key's exercise went: see ``RETIRED``), and a
    ``hint`` other than 1, 2 or 3 a TypeError (not an int) or ValueError: mistakes in the call, not verdicts on
    ``fn``. What is wrong with ``fn`` itself (not a function, wrong parameters) is its verdict, failed.
    """
    ex = get_exercise(key)
    res = run_check(ex, fn, hint=hint)
    stuck = res.status == FAILED and res.details.get("problem") != "cannot check"
    if hint == 2 and stuck and _solution_notebooks(key):  # the last hint says what is next, where this copy has it
        after = f' (Still stuck? check("{key}", {function_name(fn)}, hint=3) shows the course\'s own solution.)'
        res = dataclasses.replace(res, message=res.message.rstrip() + after)
    if res.status == FAILED and key in REUSED:
        before = f" (Before the course was renumbered, {key} was {REUSED[key]}.)"
        res = dataclasses.replace(res, message=res.message + before)
    if hint == 3 and res.details.get("problem") != "cannot check":
        res = dataclasses.replace(res, solution=solution_source(key))
    return report(res)


def _solution_notebooks(key: str) -> list[Path]:
    """The notebook of ``solutions/`` that solves exercise ``key``, in a list; empty in a copy without them."""
    root = Path(__file__).resolve().parents[2] / "solutions"
    return sorted(root.glob(f"{key.split('.')[0]}_*.ipynb"))


def solution_source(key: str) -> str:
    """The course's own answer to exercise ``key``: the code cell of ``solutions/NN_*.ipynb`` that checks it,
    or a sentence saying why there is none to show (the solutions left out of this copy, say for a graded room)."""
    found = _solution_notebooks(key)
    if not found:
        return (
            f"The course's solutions are not in this copy (no solutions/{key.split('.')[0]}_*.ipynb): an instructor "
            "may have left them out for a graded session."
        )
    call = f'check("{key}",'
    for cell in json.loads(found[0].read_text(encoding="utf-8"))["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "code" and call in text:
            code = text.split(call)[0].rstrip()
            return f"The course's solution ({found[0].parent.name}/{found[0].name}):\n{code}"
    return f"solutions/{found[0].name} has no cell that checks {key}."
