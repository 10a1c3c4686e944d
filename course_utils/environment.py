"""What a learner's machine has, and the one-line setup every notebook starts with.

``python -m course_utils.environment`` (or ``python3 course.py env``) prints OK / FAIL per
requirement with the fix for each FAIL; notebook 00 shows the same table. The corpus, which only the GPT
notebooks (``CORPUS_NOTEBOOKS``) read, is LATER until it is fetched: not a failure, with the command that fetches
it (``CORPUS_FETCH``).
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util
import os
import random
import sys
import textwrap
from dataclasses import dataclass

from course_utils.devices import best_device, pick_device  # the setup check reports them; they live there

__all__ = [
    "setup_notebook",
    "best_device",
    "pick_device",
    "Requirement",
    "environment_report",
    "print_report",
    "CORPUS_NOTEBOOKS",
    "CORPUS_FETCH",
]

CORPUS_NOTEBOOKS = ("10", "11")  # the notebooks that read the corpus: the tiny GPT and inside the trained GPT
CORPUS_FETCH = "python3 course.py corpus"  # run in the course folder: fetches it with the course's own Python


def setup_notebook(seed: int = 0, threads: int | None = 1) -> str:
    """Seed every generator, fix the thread count (one: CPU products change in their last bits with it, and
    nbval compares printed outputs; None keeps PyTorch's) and the print and plot settings; return the device."""
    import matplotlib
    import numpy as np  # matplotlib's own dependency: there whenever matplotlib is
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(seed)
    if threads is not None:
        torch.set_num_threads(threads)
    torch.set_printoptions(precision=4, sci_mode=False)
    matplotlib.rcParams.update({"figure.dpi": 72, "figure.figsize": (6.0, 3.2), "savefig.dpi": 72})
    figures_for_screens()
    hosted_widgets()
    return best_device()


SMALL_FIGURES_ENV = "COURSE_SMALL_FIGURES"  # set by the course's build: committed notebooks keep 1x images


def figure_scale() -> int:
    """Pixels per figure point drawn for a running notebook: 2 (sharp on high-resolution screens), or 1 where
    ``COURSE_SMALL_FIGURES`` is set (the build's committed notebooks)."""
    return 1 if os.environ.get(SMALL_FIGURES_ENV) else 2


def figures_for_screens() -> str | None:
    """Draw figures on white (legible in a dark theme), at twice the pixels ("retina") unless
    ``COURSE_SMALL_FIGURES`` is set (the build's committed notebooks); return the format (None outside IPython)."""
    from IPython import get_ipython  # both come with ipykernel, a dependency of the course
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    if get_ipython() is None:
        return None
    fmt = "retina" if figure_scale() == 2 else "png"
    set_matplotlib_formats(fmt, bbox_inches="tight", facecolor="white")
    return fmt


@dataclass
class Requirement:
    """One line of the report. ``later``: not needed yet (the corpus before the GPT notebooks), so a missing one
    is shown as LATER with its ``fix``, and is not a failure."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    later: bool = False

    @property
    def status(self) -> str:
        return "OK" if self.ok else "LATER" if self.later else "FAIL"


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def hosted_service() -> bool:
    """Whether this kernel runs on a hosted notebook service (Google Colab), which brings its own front end."""
    return importlib.util.find_spec("google") is not None and importlib.util.find_spec("google.colab") is not None


def environment_report() -> list[Requirement]:
    """One :class:`Requirement` per thing the course needs, each with its fix."""
    py = sys.version_info
    fix = "install Python 3.10 or newer (python.org), then run `python3 course.py lab` again"
    reqs = [Requirement("Python >= 3.10", py >= (3, 10), f"{py.major}.{py.minor}.{py.micro}", fix)]
    reinstall = "run `python3 course.py lab` (it installs the learner set, lock/learner.txt, into .venv/)"
    try:
        import torch

        reqs.append(Requirement("torch", True, torch.__version__))
        dev = best_device()
        detail = {
            "cuda": "CUDA GPU: " + (torch.cuda.get_device_name(0) if dev == "cuda" else ""),
            "mps": "Apple GPU (MPS)",
            "cpu": "CPU only: every notebook runs; 10 trains a smaller model",
        }[dev]
        reqs.append(Requirement("device", True, detail))
    except Exception as e:  # a broken torch install shows up here, not as a traceback
        reqs.append(Requirement("torch", False, f"cannot import: {e}", reinstall))
    for dist, label in (
        ("jupyterlab", "JupyterLab"),
        ("ipywidgets", "ipywidgets"),
        ("jupyterlab_widgets", "widgets extension for JupyterLab"),
        ("matplotlib", "matplotlib"),
        ("tqdm", "tqdm"),
        ("nbclient", "nbclient (course.py check)"),
    ):
        v = _version(dist)
        if v is None and dist.startswith("jupyterlab") and hosted_service():
            reqs.append(Requirement(label, True, "the hosted service's own notebook front end"))
            continue
        reqs.append(Requirement(label, v is not None, v or "not installed", reinstall))
    for requirement, name in ((_corpus_requirement, "corpus"), (_settings_requirement, "course settings")):
        try:
            reqs.append(requirement())
        except ImportError as e:  # it reads the course's own modules, which need torch: torch's FAIL says why
            reqs.append(Requirement(name, False, f"not checked: {e}", reinstall))
    try:
        importlib.import_module("course_utils.exercises").all_exercises()
        reqs.append(Requirement("course_utils", True, f"importable from {__file__.rsplit('/', 2)[0]}"))
    except Exception as e:
        reqs.append(Requirement("course_utils", False, f"cannot import: {e}", reinstall))
    return reqs


def _corpus_requirement() -> Requirement:
    """The corpus: OK when fetched and intact, LATER when not fetched yet, FAIL when a copy is there but damaged."""
    from course_utils import data

    notebooks = f"notebook{'s' * (len(CORPUS_NOTEBOOKS) > 1)} {' and '.join(CORPUS_NOTEBOOKS)}"
    name = f"corpus ({notebooks})"
    path = data.corpus_path()
    if not path.exists():
        fetched = f"notebook {CORPUS_NOTEBOOKS[0]} fetches it when it first runs (with internet)"
        if hosted_service():
            return Requirement(name, False, f"not fetched yet: {fetched}", "nothing to do now", later=True)
        fix = f"to fetch it now, once, with internet, run in the course folder: {CORPUS_FETCH}"
        return Requirement(name, False, f"not fetched yet: only {notebooks} read it, and {fetched}", fix, later=True)
    try:
        data.load_corpus(download=False)  # reads the cached corpus and checks its sha256
    except ImportError:  # torch is missing, not the corpus: environment_report says so once
        raise
    except Exception as e:  # there but damaged: notebooks 00-09 still work without it
        return Requirement(name, False, str(e).split(":")[0], f"fetch it again, with internet: {CORPUS_FETCH} --force")
    return Requirement(name, True, f"{path} (checksum OK)")


def _settings_requirement() -> Requirement:
    """The course's environment variables that are set, checked now rather than when a notebook reads them."""
    from course_utils.exercises._engine import SEED_ENV
    from course_utils.runs import choose_size

    problems = []
    try:
        choose_size("cpu")
    except ValueError as err:
        problems.append(str(err))
    seed = os.environ.get(SEED_ENV, "").strip()
    if seed and not seed.lstrip("-").isdigit():
        problems.append(f"{SEED_ENV} must be an integer seed, got {seed!r}")
    if problems:
        return Requirement(
            "course settings", False, "; ".join(problems), "change the value, or unset the variable to get the default"
        )
    named = [f"{name}={os.environ[name]}" for name in sorted(os.environ) if name.startswith("COURSE_")]
    return Requirement("course settings", True, ", ".join(named) if named else "defaults (no COURSE_* variable set)")


def hosted_widgets() -> str | None:
    """On Google Colab with ipywidgets 8, switch on Colab's widget manager for them (its front end renders only
    ipywidgets 7 by itself); return what was done, None elsewhere."""
    version = _version("ipywidgets")
    if not hosted_service() or version is None or int(version.split(".")[0]) < 8:
        return None
    from google.colab import output  # only on Colab

    output.enable_custom_widget_manager()
    return f"Colab: widget manager switched on for ipywidgets {version}"


REPORT_WIDTH = 100  # columns of the setup report; a longer detail continues, indented, on the next line


def print_report(reqs: list[Requirement] | None = None) -> bool:
    """Print the report as a table; True when nothing failed (LATER is not a failure)."""
    reqs = environment_report() if reqs is None else reqs
    width = max(len(r.name) for r in reqs)
    indent = " " * (6 + width + 2)
    # Wrapped at word boundaries: JupyterLab breaks a long output line anywhere, mid-word included.
    wrap = textwrap.TextWrapper(width=REPORT_WIDTH, subsequent_indent=indent, break_on_hyphens=False)
    for r in reqs:
        print(wrap.fill(f"{r.status:<5} {r.name:<{width}}  {r.detail}"))
        if not r.ok and r.fix:
            print(wrap.fill(f"{indent}{'fix: ' if r.status == 'FAIL' else ''}{r.fix}"))
    ok = all(r.ok or r.later for r in reqs)
    if not ok:
        print("Something is missing: apply the fixes above, then run this again.")
    elif any(r.status == "LATER" for r in reqs):
        print("All set for now: what says LATER is needed only later, and is not an error.")
    else:
        print("All set.")
    return ok


if __name__ == "__main__":
    sys.exit(0 if print_report() else 1)
