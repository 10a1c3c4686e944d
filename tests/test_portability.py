"""Printed results are the same on every CPU, and `course.py test` proves it under PyTorch's other CPU kernels.

PyTorch picks vectorised kernels for the CPU it runs on (AVX-512, AVX2, NEON, or portable C++), and sums come
out with different last bits under each. nbval compares a notebook's printed outputs character by character,
so a printed float32 difference such as ``1.2e-07`` or a tensor of row sums (``1.0000`` or ``1.``) fails on
another learner's machine. These tests catch the patterns fast; `course.py test` runs the learner notebooks
under the forced kernels (``ATEN_CPU_CAPABILITY``) to catch the rest.
"""

from __future__ import annotations

import ast
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from course_command import load_course

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p for d in ("notebooks", "solutions") for p in (ROOT / d).glob("[0-9][0-9]_*.ipynb"))

# A number in scientific notation with a negative exponent (1.2e-07, 4e-07, 1e-06), or a zero in scientific
# notation (0.0e+00): what a printed rounding error looks like. A tolerance stated as a power of ten the way
# one writes it ("agree to 1e-6", "below 1e-14") is not noise (TOLERANCE).
SCI_NOISE = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?e(?:-\d+|[-+]0+\b)")
TOLERANCE = re.compile(r"1e-[1-9]\d*")
# A value within rounding of zero printed at tensor precision: -0.0000 on one CPU is 0.0000 on another.
NEGATIVE_ZERO = re.compile(r"(?<![\d.])-0\.0+(?![\d.]*[1-9])")
# Stated constants, not results: the machine epsilon ("eps = 1.2e-07") and a parameter's value ("top_p=1e-06").
ALLOWED_BEFORE = ("eps = ", "=")


def compared_text(cell) -> str:
    """What nbval compares for a code cell (its stream text and plain-text results); '' if it ignores it."""
    if any(marker in cell.source for marker in ("NBVAL_IGNORE_OUTPUT", "NBVAL_SKIP")):
        return ""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif "data" in out:
            parts.append(out.data.get("text/plain", ""))
    return "".join(parts)


def float_noise(text: str) -> list[str]:
    """Every printed rounding error or negative zero in ``text``, each with the start of its line."""
    found = []
    for pattern in (SCI_NOISE, NEGATIVE_ZERO):
        for m in pattern.finditer(text):
            before = text[: m.start()]
            if pattern is SCI_NOISE and (before.endswith(ALLOWED_BEFORE) or TOLERANCE.fullmatch(m.group())):
                continue
            line_start = before.rfind("\n") + 1
            found.append(text[line_start : m.end()])
    return found


@pytest.mark.parametrize(
    ("text", "noise"),
    [
        ("chunk_size= 1: out (1, 2, 50, 8), max abs diff 1.2e-07", True),
        ("     MHA: same tokens True, max logit diff 5e-07", True),
        ("identity projections, max abs diff: 0.0e+00", True),
        ("largest difference: 9.5e-07", True),
        ("float64: max abs diff 4e-15", True),
        ("tensor([ 0.1036, -0.0000,  0.2421])", True),
        # stated tolerances, constants and real values
        ("repeat_interleave vs enable_gqa, agree to 1e-6: True", False),
        ("ours vs torch, float32: all below 1e-6:  True (eps = 1.2e-07)", False),
        ("ours vs torch, float64: all below 1e-14: True (eps = 2.2e-16)", False),
        ("top_p=1e-06 : keeps tokens [1]", False),
        ("torch.finfo(torch.float32).max = 3.403e+38", False),
        ("fill = -3.403e+38", False),
        ("tensor([-0.0996,  0.1481, -0.1346]) and -0.05", False),
        ("row sums: tensor([1., 1., 1.])", False),
    ],
)
def test_the_noise_patterns_are_recognised(text, noise):
    assert bool(float_noise(text)) is noise, float_noise(text)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_no_compared_output_prints_float_noise(path):
    """Differences are printed against a stated tolerance ("agree to 1e-6: True"), never as their digits."""
    nb = nbformat.read(path, as_version=4)
    bad = []
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    for number, cell in enumerate(code_cells):  # numbered as nbval numbers them: "Cell 8"
        bad += [f"Cell {number}: {hit}" for hit in float_noise(compared_text(cell))]
    assert not bad, (
        f"{path.name} prints rounding errors that differ between CPUs; print a comparison "
        f"against a tolerance instead (course_source/AUTHORING.md):\n" + "\n".join(bad)
    )


def test_notebooks_exist():
    assert len(NOTEBOOKS) >= 18, [p.name for p in NOTEBOOKS]


def _loads_the_corpus(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", "")) == "load_corpus"
        for n in ast.walk(node)
    )


def test_a_cell_that_may_download_the_corpus_is_not_compared_and_does_nothing_else():
    """On a fresh clone `load_corpus()` downloads and logs; later runs print nothing. nbval must see the same
    either way, so that cell's output is ignored, and it holds only the loading, so the facts about the
    corpus are printed (and compared) by another cell."""
    found = 0
    for path in NOTEBOOKS:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "code" or "load_corpus(" not in cell.source:
                continue
            tree = ast.parse(cell.source)
            loading = [s for s in tree.body if _loads_the_corpus(s)]
            if not loading or (isinstance(loading[0], ast.ImportFrom)):
                continue
            found += 1
            assert "NBVAL_IGNORE_OUTPUT" in cell.source, f"{path.name}: {cell.source!r}"
            assert all(_loads_the_corpus(s) or isinstance(s, (ast.Import, ast.ImportFrom)) for s in tree.body), (
                f"{path.name}: the cell that loads the corpus also does other work, whose output nbval "
                f"would not compare: {cell.source!r}"
            )
    assert found >= 4, "notebooks 10 and 11 (learner copies and solutions) load the corpus"


# --------------------------------------------------------------------------------------------------
# course.py test runs the learner notebooks under the forced CPU kernels
# --------------------------------------------------------------------------------------------------

AVX512_MACHINE = {None: "AVX512", "default": "DEFAULT", "avx2": "AVX2"}


def forced_passes(steps):
    return {s.env.get("ATEN_CPU_CAPABILITY"): s for s in steps if "ATEN_CPU_CAPABILITY" in s.env}


def test_plan_runs_each_notebook_folder_once_under_nbval_the_learner_copies_and_the_solutions_each_forced():
    course = load_course()
    steps, notices = course.test_plan([], AVX512_MACHINE)
    assert notices == []
    unit = next(s for s in steps if "--ignore=tests/e2e" in s.args)
    # every notebook runs once under nbval: the learner copies under one forced kernel, the solutions the other
    assert "tests" in unit.args and not {"notebooks", "solutions", "--nbval"} & set(unit.args), unit.args
    assert "nbval" not in unit.title
    browser = [s for s in steps if "tests/e2e" in s.args and "--ignore=tests/e2e" not in s.args]
    assert len(browser) == 1  # the browser tests run once, alone
    forced = forced_passes(steps)
    assert {k: s.args[2] for k, s in forced.items()} == {"default": "notebooks", "avx2": "solutions"}
    for kernel, step in forced.items():
        assert step.args[:2] == ["-m", "pytest"] and "--dist" in step.args and "loadfile" in step.args
        assert "--nbval" in step.args and "--nbval-lax" not in step.args  # strict: any difference fails
        assert step.ok == (0, 5) and kernel in step.title
    assert "learner notebooks" in forced["default"].title and "solutions" in forced["avx2"].title
    assert forced["default"].group == forced["avx2"].group != unit.group  # the two run side by side
    assert forced["default"].env.get("MKL_CBWR") == "COMPATIBLE"  # matrix products off Intel's fast path too


@pytest.mark.parametrize(
    "capability, forced, natively",
    [
        # a CPU without avx2: the default kernels are its own, so no forced pass; both folders natively
        ({None: "DEFAULT", "default": "DEFAULT", "avx2": "DEFAULT"}, {}, ("notebooks", "solutions")),
        # an AVX2 CPU: one forced pass (default) takes the learner copies; the solutions run natively
        ({None: "AVX2", "default": "DEFAULT", "avx2": "AVX2"}, {"default": "notebooks"}, ("solutions",)),
    ],
)
def test_plan_runs_natively_each_notebook_folder_no_forced_pass_takes(capability, forced, natively):
    course = load_course()
    steps, notices = course.test_plan([], capability)
    assert {k: s.args[2] for k, s in forced_passes(steps).items()} == forced
    unit = next(s for s in steps if "--ignore=tests/e2e" in s.args)
    assert set(natively) <= set(unit.args) and "--nbval" in unit.args
    assert {"notebooks", "solutions"} - set(natively) - set(forced.values()) == set()
    assert ("learner copies" in unit.title) == (natively == ("notebooks", "solutions"))
    if not forced:
        assert len(notices) == 2, notices
        assert any("avx2" in n and "does not have them" in n for n in notices)
        assert any("default" in n and "native run" in n for n in notices)


def test_plan_runs_the_learner_copies_under_every_forced_kernel_in_a_learner_build(tmp_path, monkeypatch):
    """A learner's zip has notebooks/ but no solutions/: its notebooks run under each forced kernel."""
    course = load_course()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "tests").mkdir()
    monkeypatch.setattr(course, "ROOT", tmp_path)
    steps, _ = course.test_plan([], AVX512_MACHINE)
    assert {k: s.args[2] for k, s in forced_passes(steps).items()} == {"default": "notebooks", "avx2": "notebooks"}
    assert "--nbval" not in next(s for s in steps if "--ignore=tests/e2e" in s.args).args


def test_plan_runs_the_unit_tests_and_the_seed_sweep_with_one_pytorch_thread_unless_told(monkeypatch):
    """Side by side on a loaded 2-core machine, PyTorch's default thread per core spins waiting for the others."""
    course = load_course()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    steps, _ = course.test_plan([], AVX512_MACHINE)
    unit = next(s for s in steps if "--ignore=tests/e2e" in s.args)
    sweep = next(s for s in steps if "tests/test_exercise_domains.py" in s.args)
    assert unit.env.get("OMP_NUM_THREADS") == sweep.env.get("OMP_NUM_THREADS") == "1"
    assert sweep.env["COURSE_SEED_SWEEP"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the caller's own setting is kept (inherited, not overridden)
    steps, _ = course.test_plan([], AVX512_MACHINE)
    assert not any("OMP_NUM_THREADS" in s.env for s in steps)


def test_plan_passes_extra_pytest_options_to_every_pytest_step():
    course = load_course()
    steps, _ = course.test_plan(["-k", "03_masking"], AVX512_MACHINE)
    pytest_steps = [s for s in steps if "pytest" in s.args]
    assert len(pytest_steps) == 5 and all(s.args[-2:] == ["-k", "03_masking"] for s in pytest_steps)


def test_plan_leaves_out_avx2_with_a_notice_where_the_cpu_lacks_it():
    course = load_course()
    steps, notices = course.test_plan([], {None: "AVX2", "default": "DEFAULT", "avx2": "AVX2"})
    assert set(forced_passes(steps)) == {"default"}
    assert len(notices) == 1 and "avx2" in notices[0] and "native run" in notices[0]
    steps, notices = course.test_plan([], {None: "", "default": "", "avx2": ""})  # PyTorch could not be asked
    assert set(forced_passes(steps)) == {"default", "avx2"}  # never left out silently: run them anyway
    assert len(notices) == 2 and all("could not ask PyTorch" in n and "anyway" in n for n in notices)


def cpu_flags() -> set[str] | None:
    """The CPU's feature flags on x86 Linux (from /proc/cpuinfo); None elsewhere."""
    cpuinfo = Path("/proc/cpuinfo")
    if platform.machine() not in ("x86_64", "AMD64") or not cpuinfo.exists():
        return None
    found = re.search(r"^flags\s*:(.*)$", cpuinfo.read_text(), re.M)
    return set(found.group(1).split()) if found else None


def test_dry_run_on_this_machine_lists_every_pass_the_cpu_can_run():
    """`course.py test --plan` asks PyTorch which kernels it really gets; on x86 Linux the answer must agree
    with the CPU's own flags: the portable pass always, the AVX2 pass exactly where the CPU has AVX2 and
    its native kernels are wider (AVX-512)."""
    proc = subprocess.run(
        [sys.executable, "course.py", "test", "--plan"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    # the venv's python, pasted from the course folder (before: `python`, the shell's, which has no nbval or torch)
    (py,) = set(re.findall(r"ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE (\S+) -m pytest notebooks --nbval", out))
    assert (ROOT / py).resolve() == (ROOT / ".venv" / "bin" / "python").resolve() or Path(py).is_absolute(), py
    assert (ROOT / py).is_file() and f"{py} -m ruff check" in out, out
    lint = next(line.split(": ", 1)[1] for line in out.splitlines() if f"{py} -m ruff check" in line)
    pasted = subprocess.run(lint, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=300)  # as printed
    assert pasted.returncode == 0, pasted.stdout + pasted.stderr
    avx2_pass = f"ATEN_CPU_CAPABILITY=avx2 {py} -m pytest solutions --nbval" in out
    if not avx2_pass:
        assert "the avx2 CPU kernels" in out, out  # the one-line notice that says why
    flags = cpu_flags()
    if flags is not None:
        assert avx2_pass == ("avx2" in flags and "avx512f" in flags), out
        assert ("does not have them" in out) == ("avx2" not in flags), out


def test_ci_runs_the_readme_test_command():
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "python3 course.py test" in lines


def _step(course, title, code, group, ok=(0,)):
    return course.Step(title, ["-c", code], group=group, ok=ok)


def meet(mine: Path, theirs: Path) -> str:
    """A step's code that leaves ``mine`` and waits (at most 60 s) for ``theirs``: two such steps both end only
    when they run side by side, whatever the machine's load (no timing threshold)."""
    return (
        f"import pathlib, sys, time; pathlib.Path({str(mine)!r}).touch(); t = time.monotonic()\n"
        f"while not pathlib.Path({str(theirs)!r}).exists():\n"
        "    time.sleep(0.05)\n"
        "    if time.monotonic() - t > 60: sys.exit('alone')\n"
        "print('me' + 't')"
    )


def test_steps_of_one_group_run_at_the_same_time_and_a_failure_fails_the_run(monkeypatch, capsys, tmp_path):
    course = load_course()
    monkeypatch.setattr(course, "PY", Path(sys.executable))
    a, b = tmp_path / "a", tmp_path / "b"
    rc = course.run_steps([_step(course, "first", meet(a, b), 1), _step(course, "second", meet(b, a), 1)])
    out = capsys.readouterr().out
    assert rc == 0 and out.count("met") == 2, out  # one after the other, the first would wait for the second alone
    assert "wall time and CPU time per step" in out and "ok in" in out and "CPU-s in all" in out

    rc = course.run_steps(
        [
            _step(course, "passes", "pass", 1),
            _step(course, "fails", "import sys; sys.exit(3)", 1),
            _step(course, "never runs", "print('group 2' + ' ran')", 2),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 3 and "FAILED (exit code 3) in" in out and "group 2 ran" not in out
    # `course.py test -k something` can select no notebook for the forced passes: pytest says 5, not 0
    assert course.run_steps([_step(course, "nothing selected", "import sys; sys.exit(5)", 1, ok=(0, 5))]) == 0
    assert course.run_steps([_step(course, "nothing selected", "import sys; sys.exit(5)", 1)]) == 5


def test_each_steps_cpu_seconds_count_the_processes_it_started(monkeypatch):
    """The CPU column of `course.py test`: a step's own work and its children's (pytest's workers and their kernels),
    not its wall time (a step that sleeps uses almost none)."""
    course = load_course()
    monkeypatch.setattr(course, "PY", Path(sys.executable))
    burn = "sum(range(4 * 10**7))"  # about a CPU-second, however loaded the machine
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}], check=True)"
    steps = [_step(course, "sleeps", "import time; time.sleep(1)", 2), _step(course, "its child works", child, 2)]
    (_, _, slept, idle), (_, rc, _, busy) = course.run_together(steps)
    assert rc == 0 and slept >= 1
    if not hasattr(os, "wait4"):  # Windows: not known, and said so
        assert idle is None and busy is None
        return
    assert idle < 0.5 < busy, (idle, busy)
