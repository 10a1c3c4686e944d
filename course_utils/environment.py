"""What a learner's machine has, and the one-line setup every notebook starts with.

``python -m course_utils.environment`` (or ``python3 course.py env``) prints OK / FAIL per
requirement with the fix for each FAIL; notebook 00 shows the same table.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import random
import sys
from dataclasses import dataclass

__all__ = ["setup_notebook", "best_device", "Requirement", "environment_report", "print_report"]


def best_device() -> str:
    """"cuda" if an NVIDIA GPU is usable, else "mps" on Apple silicon, else "cpu"."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def setup_notebook(seed: int = 0, threads: int | None = 1) -> str:
    """Seed every generator, fix the thread count and the print and plot settings; return the device.

    One thread by default: CPU matrix products change in their last bits with the thread count,
    and nbval compares printed outputs. Pass ``threads=None`` to keep PyTorch's default.
    """
    import matplotlib
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass
    if threads is not None:
        torch.set_num_threads(threads)
    torch.set_printoptions(precision=4, sci_mode=False)
    matplotlib.rcParams.update({"figure.dpi": 72, "figure.figsize": (6.0, 3.2), "savefig.dpi": 72})
    return best_device()


@dataclass
class Requirement:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def environment_report() -> list[Requirement]:
    """One :class:`Requirement` per thing the course needs, each with its fix."""
    reqs = []
    py = sys.version_info
    reqs.append(Requirement("Python >= 3.10", py >= (3, 10), f"{py.major}.{py.minor}.{py.micro}",
                            "install Python 3.10 or newer (python.org), then run `python3 course.py lab` again"))
    reinstall = "run `python3 course.py lab` (it installs requirements.txt into .venv/)"
    try:
        import torch

        reqs.append(Requirement("torch", True, torch.__version__))
        dev = best_device()
        detail = {"cuda": "CUDA GPU: " + (torch.cuda.get_device_name(0) if dev == "cuda" else ""),
                  "mps": "Apple GPU (MPS)", "cpu": "CPU only: every notebook runs; 08 trains a smaller model"}[dev]
        reqs.append(Requirement("device", True, detail))
    except Exception as e:  # a broken torch install shows up here, not as a traceback
        reqs.append(Requirement("torch", False, f"cannot import: {e}", reinstall))
    for dist, label in (("jupyterlab", "JupyterLab"), ("ipywidgets", "ipywidgets"),
                        ("jupyterlab_widgets", "widgets extension for JupyterLab"), ("matplotlib", "matplotlib"),
                        ("tqdm", "tqdm"), ("nbval", "nbval (exercise checking)")):
        v = _version(dist)
        reqs.append(Requirement(label, v is not None, v or "not installed", reinstall))
    try:
        from course_utils import data

        data.verify()
        reqs.append(Requirement("data for notebook 08", True, f"{data.corpus_path()} (checksum OK)"))
    except Exception as e:  # missing or damaged: say how to get it; notebooks 01-07 do not need it
        reqs.append(Requirement("data for notebook 08", False, str(e).split(":")[0],
                                "run `python -m course_utils.data fetch` once with internet (notebooks 01-07 "
                                "work without it)"))
    try:
        importlib.import_module("course_utils.exercises").all_exercises()
        reqs.append(Requirement("course_utils", True, f"importable from {__file__.rsplit('/', 2)[0]}"))
    except Exception as e:
        reqs.append(Requirement("course_utils", False, f"cannot import: {e}", reinstall))
    return reqs


def print_report(reqs: list[Requirement] | None = None) -> bool:
    """Print the report as a table; True when nothing failed."""
    reqs = environment_report() if reqs is None else reqs
    width = max(len(r.name) for r in reqs)
    for r in reqs:
        print(f"{'OK  ' if r.ok else 'FAIL'}  {r.name:<{width}}  {r.detail}")
        if not r.ok:
            print(f"      {'':<{width}}  fix: {r.fix}")
    ok = all(r.ok for r in reqs)
    print("All set." if ok else "Something is missing: apply the fixes above, then run this again.")
    return ok


if __name__ == "__main__":
    sys.exit(0 if print_report() else 1)
