"""The exercise engine itself (course_utils.exercises._engine), on tiny hand-made exercises independent of the
course's catalogues:
what it compares, which cases it runs, what counts as 'not attempted', its time limit, its captured printing,
what its messages show and hide, and its one-line verdicts for input it cannot check."""

import dataclasses
import re
import signal
import threading
import time

import pytest
import torch

from course_utils.exercises import check, get_exercise
from course_utils.exercises._engine import (
    FAILED,
    NOT_ATTEMPTED,
    PASSED,
    PRINTED_LINES,
    PRINTED_WIDTH,
    SEED_ENV,
    Exercise,
    ExerciseFailed,
    Mistake,
    NotAttempted,
    References,
    check_drawn,
    check_fixed,
    compare,
    report,
    run_check,
)
from course_utils.exercises._engine.domain import Domain

# ------------------------------------------------------------------------------------------ tiny exercises


def _exercise(key, signature, solution, cases, **settings):
    """A hand-made exercise, titled by its function's name in ``signature``; ``settings`` are Exercise's others."""
    title = signature.split("(")[0]
    return Exercise(key=key, title=title, signature=signature, solution=solution, cases=cases, **settings)


def _double(x):
    return x * 2


def _double_cases():
    g = torch.Generator().manual_seed(0)
    return [((torch.randn(3, generator=g),), {}), ((torch.randn(4, 8, generator=g),), {})]


HALVED = Mistake(
    "halved instead of doubled", "Doubling multiplies by two.", lambda x: x / 2, fix="return x * 2, not x / 2"
)
DOUBLE = _exercise("99.1", "double(x) -> 2 x", _double, _double_cases, mistakes=(HALVED,))


def _ids(x):
    return (x * 3).floor().long()  # token ids: int64


IDS = _exercise("99.2", "ids(x) -> int64", _ids, lambda: [((torch.linspace(0, 2, 7),), {})])
POSITIVE = _exercise("99.3", "positive(x) -> bool", lambda x: x > 0, lambda: [((torch.linspace(-1, 1, 9),), {})])


def _mean(x):
    return float(x.double().mean())  # "a number"


MEAN = _exercise(
    "99.4", "mean(x) -> a number", _mean, lambda: [((torch.tensor([1.0, 2.0, 4.0]),), {})], atol=1e-9, rtol=1e-9
)


def _write(buf, i, v):
    buf[i] = v  # the exercise asks for this write into buf
    return buf[: i + 1]


def _write_cases():
    return [((torch.zeros(5, 2), 1, torch.tensor([1.0, 2.0])), {}), ((torch.zeros(4, 2), 3, torch.ones(2)), {})]


WRITE = _exercise("99.5", "write(buf, i, v) -> buf[: i + 1]", _write, _write_cases, inplace="buf")


def _square(n):
    return n * n


SQUARE = _exercise(
    "99.6",
    "square(n) -> int",
    _square,
    lambda: [((1,), {}), ((2,), {}), ((3,), {})],
    draw=lambda g: [((int(torch.randint(4, 10_000, (), generator=g)),), {}) for _ in range(3)],
)
MASKED = _exercise(
    "99.7",
    "masked(scores, mask)",
    lambda scores, mask: scores.masked_fill(~mask, float("-inf")),
    lambda: [((torch.zeros(2, 3, 5), (torch.arange(5) < 3).expand(2, 1, 5)), {})],
)


# ------------------------------------------------------------------------------------------ inputs after the call


def _write_at_zero(buf, i, v):
    buf[0] = v
    return buf[: i + 1]


def _same_output_no_write(buf, i, v):
    return torch.cat([v[None], buf[1 : i + 1]])  # what _write_at_zero returns, with buf left alone


def test_a_catalogued_in_place_mistake_is_named_by_what_it_leaves_in_the_arguments():
    not_written = Mistake("not written", "Write into buf.", _same_output_no_write)
    at_zero = Mistake("written at position 0", "Write at position i.", _write_at_zero)
    ex = dataclasses.replace(WRITE, inplace=0, mistakes=(not_written, at_zero))
    res = run_check(ex, lambda buf, i, v: _write_at_zero(buf, i, v))  # the learner's own function, not the mistake's
    assert res.status == FAILED and res.mistake == "written at position 0", res.message
    assert run_check(ex, _same_output_no_write).mistake == "not written"


# ------------------------------------------------------------------------------------------ fixed and drawn cases


def test_drawn_cases_defeat_a_lookup_table_that_passes_the_fixed_ones():
    table = {1: 1, 2: 4, 3: 9}
    fixed_only = dataclasses.replace(SQUARE, draw=None)
    assert run_check(fixed_only, lambda n: table.get(n, 0)).status == PASSED  # why draws are needed
    res = run_check(SQUARE, lambda n: table.get(n, 0), seed=81723)
    assert res.status == FAILED
    assert re.search(r"on drawn case 1 \(seed 81723; n=\d+\)", res.message), res.message
    assert res.details["seed"] == 81723 and res.details["drawn"] == 3


def test_drawn_cases_run_after_the_fixed_ones_and_a_fixed_failure_names_its_inputs():
    seen = []

    def records(x):
        seen.append(tuple(x.shape))
        return x * 2 if x.dim() == 1 else x

    ex = dataclasses.replace(DOUBLE, mistakes=(), draw=lambda g: [((torch.randn(5, 7, generator=g),), {})])
    res = run_check(ex, records)
    assert seen == [(3,), (4, 8), (5, 7)]
    assert "on fixed case 2 (x float32 (4, 8)): values differ at" in res.message


def test_a_catalogued_mistake_is_named_even_when_it_crashes_on_a_drawn_case():
    def only_small(n):  # right on the fixed cases' shapes, then a crash a draw can provoke
        if n > 3:
            raise IndexError("table too short")
        return n + n

    ex = dataclasses.replace(SQUARE, mistakes=(Mistake("doubled", "A square multiplies n by itself.", only_small),))
    verdicts = {run_check(ex, only_small, seed=seed).message for seed in range(5)}
    assert verdicts == {"This looks like: doubled. A square multiplies n by itself."}

    def crashes_on_draws(n):
        if n > 3:
            raise IndexError("table too short")
        return n * n

    res = run_check(ex, crashes_on_draws, seed=3)
    assert res.status == FAILED and res.mistake is None
    assert re.search(
        r"^on drawn case 1 \(seed 3; n=\d+\) your function raised IndexError: table too short$", res.message
    ), res.message


def test_the_draw_seed_is_fresh_each_time_unless_pinned(monkeypatch):
    drawn_with = []

    def draw(g):
        drawn_with.append(g.initial_seed())
        return [((int(torch.randint(4, 10_000, (), generator=g)),), {})]

    ex = dataclasses.replace(SQUARE, draw=draw)
    monkeypatch.delenv(SEED_ENV, raising=False)
    seeds = {run_check(ex, _square).details["seed"] for _ in range(3)}
    assert len(seeds) > 1, "three checks drew from the same seed"
    assert set(drawn_with) == seeds  # draw() got a generator seeded with the reported seed
    monkeypatch.setenv(SEED_ENV, "4242")
    assert [run_check(ex, _square).details["seed"] for _ in range(2)] == [4242, 4242]
    assert drawn_with[-2:] == [4242, 4242]
    assert "on drawn case 1 (seed 4242; n=" in run_check(ex, lambda n: n * n if n <= 3 else 0).message
    assert run_check(ex, _square, seed=7).details["seed"] == 7  # an explicit seed wins over the variable
    monkeypatch.setenv(SEED_ENV, "soon")
    with pytest.raises(ValueError, match="COURSE_CHECK_SEED must be an integer seed, got 'soon'"):
        run_check(ex, _square)


# ------------------------------------------------------------------------------------------ not attempted / raised


def test_only_not_attempted_is_not_attempted():
    def stub(x):
        raise NotAttempted("replace this line with your code")

    res = run_check(DOUBLE, stub)
    assert res.status == NOT_ATTEMPTED and res.message == f"Write {DOUBLE.signature}, then run this cell again."


def test_not_implemented_error_is_a_failure_with_a_way_out_for_old_stubs():
    def old_stub(x):
        raise NotImplementedError

    res = run_check(DOUBLE, old_stub)
    assert res.status == FAILED
    assert "on fixed case 1 (x float32 (3,)) your function raised NotImplementedError" in res.message
    assert "untouched stub of an older copy" in res.message and "--exercise 99.1" in res.message
    res = run_check(dataclasses.replace(DOUBLE, key="03.9"), old_stub)  # a notebook that exists: named by its file
    assert "`python3 course.py reset notebooks/03_masking.ipynb --exercise 03.9`" in res.message

    def partial(x):
        if x.dim() > 1:
            raise NotImplementedError("batches come later\nsecond line")
        return x * 2

    res = run_check(DOUBLE, partial)
    assert res.status == FAILED
    assert res.message.endswith(
        "on fixed case 2 (x float32 (4, 8)) your function raised NotImplementedError: batches come later"
    )


def test_the_new_stub_under_an_old_import_cell_reads_as_not_attempted():
    def stub(x):
        raise NameError("name 'NotAttempted' is not defined", name="NotAttempted")

    res = run_check(DOUBLE, stub)
    assert res.status == NOT_ATTEMPTED
    assert "from course_utils.exercises import NotAttempted, check" in res.message


# ------------------------------------------------------------------------------------------ time limit, printing


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="the time limit needs POSIX signals")
def test_a_function_that_takes_too_long_is_stopped_at_the_time_limit():
    ex = dataclasses.replace(DOUBLE, time_limit=0.2)

    def sleeps(x):
        try:
            time.sleep(2 if x.dim() > 1 else 0)
        except Exception:  # the learner's own `except Exception` must not swallow the time limit
            pass
        return x * 2

    start = time.monotonic()
    res = run_check(ex, sleeps)
    assert time.monotonic() - start < 1.5
    assert res.status == FAILED
    assert res.message.startswith("your function took longer than 0.2 s on fixed case 2 (x float32 (4, 8))")


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="the time limit needs POSIX signals")
def test_the_time_limit_puts_back_a_timer_and_handler_that_were_there_before():
    fired = []

    def handler(*args):
        fired.append(args)

    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 30)
        assert run_check(DOUBLE, _double).status == PASSED
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 25 < remaining <= 30
        assert signal.getsignal(signal.SIGALRM) is handler and not fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("where", ["outside the main thread", "without POSIX timers"])
def test_the_check_runs_without_a_time_limit_where_it_cannot_set_one(where, monkeypatch):
    ex = dataclasses.replace(DOUBLE, time_limit=0.05)

    def slow(x):
        time.sleep(0.2)
        return x * 2

    out = []
    if where == "without POSIX timers":
        monkeypatch.delattr(signal, "setitimer", raising=False)  # as on Windows
        out.append(run_check(ex, slow))
    else:
        t = threading.Thread(target=lambda: out.append(run_check(ex, slow)))
        t.start()
        t.join()
    assert out[0].status == PASSED


def test_printing_is_captured_and_only_the_first_lines_are_kept(capsys):
    def chatty(x):
        print("x" * (PRINTED_WIDTH + 50))
        for i in range(40):
            print("step", i)
        import sys

        print("to stderr", file=sys.stderr)
        return x * 2

    res = run_check(DOUBLE, chatty)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""  # nothing leaked while checking
    assert res.status == PASSED
    assert len(res.printed) == PRINTED_LINES
    assert res.printed[0] == "x" * PRINTED_WIDTH + " ..."
    assert res.printed[1:] == tuple(f"step {i}" for i in range(PRINTED_LINES - 1))
    assert res.printed_more == 2 * (1 + 40 + 1) - PRINTED_LINES  # two fixed cases
    report(res)
    shown = capsys.readouterr().out.splitlines()
    assert shown[0] == res.line()
    assert shown[1] == f"  your function printed {2 * 42} lines during the check; the first {PRINTED_LINES}:"
    assert shown[2:] == [f"  | {ln}" for ln in res.printed]


def test_a_few_printed_lines_are_all_shown():
    def says_hi(x):
        print("hi", end="")
        return x * 2

    res = run_check(DOUBLE, says_hi)
    assert res.printed == ("hihi",) and res.printed_more == 0
    assert res.text().splitlines()[1:] == ["  your function printed during the check:", "  | hihi"]


# ------------------------------------------------------------------------------------------ messages


def test_the_exact_fix_only_with_hint_2():
    res = run_check(DOUBLE, lambda x: x / 2)
    assert res.mistake == HALVED.name and HALVED.hint in res.message and HALVED.fix not in res.message
    assert 'check("99.1", <lambda>' not in res.message and 'check("99.1", your_function, hint=2)' in res.message

    def my_double(x):
        return x / 2

    res = run_check(DOUBLE, my_double, hint=2)
    assert res.mistake == HALVED.name and HALVED.hint in res.message and f"The fix: {HALVED.fix}" in res.message
    assert 'check("99.1", my_double, hint=2)' in run_check(DOUBLE, my_double).message


def test_a_mistake_without_a_fix_does_not_advertise_hint_2():
    ex = dataclasses.replace(DOUBLE, mistakes=(Mistake("halved", "Doubling multiplies by two.", lambda x: x / 2),))
    assert "hint=2" not in run_check(ex, lambda x: x / 2).message
    assert "no exact fix written" in run_check(ex, lambda x: x / 2, hint=2).message


def test_a_scalar_close_to_the_answer_is_shown_without_revealing_the_answer():
    expected = _mean(torch.tensor([1.0, 2.0, 4.0]))
    got = expected * (1 + 3e-7)
    res = run_check(MEAN, lambda x: got)
    assert res.status == FAILED
    numbers = re.findall(r"\d[\d.e+-]*", res.message)
    assert f"{expected:.6g}" not in numbers  # never the expected number to six digits
    shown = re.search(r"your value (\S+) is (\S+) too high", res.message)
    assert shown, res.message
    digits = len(shown[1].replace(".", "").lstrip("0"))
    assert shown[1] != f"{expected:.{digits}g}"  # enough digits to see the difference
    assert abs(float(shown[1]) - got) <= abs(got - expected)


def test_a_tensor_difference_shows_the_worst_entry_and_both_values():
    def one_wrong(x):
        out = x * 2
        out.view(-1)[-1] += 0.5
        return out

    res = run_check(DOUBLE, one_wrong)
    e = _double_cases()[0][0][0] * 2
    assert "values differ at 1 of the 3 entries of the float32 (3,) tensor" in res.message
    assert f"the worst at [2]: expected {float(e[2]):.4g}, got {float(e[2]) + 0.5:.4g}" in res.message


def test_compare_never_casts_and_checks_the_device():
    x = torch.arange(4)
    assert compare(x.float(), x, 0.0, 0.0).text == "expected dtype int64, got float32"
    assert compare(x.to("meta"), x, 0.0, 0.0).text == "expected a tensor on cpu, got one on meta"
    assert compare(x.double(), x.float(), 0.0, 0.0, accept_dtypes=(torch.float64,)) is None


# ------------------------------------------------------------------------------------------ bad input to the checker


HINTS = "hint must be one of (1, 2, 3) (1: a hint, 2: the exact fix, 3: the fix and the course's solution), got"


def _settings(**kwargs):
    return lambda: Exercise(key="99.1", title="t", signature="s", solution=_double, cases=_double_cases, **kwargs)


CALL_ERRORS = [  # (a call the check cannot take, its exception, its message; "..." ends a message's start)
    # a bad hint is an error of the call, raised at once, not a failed exercise: no verdict is printed (check("01.1",
    # fn, hint="2") said "Exercise 01.1 ...: failed. hint must be ...", a verdict on the function)
    *(
        (call, error, f"{HINTS} {got}")
        for bad, error, got in [(0, ValueError, "0"), (4, ValueError, "4"), ("2", TypeError, "'2' (str)"),
                                (True, TypeError, "True (bool)")]
        for call in (lambda b=bad: check("01.1", get_exercise("01.1").solution, hint=b),
                     lambda b=bad: run_check(DOUBLE, _double, hint=b))
    ),
    # a failed check is one line in Jupyter, the error's: not printed a second time
    (lambda: check("01.1", None), ExerciseFailed, "✗ Exercise 01.1 (a soft lookup for one query): failed. expected a "
     "function soft_lookup(query, keys, values) -> out, got None ..."),
    (lambda: check("9.9", _double), KeyError, "no exercise '9.9'; known exercises: 01.1, ..."),
    (lambda: check(_double, "01.1"), KeyError, 'an exercise key is a string such as "03.1", got function ...'),
    # a retired key says where its exercise went (RETIRED, below)
    (lambda: check("09.5", _double), KeyError,
     "no exercise 09.5 in this version of the course: the value-weighted norms are now 11.1, in notebook 11"),
    (lambda: check("07.4", _double), KeyError, "no exercise 07.4 in this version of the course: the recurrent step "
     "of linear attention is now 13.4, in notebook 13"),
    (lambda: run_check(IDS, _ids, references=References(DOUBLE)), ValueError,
     "references are of exercise 99.1, but the check is of exercise 99.2"),
    # an exercise with bad settings is refused
    (_settings(inplace=1.5), TypeError,
     "Exercise 99.1: inplace must be an argument's position (int) or name (str), got 1.5"),
    (_settings(time_limit=0), ValueError,
     "Exercise 99.1: time_limit must be a positive number of seconds or None, got 0"),
    (_settings(accept_dtypes=(torch.int64,)), TypeError,
     "Exercise 99.1: accept_dtypes must be floating torch dtypes, got [torch.int64]"),
]  # fmt: skip


@pytest.mark.parametrize("call, error, said", CALL_ERRORS)
def test_a_call_the_check_cannot_take_raises_what_it_expected_in_one_line(call, error, said, capsys):
    with pytest.raises(error) as info:
        call()
    shown = str(info.value)
    assert shown.startswith(said[:-3]) if said.endswith("...") else shown == said, shown
    if error in (KeyError, ExerciseFailed):  # a notebook shows the error as that one line
        assert len(info.value._render_traceback_()) == 1
    assert capsys.readouterr().out == ""


def test_a_failed_check_carries_what_the_function_printed_and_prints_nothing(capsys):
    def chatty_and_wrong(x):
        print("trying")
        return x / 2

    res = run_check(DOUBLE, chatty_and_wrong)
    with pytest.raises(ExerciseFailed) as info:
        report(res)
    assert capsys.readouterr().out == ""
    assert str(info.value) == res.text() and res.text().startswith(res.line())
    shown = info.value._render_traceback_()
    assert shown[0] == f"\x1b[31m{res.line()}\x1b[0m" and shown[1:] == res.text().splitlines()[1:]


# The learner's view: what a notebook cell shows, run by a real kernel as JupyterLab (and nbval, and
# `course.py check`) runs it. Before, a failed check printed its verdict, then raised it again in red.
_VIEW_CELLS = [
    """import torch
from course_utils.exercises._engine import Exercise, report, run_check

DOUBLE = Exercise(key="99.1", title="double", signature="double(x)", solution=lambda x: x * 2,
                  cases=lambda: [((torch.ones(3),), {})])""",
    """def wrong(x):
    print("halving, I think")
    return x / 2

report(run_check(DOUBLE, wrong))""",
    "report(run_check(DOUBLE, lambda x: x * 2))",
]


def _shown(output) -> str:
    """The text JupyterLab shows for an output: a stream's text, an error's traceback."""
    if output["output_type"] == "stream":
        return output["text"]
    if output["output_type"] == "error":
        return "\n".join(output["traceback"])
    return "".join(output.get("data", {}).get("text/plain", ""))


def test_a_failed_check_shows_its_verdict_once_in_a_notebook(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in _VIEW_CELLS]
    nb.cells[1].metadata["tags"] = ["raises-exception"]  # the failing check must still fail its cell
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    failed, passed = nb.cells[1].outputs, nb.cells[2].outputs
    assert [o["output_type"] for o in failed] == ["error"], failed
    assert failed[0]["ename"] == "ExerciseFailed"
    seen = "\n".join(_shown(o) for o in failed)
    assert seen.count("Exercise 99.1 (double): failed.") == 1, seen
    assert seen.count("halving, I think") == 1, seen
    assert "Traceback" not in seen and "_engine" not in seen  # no traceback into the checking code
    said = "".join(_shown(o) for o in passed)
    assert said.count("Exercise 99.1 (double): passed.") == 1 and all(o["output_type"] == "stream" for o in passed)


# Old keys: a key names one exercise for good. Keys the renumbering of notebooks 08 to 11 left empty are in a plain
# table (RETIRED), and the keys it gave to new exercises before that rule (REUSED) say what they meant, whatever the
# function passed: nothing is guessed from the answer.


def test_the_retired_and_reused_tables_point_at_exercises_that_exist():
    from course_utils.exercises import RETIRED, REUSED, all_exercises

    exercises = all_exercises()
    assert not set(RETIRED) & set(exercises), "a retired key names an exercise again"
    for said in [*RETIRED.values(), *REUSED.values()]:
        new = re.search(r"now (\d\d\.\d)", said).group(1)
        assert new in exercises, said
    assert set(REUSED) <= set(exercises)


def test_a_reused_key_says_what_it_meant_before_on_a_failure_only(capsys):
    def nucleus(logits, temperature, top_p):  # an older notebook's answer to what 08.2 was
        return logits

    with pytest.raises(ExerciseFailed) as info:
        check("08.2", nucleus)
    said = str(info.value)
    assert said.endswith("(Before the course was renumbered, 08.2 was nucleus (top-p) sampling, now 09.1.)"), said
    assert "your function takes (logits, temperature, top_p)" in said  # the plain verdict, nothing guessed


def test_hint_3_shows_the_courses_own_solution_after_the_verdict(capsys):
    def soft_lookup(query, keys, values):
        return values.mean(0)  # wrong: uniform weights

    with pytest.raises(ExerciseFailed) as info:
        check("01.1", soft_lookup, hint=2)
    assert 'check("01.1", soft_lookup, hint=3) shows the course\'s own solution' in str(info.value)
    with pytest.raises(ExerciseFailed) as info:
        check("01.1", soft_lookup, hint=3)
    said = str(info.value)
    assert "The course's solution (solutions/01_dot_product_toy.ipynb):" in said
    assert "def soft_lookup(query, keys, values):" in said and "NotAttempted" not in said


def test_where_the_solutions_are_left_out_hint_3_says_so_and_hint_2_promises_none(monkeypatch, tmp_path):
    """A graded copy (no solutions/) ended hint=2's verdict with 'Still stuck? ... hint=3 shows the course's own
    solution', which there only says the solutions are left out; hint=2 is the last hint there."""
    import course_utils.exercises as exercises

    def soft_lookup(query, keys, values):
        return (keys @ query) @ values  # wrong: raw scores, no softmax

    monkeypatch.setattr(exercises, "__file__", str(tmp_path / "course_utils" / "exercises" / "__init__.py"))
    assert "The course's solutions are not in this copy" in exercises.solution_source("01.1")
    with pytest.raises(ExerciseFailed) as info:
        check("01.1", soft_lookup, hint=2)
    said = str(info.value)
    assert "The fix:" in said and "hint=3" not in said and "solution" not in said, said


# ------------------------------------------------------------------ a mistake that cannot run is named by its error


def _project(x, w):
    return x @ w  # w stored (C, D)


TRANSPOSED = Mistake(
    "weights transposed",
    "This exercise stores weights input width first.",
    lambda x, w: x @ w.T,
    fix="x @ w, not x @ w.T",
)
PROJECT = _exercise(
    "99.9",
    "project(x, w) -> (T, D)",
    _project,
    lambda: [((torch.ones(2, 4), torch.ones(4, 3)), {}), ((torch.ones(5, 6), torch.ones(6, 2)), {})],
    mistakes=(TRANSPOSED,),
)


def _scale_rows(w, n):
    return w * n.unsqueeze(-2)  # w (B, T, S), n (B, S) -> (B, 1, S)


SCALE_ROWS = _exercise(
    "99.8",
    "scale_rows(w, n) -> (B, T, S)",
    _scale_rows,
    lambda: [((torch.ones(2, 3, 5), torch.ones(2, 5)), {})],
    mistakes=(
        Mistake(
            "n over the wrong axis", "n runs along the keys.", lambda w, n: w * n.unsqueeze(-1), fix="n.unsqueeze(-2)"
        ),
    ),
)


# ------------------------------------------------ what a tester found: modules, huge numbers, globals, RNG


def test_a_callable_whose_signature_raises_gets_a_verdict():
    class Bomb:
        @property
        def __signature__(self):
            raise RuntimeError("sig bomb")

        def __call__(self, x):
            return x * 2

    res = run_check(DOUBLE, Bomb())
    assert res.status in (PASSED, FAILED) and "Traceback" not in res.message


def test_global_settings_changed_by_the_learner_are_put_back_and_said():
    def sets_float64(x):
        torch.set_default_dtype(torch.float64)
        return x * 2

    def disables_grad(x):
        torch.set_grad_enabled(False)
        return x * 2

    for fn, said in ((sets_float64, "set_default_dtype"), (disables_grad, "set_grad_enabled")):
        res = run_check(DOUBLE, fn)
        assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()
        assert said in res.message and "put it back" in res.message, res.message
    assert "put it back" not in run_check(DOUBLE, _double).message


def test_a_check_leaves_the_callers_random_state_as_it_was():
    def seeds(x):
        torch.manual_seed(123)
        return x * 2

    torch.manual_seed(0)
    before = torch.get_rng_state()
    run_check(DOUBLE, seeds)
    assert torch.equal(torch.get_rng_state(), before)


def test_a_dtype_or_shape_problem_teaches_instead_of_saying_no_mistake_matches():
    res = run_check(DOUBLE, lambda x: (x * 2).double())
    assert "expected dtype" in res.message and "states the dtype it wants" in res.message
    assert "matches none of the common mistakes" not in res.message
    res = run_check(DOUBLE, lambda x: (x * 2)[None])
    assert "expected shape" in res.message and "matches none of the common mistakes" not in res.message


# ------------------------------------------------ issue #21: the same verdict on every run, and which input broke it


def test_a_fixed_case_failure_is_named_the_same_on_every_seed():
    """Wrong on the fixed cases as the catalogued mistake is, and like the mistake on small drawn numbers only:
    the name is decided on the fixed cases, so no draw can take it away (it used to, on most seeds)."""
    doubled = Mistake("doubled", "A square multiplies n by itself.", lambda n: n + n)
    ex = dataclasses.replace(SQUARE, mistakes=(doubled,))

    def doubles_small_numbers(n):
        return n + n if n < 5000 else n * n

    results = [run_check(ex, doubles_small_numbers, seed=seed) for seed in range(30)]
    assert {r.mistake for r in results} == {"doubled"}
    assert {r.message for r in results} == {"This looks like: doubled. A square multiplies n by itself."}


def test_a_failure_only_a_draw_reveals_names_no_mistake_on_any_seed():
    """Right on every fixed case, wrong on some drawn ones: the verdict gives the drawn case and its seed and never
    a mistake's name, even one catalogued (badly: it passes the fixed cases) that agrees with it everywhere."""

    def table(n):
        return n * n if n < 5000 else 0

    ex = dataclasses.replace(SQUARE, mistakes=(Mistake("a table of squares up to 5000", "Compute the square.", table),))
    results = {seed: run_check(ex, table, seed=seed) for seed in range(30)}
    assert {r.mistake for r in results.values()} == {None}
    failed = {seed: r for seed, r in results.items() if r.status == FAILED}
    assert failed and len(failed) < 30  # some draws hold a number past the table, some do not
    for seed, r in failed.items():
        assert re.match(rf"on drawn case \d \(seed {seed}; n=\d+\): expected \d+, got 0\. ", r.message), r.message
        assert "answers every fixed case right and this drawn one wrong, so no common mistake is named" in r.message


def _project_cases():
    g = torch.Generator().manual_seed(3)
    shapes = [((3, 3), (3, 3)), ((2, 4), (4, 3)), ((3, 4), (4, 1))]  # square; C != D; D == 1
    return [((torch.randn(*x, generator=g), torch.randn(*w, generator=g)), {}) for x, w in shapes]


def _project_ex(cases=_project_cases, mistakes=(TRANSPOSED,)):
    return dataclasses.replace(
        PROJECT,
        cases=cases,
        mistakes=mistakes,
        draw=lambda g: [((torch.randn(5, 7, generator=g), torch.randn(7, 2, generator=g)), {})],
    )


def _einsum_transposed(x, w):
    return torch.einsum("tc,dc->td", x, w)  # x @ w.T in einsum: its own error where matmul raises its own


def test_a_mistake_that_raises_is_named_when_the_learner_raises_otherwise_worded_where_it_does():
    """The same slip in einsum: wrong like the mistake on the square case, then einsum's error where matmul raises
    (and an answer where einsum broadcasts a size-1 axis that matmul refuses, after that first error)."""
    ex = _project_ex()
    with pytest.raises(RuntimeError) as mine:
        _einsum_transposed(*ex.cases()[1][0])
    with pytest.raises(RuntimeError) as theirs:
        TRANSPOSED.fn(*ex.cases()[1][0])
    assert str(mine.value) != str(theirs.value)  # the wording differs
    for seed in range(30):
        res = run_check(ex, _einsum_transposed, seed=seed)
        assert res.status == FAILED and res.mistake == "weights transposed", res.message
        assert "einsum()" in res.message  # the learner's own error is shown


def test_a_raising_mistake_is_named_when_the_first_error_comes_before_the_evidence():
    """The einsum answer raises on the first fixed case, before any wrong answer: it is then run on the later
    fixed cases, where it answers as the mistake does."""
    reordered = _project_ex(cases=lambda: [_project_cases()[i] for i in (1, 0)])
    res = run_check(reordered, _einsum_transposed, seed=0)
    assert res.mistake == "weights transposed", res.message
    assert res.message.endswith(
        "(on fixed case 1 (x float32 (2, 4), w float32 (4, 3)) your function raised "
        "RuntimeError: " + str(_einsum_error(*_project_cases()[1][0])) + ")"
    )


def _einsum_error(x, w):
    try:
        _einsum_transposed(x, w)
    except RuntimeError as e:
        return str(e).splitlines()[0]
    raise AssertionError("einsum did not raise")


def _batched(x, w):
    return x @ w  # x (T, C) or (B, T, C)


def _batched_cases():
    g = torch.Generator().manual_seed(4)
    return [
        ((torch.randn(3, 4, generator=g), torch.randn(4, 2, generator=g)), {}),
        ((torch.randn(2, 3, 4, generator=g), torch.randn(4, 2, generator=g)), {}),
    ]


def _flattens_to_2d(x, w):
    return torch.mm(x, w)  # right on 2-D input, a RuntimeError on 3-D


BATCHED = _exercise(
    "99.15",
    "batched(x, w)",
    _batched,
    _batched_cases,
    mistakes=(Mistake("the batch axis forgotten", "x may have a batch axis.", _flattens_to_2d),),
)


def _refuses_batches(x, w):
    if x.dim() != 2:
        raise RuntimeError("only matrices, please")
    return x @ w


def _raises_everywhere(x, w):
    raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")


def _raises_on_square(x, w):
    if w.shape[0] == w.shape[1]:
        raise RuntimeError("square")
    return x @ w.T


NAMING = [  # (exercise, an answer that raises somewhere, the mistake it must be named as or None, the message says)
    # named when it raises as the mistake does; the learner's own error is still shown
    (PROJECT, lambda x, w: torch.matmul(x, w.T), "weights transposed", "mat1 and mat2 shapes cannot be multiplied"),
    # both raise 'The size of tensor a (N) must match the size of tensor b (N) ...' with other sizes: the numbers
    # (shapes) are part of the failure, so the catalogued mistake is not named for another slip
    (SCALE_ROWS, lambda w, n: w * n, None, "must match the size of tensor b"),  # (B, T, S) * (B, S): B meets T
    (SCALE_ROWS, lambda w, n: w * n[..., None], "n over the wrong axis", ""),
    # right wherever it answers, and a RuntimeError where the mistake raises one, but worded otherwise: no evidence
    # of that mistake (only the same error word for word would be)
    (BATCHED, _refuses_batches, None, "raised RuntimeError: only matrices, please"),
    (BATCHED, lambda x, w: torch.mm(x, w), "the batch axis forgotten", ""),
    (_project_ex(), _raises_everywhere, None, ""),
    (PROJECT, _raises_everywhere, None, ""),  # the mistake raises on every case there too
    (_project_ex(), _raises_on_square, None, "raised RuntimeError: square"),  # it raises where the mistake answers
]


@pytest.mark.parametrize("ex, fn, mistake, said", NAMING)
def test_an_answer_that_raises_is_named_only_on_the_evidence_of_the_mistake(ex, fn, mistake, said):
    res = run_check(ex, fn)
    assert res.status == FAILED and res.mistake == mistake and said in res.message, res.message
    fix = next((m.fix for m in ex.mistakes if m.name == mistake), None)
    assert not fix or (fix not in res.message and fix in run_check(ex, fn, hint=2).message)  # with hint=2 only


def _weighted(w, v):
    return w @ v  # w (T, S), v (S, Dv)


def _weighted_cases():
    g = torch.Generator().manual_seed(5)
    return [
        ((torch.rand(3, 3, generator=g), torch.randn(3, 2, generator=g)), {}),
        ((torch.rand(2, 3, generator=g), torch.randn(3, 1, generator=g)), {}),
    ]


WEIGHTED = _exercise(
    "99.16",
    "weighted(w, v) -> (T, Dv)",
    _weighted,
    _weighted_cases,
    draw=lambda g: [((torch.rand(5, 4, generator=g), torch.randn(4, 2, generator=g)), {})],
    edges={
        "T != S": lambda w, v: w.shape[0] != w.shape[1],
        "an index out of range": lambda w, v: v.shape[5] > 0,  # raises: not held
        "not a truth value": lambda w, v: w > 0,  # a tensor of many entries: not held
        "shrinks its argument": lambda w, v: v.resize_(1) is None and False,  # gets a copy: the case is unchanged
        "Dv == 1": lambda w, v: v.shape[1] == 1,
    },
)


def test_a_failure_names_the_edges_its_case_holds():
    res = run_check(WEIGHTED, lambda w, v: (w[None] @ v).squeeze())
    assert res.message.startswith(
        "on fixed case 2 (T != S, Dv == 1; w float32 (2, 3), v float32 (3, 1)): expected shape (2, 1), got (2,)"
    ), res.message

    def crashes_when_one_wide(w, v):
        if v.shape[1] == 1:
            raise ValueError("one column")
        return w @ v

    res = run_check(WEIGHTED, crashes_when_one_wide)
    assert res.message.startswith("on fixed case 2 (T != S, Dv == 1; w float32 (2, 3), v float32 (3, 1)) your ")

    res = run_check(WEIGHTED, lambda w, v: w @ v if w.shape[0] < 4 else w @ v + 1, seed=7)
    assert res.message.startswith("on drawn case 1 (seed 7; T != S; w float32 (5, 4), v float32 (4, 2)): "), res.message
    assert run_check(WEIGHTED, _weighted).status == PASSED


@pytest.mark.parametrize(
    "fn,problem",
    [
        (_double, None),
        (lambda x: (x * 2).double(), "wrong dtype"),
        (lambda x: (x * 2)[None], "wrong shape"),
        (lambda x: x * 3, "wrong value"),
        (lambda x: x / 2, "wrong value"),  # named: halved
        (lambda x: x.mul_(2), "changed an input"),
        (lambda x: x.no_such_method(), "raised"),
        (lambda x: (_ for _ in ()).throw(NotAttempted()), "not attempted"),
        (None, "cannot check"),
    ],
)
def test_a_verdict_records_the_kind_of_problem_it_found(fn, problem):
    res = run_check(DOUBLE, fn)
    assert res.details.get("problem") == problem, res.message


# ---------------------------------------------------------------------------------- the fixed cases and the draws apart
# check_fixed and check_drawn run one part of a check each, and References share the solution's and the mistakes'
# runs between checks (the seed sweep of tests/test_exercise_domains.py): each verdict is the one without them.


def _verdict(res):
    return res.status, res.mistake, res.message


@pytest.mark.parametrize("key", ["02.2", "03.2", "09.2", "11.4"])
def test_each_part_of_a_check_gives_with_references_the_verdict_it_gives_without(key):
    from course_utils.exercises import all_exercises

    ex = all_exercises()[key]
    refs = References(ex)
    fixed_only, drawn_only = dataclasses.replace(ex, draw=None), dataclasses.replace(ex, cases=list, domain=Domain())
    answers = [ex.solution, *(m.fn for m in ex.mistakes), lambda *a, **k: ex.solution(*a, **k)]
    for fn in answers:  # the fixed cases do not depend on the seed: once
        want = _verdict(run_check(fixed_only, fn))
        assert _verdict(check_fixed(ex, fn, references=refs)) == want
        assert _verdict(check_fixed(ex, fn)) == want
    for seed in (3, 4):  # a second seed: the references' draws are those of the seed asked for
        for fn in answers:
            want = _verdict(run_check(drawn_only, fn, seed=seed))
            assert _verdict(check_drawn(ex, fn, seed, references=refs)) == want
            assert _verdict(check_drawn(ex, fn, seed)) == want
            want = _verdict(run_check(ex, fn, seed=seed))
            assert _verdict(run_check(ex, fn, seed=seed, references=refs)) == want
    assert refs.deterministic


def test_a_check_of_one_part_runs_only_that_part():
    assert check_fixed(DOUBLE, _double).details["drawn"] == 0
    res = check_drawn(WEIGHTED, _weighted, 7)
    assert (res.details["cases"], res.details["seed"]) == (0, 7) and res.details["drawn"] > 0
    res = check_drawn(WEIGHTED, lambda w, v: w @ v if w.shape[0] < 4 else w @ v + 1, 7)
    assert res.status == FAILED and res.message.startswith("on drawn case 1 (seed 7; "), res.message


@pytest.mark.parametrize("which", ["solution", "mistake"])
def test_references_run_afresh_a_solution_or_mistake_that_answers_a_case_two_ways(which):
    calls = []

    def drifting(x):  # not deterministic: its second run of a case differs
        calls.append(1)
        return x * (2 if which == "solution" else 0.5) + len(calls)

    if which == "solution":
        ex = dataclasses.replace(DOUBLE, solution=drifting, mistakes=())
    else:
        ex = dataclasses.replace(DOUBLE, mistakes=(dataclasses.replace(HALVED, fn=drifting),))
    refs = References(ex)
    check_fixed(ex, lambda x: x / 2, references=refs)
    assert refs.deterministic == (which == "mistake")  # the solution's runs decide it
    before = len(calls)
    check_fixed(ex, lambda x: x / 2, references=refs)
    assert len(calls) == before + len(refs.fixed)  # run again for the second check, not taken from the first


def test_references_keep_a_deterministic_mistakes_runs():
    kept = References(DOUBLE)
    check_fixed(DOUBLE, lambda x: x / 2, references=kept)
    assert kept._mistakes[id(HALVED)] is not None


def _seeding_cases():
    torch.manual_seed(0)  # cases built with torch's global generator, as 05.1's modules are
    return [((torch.randn(3),), {}), ((torch.randn(4, 8),), {})]


def _drawing_from_the_global_generator(g):
    torch.rand(())  # a draw that also moves torch's global generator
    return [((torch.randn(5, generator=g),), {})]


def test_a_learner_that_reads_the_global_generator_gets_the_same_verdict_with_references_as_without():
    """The cases (fixed and drawn) and the reference runs are made apart from the global generator the learner's
    function reads: without references they were made inside each check (and cases that seed it, as 05.1's do, fixed
    what the learner drew), with references once before, so a learner using torch.rand was told two things."""
    ex = dataclasses.replace(DOUBLE, cases=_seeding_cases, draw=_drawing_from_the_global_generator)
    refs = References(ex)

    def noisy(x):
        return x * 2 + torch.rand(x.shape)  # wrong by a random amount, named in the verdict

    for seed in (1, 2):
        torch.manual_seed(123)
        without = _verdict(run_check(ex, noisy, seed=seed))
        torch.manual_seed(123)
        assert _verdict(run_check(ex, noisy, seed=seed, references=refs)) == without
        torch.manual_seed(123)
        assert _verdict(check_drawn(ex, noisy, seed, references=refs)) == _verdict(check_drawn(ex, noisy, seed))


def test_references_keep_a_solution_run_only_when_its_second_run_is_identical_not_merely_close():
    """A reference whose two runs differ within the tolerance is not deterministic either: kept, its first run
    would judge an answer near the tolerance's edge otherwise than a fresh run does."""
    calls = []

    def first_run_apart(x):  # its first run 4e-6 above twice x, every later one 4e-6 below
        calls.append(1)
        return x * 2 + (4e-6 if len(calls) == 1 else -4e-6)

    ex = dataclasses.replace(DOUBLE, solution=first_run_apart, cases=lambda: [((torch.zeros(3),), {})], mistakes=())
    refs = References(ex)

    def low(x):
        return x * 2 - 8e-6  # 4e-6 from a later run (within 1e-5), 1.2e-5 from the first (past it)

    check_fixed(ex, low, references=refs)  # the first check runs the reference twice, and judges by the first run
    assert not refs.deterministic
    with_refs = check_fixed(ex, low, references=refs)  # later ones by a fresh run, as a check without references
    assert _verdict(with_refs) == _verdict(check_fixed(ex, low)) == (PASSED, None, "Well done.")


# ------------------------------------------------------------------------------------------ verdicts, as tables

DOT = _exercise(
    "99.8",
    "dot(a, b) -> a number",
    lambda a, b: a @ b,
    lambda: [((torch.tensor([1.0, 2.0]), torch.tensor([3.0, 0.5])), {})],
)
TOTAL = _exercise(
    "99.9",
    "total(xs, scale)",
    lambda xs, scale: sum(xs) * scale,
    lambda: [(([torch.ones(2), torch.zeros(2)],), {"scale": torch.tensor(2.0)})],
)
NAN = _exercise("99.10", "f(x)", lambda x: x.nan_to_num(), lambda: [((torch.tensor([float("nan"), 1.0]),), {})])
WEIGHT = _exercise("99.11", "weight_of(m)", lambda m: m.weight.detach() * 1, lambda: [((torch.nn.Linear(2, 3),), {})])
HALF = _exercise("99.13", "half(x) -> a number", lambda x: x / 2, lambda: [((3.0,), {})])
NOISE = _exercise(
    "99.14",
    "noise(n, gen)",
    lambda n, gen: torch.rand(n, generator=gen),
    lambda: [((3, torch.Generator().manual_seed(1)), {})],
)


def _mha_slices(m):
    C = m.embed_dim
    return m.in_proj_weight.detach()[:C] * 1


MHA = _exercise(
    "99.12", "slices(m)", _mha_slices, lambda: [((torch.nn.MultiheadAttention(4, 2, batch_first=True),), {})]
)


def _changes_module(change):
    """_mha_slices after ``change(m)``: the module changed other than in its values."""

    def answer(m):
        change(m)
        return _mha_slices(m)

    return answer


class _Doubler(torch.nn.Module):
    def forward(self, x):
        return x * 2


class _Misspelt(torch.nn.Module):
    def forwad(self, x):
        return x * 2


PASSES = [  # (exercise, an answer written otherwise that the check must accept)
    *((ex, ex.solution) for ex in (DOUBLE, IDS, POSITIVE, MEAN, WRITE, SQUARE, MASKED, MHA)),
    # a number: a 0-d tensor or a Python number, of any float dtype
    (MEAN, lambda x: x.mean()),
    (MEAN, lambda x: x.double().mean()),
    (MEAN, lambda x: x.double().mean().item()),
    (MEAN, lambda x: 7 / 3),
    (DOT, lambda a, b: float(a @ b)),  # a Python number where a 0-d float tensor is expected
    (SQUARE, lambda n: torch.tensor(n * n)),  # an integer: a Python int or an integer tensor
    (DOUBLE, _Doubler()),  # a module: its forward is the answer
    (NAN, lambda x: torch.where(x.isnan(), torch.zeros_like(x), x)),  # NaN inputs left alone are not changed
    (NOISE, lambda n, gen: torch.rand(n, generator=gen)),  # drawing from a generator argument: each run its own copy
]


@pytest.mark.parametrize("ex, fn", PASSES)
def test_each_right_answer_passes(ex, fn):
    res = run_check(ex, fn)
    assert res.status == PASSED, (ex.key, res.message)


class _NotCallable:
    pass


def _generator(x):
    yield x * 2


def _too_few():
    return 0


def _quits(x):
    raise SystemExit(3)


def _one_flipped(x):
    return (x > 0) ^ (torch.arange(len(x)) == 0)


def _doubles_in_place(x):
    x.mul_(2)
    return x


def _second_in_place(xs, scale):
    xs[1].add_(0)  # unchanged: no failure for an in-place op that changes nothing
    xs[1].add_(1)
    return (xs[0] + xs[1] - 1) * scale


def _scale_in_place(xs, scale):
    out = sum(xs) * scale
    scale.zero_()
    return out


def _zeroes_bias(m):
    with torch.no_grad():
        m.bias.zero_()
    return m.weight.detach() * 1


def _writes_one_late(buf, i, v):
    out = torch.cat([buf[:i], v[None]])
    if i + 1 < len(buf):
        buf[i + 1] = v
    else:
        buf[i] = v
    return out


def _half_done(x):
    if x.dim() > 1:
        raise NotAttempted("later")
    return x * 2


class _OneInput(torch.nn.Module):
    def forward(self, scores):
        return scores


VERDICTS = [  # (exercise, the learner's function, what the one-line failure must say); no mistake is named
    # outputs: a dtype is never cast, booleans and numbers are compared exactly
    (DOUBLE, lambda x: (x * 2).double(), "expected dtype float32, got float64"),
    (IDS, lambda x: _ids(x).float(), "expected dtype int64, got float32"),
    (IDS, lambda x: _ids(x) + 0.9, "expected dtype int64, got float32"),  # even when it rounds right
    (POSITIVE, lambda x: (x > 0).to(torch.uint8), "expected dtype bool, got uint8"),
    (POSITIVE, _one_flipped,
     "1 of the 9 entries of the bool (9,) tensor differ; the first at [0]: expected False, got True"),
    (DOUBLE, lambda x: 2.0, "expected a tensor (float32 (3,)), got float"),
    (MEAN, lambda x: float(x.sum()), "expected about 2.3, got 7 (relative error 2.0e+00"),
    (DOT, lambda a, b: float(a @ b) + 1, "expected about 4, got 5"),
    (SQUARE, lambda n: float(n * n), "on fixed case 1 (n=1): expected an integer, got float 1.0"),
    (HALF, lambda x: 10**400, "too large for a float"),
    (MASKED, lambda scores, mask: scores, "on fixed case 1 (scores float32 (2, 3, 5), mask bool (2, 1, 5)):"),
    (WEIGHTED, lambda w, v: w @ v + 1, "on fixed case 1 (w float32 (3, 3), v float32 (3, 2)): values differ"),
    # inputs after the call
    (DOUBLE, _doubles_in_place, "on fixed case 1 (x float32 (3,)): your function changed its input `x` in place"),
    (TOTAL, _second_in_place, "changed its input `xs[1]` in place"),
    (TOTAL, _scale_in_place, "changed its input `scale` in place"),
    (WEIGHT, _zeroes_bias, "changed its input `m.bias` in place"),
    (WRITE, lambda buf, i, v: torch.cat([buf[:i], v[None]]),
     "after your call, `buf` (which your function should write into) is wrong"),
    (WRITE, _writes_one_late, "`buf`"),
    (MHA, _changes_module(lambda m: setattr(m, "batch_first", False)),
     "changed its input `m.batch_first (True -> False)` in place"),
    (MHA, _changes_module(lambda m: m.in_proj_weight.requires_grad_(False)),
     "changed its input `m.in_proj_weight.requires_grad (True -> False)` in place"),
    (MHA, _changes_module(lambda m: m.eval()), "changed its input `m.training (True -> False)` in place"),
    (MHA, _changes_module(lambda m: setattr(m, "dropout", 0.9)), "changed its input `m.dropout (0.0 -> 0.9)` in place"),
    (MHA, _changes_module(lambda m: m.register_forward_hook(lambda *a: None)),
     "changed its input `m.hooks (0 -> 1)` in place"),
    # what the function raised
    (DOUBLE, _quits, "raised SystemExit: 3"),
    (DOUBLE, _half_done, "on fixed case 2 (x float32 (4, 8)) your function raised NotAttempted: later"),
    (PROJECT, lambda x, w: x.reshape(7, -1) @ w, "your function raised RuntimeError: shape '[7, -1]' is invalid"),
    # bad input to the checker
    (DOUBLE, None, "got None"),
    (DOUBLE, 42, "got int"),
    (DOUBLE, _NotCallable, "got the class _NotCallable"),
    (DOUBLE, _NotCallable(), "got an instance of _NotCallable, which cannot be called"),
    (DOUBLE, torch.nn.Identity, "got the class Identity; pass an instance, Identity(...)"),
    (DOUBLE, _generator, "got a generator function (it uses `yield`)"),
    (DOUBLE, torch.ones(3), 'got a tensor: pass the function itself, check("99.1", my_function), not what it returns'),
    (DOUBLE, _Misspelt(), "your module has no `forward` method (torch: Module [_Misspelt]"),
    (DOUBLE, _too_few, "your function takes (), but the check calls it with 1 argument"),
    (DOUBLE, lambda x, y: x, "your function takes (x, y), but the check calls it with 1 argument"),
    (MASKED, lambda scores: scores, "expected parameters (scores, mask)"),
    (MASKED, _OneInput(), "your function takes (scores), but the check calls it with 2 arguments"),
]  # fmt: skip


@pytest.mark.parametrize("ex, fn, expected", VERDICTS, ids=[said[:60] for *_, said in VERDICTS])
def test_each_wrong_answer_gets_its_one_line_verdict(ex, fn, expected):
    res = run_check(ex, fn)
    assert res.status == FAILED and res.mistake is None and expected in res.message, res.message
    assert "\n" not in res.line()
