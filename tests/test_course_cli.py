"""course.py, the two README commands' entry point: usage, and reuse of an installed environment."""

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_course():
    spec = importlib.util.spec_from_file_location("course", ROOT / "course.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_usage_without_a_command():
    proc = subprocess.run([sys.executable, "course.py"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    for word in ("lab", "test", "check", "env", "build"):
        assert f"course.py {word}" in proc.stdout


def test_second_run_reuses_the_environment(tmp_path, monkeypatch, capsys):
    course = load_course()
    fake_python = tmp_path / "bin" / "python"
    fake_python.parent.mkdir()
    fake_python.touch()
    monkeypatch.setattr(course, "PY", fake_python)
    monkeypatch.setattr(course, "VENV", tmp_path)
    monkeypatch.setattr(course, "STAMP", tmp_path / ".course-installed")
    calls = []
    monkeypatch.setattr(course, "run", lambda cmd, **kw: calls.append(cmd) or 0)
    course.ensure_installed()
    assert len(calls) == 1 and "install" in calls[0]  # first run installs
    course.ensure_installed()
    assert len(calls) == 1  # second run installs nothing
    assert "reusing" in capsys.readouterr().out
    (tmp_path / ".course-installed").write_text("stale\n")
    course.ensure_installed()
    assert len(calls) == 2  # changed requirements install again


def test_usage_says_what_room_package_and_check_take():
    proc = subprocess.run([sys.executable, "course.py", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0
    assert "room DIR [--force]" in proc.stdout and "[--force]\n" in proc.stdout.split("package", 1)[1]
    assert "check [NOTEBOOK or FOLDER ...] [--timeout SECONDS]" in proc.stdout
    assert "moved aside, whole, to backup-NAME-DATE" in proc.stdout


def test_check_and_reset_read_paths_from_the_folder_they_are_run_in(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print('my notes')")]
    nbformat.write(nb, tmp_path / "notes.ipynb")
    proc = subprocess.run([sys.executable, str(ROOT / "course.py"), "check", "notes.ipynb", "--json", "v.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "notes.ipynb: no exercises in this notebook" in proc.stdout  # found beside the learner, not in the course
    (tmp_path / "notebooks").mkdir()
    proc = subprocess.run([sys.executable, str(ROOT / "course.py"), "reset", "notebooks/03_masking.ipynb"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "notebooks/03_masking.ipynb is not in notebooks/" in proc.stderr
    assert not (tmp_path / "notebooks" / "03_masking.ipynb").exists()
