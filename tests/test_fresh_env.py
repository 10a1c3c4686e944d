"""Each lock alone is enough, in a fresh virtual environment:

- the learner set, installed as `python3 course.py lab` and requirements.txt (Binder and the like) install it,
  `pip install -c lock/learner.txt -e .[lab]`, runs every learner notebook, holds no author tool, and every
  package in it is at the version the lock pins;
- the author set, `pip install -c lock/author.txt -e .[lab,author]`, has its tools, at the lock's versions;
- plain `pip install -r lock/NAME.txt` then `pip install --no-deps -e .` gives a consistent environment.

It downloads and installs everything (torch among it: minutes and gigabytes), so it runs only when asked:
``COURSE_FRESH_VENV=1 python3 course.py test -k fresh_env``; add ``COURSE_FRESH_VENV_FIND_LINKS=DIR`` to
install from a room folder (``python3 course.py room DIR``, with ``--author`` for the author set) with
``--no-index`` instead of the internet. The plain ``-r`` installs take every line whose markers hold,
torch's CUDA libraries among them on Linux (gigabytes more), so they also need ``COURSE_FRESH_VENV_PLAIN=1``.
"""

import json
import os
import re
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    os.environ.get("COURSE_FRESH_VENV") != "1", reason="installs a lock into a fresh venv; set COURSE_FRESH_VENV=1"
)
AUTHOR_TOOLS = ("pytest", "nbval", "hypothesis", "xdist", "ruff", "playwright", "jupytext", "uv")
RUN_NOTEBOOK = """\
import sys, nbformat
from pathlib import Path
from nbclient import NotebookClient
path = Path(sys.argv[1])
nb = nbformat.read(path, as_version=4)
NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
"""
VERSIONS = (
    "import importlib.metadata as m, json; "
    "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
)


def fresh_venv(where: Path) -> Path:
    venv.EnvBuilder(with_pip=True).create(where)
    return where / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def pip_install(py: Path, *args: str) -> float:
    links = os.environ.get("COURSE_FRESH_VENV_FIND_LINKS")
    source = (
        ["--no-index", "--find-links", str(Path(links) / "wheels" if (Path(links) / "wheels").is_dir() else links)]
        if links
        else []
    )
    start = time.monotonic()
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", *source, *args], cwd=ROOT, check=True
    )
    seconds = time.monotonic() - start
    subprocess.run([py, "-m", "pip", "check"], cwd=ROOT, check=True)
    return seconds


def pins(name: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for line in (ROOT / "lock" / f"{name}.txt").read_text(encoding="utf-8").splitlines():
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)", line)
        if m:
            out.setdefault(re.sub(r"[-_.]+", "-", m[1]).lower(), set()).add(m[2])
    return out


def installed_versions(py: Path) -> dict[str, str]:
    got = json.loads(subprocess.run([py, "-c", VERSIONS], capture_output=True, text=True, check=True).stdout)
    return {re.sub(r"[-_.]+", "-", k).lower(): v for k, v in got.items()}


def assert_at_locked_versions(py: Path, name: str) -> dict[str, str]:
    locked = pins(name)
    have = installed_versions(py)
    off = {
        n: (v, sorted(locked[n])) for n, v in have.items() if n in locked and v.split("+")[0] not in locked[n]
    }  # torch 2.13.0+cpu is torch 2.13.0
    unlocked = sorted(n for n in have if n not in locked and n not in ("pip", "setuptools", "course-utils"))
    assert not off and not unlocked, f"lock/{name}.txt: installed at other versions {off}; not in the lock {unlocked}"
    return have


def test_the_learner_set_alone_runs_every_notebook_and_holds_no_author_tool(tmp_path):
    py = fresh_venv(tmp_path / "learner")
    seconds = pip_install(py, "-c", "lock/learner.txt", "-e", ".[lab]")
    print(f"learner set installed in {seconds:.0f} s", file=sys.stderr)
    have = assert_at_locked_versions(py, "learner")
    assert not [t for t in AUTHOR_TOOLS if t in have or f"pytest-{t}" in have], sorted(have)
    slow = []
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        start = time.monotonic()
        proc = subprocess.run([py, "-c", RUN_NOTEBOOK, str(nb)], cwd=ROOT, capture_output=True, text=True)
        seconds = time.monotonic() - start
        assert proc.returncode == 0, f"{nb.name} failed in a fresh venv with the learner set:\n{proc.stderr[-3000:]}"
        if seconds > 300:  # every notebook runs in well under a minute on a CPU laptop
            slow.append(f"{nb.name}: {seconds:.0f} s")
        print(f"{nb.name}: {seconds:.1f} s in the fresh venv", file=sys.stderr)
    assert not slow, f"notebooks slower than expected on this machine: {slow}"


def test_the_author_set_installs_with_its_tools(tmp_path):
    py = fresh_venv(tmp_path / "author")
    seconds = pip_install(py, "-c", "lock/author.txt", "-e", ".[lab,author]")
    print(f"author set installed in {seconds:.0f} s", file=sys.stderr)
    assert_at_locked_versions(py, "author")
    for tool in (
        ["-m", "pytest", "--version"],
        ["-m", "jupytext", "--version"],
        ["-m", "ruff", "--version"],
        ["-m", "uv", "--version"],
        ["-c", "import nbval, hypothesis, xdist, playwright"],
    ):
        subprocess.run([py, *tool], cwd=ROOT, check=True, capture_output=True)


@pytest.mark.skipif(
    os.environ.get("COURSE_FRESH_VENV_PLAIN") != "1",
    reason="installs every line of a lock (on Linux, torch's CUDA libraries too); set COURSE_FRESH_VENV_PLAIN=1",
)
@pytest.mark.parametrize("name", ["learner", "author"])
def test_plain_pip_install_r_of_a_lock_works(tmp_path, name):
    py = fresh_venv(tmp_path / name)
    seconds = pip_install(py, "-r", f"lock/{name}.txt")
    pip_install(py, "--no-deps", "-e", ".")
    print(f"pip install -r lock/{name}.txt: {seconds:.0f} s", file=sys.stderr)
    assert_at_locked_versions(py, name)
