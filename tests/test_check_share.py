"""tools/check_share.py: the share of function-body lines that check arguments (issue #20's measure)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "check_share.py"
_spec = importlib.util.spec_from_file_location("check_share", SCRIPT)
check_share = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_share)  # defines functions; measures nothing

SNIPPET = textwrap.dedent(
    '''
    """A module docstring: not in any function."""


    def idea(x, n):
        """A docstring, however long,
        is not a body line."""
        # a comment line is not one either

        check_int("n", n)  # a check call as a statement: 1
        y = check_tensor("x", x)  # a check call as an assignment's value: 1
        if n > 3:  # an if whose body only checks: 2
            raise ValueError(f"n must be at most 3, got {n}")
        out = y * n  # the idea: 1
        return out  # 1


    def _check_pair(a, b):
        """A _check_* function counts whole (its body, not its docstring)."""
        total = a + b
        return total


    def provoke(a):
        try:  # a try that only provokes an error, and an except that turns it into the caller's: 4
            broadcast_shapes(a, a)
        except RuntimeError:
            raise ValueError("a does not broadcast") from None
        try:  # clean up and pass the failure on: no check, 5
            z = a.item()
        except BaseException:
            cleanup()
            raise
        if z:  # an if that does more than check is the idea; the raise inside it is a check: 1 of 3
            z += 1
            raise ValueError("no")
        return check_int("z", z)  # a returned check: 1
    '''
)


def _write(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / name
    path.write_text(source, encoding="utf-8")
    return path


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)


def test_a_known_snippet_counts_checks_against_body_lines():
    body, checks, per_function = check_share.measure(SNIPPET)
    assert per_function == [("idea", 6, 4), ("_check_pair", 2, 2), ("provoke", 13, 6)]
    assert (body, checks) == (21, 12)


def test_a_check_inside_the_idea_or_a_bare_reraise_is_measured_as_the_docstring_says():
    source = textwrap.dedent(
        """
        def f(p):
            return kernel(check_partial("p", p))

        def g(p):
            layer = Linear(4, 4, bias=check_bool("bias", p))
            assert p is not None
            raise
        """
    )
    _, _, per_function = check_share.measure(source)
    # the returned kernel call is the idea; a check anywhere in an assignment's value counts; a bare raise does not
    assert per_function == [("f", 1, 0), ("g", 3, 2)]


def test_help_prints_the_usage_and_what_counts_and_measures_nothing():
    proc = _run("--help")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith("usage: check_share.py")
    assert "What counts" in proc.stdout and "--max" in proc.stdout
    assert "share" in proc.stdout and "course_utils/" not in proc.stdout  # no table of modules


@pytest.mark.parametrize("limit, code", [("0.60", 0), ("0.40", 1)])
def test_max_exits_1_on_a_module_above_it_and_0_below(tmp_path, limit, code):
    half = _write(tmp_path, "half.py", "def f(n):\n    check_int('n', n)\n    return n\n")  # 1 of 2: 50%
    light = _write(tmp_path, "light.py", "def g(n):\n    m = n + 1\n    return m\n")  # 0%
    proc = _run("--max", limit, str(half), str(light))
    assert proc.returncode == code, proc.stdout + proc.stderr
    rows = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines()[1:]}
    assert rows[str(half)] == ["2", "1", "50%"] + (["over"] if code else [])
    assert rows[str(light)] == ["2", "0", "0%"] and rows["all"] == ["4", "1", "25%"]
    assert (f"above 40%: {half}" in proc.stderr) is bool(code) and str(light) not in proc.stderr


def test_functions_lists_the_functions_whose_checks_outweigh_the_idea(tmp_path):
    path = _write(tmp_path, "m.py", SNIPPET)
    lines = _run("--functions", str(path)).stdout.splitlines()
    listed = [line.split()[0] for line in lines if line.startswith("    ")]
    assert listed == ["idea"]  # 4 of 6; provoke is 6 of 13, and a _check_* function is a check by name


def test_the_guides_say_how_to_run_it():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    for text in (readme, contributing):
        assert "python3 tools/check_share.py" in text and "20%" in text
    for module in check_share.LEARNER_MODULES:
        assert (ROOT / "course_utils" / f"{module}.py").is_file()
        assert f"`{module}`" in readme, f"the README's list of the modules a learner reads lacks {module}"


@pytest.mark.parametrize("name", check_share.LEARNER_MODULES)
def test_each_module_a_learner_reads_spends_at_most_a_fifth_of_its_lines_on_checks(name):
    """Issue #20's goal, held: checks at the door (one call into _validate), the idea in the room."""
    body, checks, _ = check_share.measure((ROOT / "course_utils" / f"{name}.py").read_text(encoding="utf-8"))
    assert body > 0 and checks > 0  # the module was read, and its boundary checks were seen
    assert checks / body <= check_share.GOAL, f"{name}: {checks} of {body} function-body lines check arguments"


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda d: d / "missing.py", "cannot read .*missing.py: No such file"),
        (lambda d: d, "cannot read .*: Is a directory"),
        (lambda d: (d / "bad.py").write_text("def f(:\n") and d / "bad.py", r"bad.py is not Python .*\(line 1\)"),
    ],
    ids=["missing", "folder", "syntax"],
)
def test_a_file_it_cannot_read_is_one_line_and_exit_2(tmp_path, make, words):
    done = _run(str(make(tmp_path)))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert re.search(words, done.stderr.strip().splitlines()[-1]), done.stderr


@pytest.mark.parametrize("share", ["20", "-1"])
def test_max_outside_0_to_1_is_refused_it_could_never_fail(share):
    done = _run("--max", share)
    assert done.returncode == 2 and "--max is a share between 0 and 1" in done.stderr, done.stderr
