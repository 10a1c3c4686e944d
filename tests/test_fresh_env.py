"""requirements.txt alone is enough (as on Binder and other hosted services that build from it): in a fresh
virtual environment with only it installed, every learner notebook runs.

It downloads and installs everything (torch among it: minutes and gigabytes), so it runs only when asked:
``COURSE_FRESH_VENV=1 python3 course.py test -k fresh_env``; add ``COURSE_FRESH_VENV_FIND_LINKS=DIR`` to
install from a room folder (``python3 course.py room DIR``) with ``--no-index`` instead of the internet.
"""

import os
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(os.environ.get("COURSE_FRESH_VENV") != "1",
                                reason="installs requirements.txt into a fresh venv; set COURSE_FRESH_VENV=1")


def test_requirements_txt_alone_runs_every_notebook(tmp_path):
    env_dir = tmp_path / "fresh"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    links = os.environ.get("COURSE_FRESH_VENV_FIND_LINKS")
    source = ["--no-index", "--find-links", str(Path(links) / "wheels" if (Path(links) / "wheels").is_dir()
                                                 else links)] if links else []
    subprocess.run([py, "-m", "pip", "install", "-q", *source, "-r", "requirements.txt"], cwd=ROOT, check=True)
    subprocess.run([py, "-m", "pip", "check"], cwd=ROOT, check=True)
    slow = []
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        start = time.monotonic()
        proc = subprocess.run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                               "--nbval-current-env", str(nb)], cwd=ROOT, capture_output=True, text=True)
        seconds = time.monotonic() - start
        assert proc.returncode == 0, f"{nb.name} failed in a fresh venv:\n{proc.stdout[-3000:]}"
        if seconds > 300:  # every notebook runs in well under a minute on a CPU laptop
            slow.append(f"{nb.name}: {seconds:.0f} s")
        print(f"{nb.name}: {seconds:.1f} s in the fresh venv", file=sys.stderr)
    assert not slow, f"notebooks slower than expected on this machine: {slow}"
