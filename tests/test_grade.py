"""The learner's check command, end to end: each notebook runs in a kernel, the table names each verdict, and
whatever goes wrong (an endless loop, a syntax error, a file that is not a notebook, a folder, a notebook
without exercises) is said plainly, promptly and without losing an earlier report. The report names its
learner and never replaces another learner's; ``--summary`` makes the class table of a folder of reports.

Every run here has no terminal for standard input (the learner's name is then never asked); the one that gives
``--learner`` to a subprocess (``course.py check --learner "Ada Lovelace"``, literally) puts the course's own
reports/learner.txt back as it was."""

import csv
import html
import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import pytest

from course_tools import grade
from course_utils.exercises import get_exercise

ROOT = Path(__file__).resolve().parent.parent


def run_command(cmd, cwd=ROOT, timeout=300, **kwargs) -> subprocess.CompletedProcess:
    """Run a command as a learner would, in the course folder unless told; its output as text, its stdin closed."""
    return subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kwargs
    )


SETUP = "from course_utils.exercises import NotAttempted, check, get_exercise"
SOLVED = 'check("01.1", get_exercise("01.1").solution)'


def notebook(path: Path, *sources: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell("# my work")] + [nbformat.v4.new_code_cell(s) for s in sources]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def check(*args, timeout=300) -> subprocess.CompletedProcess:
    return run_command([sys.executable, "-m", "course_tools.grade", *map(str, args)], timeout=timeout)


def check_here(capsys, *args) -> tuple[int, str, str]:
    """`check ARGS` run in this process (grade.main with argv, no interpreter and torch to start): its exit code
    (argparse's too), standard output and standard error. For refusals, where the literal command is not the
    point; each documented command keeps a test that runs it literally (``check``, ``course.py check``)."""
    try:
        code = grade.main([str(a) for a in args])
    except SystemExit as stop:
        code = stop.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def rows_in(report: Path) -> list[dict]:
    """The rows of a report, after checking that it is one."""
    from course_tools.grade import read_report

    return read_report(report)["exercises"]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One `check FOLDER --json REPORT`, run as a learner types it (its environment without the report variable),
    over a folder that holds a renamed notebook (checked for the exercises its cells check: one passed, one
    failed, one not attempted, one whose check cell meets a syntax error, a cell that raises, a file read beside
    it, a 6 s wait between two verdicts), its backup, its checkpoint and a notebook without exercises. Each line
    of the output comes with the second it arrived: the tests below read this one run."""
    from types import SimpleNamespace

    folder = tmp_path_factory.mktemp("graded") / "work"
    path = notebook(
        folder / "renamed_copy.ipynb",
        SETUP,
        "import os\nassert open('data.txt').read() == 'beside the notebook'\n"
        "assert os.environ['COURSE_EXERCISE_REPORT']",
        SOLVED,
        "raise ValueError('my own bug')",
        "def mine(x:\n    return x",
        'check("02.1", mine)',
        "import time\ntime.sleep(6)",
        'check("01.2", get_exercise("01.2").mistakes[0].fn)',
        'def mine(*a):\n    raise NotAttempted("replace this line")\ncheck("01.3", mine)',
    )
    (folder / "data.txt").write_text("beside the notebook")
    notebook(folder / "backup-renamed_copy-20260102-030405.ipynb", "raise RuntimeError('a backup ran')")
    notebook(folder / ".ipynb_checkpoints" / "renamed_copy-checkpoint.ipynb", "raise RuntimeError('a checkpoint ran')")
    notebook(folder / "scratch.ipynb", "print('no exercises here')")
    out_json = folder.parent / "verdicts.json"
    env = {k: v for k, v in os.environ.items() if k != "COURSE_EXERCISE_REPORT"}
    before = datetime.now(timezone.utc).replace(microsecond=0)
    proc = subprocess.Popen(
        [sys.executable, "-m", "course_tools.grade", str(folder), "--json", str(out_json)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    arrived = []  # (seconds since start, line), read as the lines come
    start = time.monotonic()
    for line in proc.stdout:
        arrived.append((time.monotonic() - start, line.rstrip("\n")))
    proc.wait(timeout=300)
    lines = [line for _, line in arrived]
    return SimpleNamespace(
        path=path,
        folder=folder,
        json=out_json,
        returncode=proc.returncode,
        lines=lines,
        out="\n".join(lines),
        at={line: s for s, line in arrived},
        before=before,
        after=datetime.now(timezone.utc),
    )


def test_grade_reports_passed_failed_and_not_attempted(graded):
    """The kernel runs in the notebook's folder and gets the report variable from check alone (cell 3 asserts
    both); the report names its learner, the course's version, the time (UTC) and what was checked."""
    from importlib import metadata

    from course_tools.grade import learner_problem

    assert graded.returncode == 1, graded.out  # an attempted exercise failed
    report = json.loads(graded.json.read_text())
    rows = {r["key"]: r for r in rows_in(graded.json)}
    assert learner_problem(report["learner"]) is None and f"learner: {report['learner']} (" in graded.out
    assert report["course_version"]["package"] == metadata.version("course_utils")
    if (ROOT / ".git").exists():  # what `git describe` says of this checkout (a commit at least), else nothing
        described = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True
        ).stdout.strip()
        assert report["course_version"]["git"] == described and described
    else:
        assert report["course_version"]["git"] is None
    checked_at = datetime.strptime(report["checked_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    assert graded.before <= checked_at <= graded.after
    assert report["checked"] == [str(graded.folder)]
    assert [(r["notebook"], r["key"], r["status"]) for r in rows.values()] == [
        ("renamed_copy.ipynb", "01.1", "passed"),
        ("renamed_copy.ipynb", "01.2", "failed"),
        ("renamed_copy.ipynb", "01.3", "not attempted"),
        ("renamed_copy.ipynb", "02.1", "not run"),  # in course order, as the class table has them
    ]
    assert rows["01.2"]["mistake"] == get_exercise("01.2").mistakes[0].name
    assert "error in cell 3 " not in graded.out  # the notebook's folder and the report variable, as asserted there
    assert "total:" in graded.out and "1 passed, 1 failed, 1 not attempted, 1 not run" in graded.out


def test_errors_are_said_as_they_happen_with_their_cell_and_without_colour(graded):
    """A cell that raises and a syntax error: each said as it happens, before the notebook's end line, which names
    the first; the check cell that met the syntax error says so in its row."""
    raised = "cell 5 (`raise ValueError('my own bug')`): ValueError: my own bug"
    end = graded.lines.index(next(ln for ln in graded.lines if "renamed_copy.ipynb: finished in" in ln))
    assert graded.lines.index(f"    error in {raised}") < end and f"first error: {raised}" in graded.lines[end]
    (syntax,) = [ln for ln in graded.lines if ln.startswith("    error in cell 6 (`def mine(x:`): SyntaxError:")]
    assert "(line 1 of the cell)" in syntax and graded.lines.index(syntax) < end
    assert "\x1b[" not in graded.out and "an earlier cell" not in graded.out
    row = {r["key"]: r for r in rows_in(graded.json)}["02.1"]
    assert 'its check cell raised an error: cell 7 (`check("02.1", mine)`): NameError' in row["message"]


def test_a_folder_is_expanded_to_its_notebooks_without_backups_or_checkpoints(graded):
    assert "[1/2] renamed_copy.ipynb: running" in graded.out, graded.out
    assert "[2/2] scratch.ipynb" in graded.out and "skipped" in graded.out  # no exercises, but not named
    assert "backup" not in graded.out and "checkpoint" not in graded.out
    assert {r["notebook"] for r in rows_in(graded.json)} == {"renamed_copy.ipynb"}


def test_each_verdict_is_printed_as_soon_as_its_check_cell_has_run(graded):
    """A learner sees each exercise's verdict while the notebook still runs, not minutes later in the table; a 6 s
    cell says nothing meanwhile (one line every 10 s, the default)."""
    mistake = get_exercise("01.2").mistakes[0]
    first = f"    01.1 {get_exercise('01.1').title}: passed"
    second = f"    01.2 {get_exercise('01.2').title}: failed ({mistake.name})"
    assert first in graded.lines and second in graded.lines, graded.out
    end = graded.at[next(ln for ln in graded.lines if "renamed_copy.ipynb: finished in" in ln)]
    assert graded.at[first] < graded.at[second] < end
    assert end - graded.at[first] > 5, "the first verdict was held back until the notebook ended"
    assert graded.lines.index(first) > next(
        i for i, ln in enumerate(graded.lines) if "renamed_copy.ipynb: running" in ln
    )
    assert not [ln for ln in graded.lines if "still running" in ln and "cell 8 (" in ln]  # (the import may pass 10 s)
    table = graded.lines[graded.lines.index(next(ln for ln in graded.lines if ln.startswith("notebook "))) :]
    assert any(ln.startswith("renamed_copy.ipynb") and ln.endswith(f"failed ({mistake.name})") for ln in table)


def test_a_cell_that_raises_makes_the_exit_code_1_though_every_check_passed(
    reports_here, tmp_path, monkeypatch, capsys
):
    passing = _fake_run({"01.1": "passed"})

    def raising(*args, **kwargs):
        run = passing(*args, **kwargs)
        run.first_error = "cell 3 (`raise ValueError('my own bug')`): ValueError: my own bug"
        return run

    monkeypatch.setattr(grade, "run_notebook", raising)
    path = notebook(tmp_path / "boom.ipynb", SETUP, SOLVED)  # (not 01_: its other exercises would be not run)
    code, out, err = check_here(capsys, path, "--learner", "ana", "--json", tmp_path / "v.json")
    assert code == 1, out + err
    assert "first error: cell 3 (`raise ValueError('my own bug')`)" in out
    assert [r["status"] for r in rows_in(tmp_path / "v.json")] == ["passed"]


def test_an_endless_loop_stops_at_the_time_limit_and_names_the_cell(tmp_path):
    # the loop comes first: importing torch may itself take a few seconds on a busy machine
    path = notebook(tmp_path / "01_loop.ipynb", "n = 0\nwhile True:\n    n += 1", SETUP, SOLVED)
    out_json = tmp_path / "verdicts.json"
    # without the limit the loop never ends, and check() fails at its own timeout: no wall-time threshold, which
    # flaked under a load of 19 on two cores (80 s)
    proc = check(path, "--timeout", "2", "--json", out_json, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "01_loop.ipynb: finished in" in proc.stdout
    assert "cell 2 (`n = 0`) ran out of time: still running after 2 s" in proc.stdout
    assert "--timeout SECONDS" in proc.stdout
    row = {r["key"]: r for r in rows_in(out_json)}["01.1"]
    assert row["status"] == "not run" and "cell 2 (`n = 0`) ran out of time" in row["message"]


@pytest.mark.parametrize(
    "source, label",
    [
        ("# NBVAL_IGNORE_OUTPUT\ntrain(model)", "train(model)"),  # was `# NBVAL_IGNORE_OUTPUT` on Ctrl+C
        ("\n  # NBVAL_SKIP\n\n# NBVAL_CHECK_OUTPUT\n    x = 1  # set x\ny = 2", "x = 1  # set x"),
        ("# NBVAL_RAISES_EXCEPTION\n# my own note\nraise ValueError('boom')", "raise ValueError('boom')"),
        ("while True:\n    pass", "while True:"),
        ("# only a comment\n# and another", "# only a comment"),  # nothing else to show
        ("\n  \n", "(empty)"),
        ("x = '" + "a" * 70 + "'", "x = '" + "a" * 52 + "..."),
    ],
)
def test_a_cell_is_labelled_by_its_first_line_of_code_not_an_nbval_marker(source, label):
    """The one label of a cell in an error, a time limit, a "still running" line and an interruption."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# title"), nbformat.v4.new_code_cell(source)])
    assert grade._describe(nb, 1) == f"cell 2 (`{label}`)"


def test_the_rows_are_in_course_order_when_a_check_cell_was_deleted():
    """Before: 03.3's check cell deleted, its 'not run' row came after 03.4's verdict."""
    from course_utils.exercises import all_exercises

    exercises = all_exercises()
    ours = [k for k in exercises if k.startswith("03.")]
    run = grade.NotebookRun(Path("03_masking.ipynb"), keys=[k for k in ours if k != "03.3"])
    run.records = [{"key": k, "title": exercises[k].title, "status": "passed", "mistake": None, "message": ""}
                   for k in run.keys]  # fmt: skip
    rows = grade.rows_for(run, exercises)
    assert [r["key"] for r in rows] == ours and rows[2]["status"] == "not run", rows


def test_a_missing_path_is_one_line_and_exit_2(tmp_path):
    proc = check(tmp_path / "nope.ipynb", timeout=120)  # the command itself, once; the other refusals: the table
    assert (
        proc.returncode == 2
        and proc.stderr.strip() == f"course check: {tmp_path / 'nope.ipynb'}: no such file or folder"
    )


def _contents(t: Path) -> dict:
    """Everything in folder ``t`` as it is: a file's bytes, a link's target, None for a folder."""
    return {
        p.relative_to(t): os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else None
        for p in t.rglob("*")
    }


EXAMPLE = f"give --json a file in a folder you can write to, e.g. --json {Path.home() / 'exercises.json'}"
LINK = "check writes the report only as a plain file, never through a link; " + EXAMPLE
NOT_JSON = "a report is a .json file, and this name ends in"
REFUSALS = [  # (the command's arguments in folder {t}, the last line it prints: one line and exit 2, nothing run)
    # a file that is not a notebook: `check README.md` printed "running ..." and exited 1 where a notebook without
    # exercises exits 2 (a notebook in a folder that does not read is reported as the run reaches it: below)
    ("README.md --learner ana --json {t}/v.json",
     "course check: README.md: not a notebook (a notebook's file name ends in .ipynb); give a notebook or a folder"),
    ("{t}/01_broken.ipynb --learner ana --json {t}/v.json", "course check: {t}/01_broken.ipynb: not a notebook: "
     "invalid JSON (Expecting property name enclosed in double quotes at line 1, column 3)"),
    ("{t}/list.ipynb --learner ana --json {t}/v.json", "course check: {t}/list.ipynb: not a notebook: "
     'JSON without the "cells" and "nbformat" of a notebook (got list)'),
    ("{t}/empty", "{t}/empty: this folder has no notebooks"),
    ("{t}/01_mine.ipynb --timeout -1", "expected a positive number of seconds such as 120, got '-1'"),
    ("{t}/01_mine.ipynb --json {t}", "--json {t}: this is a folder; give a file name such as"),
    # a report that cannot be written there: it used to run every notebook, then end in a traceback
    ("{t}/01_mine.ipynb --json {t}/notes.txt/ex.json", "course check: --json {t}/notes.txt/ex.json: cannot write the "
     "report there: {t}/notes.txt is a file, not a folder; " + EXAMPLE),
    # a --json that is a link was replaced by a plain file (the file it named kept its old contents), and one below
    # a broken folder link passed the early check and failed after every notebook had run
    ("{t}/01_mine.ipynb --json {t}/link.json", "{t}/link.json is a symbolic link; " + LINK),
    ("{t}/01_mine.ipynb --json {t}/gone/r.json", "{t}/gone is a symbolic link to nothing; " + LINK),
    # `--json notebooks/03_masking.ipynb` (read as "the JSON of this notebook") replaced the notebook with the
    # report, and `--json reports/learner.txt` the remembered name
    ("{t}/01_mine.ipynb --learner ana --json {t}/01_mine.ipynb", f"--json {{t}}/01_mine.ipynb: {NOT_JSON} '.ipynb'"),
    ("{t}/01_mine.ipynb --learner ana --json {t}/learner.txt", f"--json {{t}}/learner.txt: {NOT_JSON} '.txt'"),
    ("{t}/01_mine.ipynb --learner ana --json {t}/mine", f"--json {{t}}/mine: {NOT_JSON} 'no suffix'"),
    ("{t}/01_mine.ipynb --learner ana --json {t}/shared.json",
     "course check: --json {t}/shared.json holds the report of bo, not ana: give a file of your own"),
    ("--summary {t}/empty", "course check: --summary {t}/empty: no exercise reports in this folder (each learner's "
     "reports/exercises-NAME.json, from `python3 course.py check --learner NAME`)"),
    ("--summary {t}/old", "--summary {t}/old: no exercise reports in this folder"),
    ("--summary {t}/nope", "no such folder; give the folder you collected the reports in"),
    ("--summary {t}/empty notebooks/", "--summary runs no notebook and writes no report"),
    ("--out {t}/empty", "--out goes with --summary FOLDER"),
]  # fmt: skip


@pytest.mark.parametrize("args, said", REFUSALS, ids=[a for a, _ in REFUSALS])
def test_a_command_check_cannot_carry_out_is_refused_in_one_line_before_anything_runs(
    args, said, tmp_path, monkeypatch, capsys
):
    t = tmp_path
    notebook(t / "01_mine.ipynb", SETUP, SOLVED)
    (t / "01_broken.ipynb").write_text("{ this is not a notebook", encoding="utf-8")
    (t / "list.ipynb").write_text("[1, 2]", encoding="utf-8")
    (t / "notes.txt").write_text("mine")
    (t / "real.json").write_text("orig")
    (t / "link.json").symlink_to(t / "real.json")
    (t / "gone").symlink_to(t / "nowhere")
    (t / "learner.txt").write_text("ana\n")
    (t / "empty").mkdir()
    (t / "old").mkdir()
    (t / "old" / "x.json").write_text("[]")  # a report of the old check, without the learner's name
    write_report(t, "bo", {"01.1": "passed"}, "2026-11-26T09:00:00+00:00", "shared.json")
    before = _contents(t)
    monkeypatch.setattr(grade, "run_notebook", lambda *a, **k: pytest.fail("a notebook ran"))
    monkeypatch.setattr(grade, "REPORTS", t / "reports")
    monkeypatch.setattr(grade, "LEARNER_FILE", t / "reports" / "learner.txt")
    monkeypatch.chdir(ROOT)
    code, out, err = check_here(capsys, *[a.format(t=t) for a in args.split()])
    assert code == 2 and out == "" and "Traceback" not in err, out + err
    assert said.format(t=t) in err.splitlines()[-1], err
    if said.startswith("course check: "):  # the whole line
        assert err.splitlines()[-1] == said.format(t=t), err
    assert _contents(t) == before  # nothing written or replaced: no report, no remembered name, links kept


def test_a_default_report_in_a_folder_that_takes_no_new_file_is_refused_before_any_notebook_runs(
    tmp_path, monkeypatch, capsys
):
    """The default report, reports/exercises-ana.json, of a read-only course: one line and exit 2 before anything
    runs (it used to run every notebook, then end in a traceback)."""
    path = notebook(tmp_path / "01_mine.ipynb", SETUP, SOLVED)
    locked = tmp_path / "read-only-course"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        unwritable = [locked] if not os.access(locked, os.W_OK) else []  # root may write anyway
        unwritable += [Path("/proc")] if sys.platform.startswith("linux") and Path("/proc").is_dir() else []
        for folder in unwritable:
            monkeypatch.setattr(grade, "REPORTS", folder / "reports")
            monkeypatch.setattr(grade, "LEARNER_FILE", folder / "reports" / "learner.txt")
            monkeypatch.setattr(grade, "run_notebook", lambda *a, **k: pytest.fail("a notebook ran"))
            assert grade.main([str(path), "--learner", "ana"]) == 2
            err = capsys.readouterr().err
            assert err.startswith(
                f"course check: the report {folder / 'reports' / 'exercises-ana.json'} (the default "
                f"of --json): cannot write the report there: {folder} does not take new files ("
            ), err
            assert "give --json a file in a folder you can write to" in err
    finally:
        locked.chmod(0o755)
    assert not list(locked.iterdir())  # the probe file is gone


def test_a_notebook_in_a_folder_that_does_not_read_is_reported_as_the_run_reaches_it(tmp_path, monkeypatch, capsys):
    """In a folder (a room's copies), a broken notebook does not stop the others: exit 1, named in the table."""
    monkeypatch.setattr(grade, "REPORTS", tmp_path / "reports")
    monkeypatch.setattr(grade, "LEARNER_FILE", tmp_path / "reports" / "learner.txt")
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "01_broken.ipynb").write_text("{ this is not a notebook", encoding="utf-8")
    code, out, err = check_here(capsys, tmp_path / "class", "--learner", "ana", "--json", tmp_path / "v.json")
    assert code == 1 and "01_broken.ipynb" in out and "not a notebook: invalid JSON (" in out, out + err
    assert "Traceback" not in out + err


def test_a_notebook_without_exercises_fails_and_keeps_the_earlier_report(tmp_path, capsys):
    """In this process (no kernel starts for it); tests/test_course_cli.py runs `course.py check` on one."""
    path = notebook(tmp_path / "renamed.ipynb", "print('hello')")
    out_json = tmp_path / "verdicts.json"
    out_json.write_text('[{"key": "01.1", "status": "passed"}]\n')
    stale = tmp_path / f".verdicts.json.{2**22 + 12345}-abc.tmp"  # left by a killed run (no such pid)
    stale.write_text("half")
    code, out, err = check_here(capsys, path, "--json", out_json)
    assert code == 2, out + err
    assert "renamed.ipynb: no exercises in this notebook" in out
    assert out_json.read_text() == '[{"key": "01.1", "status": "passed"}]\n'
    assert "left as it was" in out
    assert not stale.exists()  # the killed run's temporary is cleaned by the next run


def test_a_long_cell_says_it_is_still_running(tmp_path):
    from course_tools.grade import run_notebook

    path = notebook(tmp_path / "01_wait.ipynb", SETUP, "import time\ntime.sleep(3)", SOLVED)
    said = []
    run = run_notebook(path, progress=said.append, heartbeat=0.5)
    ticks = [s for s in said if s.startswith("    ... cell 3 (`import time`): still running, ")]
    assert len(ticks) >= 3, said  # (the import cell before it may take long enough for a line of its own)
    assert said[-1].startswith("    01.1 ") and said[-1].endswith(": passed")  # after the slow cell, the verdict
    assert [r["status"] for r in run.records] == ["passed"]


def test_ctrl_c_prints_what_finished_shuts_the_kernel_down_and_keeps_the_report(tmp_path):
    """Ctrl+C in the terminal (SIGINT to the whole process group, as a terminal sends it) during
    `course.py check`: the table of the verdicts that finished, marked as interrupted, the kernel shut down, the
    earlier JSON report untouched, exit 130, and no traceback (there were ~20 lines of asyncio's)."""
    import signal

    folder = tmp_path / "work"
    notebook(
        folder / "01_slow.ipynb",
        SETUP,
        SOLVED,
        "import os\nopen('kernel.pid', 'w').write(str(os.getpid()))",
        "import time\ntime.sleep(120)",
        'check("01.2", get_exercise("01.2").solution)',
    )
    notebook(folder / "02_after.ipynb", SETUP, 'check("02.1", get_exercise("02.1").solution)')
    out_json = tmp_path / "verdicts.json"
    out_json.write_text('[{"key": "01.1", "status": "passed"}]\n')
    proc = subprocess.Popen(
        [sys.executable, "course.py", "check", str(folder), "--json", str(out_json)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    lines = []
    try:
        for line in proc.stdout:  # wait for the first verdict, then for the slow cell to start
            lines.append(line.rstrip("\n"))
            if line.startswith("    01.1 "):
                break
        pid_file = folder / "kernel.pid"
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        kernel = int(pid_file.read_text())
        time.sleep(1)
        os.killpg(proc.pid, signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    lines += rest.splitlines()
    text = "\n".join(lines)
    assert proc.returncode == 130, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert "[1/2] 01_slow.ipynb: interrupted (Ctrl+C) while cell 5 (`import time`) ran after " in text
    assert "interrupted (Ctrl+C): the verdicts of what had finished" in text
    table = {ln.split()[1]: ln for ln in lines if ln.startswith("01_slow.ipynb ")}
    assert table["01.1"].endswith("passed")
    assert table["01.2"].endswith("not run: interrupted (Ctrl+C) while cell 5 (`import time`) ran"), table
    assert "total so far (interrupted): 4 exercises, 1 passed, 0 failed, 0 not attempted, 3 not run" in text, text
    assert "not run to the end: 01_slow.ipynb, 02_after.ipynb" in text and "[2/2]" not in text
    assert f"{out_json} is left as it was" in text
    assert out_json.read_text() == '[{"key": "01.1", "status": "passed"}]\n'
    assert get_exercise("01.1").title in table["01.1"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(kernel, 0)  # the kernel runs in a session of its own: only check's shutdown ends it
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        os.kill(kernel, signal.SIGKILL)
        pytest.fail("the kernel was left running")


# ------------------------------------------------------------------------------- the learner and their report


def _fake_run(statuses: dict[str, str]):
    """A stand-in for run_notebook: each key gets the given status at once (no kernel), 01.2's failure named."""
    from course_tools.grade import NotebookRun

    def run(path, timeout=None, has_exercises=None, progress=None, heartbeat=None):
        r = NotebookRun(Path(path), keys=list(statuses), check_cells={k: i for i, k in enumerate(statuses)})
        for key, status in statuses.items():
            mistake = get_exercise(key).mistakes[0].name if status == "failed" else None
            r.records.append(
                {"key": key, "title": get_exercise(key).title, "status": status, "mistake": mistake, "message": ""}
            )
        return r

    return run


@pytest.fixture
def reports_here(tmp_path, monkeypatch):
    """grade.main in this process, with its reports/ and remembered name in tmp_path, run_notebook faked, and no
    terminal to ask on. Returns the reports folder."""
    monkeypatch.setattr(grade, "REPORTS", tmp_path / "reports")
    monkeypatch.setattr(grade, "LEARNER_FILE", tmp_path / "reports" / "learner.txt")
    monkeypatch.setattr(grade, "run_notebook", _fake_run({"01.1": "passed", "01.2": "failed"}))
    monkeypatch.setattr(grade, "_interactive", lambda: False)
    monkeypatch.setattr(grade.getpass, "getuser", lambda: "ci-runner")
    notebook(tmp_path / "work" / "mine.ipynb", SETUP, SOLVED)
    return tmp_path / "reports"


def test_two_learners_get_two_reports_and_a_second_run_replaces_only_ones_own(reports_here, tmp_path, capsys):
    work = str(tmp_path / "work" / "mine.ipynb")
    assert grade.main([work, "--learner", "ana"]) == 1  # 01.2 failed
    out = capsys.readouterr().out
    assert "learner: ana (from --learner, remembered in" in out
    assert f"written: {reports_here / 'exercises-ana.json'} (learner ana" in out and "previous" not in out
    assert (reports_here / "learner.txt").read_text() == "ana\n"
    first_ana = (reports_here / "exercises-ana.json").read_bytes()
    assert grade.main([work, "--learner", "bo"]) == 1
    capsys.readouterr()
    bo = (reports_here / "exercises-bo.json").read_bytes()
    assert (reports_here / "exercises-ana.json").read_bytes() == first_ana  # bo's run left ana's report alone
    assert json.loads(bo)["learner"] == "bo" and (reports_here / "learner.txt").read_text() == "bo\n"
    grade.run_notebook = _fake_run({"01.1": "passed", "01.2": "passed"})  # (monkeypatch restores it)
    assert grade.main([work, "--learner", "ana"]) == 0
    out = capsys.readouterr().out
    previous = reports_here / "exercises-ana.json.previous"
    assert f"your previous report is kept as {previous}" in out
    assert previous.read_bytes() == first_ana
    assert [r["status"] for r in rows_in(reports_here / "exercises-ana.json")] == ["passed", "passed"]
    assert (reports_here / "exercises-bo.json").read_bytes() == bo
    assert sorted(p.name for p in reports_here.iterdir()) == [
        "exercises-ana.json",
        "exercises-ana.json.previous",
        "exercises-bo.json",
        "learner.txt",
    ]
    assert grade.main([work]) == 0  # no --learner: the remembered name, ana
    assert "learner: ana (remembered in" in capsys.readouterr().out


def test_without_a_name_or_a_terminal_the_login_name_is_used_and_said(reports_here, tmp_path, capsys):
    assert grade.main([str(tmp_path / "work" / "mine.ipynb")]) == 1
    out = capsys.readouterr().out
    assert "learner: ci-runner (your login name: no --learner given and no terminal to ask; another: " in out
    assert json.loads((reports_here / "exercises-ci-runner.json").read_text())["learner"] == "ci-runner"
    assert not (reports_here / "learner.txt").exists()  # a guess is not remembered: a terminal run still asks


def test_on_a_terminal_the_name_is_asked_once_and_remembered(reports_here, tmp_path, monkeypatch, capsys):
    answers = iter(["ana\u200bsilva", "\u202eana", "  Ana   Silva "])
    monkeypatch.setattr(grade, "_interactive", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    assert grade.main([str(tmp_path / "work" / "mine.ipynb")]) == 1
    out = capsys.readouterr().out
    assert out.count("try again") == 2 and "U+200B (ZERO WIDTH SPACE)" in out
    assert "U+202E (RIGHT-TO-LEFT OVERRIDE)" in out
    assert "learner: Ana Silva (remembered in" in out
    assert (reports_here / "learner.txt").read_text() == "Ana Silva\n"
    monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail("asked a second time"))
    assert grade.main([str(tmp_path / "work" / "mine.ipynb")]) == 1
    assert json.loads((reports_here / "exercises-Ana-Silva.json").read_text())["learner"] == "Ana Silva"


@pytest.mark.parametrize(
    "name, said",
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("x" * 81, "at most 80 characters, this one has 81"),
        ("ana\u200bsilva", "character 4 is an invisible or control character, U+200B (ZERO WIDTH SPACE)"),
        ("\u202eana", "character 1 is an invisible or control character, U+202E (RIGHT-TO-LEFT OVERRIDE)"),
        ("ana\u200c", "character 4 is an invisible or control character, U+200C (ZERO WIDTH NON-JOINER)"),
        ("ana \u200d bo", "character 5 is an invisible or control character, U+200D (ZERO WIDTH JOINER)"),
        ("\u200dana", "character 1 is an invisible or control character, U+200D (ZERO WIDTH JOINER)"),
        ("ana\x00", "character 4 is an invisible or control character, U+0000"),
    ],
)
def test_a_name_that_is_empty_too_long_or_hides_a_character_is_one_line_and_exit_2(
    reports_here, tmp_path, capsys, name, said
):
    assert grade.main([str(tmp_path / "work" / "mine.ipynb"), f"--learner={name}"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and err.startswith(f"course check: --learner {name!r}: "), err
    assert said in err and 'e.g. --learner "Ana Silva"' in err and captured.out == ""
    assert not reports_here.exists()  # nothing written, not even the remembered name


@pytest.mark.parametrize(
    "typed, shown, file",
    [
        ("Ada Lovelace", "Ada Lovelace", "Ada-Lovelace"),
        ("Jose\u0301 Núñez", "José Núñez", "José-Núñez"),  # decomposed: NFC, one character per letter
        ("  ana   silva ", "ana silva", "ana-silva"),
        ("a/b", "a/b", "a-b"),
        ("../x", "../x", "x"),
        ("-rf", "-rf", "rf"),  # `--learner -Ana` stopped argparse ("expected one argument") before
        ("-Ana", "-Ana", "Ana"),
        ("O'Brien, Seán", "O'Brien, Seán", "O-Brien-Seán"),
        ("李雷", "李雷", "李雷"),
        ("علی\u200cرضا", "علی\u200cرضا", "علی-رضا"),  # Persian: the zero-width non-joiner is part of the spelling
        # (it and the emoji joined by a zero-width joiner below were refused before)
        ("👩\u200d💻 Dev", "👩\u200d💻 Dev", "Dev"),  # one emoji, joined by U+200D
        ("..", "..", "learner-"),  # nothing of it can name a file: the start of its sha256 does
        ("🦊", "🦊", "learner-"),
        ("Maria Fernanda de la Cruz Rodríguez-Hernández y Gómez", None, "Maria-Fernanda-de-la-Cruz-Rodrí-"),
    ],
)
def test_a_name_as_people_write_it_is_kept_as_typed_in_a_safe_file(reports_here, tmp_path, capsys, typed, shown, file):
    shown = shown or typed
    assert grade.main([str(tmp_path / "work" / "mine.ipynb"), "--learner", typed]) == 1  # 01.2 failed
    out = capsys.readouterr().out
    assert f"learner: {shown} (from --learner" in out
    (report,) = reports_here.glob("exercises-*.json")
    assert report.parent == reports_here and report.name.startswith(f"exercises-{file}")
    assert len(report.name) <= len("exercises-.json") + grade.MAX_FILE_NAME
    assert report.stem == f"exercises-{grade.learner_file_name(shown)}"
    assert json.loads(report.read_text(encoding="utf-8"))["learner"] == shown
    assert (reports_here / "learner.txt").read_text(encoding="utf-8") == shown + "\n"
    assert f"written: {report} (learner {shown}," in out
    table = tmp_path / "table"
    assert grade.main(["--summary", str(reports_here), "--out", str(table)]) == 0
    page = (table / "class-summary.html").read_text(encoding="utf-8")
    assert f'<th scope="row" title="{html.escape(shown)}">{html.escape(shown)}</th>' in page


def test_two_names_with_one_file_form_do_not_replace_each_other(reports_here, tmp_path, capsys):
    work = str(tmp_path / "work" / "mine.ipynb")
    for first, second in (("Ana Silva", "Ana-Silva"), ("../x", "x"), ("🦄 Uni", "Uni")):
        assert grade.main([work, "--learner", first]) == 1
        (mine,) = reports_here.glob("exercises-*.json")
        before = mine.read_bytes()
        capsys.readouterr()
        assert grade.main([work, f"--learner={second}"]) == 1  # 01.2 failed: a report all the same
        captured = capsys.readouterr()
        digest = grade.hashlib.sha256(second.encode()).hexdigest()[:8]
        theirs = reports_here / f"exercises-{grade.learner_file_name(second)}-{digest}.json"
        assert f"written: {theirs} (learner {second}," in captured.out and "--json" not in captured.err
        assert mine.read_bytes() == before and json.loads(theirs.read_text())["learner"] == second
        assert grade.main([work, f"--learner={second}"]) == 1  # again: the same file, theirs kept as previous
        assert f"written: {theirs} (learner {second}," in capsys.readouterr().out
        assert (reports_here / (theirs.name + ".previous")).is_file() and mine.read_bytes() == before
        for p in reports_here.glob("exercises-*"):
            p.unlink()


def test_check_in_the_course_gives_a_second_name_of_one_form_a_file_of_its_own(tmp_path, monkeypatch, capsys):
    """`check --learner "Zq Ana Silva"` then `--learner "Zq-Ana-Silva"` into the course's own reports/ (the
    default; restored after): the second was refused with a message about --json, a flag never given. Run in this
    process with the notebook run stood in (the literal command is the tests on names above and on Ctrl+C)."""
    monkeypatch.setattr(grade, "run_notebook", _fake_run({"01.1": "passed"}))
    monkeypatch.setattr(grade, "_interactive", lambda: False)
    path = notebook(tmp_path / "mine.ipynb", SETUP, SOLVED)
    reports = ROOT / "reports"
    assert grade.REPORTS == reports  # the course's own folder, as the command writes it
    remembered = reports / "learner.txt"
    before = remembered.read_bytes() if remembered.is_file() else None
    made = reports.exists()
    try:
        procs = [check_here(capsys, path, "--learner", name) for name in ("Zq Ana Silva", "Zq-Ana-Silva")]
        files = sorted(reports.glob("exercises-Zq-Ana-Silva*.json"))
        learners = [json.loads(f.read_text(encoding="utf-8"))["learner"] for f in files]
    finally:
        for f in reports.glob("exercises-Zq-Ana-Silva*"):
            f.unlink()
        if before is None:
            remembered.unlink(missing_ok=True)
        else:
            remembered.write_bytes(before)
        if not made and not any(reports.iterdir()):
            reports.rmdir()
    for code, out, err in procs:
        assert code == 0, out + err
        assert "--json" not in out + err
    digest = __import__("hashlib").sha256(b"Zq-Ana-Silva").hexdigest()[:8]
    assert [f.name for f in files] == ["exercises-Zq-Ana-Silva-" + digest + ".json", "exercises-Zq-Ana-Silva.json"]
    assert learners == ["Zq-Ana-Silva", "Zq Ana Silva"]


def test_a_report_written_meanwhile_by_another_check_is_not_replaced(reports_here, tmp_path, monkeypatch, capsys):
    """Two checks at once ("Bo Li", then "Bo-Li" 4 s later): both found exercises-Bo-Li.json free before their
    notebooks ran; the one that ends second asks again when it writes, and takes a file of its own."""
    work = str(tmp_path / "work" / "mine.ipynb")
    fake = _fake_run({"01.1": "passed"})

    def meanwhile(report):  # Bo Li's check writes ``report`` while Bo-Li's notebooks run
        def run(*args, **kwargs):
            write_report(report.parent, "Bo Li", {"01.1": "failed"}, "2026-11-26T09:00:00+00:00", report.name)
            return fake(*args, **kwargs)

        return run

    monkeypatch.setattr(grade, "run_notebook", meanwhile(reports_here / "exercises-Bo-Li.json"))
    assert grade.main([work, "--learner", "Bo-Li"]) == 0
    out = capsys.readouterr().out
    digest = grade.hashlib.sha256(b"Bo-Li").hexdigest()[:8]
    assert f"written: {reports_here / f'exercises-Bo-Li-{digest}.json'} (learner Bo-Li," in out
    assert json.loads((reports_here / "exercises-Bo-Li.json").read_text())["learner"] == "Bo Li"
    assert not (reports_here / "exercises-Bo-Li.json.previous").exists()
    shared = tmp_path / "shared.json"  # --json names one file: refused, the other learner's report kept
    monkeypatch.setattr(grade, "run_notebook", meanwhile(shared))
    assert grade.main([work, "--learner", "Bo-Li", "--json", str(shared)]) == 2
    err = capsys.readouterr().err
    assert f"course check: {shared} became the report of Bo Li while the notebooks ran; yours is not written" in err
    assert json.loads(shared.read_text())["learner"] == "Bo Li"


def test_check_takes_a_name_with_a_space_from_the_command_line(tmp_path):
    """`python3 course.py check --learner "Ada Lovelace"`, literally, as the issue tried it (refused before). The
    other names given as a separate argument are run in this process: the test of names as people write them."""
    path = notebook(tmp_path / "mine.ipynb", SETUP, SOLVED)
    report = tmp_path / "m.json"
    remembered = ROOT / "reports" / "learner.txt"  # --learner remembers the name: the course's own file is restored
    before = remembered.read_bytes() if remembered.is_file() else None
    try:
        proc = run_command([sys.executable, "course.py", "check", path, "--learner", "Ada Lovelace", "--json", report])
    finally:
        if before is None:
            remembered.unlink(missing_ok=True)
        else:
            remembered.write_bytes(before)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "learner: Ada Lovelace (from --learner" in proc.stdout
    assert f"written: {report} (learner Ada Lovelace," in proc.stdout
    assert json.loads(report.read_text(encoding="utf-8"))["learner"] == "Ada Lovelace"


# ---------------------------------------------------------------------------------------- the class summary


def write_report(folder: Path, learner: str, statuses: dict[str, str], when: str, name: str | None = None) -> Path:
    from course_tools.grade import make_report

    rows = [
        {
            "notebook": f"{key[:2]}_x.ipynb",
            "key": key,
            "title": get_exercise(key).title,
            "status": status,
            "mistake": get_exercise(key).mistakes[0].name if status == "failed" else None,
            "message": "",
        }
        for key, status in statuses.items()
    ]
    report = make_report(learner, [Path("/home") / learner / "notebooks"], rows, now=datetime.fromisoformat(when))
    path = folder / (name or f"exercises-{learner}.json")
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report), encoding="utf-8")
    return path


def csv_rows(path: Path) -> list[list[str]]:
    """A table check wrote, read as a spreadsheet reads it (UTF-8 with a byte order mark)."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.reader(f))


def test_summary_makes_one_class_table_as_csv_and_html(tmp_path, capsys):
    room = tmp_path / "usb" / "class"
    write_report(room, "bo", {"01.1": "passed", "01.2": "failed", "03.1": "not attempted"}, "2026-11-26T09:00:00+00:00")
    write_report(room, "ana", {"01.2": "passed", "01.1": "not run", "10.1": "failed"}, "2026-11-26T09:05:00+00:00")
    assert grade.main(["--summary", str(room)]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "2 learners, 4 exercises, from 2 reports in" in captured.out
    table = csv_rows(room / "class-summary.csv")
    mistake = {k: get_exercise(k).mistakes[0].name for k in ("01.2", "10.1")}
    assert table[0] == ["learner", "checked at (UTC)", "course version", "passed", "01.1", "01.2", "03.1", "10.1"]
    assert table[1][0:2] == ["ana", "2026-11-26T09:05:00Z"] and table[1][3:] == [
        "1 of 3",  # passed, of the exercises in their report,
        "not run",
        "passed",
        "not checked",
        f"failed ({mistake['10.1']})",
    ]
    assert table[2][0] == "bo" and table[2][3:] == [
        "1 of 3",
        "passed",
        f"failed ({mistake['01.2']})",
        "not attempted",
        "not checked",
    ]
    assert len(table) == 3
    page = (room / "class-summary.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page
    assert "http://" not in page and "https://" not in page and "<script" not in page and "<link" not in page
    assert 'data-learner="ana"' in page and "prefers-color-scheme: dark" in page
    assert sorted(p.name for p in room.iterdir() if not p.name.startswith("exercises-")) == [
        ".class-summary-files",
        "class-mistakes.csv",
        "class-summary.csv",
        "class-summary.html",
    ]


def test_summary_skips_what_is_not_a_report_and_takes_a_learners_newest(tmp_path, capsys):
    """Each skipped file is said: a link to nothing or a folder named like a report was skipped without a word, so
    the instructor did not learn that a learner's report was missing."""
    room = tmp_path / "class"
    write_report(room, "ana", {"01.1": "failed"}, "2026-11-26T09:00:00+00:00", name="ana-morning.json")
    write_report(room, "Ana", {"01.1": "passed"}, "2026-11-26T11:00:00+00:00", name="exercises-Ana.json")
    write_report(room, "bo", {"01.1": "passed"}, "2026-11-26T10:00:00+00:00")
    (room / "old.json").write_text('[{"key": "01.1", "status": "passed"}]')  # a report of the old check
    (room / "notes.json").write_text('{"mine": 1}')
    (room / "broken.json").write_text("{ half")
    (room / "binary.json").write_bytes(b"\xff\xfe\x00")
    (room / "bad-row.json").write_text(
        json.dumps({**json.loads((room / "exercises-bo.json").read_text()), "exercises": [{"key": "x"}]})
    )
    (room / "photo.jpg").write_bytes(b"\xff\xd8")  # not *.json: not looked at
    (room / "exercises-cy.json").symlink_to(room / "gone.json")
    (room / "exercises-di.json").mkdir()
    (room / "loop.json").symlink_to(room / "loop.json")
    assert grade.main(["--summary", str(room), "--out", str(tmp_path / "table")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "course check: skipped bad-row.json: exercise 1 of its list is not a row with a key such as 01.1 and a "
        "known status",
        "course check: skipped binary.json: not UTF-8 text",
        "course check: skipped broken.json: not JSON (Expecting property name enclosed in double quotes at line 1)",
        "course check: skipped exercises-cy.json: a link to nothing",
        "course check: skipped exercises-di.json: not a file",
        "course check: skipped loop.json: a link to nothing",
        'course check: skipped notes.json: not an exercise report (no "kind": "attention course exercise report")',
        "course check: skipped old.json: a report of an older `check`, without the learner's name: ask them to "
        "run `python3 course.py check --learner NAME` again",
        "course check: Ana has 2 reports: took exercises-Ana.json (checked at 2026-11-26T11:00:00Z), the newest; "
        "skipped ana-morning.json (checked at 2026-11-26T09:00:00Z)",
    ]
    text = (tmp_path / "table" / "class-summary.csv").read_text(encoding="utf-8-sig").splitlines()
    assert [line.split(",")[0] for line in text] == ["learner", "Ana", "bo"]
    assert text[1].endswith(",passed") and not (room / "class-summary.csv").exists()


def test_summary_escapes_what_a_report_says(tmp_path, capsys):
    """A report is a file a learner sent: its mistake names and titles are text, never markup or a formula."""
    path = write_report(tmp_path, "ana", {"01.1": "failed"}, "2026-11-26T09:00:00+00:00")
    data = json.loads(path.read_text())
    data["exercises"][0].update(mistake='=HYPERLINK("x")<script>alert(1)</script>', title="<b>t</b>")
    path.write_text(json.dumps(data))
    other = write_report(tmp_path, "<i>bo</i>", {"01.1": "passed"}, "2026-11-26T09:00:00+00:00", "bo.json")
    data = json.loads(other.read_text())
    data["course_version"] = {"package": '=HYPERLINK("http://x")', "git": None}  # the version column is text too
    other.write_text(json.dumps(data))  # (another version: set apart, listed below the grid)
    assert grade.main(["--summary", str(tmp_path)]) == 0
    page = (tmp_path / "class-summary.html").read_text()
    assert "<i>" not in page and "&lt;i&gt;bo&lt;/i&gt;" in page and "=HYPERLINK(&quot;http://x&quot;)" in page
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<b>t</b>" not in page
    csv_text = (tmp_path / "class-summary.csv").read_text(encoding="utf-8-sig")
    assert 'failed (=HYPERLINK(""x"")' in csv_text  # inside "failed (...)": a spreadsheet shows it as text
    assert ',"\'=HYPERLINK(""http://x"")",' in csv_text and ',"=HYPERLINK' not in csv_text


def _bo_and_friends(room: Path) -> None:
    """Four learners: 01.2's first mistake made by three, its second by one, 03.1's first by two, a failure
    no mistake names by one; bo's notebooks edited (git's -dirty)."""
    second = get_exercise("01.2").mistakes[1].name
    write_report(room, "ana", {"01.2": "failed", "03.1": "failed"}, "2026-11-26T09:00:00+00:00")
    write_report(room, "bo", {"01.2": "failed", "03.1": "failed"}, "2026-11-26T09:01:00+00:00")
    write_report(room, "cy", {"01.2": "failed", "03.1": "passed", "01.1": "failed"}, "2026-11-26T09:02:00+00:00")
    write_report(room, "di", {"01.2": "failed", "03.1": "not run"}, "2026-11-26T09:03:00+00:00")
    for name, change in (("di", ("01.2", second)), ("cy", ("01.1", None))):
        path = room / f"exercises-{name}.json"
        data = json.loads(path.read_text())
        for row in data["exercises"]:
            if row["key"] == change[0]:
                row["mistake"] = change[1]
        if name == "cy":
            data["course_version"] = {"package": data["course_version"]["package"], "git": "v0.9.1-3-gabc1234-dirty"}
        path.write_text(json.dumps(data))


def test_summary_says_what_to_reteach_most_learners_first_in_the_html_and_a_csv(tmp_path, capsys):
    """Issue 29 item 5: per exercise, how many learners made each named mistake, sorted."""
    _bo_and_friends(tmp_path)
    assert grade.main(["--summary", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"written: {tmp_path / 'class-mistakes.csv'}" in out
    m12, m31 = get_exercise("01.2").mistakes, get_exercise("03.1").mistakes
    table = csv_rows(tmp_path / "class-mistakes.csv")
    assert table[0] == ["learners", "of who checked it", "exercise", "title", "mistake", "who", "hint"]
    assert [row[:3] + row[4:6] for row in table[1:]] == [
        ["3", "4", "01.2", m12[0].name, "ana; bo; cy"],
        ["2", "4", "03.1", m31[0].name, "ana; bo"],
        ["1", "4", "01.2", m12[1].name, "di"],
        ["1", "1", "01.1", grade.UNNAMED, "cy"],  # unnamed failures after the named mistakes; only cy checked 01.1
    ]
    assert table[1][6] == m12[0].hint and table[4][6] == grade.UNNAMED_HINT
    page = (tmp_path / "class-summary.html").read_text(encoding="utf-8")
    reteach = page[page.index('id="reteach"') :]
    assert reteach.index(m12[0].name) < reteach.index(m31[0].name) < reteach.index(grade.UNNAMED)
    assert f'data-key="01.2" data-mistake="{html.escape(m12[0].name)}" data-learners="3"' in reteach


def test_the_table_shows_the_package_version_not_gits_dirty_suffix(tmp_path, capsys):
    """Issue 29 item 4: every learner's edited notebooks make `git describe --dirty` end in -dirty."""
    _bo_and_friends(tmp_path)
    assert grade.main(["--summary", str(tmp_path)]) == 0
    capsys.readouterr()
    rows = {row[0]: row for row in csv_rows(tmp_path / "class-summary.csv")}
    version = grade.this_version()
    assert rows["cy"][2] == version and "dirty" not in (tmp_path / "class-summary.csv").read_text()
    page = (tmp_path / "class-summary.html").read_text(encoding="utf-8")
    assert f'<td class="meta" title="{version}, git v0.9.1-3-gabc1234-dirty">{version}</td>' in page  # git's on hover


def test_a_rerun_of_summary_keeps_an_edited_table_aside_byte_for_byte(tmp_path, capsys):
    """Issue 29 item 6: an instructor added a column to the CSV; `check --summary` again keeps it, as the site
    keeps a page changed since it wrote it. Tried as a command, literally."""
    _bo_and_friends(tmp_path)
    run = [sys.executable, "course.py", "check", "--summary", str(tmp_path)]
    first = run_command(run)
    assert first.returncode == 0 and "kept:" not in first.stdout, first.stdout + first.stderr
    code, out, _ = check_here(capsys, "--summary", tmp_path)  # the reruns in this process: the same main
    assert code == 0 and "kept:" not in out  # unchanged files: nothing to keep
    assert not list(tmp_path.glob("backup-*"))
    table = tmp_path / "class-summary.csv"
    edited = b"".join(
        line.rstrip(b"\r\n") + (b",notes\r\n" if n == 0 else b",talk to them\r\n")
        for n, line in enumerate(table.read_bytes().splitlines(keepends=True))
    )
    table.write_bytes(edited)
    code, out, err = check_here(capsys, "--summary", tmp_path)
    assert code == 0, out + err
    (kept,) = tmp_path.glob("backup-class-summary-*.csv")
    assert kept.read_bytes() == edited
    kept_line = [line for line in out.splitlines() if line.startswith("kept: ")]
    assert kept_line == [f"kept: class-summary.csv was changed since the class table was written: kept as {kept.name}"]
    assert b"talk to them" not in table.read_bytes() and table.read_bytes().startswith(b"\xef\xbb\xbflearner,")
    (tmp_path / "class-summary.html").unlink()  # a file deleted is written again, with nothing to keep
    assert grade.main(["--summary", str(tmp_path)]) == 0
    assert "kept:" not in capsys.readouterr().out and len(list(tmp_path.glob("backup-*"))) == 1


def test_a_summary_over_tables_it_did_not_write_keeps_them(tmp_path, capsys):
    """A class-summary.csv made by hand, or by a check of before the ledger, is kept aside, not replaced."""
    _bo_and_friends(tmp_path)
    (tmp_path / "class-summary.csv").write_bytes(b"my own table\n")
    assert grade.main(["--summary", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    (kept,) = tmp_path.glob("backup-class-summary-*.csv")
    assert kept.read_bytes() == b"my own table\n" and f"kept as {kept.name}" in out


def test_the_grid_groups_the_exercises_by_notebook_one_cell_each(tmp_path, capsys):
    """Issue 29 item 4, read from the HTML (tests/e2e/test_e2e_class_report.py measures it in Chromium): one
    heading per notebook over its own exercises, one cell per learner and exercise, its verdict as a class and
    its exercise and mistake in the cell's title (the tooltip)."""
    _bo_and_friends(tmp_path)
    assert grade.main(["--summary", str(tmp_path)]) == 0
    capsys.readouterr()
    page = (tmp_path / "class-summary.html").read_text(encoding="utf-8")
    groups = re.findall(r'<th scope="colgroup" colspan="(\d+)" class="notebook first" title="[^"]*">(\d\d)</th>', page)
    assert groups == [("2", "01"), ("1", "03")]  # 01.1 and 01.2 under 01, 03.1 under 03
    cells = re.findall(r'<td class="v ([a-z-]+)(?: first)?" data-key="([\d.]+)" data-verdict="\1"', page)
    assert len(cells) == 4 * 3  # four learners, three exercises
    mistake = html.escape(get_exercise("01.2").mistakes[0].name)
    title = f'title="ana, 01.2 {html.escape(get_exercise("01.2").title)}: failed: {mistake}"'
    assert title in page
    assert page.count('<td class="v not-checked') == 3  # ana, bo and di have no 01.1


@pytest.mark.parametrize("out", ["notebooks", "course_utils/exercises", ".", ".venv"])
def test_summary_refuses_to_write_the_class_table_into_the_courses_sources(tmp_path, monkeypatch, capsys, out):
    """`course.py check --summary CLASS --out notebooks`, literally: the table names every learner, and
    `course.py package --learner` zips notebooks/ and course_utils/ for learners (as site and room refuse). The
    other folders are refused by the same code, run in this process from the course folder."""
    write_report(tmp_path / "class", "ana", {"01.1": "passed"}, "2026-11-26T09:00:00+00:00")
    where = (ROOT / out).resolve()
    before = sorted(p.name for p in where.iterdir())
    if out == "notebooks":
        run = [sys.executable, "course.py", "check", "--summary", str(tmp_path / "class"), "--out", out]
        proc = run_command(run)
        code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    else:
        monkeypatch.chdir(ROOT)
        code, stdout, stderr = check_here(capsys, "--summary", tmp_path / "class", "--out", out)
    assert code == 2, stdout + stderr
    (said,) = [line for line in stderr.splitlines() if line.startswith("course check:")]
    what = "holds the course folder" if out == "." else f"is inside {out.split('/')[0]}/, a folder of the course"
    assert said.startswith(f"course check: --out {out}: {where} {what}") and "outside the course" in said
    assert "--force" not in said  # check has no such flag
    assert sorted(p.name for p in where.iterdir()) == before


def test_summary_elsewhere_in_the_course_is_written_with_a_warning(tmp_path, monkeypatch, capsys):
    write_report(tmp_path / "class", "ana", {"01.1": "passed"}, "2026-11-26T09:00:00+00:00")
    monkeypatch.setattr(grade, "ROOT", tmp_path)  # a course folder of its own, so the course's is left alone
    assert grade.main(["--summary", str(tmp_path / "class")]) == 0
    err = capsys.readouterr().err
    assert f"course check: warning: {tmp_path / 'class'} is inside the course folder {tmp_path}" in err
    assert "names every learner" in err and (tmp_path / "class" / "class-summary.html").is_file()


def test_reports_of_another_course_version_are_said_and_set_apart(tmp_path, capsys):
    """`check --summary CLASS` (in this process: the command itself is run by the tests on a rerun and on --out)
    over a report of course version 0.0.3 (its exercise numbers
    meant other exercises): said on the terminal, out of the grid and the counts, listed apart in the table."""
    version = grade.this_version()
    write_report(tmp_path, "ana", {"01.1": "passed", "01.2": "failed"}, "2026-11-26T09:00:00+00:00")
    old = write_report(tmp_path, "old bo", {"01.2": "failed", "03.1": "failed"}, "2026-11-26T09:01:00+00:00")
    data = json.loads(old.read_text())
    data["course_version"] = {"package": "0.0.3", "git": None}
    data["exercises"].append({**data["exercises"][0], "key": "12.7", "title": "gone"})  # a key this course lacks
    old.write_text(json.dumps(data))
    code, out, err = check_here(capsys, "--summary", tmp_path, "--out", tmp_path / "t")
    assert code == 0, out + err
    assert (
        f"course check: set apart {old.name} (old bo): course version 0.0.3, not {version} as this course; "
        "its exercise numbers may name other exercises, so it is not in the grid or the counts"
    ) in err
    assert f"1 learner, 2 exercises, from 1 report in {tmp_path} (course version {version}); 1 report of " in out
    table = csv_rows(tmp_path / "t" / "class-summary.csv")
    assert table[0][4:] == ["01.1", "01.2"] and table[1][0] == "ana" and table[2] == []
    assert table[-1] == ["old bo", "2026-11-26T09:01:00Z", "0.0.3", old.name]
    mistakes = csv_rows(tmp_path / "t" / "class-mistakes.csv")[1:]
    assert [(m[0], m[2], m[5]) for m in mistakes] == [("1", "01.2", "ana")]
    page = (tmp_path / "t" / "class-summary.html").read_text(encoding="utf-8")
    grid = page[page.index('id="class-summary"') : page.index("</table>")]
    assert "old bo" not in grid and "12.7" not in grid and 'data-key="03.1"' not in grid
    apart = page[page.index('id="apart"') :]
    assert '<tr data-learner="old bo"><th scope="row">old bo</th><td>0.0.3</td>' in apart


def test_a_report_saved_with_a_byte_order_mark_is_read(tmp_path, capsys):
    """`check --summary CLASS` over a report an instructor opened and saved in Windows Notepad (UTF-8 with a
    BOM): it was skipped as "not JSON". (In this process: the command itself is run by the tests around it.)"""
    path = write_report(tmp_path, "José", {"01.1": "passed"}, "2026-11-26T09:00:00+00:00")
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    code, out, err = check_here(capsys, "--summary", tmp_path, "--out", tmp_path / "t")
    assert code == 0 and "skipped" not in err, out + err
    assert f"1 learner, 1 exercise, from 1 report in {tmp_path}" in out
    page = (tmp_path / "t" / "class-summary.html").read_text(encoding="utf-8")
    assert '<tr data-learner="José">' in page


def test_reteach_counts_over_who_checked_it_and_puts_unnamed_failures_last(tmp_path, capsys):
    """`check --summary CLASS` (in this process): "N of M" counts the learners whose report has the exercise
    (it counted the whole class), a learner's "passed" the exercises in their report (it counted every column),
    and failures no known mistake names come after the named mistakes (they ranked first, with no hint)."""
    for n in range(4):  # four learners fail 01.1 with no named mistake; two of them reached 10.1, one failed it
        path = write_report(tmp_path, f"l{n}", {"01.1": "failed", "01.2": "passed"}, "2026-11-26T09:00:00+00:00")
        data = json.loads(path.read_text())
        data["exercises"][0]["mistake"] = None
        if n < 2:
            data["exercises"].append({**data["exercises"][1], "key": "10.1", "status": "failed" if n else "passed"})
            data["exercises"][-1]["mistake"] = get_exercise("10.1").mistakes[0].name if n else None
        path.write_text(json.dumps(data))
    code, out, err = check_here(capsys, "--summary", tmp_path, "--out", tmp_path / "t")
    assert code == 0, out + err
    page = (tmp_path / "t" / "class-summary.html").read_text(encoding="utf-8")
    reteach = re.findall(r'<tr data-key="([^"]+)" data-mistake="([^"]+)".*?<td class="count"[^>]*>([^<]*)</td>', page)
    assert reteach == [
        ("10.1", html.escape(get_exercise("10.1").mistakes[0].name), "1 of 2 who checked it"),
        ("01.1", html.escape(grade.UNNAMED), "4 of 4 who checked it"),
    ]
    assert 'title="10.1: 1 of the 2 who checked it passed">1</td>' in page
    passed = dict(re.findall(r'<tr data-learner="(l\d)">.*?<td class="meta"[^>]*>([^<]*)</td>', page))
    assert passed == {"l0": "2/3", "l1": "1/3", "l2": "1/2", "l3": "1/2"}  # of the exercises in their report
