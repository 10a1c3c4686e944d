"""CONTRIBUTING.md and the pre-commit hooks it tells authors to install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / ".pre-commit-config.yaml"


def test_the_pre_commit_configuration_is_valid():
    pytest.importorskip("pre_commit", reason="pre-commit is in the author set (python3 course.py test)")
    proc = subprocess.run([sys.executable, "-m", "pre_commit", "validate-config", str(CONFIG)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_each_hook_runs_a_program_of_the_course_venv_with_the_lock_s_versions():
    hooks = [h for repo in yaml.safe_load(CONFIG.read_text())["repos"] for h in repo["hooks"]]
    assert {h["id"] for h in hooks} >= {"ruff", "notebooks-in-sync"}
    for hook in hooks:
        program = hook["entry"].split()[0]
        assert program.startswith(".venv/bin/"), f"{hook['id']}: {program} is not the course venv's"
        if Path(sys.prefix).resolve() == (ROOT / ".venv").resolve():
            assert (ROOT / program).exists(), f"{hook['id']}: {program} is missing from .venv"


def test_contributing_walks_through_adding_a_notebook_and_its_skeleton():
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    for piece in ("course_source/NN_topic.py", "course_utils/exercises/<topic>.py", "tests/test_<topic>.py",
                  "README row", "Instructor guide", "The notebook skeleton", "python3 course.py build NN"):
        assert piece in text, f"CONTRIBUTING.md lost {piece!r}"
    assert "../shared" not in (ROOT / "course_source" / "AUTHORING.md").read_text(encoding="utf-8")
