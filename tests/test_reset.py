"""Resetting an exercise or a notebook: the clean learner cells come back, the learner's other work stays,
and the learner's previous file is kept beside it."""

import re
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import nbformat
import pytest
from course_command import installed_env, run_command

from course_tools import reset
from course_tools.build import STUB
from course_tools.reset import clean_copy, course_notebooks, exercise_cells, reset_exercise, reset_notebook

ROOT = Path(__file__).resolve().parent.parent
NAME = "03_masking.ipynb"
NOW = datetime(2026, 1, 2, 3, 4, 5)


def learner_work(tmp_path) -> tuple[Path, dict[str, int]]:
    """A learner's notebook: two exercises attempted, a note of their own added at the top."""
    path = tmp_path / NAME
    shutil.copy(ROOT / "notebooks" / NAME, path)
    nb = nbformat.read(path, as_version=4)
    cells = exercise_cells(nb)
    for key in ("03.1", "03.2"):
        i = cells[key][-1]
        nb.cells[i].source = nb.cells[i].source.replace(STUB, f"return 'my {key}'")
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("my own notes"))
    nbformat.write(nb, path)
    return path, {k: v[-1] + 1 for k, v in cells.items()}  # +1: the inserted note


def test_every_notebook_has_a_clean_copy_with_its_exercises():
    from course_utils.exercises import all_exercises

    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        keys = {k for k in all_exercises() if k.startswith(path.name[:2] + ".")}
        assert set(exercise_cells(clean_copy(path.name))) == keys, path.name


def test_reset_one_exercise_keeps_everything_else(tmp_path):
    path, where = learner_work(tmp_path)
    before = path.read_text(encoding="utf-8")
    backup = reset_exercise(path, "03.2", now=NOW, folder=tmp_path)
    assert backup == tmp_path / "backup-03_masking-20260102-030405.ipynb"
    assert backup.read_text(encoding="utf-8") == before  # the learner's file, untouched
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[0].source == "my own notes"
    assert "return 'my 03.1'" in nb.cells[where["03.1"]].source  # the other attempt is kept
    reset_cell = nb.cells[where["03.2"]]
    assert STUB in reset_cell.source and "my 03.2" not in reset_cell.source
    assert reset_cell.outputs == [] and reset_cell.execution_count is None
    clean = clean_copy(NAME)
    assert reset_cell.source == clean.cells[exercise_cells(clean)["03.2"][-1]].source
    assert len(nb.cells) == len(clean.cells) + 1


def test_reset_whole_notebook_keeps_a_backup(tmp_path):
    path, _ = learner_work(tmp_path)
    before = path.read_text(encoding="utf-8")
    backup = reset_notebook(path, now=NOW, folder=tmp_path)
    assert backup.read_text(encoding="utf-8") == before
    nb = nbformat.read(path, as_version=4)
    assert [c.source for c in nb.cells] == [c.source for c in clean_copy(NAME).cells]
    assert reset_notebook(path, now=NOW, folder=tmp_path) is None  # already clean: nothing written, no backup
    assert len(list(tmp_path.glob("backup-*"))) == 1
    path.write_text(before, encoding="utf-8")
    assert (
        reset_notebook(path, now=NOW, folder=tmp_path).name == "backup-03_masking-20260102-030405-2.ipynb"
    )  # never overwrites


def test_reset_command(tmp_path, monkeypatch, capsys):
    path, where = learner_work(tmp_path)
    monkeypatch.setattr(reset, "LEARNER_DIR", tmp_path)  # the learner's notebooks/ folder, here a copy
    assert reset.main([str(path), "--exercise", "03.1"]) == 0
    assert "your previous file is kept as" in capsys.readouterr().out
    nb = nbformat.read(path, as_version=4)
    assert "my 03.1" not in nb.cells[where["03.1"]].source and "my 03.2" in nb.cells[where["03.2"]].source
    assert len(list(tmp_path.glob("backup-03_masking-*.ipynb"))) == 1


def test_reset_refuses_an_instructors_solution_and_leaves_it_unchanged():
    solution = ROOT / "solutions" / NAME
    before = solution.read_bytes()
    proc = run_command([sys.executable, "course.py", "reset", f"solutions/{NAME}"])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        "cannot reset: solutions/03_masking.ipynb is not in notebooks/; solutions/ holds the instructor's "
        "complete notebooks, which reset never changes" in proc.stderr
    )
    assert "03_masking.ipynb" in proc.stderr.split("(", 1)[1]  # names what it accepts
    assert solution.read_bytes() == before
    assert not list(solution.parent.glob("backup-*"))


# What reset refuses, given a learner's 03_masking.ipynb in a folder that is not notebooks/ (learner_work): (the call,
# given that path; the exception; what its message must say). Nothing is written, nothing is backed up.
RESET_REFUSED = [
    (lambda path: reset_exercise(path, "04.1", folder=path.parent), KeyError,
     "03_masking.ipynb has no exercise 04.1; its exercises are: 03.1"),
    (lambda path: reset_notebook(path), ValueError,
     r"03_masking.ipynb is not in notebooks/\. reset puts back only the course's own notebooks in notebooks/ "
     r"\(00_setup_check.ipynb, "),
    (lambda path: reset_exercise(path, "03.1"), ValueError, "is not in notebooks/"),
    *[(lambda path, name=name: reset_notebook(path.parent / name, folder=path.parent), ValueError, what)
      for name, what in (("backup-03_masking-20260102-030405.ipynb", "is a backup, which reset never changes"),
                         ("my_notes.ipynb", "is not a notebook of the course"),
                         ("03_masking.py", "is not a notebook of the course"))],
]  # fmt: skip


@pytest.mark.parametrize("call, error, said", RESET_REFUSED)
def test_what_reset_refuses_is_said_and_nothing_is_written(call, error, said, tmp_path):
    path, _ = learner_work(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(error, match=said):
        call(path)
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert "03_masking.ipynb" in course_notebooks() and "00_setup_check.ipynb" in course_notebooks()


def test_reset_cleans_a_killed_runs_temporary_and_writes_atomically(tmp_path):
    path, _ = learner_work(tmp_path)
    stale = tmp_path / f".{NAME}.{2**22 + 12345}-abc.tmp"  # left by a reset that was killed (no such pid)
    stale.write_text("half a notebook")
    reset_notebook(path, now=NOW, folder=tmp_path)
    assert not stale.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["03_masking.ipynb", "backup-03_masking-20260102-030405.ipynb"]


def test_reset_of_one_exercise_in_a_broken_file_says_to_reset_the_whole_notebook(tmp_path):
    path = tmp_path / NAME
    path.write_text("{ half a notebook", encoding="utf-8")
    with pytest.raises(
        ValueError,
        match=r"03_masking.ipynb cannot be read as a notebook \(.*\); reset the whole "
        r"notebook instead",
    ):
        reset_exercise(path, "03.1", folder=tmp_path)
    assert path.read_text(encoding="utf-8") == "{ half a notebook"
    backup = reset_notebook(path, now=NOW, folder=tmp_path)  # the whole notebook: the broken file is kept
    assert backup.read_text(encoding="utf-8") == "{ half a notebook"
    assert [c.source for c in nbformat.read(path, as_version=4).cells] == [c.source for c in clean_copy(NAME).cells]


def test_the_commands_reset_prints_paste_back_whole_with_spaces_in_the_path(tmp_path):
    """A hint names `python3 course.py reset PATH` for the learner to paste: a path with spaces (and letters
    beyond ASCII) is quoted, so the shell hands it back as one argument."""
    import shlex

    folder = tmp_path / "c 12 ü" / "notebooks"
    folder.mkdir(parents=True)
    path = folder / NAME
    path.write_text("{ half a notebook", encoding="utf-8")
    with pytest.raises(ValueError) as broken:
        reset_exercise(path, "03.1", folder=folder)
    with pytest.raises(FileNotFoundError) as missing:
        reset_exercise(folder / "00_setup_check.ipynb", "00.1", folder=folder)
    for error in (broken.value, missing.value):
        hint = str(error).rsplit(": ", 1)[1]
        assert shlex.split(hint)[:3] == ["python3", "course.py", "reset"], hint
        assert [Path(a) for a in shlex.split(hint)[3:]] in ([path], [folder / "00_setup_check.ipynb"]), hint


def test_a_notebook_that_is_a_symbolic_link_is_refused_as_one(tmp_path):
    """A link in notebooks/ to a file outside it, or to another of the course's notebooks: refused, and the
    message says it is a link (it said "is not in notebooks/"); neither the link nor what it points to changes."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    outside, _ = learner_work(tmp_path)  # tmp_path/03_masking.ipynb, a learner's work outside notebooks/
    inside = folder / "04_multi_head_attention.ipynb"
    inside.write_text("the learner's notebook 04", encoding="utf-8")
    before = outside.read_bytes()
    for link, target in ((folder / NAME, outside), (folder / "05_other.ipynb", inside)):
        link.symlink_to(target)
        shown = re.escape(str(target))
        with pytest.raises(
            ValueError,
            match=rf"{link.name} is a symbolic link \(to {shown}\); reset refuses links "
            r"so that it never writes outside .* remove the link",
        ):
            reset_notebook(link, folder=folder)
        with pytest.raises(ValueError, match="is a symbolic link"):
            reset_exercise(link, "03.1", folder=folder)
        assert link.is_symlink()
    assert outside.read_bytes() == before and inside.read_text(encoding="utf-8") == "the learner's notebook 04"
    assert not list(tmp_path.rglob("backup-*"))


def test_reset_exercise_run_twice_writes_no_backup_the_second_time(tmp_path):
    """`reset --exercise` used to keep a backup even when nothing changed (the exercise was already clean): run
    literally, twice; the second run says so, writes nothing, and the file's bytes stay as they were."""
    path, _ = learner_work(tmp_path)
    course = tmp_path / "course"  # a learner's copy of the course: its clean copies in .course/clean/
    for name in ("lock", "course_utils", "course_tools"):
        shutil.copytree(ROOT / name, course / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("course.py", "pyproject.toml"):
        shutil.copy(ROOT / name, course / name)
    (course / ".course" / "clean").mkdir(parents=True)
    (course / ".course" / "clean" / NAME).write_text(nbformat.writes(clean_copy(NAME)), encoding="utf-8")
    notebooks = course / "notebooks"
    notebooks.mkdir()
    mine = notebooks / NAME
    mine.write_bytes(path.read_bytes())
    env = installed_env()
    runs = []
    for _ in range(2):
        runs.append(
            run_command(
                [sys.executable, str(ROOT / "course.py"), "reset", f"notebooks/{NAME}", "--exercise", "03.1"],
                cwd=course,
                env=env,
            )
        )
        if len(runs) == 1:
            after_first = mine.read_bytes()
    assert all(r.returncode == 0 for r in runs), [r.stdout + r.stderr for r in runs]
    assert "your previous file is kept as" in runs[0].stdout
    said = [line for line in runs[1].stdout.splitlines() if not line.startswith("[course]")]
    assert said == [
        f"exercise 03.1 in notebooks/{NAME} already is the clean learner copy: nothing written, no backup made."
    ]
    assert mine.read_bytes() == after_first and len(list(notebooks.glob("backup-*"))) == 1


def test_reset_exercise_of_an_untouched_notebook_writes_nothing_where_nothing_says_how_it_shipped(
    tmp_path, monkeypatch
):
    """A copy without git or .course/shipped.json (GitHub's "Download ZIP"): the exercise's cells read as the clean
    ones, only their outputs differ, so no backup is made and the file stays as it was."""
    monkeypatch.setattr(reset, "shipped_digest", lambda name: None)
    mine = tmp_path / NAME
    shutil.copy(ROOT / "notebooks" / NAME, mine)
    before = mine.read_bytes()
    assert reset.reset_exercise(mine, "03.2", NOW, folder=tmp_path) is None
    assert mine.read_bytes() == before and not list(tmp_path.glob("backup-*"))
    (tmp_path / "worked").mkdir()
    path, _ = learner_work(tmp_path / "worked")  # an attempted exercise is still reset, with a backup
    assert reset.reset_exercise(path, "03.2", NOW, folder=path.parent) is not None


def test_reset_of_the_notebook_as_committed_writes_nothing_run_literally():
    """`python3 course.py reset notebooks/01_dot_product_toy.ipynb` on the notebook as shipped (as committed, with
    its outputs) used to keep a backup and write the unexecuted copy over it. Run literally in the course; should
    it write anyway, the committed file is put back and the backup removed."""
    import os

    name = "01_dot_product_toy.ipynb"
    notebook = ROOT / "notebooks" / name
    committed = subprocess.run(["git", "show", f"HEAD:notebooks/{name}"], cwd=ROOT, capture_output=True)
    if committed.returncode != 0 or notebook.read_bytes() != committed.stdout:
        pytest.skip(f"notebooks/{name} is not the committed file here (not a git checkout, or changed)")
    before = set(notebook.parent.glob("backup-*"))
    try:
        proc = run_command(
            [sys.executable, "course.py", "reset", f"notebooks/{name}"],
            env={**os.environ, "COURSE_VENV": os.environ.get("COURSE_VENV", str(ROOT / ".venv"))},
        )
        made = set(notebook.parent.glob("backup-*")) - before
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"notebooks/{name} already is the clean learner copy: nothing written, no backup made." in proc.stdout
        assert notebook.read_bytes() == committed.stdout and not made
    finally:
        notebook.write_bytes(committed.stdout)
        for extra in set(notebook.parent.glob("backup-*")) - before:
            extra.unlink()
