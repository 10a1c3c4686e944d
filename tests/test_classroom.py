"""Checking exercises with nbval (`pytest --nbval-lax`), as the README, the guide and notebook 00 say, and the
classroom workflow (docs/classroom/exercises.yml) that runs the same command on each learner's push (issue #29)."""

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / "docs" / "classroom" / "exercises.yml"
NBVAL_LAX = ".venv/bin/python -m pytest --nbval-lax notebooks/"  # the one command, as every document gives it
WRONG = "    scores = keys @ query\n    return scores @ values"  # 01.1 without the softmax: raw scores as weights
RIGHT = "    return torch.softmax(q @ k.T, dim=-1) @ v"  # 01.2, as a learner writes it
STUB = '    # YOUR CODE HERE\n    raise NotAttempted("replace this line with your code")'


def steps() -> list[dict]:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"]["nbval"]["steps"]


@pytest.mark.parametrize(
    "where",
    ["README.md", "docs/INSTRUCTOR_GUIDE.md", "docs/classroom/README.md", "course_source/00_setup_check.py"],
)
def test_the_nbval_command_is_documented_where_learners_and_instructors_look(where):
    assert NBVAL_LAX in (ROOT / where).read_text(encoding="utf-8"), f"{where} does not give `{NBVAL_LAX}`"


def test_the_workflow_installs_the_course_and_nbval_at_the_pinned_versions_and_runs_the_documented_command():
    runs = [s["run"] for s in steps() if "run" in s]
    install = next(r for r in runs if "pip install" in r).splitlines()
    assert install == ["python3 course.py env", ".venv/bin/python -m pip install -c lock/author.txt nbval pytest"]
    author_lock = (ROOT / "lock" / "author.txt").read_text(encoding="utf-8")
    assert "\nnbval==" in author_lock and "\npytest==" in author_lock  # the constraint pins both
    check = next(r for r in runs if "--nbval-lax" in r).splitlines()
    assert check == ["set -o pipefail", f"{NBVAL_LAX} 2>&1 | tee nbval.log"]
    assert yaml.safe_load(WORKFLOW.read_text())[True] == {"push": None, "workflow_dispatch": None}  # `on:` (YAML 1.1)


def test_nbval_lax_passes_a_right_and_an_unattempted_exercise_and_fails_a_wrong_one_naming_its_mistake(tmp_path):
    """The workflow's two check steps, run literally in a course folder whose notebook 01 has 01.1 wrong (raw
    scores, no softmax), 01.2 right and 01.3, 01.4 not attempted: one failure, 01.1's cell, with the mistake named,
    and the run's summary lists 01.1 alone. The folder also holds the backup `course.py reset` keeps of a notebook
    (its wrong answers too): the documented command and the workflow used to run it, so CI kept failing; the
    conftest.py every course copy ships leaves it out."""
    from course_utils.exercises import check

    course = tmp_path / "course"
    (course / "notebooks").mkdir(parents=True)
    for name in ("conftest.py", "pyproject.toml"):  # pytest's settings in a course folder
        (course / name).write_bytes((ROOT / name).read_bytes())
    (course / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    nb = nbformat.read(ROOT / "notebooks" / "01_dot_product_toy.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    cells = {
        key: i for i, c in enumerate(code) for key in ("01.1", "01.2", "01.3", "01.4") if f'check("{key}"' in c.source
    }
    assert all(STUB in code[i].source for i in cells.values())  # the learner copy: nothing attempted
    code[cells["01.1"]].source = code[cells["01.1"]].source.replace(STUB, WRONG)
    code[cells["01.2"]].source = code[cells["01.2"]].source.replace(STUB, RIGHT)
    nbformat.write(nb, course / "notebooks" / "01_dot_product_toy.ipynb")
    nbformat.write(nb, course / "notebooks" / "backup-01_dot_product_toy-20260101-090000.ipynb")

    import torch

    def attention_many(q, k, v):
        return torch.softmax(q @ k.T, dim=-1) @ v

    check("01.2", attention_many)  # the right answer is right (check raises when it is not)

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COURSE_RUNS_DIR"))}
    run_step = next(s for s in steps() if "--nbval-lax" in s.get("run", ""))
    proc = subprocess.run(
        ["bash", "-e", "-c", run_step["run"]], cwd=course, env=env, capture_output=True, text=True, timeout=600
    )
    log = (course / "nbval.log").read_text(encoding="utf-8")
    assert proc.returncode == 1, log
    assert f"FAILED notebooks/01_dot_product_toy.ipynb::Cell {cells['01.1']}" in log, log
    assert "1 failed, " in log and "This looks like: raw scores, no softmax" in log, log  # the others passed
    assert "backup-" not in log, log  # the backup was not collected

    summary = tmp_path / "summary.md"
    report = next(s for s in steps() if "GITHUB_STEP_SUMMARY" in s.get("run", ""))
    assert report["if"] == "failure()"
    proc = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", report["run"]],
        cwd=course,
        env={**env, "GITHUB_STEP_SUMMARY": str(summary)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = summary.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "### Exercises that failed" and len(lines) == 2, lines
    assert "Exercise 01.1 (a soft lookup for one query): failed. This looks like: raw scores, no softmax" in lines[1]


def test_the_course_gitignore_keeps_resets_backups_out_of_a_learners_commits():
    """The learner zip ships this .gitignore: a classroom repository made from it never commits a backup."""
    proc = subprocess.run(
        ["git", "check-ignore", "-q", "--no-index", "notebooks/backup-01_dot_product_toy-20260101-090000.ipynb"],
        cwd=ROOT,
    )
    assert proc.returncode == 0
    from course_tools._output import COMMON

    assert ".gitignore" in COMMON and "conftest.py" in COMMON  # both go into the learner zip
