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

Its parts, each importing only those before it: :mod:`.compare` (comparing values), :mod:`.domain` (an exercise's
domain as data), :mod:`.exercise` (:class:`Exercise`, :class:`Mistake`, the verdict :class:`CheckResult` and
:func:`report`), :mod:`.sandbox` (running the learner's function safely, phase 2, and where its time limit works),
:mod:`.cases` (phase 1), :mod:`.mistakes` (phase 3: the verdict, and naming the mistake) and :mod:`.core` (a check
put together).
:mod:`course_utils.exercises` (the catalogues and ``check``) imports this package, never the other way round.
``tests/test_checking.py`` tests this machinery; ``tests/test_exercises.py`` tests each exercise's catalogue.
"""

from course_utils.exercises._engine.cases import References
from course_utils.exercises._engine.compare import compare
from course_utils.exercises._engine.core import check_drawn, check_fixed, run_check
from course_utils.exercises._engine.exercise import (
    FAILED,
    NOT_ATTEMPTED,
    PASSED,
    REPORT_ENV,
    SEED_ENV,
    CheckResult,
    Exercise,
    ExerciseFailed,
    Mistake,
    NotAttempted,
    UnknownExercise,
    report,
)
from course_utils.exercises._engine.sandbox import PRINTED_LINES, PRINTED_WIDTH

__all__ = [
    "PASSED",
    "FAILED",
    "NOT_ATTEMPTED",
    "REPORT_ENV",
    "SEED_ENV",
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
    "compare",
    "PRINTED_LINES",
    "PRINTED_WIDTH",
]
