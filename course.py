#!/usr/bin/env python3
"""One entry point for the course. Needs only Python 3.10+; it sets up everything else.

    python3 course.py lab      install (first time only) and open the course in JupyterLab
    python3 course.py test     install (first time only) and run every test: unit tests and nbval on every notebook
    python3 course.py check    check your exercises in notebooks/ and print a table (add notebook paths to narrow it)
    python3 course.py env      print OK / FAIL for everything the course needs, with the fix for each FAIL
    python3 course.py build    (authors) rebuild notebooks/ and solutions/ from course_source/
    python3 course.py reset NOTEBOOK [--exercise NN.K]
                               put a notebook (or one exercise of it) back to its clean learner copy;
                               your previous file is kept beside it as backup-NAME-DATE.ipynb
    python3 course.py e2e      run only the browser tests (JupyterLab in Chromium, every notebook)
    python3 course.py room DIR (instructors) fill DIR with everything a room without internet needs
    python3 course.py package --learner OUT.zip | --instructor OUT.zip
                               (instructors) zip the course without / with solutions

`lab` and `test` take `--offline DIR` (a folder made by `room`, or its URL when served with
`python3 -m http.server`): they install from there with `pip install --no-index --find-links`.
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


def offline_source(where: str) -> str:
    """The folder or URL of wheels inside a room folder made by `course.py room` (its wheels/ if it has one)."""
    if "://" in where:
        return where
    path = Path(where).expanduser().resolve()
    if not path.is_dir():
        sys.exit(f"[course] --offline {where}: no such folder (make one with `python3 course.py room DIR`)")
    return str(path / "wheels") if (path / "wheels").is_dir() else str(path)


def take_offline(extra: list[str]) -> tuple[str | None, list[str]]:
    """Split `--offline DIR` (or `--offline=DIR`) off the arguments."""
    rest, where = [], None
    it = iter(extra)
    for a in it:
        if a == "--offline":
            where = next(it, None)
            if where is None:
                sys.exit("[course] --offline needs a folder or URL, e.g. --offline /media/usb/room")
        elif a.startswith("--offline="):
            where = a.split("=", 1)[1]
        else:
            rest.append(a)
    return where, rest


def copy_room_datasets(where: str) -> None:
    """Copy the datasets a room folder carries into datasets/, where the course reads them."""
    if "://" in where:
        return
    src = Path(where).expanduser().resolve() / "datasets"
    if src.is_dir():
        import shutil

        (ROOT / "datasets").mkdir(exist_ok=True)
        for f in src.iterdir():
            if f.is_file() and not (ROOT / "datasets" / f.name).exists():
                say(f"copying {f.name} from the room folder into datasets/")
                shutil.copy2(f, ROOT / "datasets" / f.name)


def ensure_installed(offline: str | None = None) -> None:
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
    source = [] if offline is None else ["--no-index", "--find-links", offline_source(offline)]
    if offline is not None:
        say(f"offline: installing only from {source[-1]}")
    if run([PY, "-m", "pip", "install", "--disable-pip-version-check", *source, "-r", "requirements.txt"]) != 0:
        sys.exit("[course] installing failed; see pip's message above. On a flaky network, run the same command "
                 "again: pip resumes with what it already has.")
    STAMP.write_text(want + "\n")
    say("installed")


def in_venv(*args: str) -> int:
    return run([PY, *args])


def cmd_lab(extra: list[str]) -> int:
    offline, extra = take_offline(extra)
    ensure_installed(offline)
    if offline:
        copy_room_datasets(offline)
    say("checking the environment")
    in_venv("-m", "course_utils.environment")
    say("starting JupyterLab on the course notebooks; stop it with Ctrl+C")
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in extra:
        extra = [*extra, "--allow-root"]  # Jupyter refuses to run as root without it (containers, CI)
    return in_venv("-m", "jupyter", "lab", "notebooks/00_setup_check.ipynb", *extra)


def cmd_test(extra: list[str]) -> int:
    offline, extra = take_offline(extra)
    ensure_installed(offline)
    if offline:
        copy_room_datasets(offline)
    # Folders this copy of the course has (a learner build has no solutions/ or course_source/); a learner's
    # backups (backup-*.ipynb, from `course.py reset`) are their own work, not part of the course.
    lint = [d for d in ("course_utils", "tests", "course_source", "notebooks", "solutions") if (ROOT / d).is_dir()]
    test = [d for d in ("tests", "notebooks", "solutions") if (ROOT / d).is_dir()]
    steps = [
        ("lint (ruff, including B015: comparisons whose result is thrown away)",
         ["-m", "ruff", "check", *lint, "course.py", "--extend-exclude", "backup-*.ipynb"]),
        ("unit tests (notebooks in sync with course_source/ among them), nbval on every notebook "
         "(learner copies and solutions), then every notebook in JupyterLab in a real browser (tests/e2e; "
         "skipped without Chromium)",
         ["-m", "pytest", *test, "--nbval", "--nbval-current-env", "--nbval-cell-timeout=600",
          "--ignore-glob=**/backup-*.ipynb", *extra]),
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


def cmd_reset(extra: list[str]) -> int:
    ensure_installed()
    return in_venv("-m", "course_utils.reset", *extra)


def cmd_e2e(extra: list[str]) -> int:
    ensure_installed()
    say("every notebook in JupyterLab, in Chromium (screenshots in reports/screenshots/)")
    return in_venv("-m", "pytest", "tests/e2e", *extra)


def cmd_room(extra: list[str]) -> int:
    ensure_installed()
    return in_venv("-m", "course_utils.room", "prepare", *extra)


def cmd_package(extra: list[str]) -> int:
    ensure_installed()
    return in_venv("-m", "course_utils.room", "package", *extra)


COMMANDS = {"lab": cmd_lab, "test": cmd_test, "check": cmd_check, "env": cmd_env, "build": cmd_build,
            "reset": cmd_reset, "e2e": cmd_e2e, "room": cmd_room, "package": cmd_package}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
