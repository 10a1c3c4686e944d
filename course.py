#!/usr/bin/env python3
"""One entry point for the course. Needs only Python 3.10+; it sets up everything else.

    python3 course.py lab      install (first time only) and open the course in JupyterLab
    python3 course.py test     install (first time only) and run every test: unit tests and nbval on every notebook
    python3 course.py check    check your exercises in notebooks/ and print a table (add notebook paths to narrow it)
    python3 course.py env      print OK / FAIL for everything the course needs, with the fix for each FAIL
    python3 course.py build    (authors) rebuild notebooks/ and solutions/ from course_source/

Everything is installed into .venv/ next to this file; a second run reuses it unless requirements.txt
or pyproject.toml changed. Set COURSE_VENV to use another folder.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("COURSE_VENV", ROOT / ".venv"))
STAMP = VENV / ".course-installed"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")


def say(msg: str) -> None:
    print(f"[course] {msg}", flush=True)


def run(cmd: list, **kw) -> int:
    say("$ " + " ".join(str(c) for c in cmd))
    return subprocess.call([str(c) for c in cmd], cwd=ROOT, **kw)


def requirements_hash() -> str:
    h = hashlib.sha256()
    for name in ("requirements.txt", "pyproject.toml"):
        h.update((ROOT / name).read_bytes())
    return h.hexdigest()


def ensure_installed() -> None:
    if sys.version_info < (3, 10):
        sys.exit(f"[course] Python 3.10 or newer is needed, this is {sys.version.split()[0]}. "
                 "Install a newer Python from python.org and run this command with it.")
    if not PY.exists():
        say(f"creating a virtual environment in {VENV}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    want = requirements_hash()
    if STAMP.exists() and STAMP.read_text().strip() == want:
        say(f"reusing {VENV} (requirements unchanged)")
        return
    say("installing requirements.txt into the virtual environment (the first time takes a few minutes)")
    if run([PY, "-m", "pip", "install", "--disable-pip-version-check", "-r", "requirements.txt"]) != 0:
        sys.exit("[course] installing failed; see pip's message above. On a flaky network, run the same command "
                 "again: pip resumes with what it already has.")
    STAMP.write_text(want + "\n")
    say("installed")


def in_venv(*args: str) -> int:
    return run([PY, *args])


def cmd_lab(extra: list[str]) -> int:
    ensure_installed()
    say("checking the environment")
    in_venv("-m", "course_utils.environment")
    say("starting JupyterLab on the course notebooks; stop it with Ctrl+C")
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in extra:
        extra = [*extra, "--allow-root"]  # Jupyter refuses to run as root without it (containers, CI)
    return in_venv("-m", "jupyter", "lab", "notebooks/00_setup_check.ipynb", *extra)


def cmd_test(extra: list[str]) -> int:
    ensure_installed()
    steps = [
        ("lint (ruff, including B015: comparisons whose result is thrown away)",
         ["-m", "ruff", "check", "course_utils", "tests", "course_source", "notebooks", "solutions", "course.py"]),
        ("unit tests (notebooks in sync with course_source/ among them), then nbval on every notebook "
         "(learner copies and solutions)",
         ["-m", "pytest", "tests", "notebooks", "solutions", "--nbval", "--nbval-current-env",
          "--nbval-cell-timeout=600", *extra]),
    ]
    for title, args in steps:
        say(title)
        rc = in_venv(*args)
        if rc != 0:
            say(f"FAILED: {title}")
            return rc
    say("all tests passed")
    return 0


def cmd_check(extra: list[str]) -> int:
    ensure_installed()
    return in_venv("-m", "course_utils.grade", *extra)


def cmd_env(extra: list[str]) -> int:
    ensure_installed()
    return in_venv("-m", "course_utils.environment", *extra)


def cmd_build(extra: list[str]) -> int:
    ensure_installed()
    return in_venv("-m", "course_utils.build", *extra)


COMMANDS = {"lab": cmd_lab, "test": cmd_test, "check": cmd_check, "env": cmd_env, "build": cmd_build}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
