"""Resetting an exercise or a notebook: the clean learner cells come back, the learner's other work stays,
and the learner's previous file is kept beside it."""

import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import nbformat
import pytest

from course_utils.build import STUB
from course_utils.reset import clean_copy, exercise_cells, reset_exercise, reset_notebook

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
    backup = reset_exercise(path, "03.2", now=NOW)
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
    backup = reset_notebook(path, now=NOW)
    assert backup.read_text(encoding="utf-8") == before
    nb = nbformat.read(path, as_version=4)
    assert [c.source for c in nb.cells] == [c.source for c in clean_copy(NAME).cells]
    assert reset_notebook(path, now=NOW).name == "backup-03_masking-20260102-030405-2.ipynb"  # never overwrites


def test_reset_names_the_notebooks_exercises_when_the_key_is_wrong(tmp_path):
    path, _ = learner_work(tmp_path)
    with pytest.raises(KeyError, match="03_masking.ipynb has no exercise 04.1; its exercises are: 03.1"):
        reset_exercise(path, "04.1")
    assert not list(tmp_path.glob("backup-*"))  # nothing written when nothing was reset


def test_reset_command(tmp_path):
    path, where = learner_work(tmp_path)
    proc = subprocess.run([sys.executable, "course.py", "reset", str(path), "--exercise", "03.1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "your previous file is kept as" in proc.stdout
    nb = nbformat.read(path, as_version=4)
    assert "my 03.1" not in nb.cells[where["03.1"]].source and "my 03.2" in nb.cells[where["03.2"]].source
    assert len(list(tmp_path.glob("backup-03_masking-*.ipynb"))) == 1
