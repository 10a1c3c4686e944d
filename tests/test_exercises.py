"""Every exercise check is real: it passes the solution, calls the stub 'not attempted',
and names each catalogued mistake when given a function that makes it."""

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from course_utils.checking import FAILED, NOT_ATTEMPTED, PASSED, REPORT_ENV, ExerciseFailed, run_check
from course_utils.exercises import NotAttempted, all_exercises, check, get_exercise

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = all_exercises()
MISTAKES = [(key, m.name) for key, ex in EXERCISES.items() for m in ex.mistakes]


def stub(*args, **kwargs):
    raise NotAttempted("replace this line with your code")


@pytest.mark.parametrize("key", EXERCISES)
def test_solution_passes(key):
    res = run_check(EXERCISES[key], EXERCISES[key].solution)
    assert res.status == PASSED, res.message


@pytest.mark.parametrize("key", EXERCISES)
def test_unsolved_stub_is_not_attempted(key):
    res = run_check(EXERCISES[key], stub)
    assert res.status == NOT_ATTEMPTED, res.message


@pytest.mark.parametrize("key,name", MISTAKES)
def test_each_catalogued_mistake_is_named(key, name):
    ex = EXERCISES[key]
    mistake = next(m for m in ex.mistakes if m.name == name)
    res = run_check(ex, mistake.fn)
    assert res.status == FAILED
    assert res.mistake == name, f"diagnosed as {res.mistake!r}: {res.message}"
    assert name in res.message and mistake.hint in res.message


@pytest.mark.parametrize("key", EXERCISES)
def test_each_exercise_knows_three_distinct_mistakes(key):
    names = [m.name for m in EXERCISES[key].mistakes]
    assert len(names) >= 3, f"{key} catalogues only {len(names)} mistakes"
    assert len(set(names)) == len(names)


def test_every_notebook_has_three_exercises():
    per_notebook = Counter(key.split(".")[0] for key in EXERCISES)
    numbers = sorted(p.name[:2] for p in ROOT.glob("course_source/[0-9][0-9]_*.py") if not p.name.startswith("00"))
    assert sorted(per_notebook) == numbers
    assert all(n >= 3 for n in per_notebook.values()), per_notebook


@pytest.mark.parametrize("key", EXERCISES)
def test_every_exercise_is_checked_in_its_notebook_source(key):
    (source,) = ROOT.glob(f"course_source/{key.split('.')[0]}_*.py")
    assert re.search(rf"check\(\s*[\"']{re.escape(key)}[\"']", source.read_text()), f"{source.name} never checks {key}"


def test_wrong_answer_that_matches_no_mistake_gets_a_generic_reason():
    ex = get_exercise("02.1")

    def garbage(*args, **kwargs):
        out = ex.solution(*args, **kwargs)
        return tuple(o * 0 + 7 for o in out) if isinstance(out, tuple) else out * 0 + 7

    res = run_check(ex, garbage)
    assert res.status == FAILED and res.mistake is None
    assert "matches none of the common mistakes" in res.message


def test_function_that_raises_is_a_failure_not_a_crash():
    def broken(*args, **kwargs):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    res = run_check(get_exercise("01.1"), broken)
    assert res.status == FAILED
    assert "raised RuntimeError: mat1 and mat2 shapes cannot be multiplied" in res.message


def test_not_a_function():
    res = run_check(get_exercise("01.1"), 42)
    assert res.status == FAILED and "expected a function" in res.message


def test_check_prints_records_and_raises(tmp_path, monkeypatch, capsys):
    report = tmp_path / "report.jsonl"
    monkeypatch.setenv(REPORT_ENV, str(report))
    ex = get_exercise("03.1")
    assert check("03.1", ex.solution).status == PASSED
    assert check("03.2", stub).status == NOT_ATTEMPTED
    with pytest.raises(ExerciseFailed, match=re.escape(ex.mistakes[0].name)):
        check("03.1", ex.mistakes[0].fn)
    printed = capsys.readouterr().out
    assert "03.1" in printed and "passed" in printed and "not attempted" in printed
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    assert [r["status"] for r in rows] == [PASSED, NOT_ATTEMPTED, FAILED]
    assert rows[2]["mistake"] == ex.mistakes[0].name


def test_unknown_key_lists_the_known_ones():
    with pytest.raises(KeyError, match="no exercise '9.9'; known exercises: 01.1"):
        get_exercise("9.9")


def test_numbers_compare_infinities_and_nans_as_equal_to_themselves():
    from course_utils.checking import compare_outputs

    inf, nan = float("inf"), float("nan")
    assert compare_outputs(inf, inf, 1e-6, 1e-6) is None
    assert compare_outputs(nan, nan, 1e-6, 1e-6) is None
    assert compare_outputs(inf, 1.0, 1e-6, 1e-6) == "expected 1, got inf"
    assert compare_outputs(1.0, inf, 1e-6, 1e-6) == "expected inf, got 1"
    assert compare_outputs(-inf, inf, 1e-6, 1e-6) == "expected inf, got -inf"
    assert compare_outputs(1.0 + 1e-9, 1.0, 1e-6, 1e-6) is None
