"""What the tests of course.py and the tools it starts share: course.py loaded as a module, a command run as a
learner types it, and a course whose venv is a stand-in that records what would be installed."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_course():
    spec = importlib.util.spec_from_file_location("course", ROOT / "course.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_command(cmd, cwd=ROOT, timeout=300, **kwargs) -> subprocess.CompletedProcess:
    """Run a command as a learner would, in the course folder unless told; its output as text, its stdin closed."""
    return subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kwargs
    )


def installed_env() -> dict[str, str]:
    """This environment, with COURSE_VENV naming the course's installed venv; skips where none is installed (a
    copy of the course run elsewhere would install one first)."""
    venv = os.environ.get("COURSE_VENV", str(ROOT / ".venv"))
    if not (Path(venv) / ".course-installed").exists():
        pytest.skip(f"{venv} is not installed (course.py would install it first)")
    return {**os.environ, "COURSE_VENV": venv}


def fake_venv_course(venv: Path, monkeypatch) -> tuple[object, list[list[str]]]:
    """(course.py whose venv is ``venv``, with a python that is only a file, the commands it runs): nothing runs."""
    course = load_course()
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    monkeypatch.setattr(course, "PY", venv / "bin" / "python")
    monkeypatch.setattr(course, "VENV", venv)
    monkeypatch.setattr(course, "STAMP", venv / ".course-installed")
    calls = []
    monkeypatch.setattr(course, "run", lambda cmd, **kw: calls.append([str(c) for c in cmd]) or 0)
    return course, calls
