"""What a training run checks and sets up on this machine before its first step, so that a problem is one line with
its fix instead of a traceback after an hour: the output folder (:func:`check_out_dir`), the processes under
``torchrun`` and the device (:func:`join_processes`), the text (:func:`read_data`), and which of the GPU recipe's
switches can work here (:func:`gpu_switches`). :func:`course_utils.train.train` calls them; the command line
(``course_utils.train_cli``) prints a :class:`RunSetupError` as one line and exits with code 2.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from course_utils._files import probe_writable
from course_utils._validate import check_path
from course_utils.data import is_course_corpus, load_text
from course_utils.devices import pick_device

__all__ = [
    "CHECKPOINT_NAME",
    "SUMMARY_NAME",
    "RunSetupError",
    "check_out_dir",
    "check_can_create",
    "join_processes",
    "read_data",
    "compile_available",
    "fused_adamw_available",
    "Switches",
    "gpu_switches",
    "autocast_context",
    "first_line",
]

CHECKPOINT_NAME = "checkpoint.pt"
SUMMARY_NAME = "summary.json"


class RunSetupError(ValueError):
    """The run cannot start as asked (output folder, data, resume): found before the first step, with the fix."""


def first_line(err: BaseException) -> str:
    """The first line of an error's message (some of PyTorch's run to a page)."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


# ----------------------------------------------------------------------------------------------
# The output folder
# ----------------------------------------------------------------------------------------------


def check_out_dir(out_dir: str | os.PathLike, resume: bool = False) -> Path:
    """``out_dir`` as a Path, or RunSetupError: it is a file, lies under a file, cannot be written, or already
    holds a checkpoint that a run without ``resume`` would overwrite."""
    check_path("out_dir", out_dir)
    if not os.fspath(out_dir).strip():  # `--out "$RUN"` with RUN unset: Path("") is the current folder
        raise RunSetupError(
            f"--out is empty ({os.fspath(out_dir)!r}), expected a folder for {CHECKPOINT_NAME} and {SUMMARY_NAME}, "
            "such as runs/NAME in the course folder (an unset shell variable?); give . for the current folder"
        )
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise RunSetupError(
            f"--out {out_dir} is a file, expected a folder for {CHECKPOINT_NAME} and "
            f"{SUMMARY_NAME}: choose another --out, or move the file away"
        )
    check_can_create(out_dir, "--out")
    try:  # the permission bits can say yes where the system says no (root under /proc, a full or read-only disk)
        _probe_out_dir(out_dir)
    except OSError as e:
        raise RunSetupError(
            f"--out {out_dir} cannot be written here ({e.strerror or e}): choose a folder you can write to, "
            "such as runs/NAME in the course folder"
        ) from None
    if not resume and (out_dir / CHECKPOINT_NAME).exists():
        raise RunSetupError(
            f"--out {out_dir} already holds a run ({CHECKPOINT_NAME}): add --resume to continue "
            "it, or choose another --out for a new run (delete the folder to start it over)"
        )
    return out_dir


def _nearest_existing(path: Path) -> Path:
    """``path`` if it is there, else the nearest folder above it that is."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_can_create(path: Path, flag: str) -> None:
    """RunSetupError unless ``path`` (a folder or a file) can be created or replaced by this process."""
    existing = _nearest_existing(path)  # the run creates the rest
    if existing != path and not existing.is_dir():
        raise RunSetupError(
            f"{flag} {path} cannot be created: {existing} is a file, not a folder; choose another {flag}"
        )
    folder = existing if existing.is_dir() else existing.parent
    if not os.access(folder, os.W_OK | os.X_OK):  # also False on a read-only file system, even for root
        raise RunSetupError(
            f"{flag} {path}: {folder} is not writable here; choose a folder you can write "
            "to, such as runs/NAME in the course folder"
        )


def _probe_out_dir(out_dir: Path) -> None:
    """OSError unless a file can really be written in ``out_dir``, or, where it is still to be made, in a new
    folder in the nearest existing folder above it (made and removed at once: a refused run leaves nothing)."""
    existing = _nearest_existing(out_dir)
    if existing == out_dir:
        probe_writable(out_dir)
        return
    folder = tempfile.mkdtemp(dir=existing, prefix=".probe-", suffix=".tmp")
    try:
        probe_writable(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# Processes, device and data
# ----------------------------------------------------------------------------------------------


def join_processes(batch_size: int, device: str | torch.device | None) -> tuple[int, int, torch.device]:
    """(rank, world size, device): under torchrun, join the process group, each process on its own GPU where
    there are GPUs; alone, (0, 1, the device asked for or the best one here)."""
    rank, world, local_rank = _distributed()
    if world > 1:
        if batch_size % world != 0:
            raise ValueError(f"batch_size ({batch_size}) must be divisible by the number of processes ({world})")
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    if world > 1 and torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        return rank, world, device
    return rank, world, pick_device(device)  # ValueError with the fix for a device this machine does not have


def _distributed() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's environment; (0, 1, 0) when run as one process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1, 0
    return int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0"))


def read_data(data_path: str | os.PathLike, say: Callable[[str], None]) -> str:
    """The training text; the course corpus only after its sha256 matches (ChecksumError otherwise)."""
    text = load_text(data_path)  # checks the course corpus' sha256
    if is_course_corpus(data_path):
        say(f"data: {data_path} is the course corpus, sha256 verified")
    else:
        say(
            f"data: {data_path} is your own text (not the course corpus): used as it is, not verified "
            "against a pinned sha256"
        )
    return text


# ----------------------------------------------------------------------------------------------
# The GPU recipe's switches
# ----------------------------------------------------------------------------------------------


def compile_available(device: torch.device) -> tuple[bool, str]:
    """Whether ``torch.compile`` can work on ``device`` here, and if not, why (one phrase).

    CUDA needs Triton (PyPI has none for Windows); the CPU needs a C++ compiler for inductor's kernels.
    """
    if device.type == "cuda" and importlib.util.find_spec("triton") is None:
        return False, "Triton is not installed (PyPI has no Triton for Windows)"
    if device.type == "cpu":
        names = [os.environ.get("CXX", ""), "g++", "clang++", "c++", "cl"]
        if not any(name and shutil.which(name) for name in names):
            return False, "inductor needs a C++ compiler for the CPU, and none was found (install g++ or clang++)"
    return True, ""


def fused_adamw_available(device: torch.device) -> bool:
    """Whether this PyTorch build has a fused AdamW step for ``device`` (CUDA, and the CPU since torch 2.4)."""
    p = torch.zeros(1, device=device, requires_grad=True)
    p.grad = torch.zeros(1, device=device)
    try:
        torch.optim.AdamW([p], fused=True).step()
    except (RuntimeError, ValueError):
        return False
    return True


@dataclass(frozen=True)
class Switches:
    """The GPU recipe's switches as one session uses them (see :func:`gpu_switches`)."""

    compile: bool
    autocast: str  # "bf16" or "off"
    fused_adamw: bool


def gpu_switches(train_config: Any, device: torch.device) -> tuple[Switches, list[str]]:
    """Which of the GPU recipe's switches this session uses on ``device``, and a notice for each that cannot be.

    ``train_config`` is a :class:`~course_utils.train.TrainConfig`: its ``compile``, ``autocast`` and
    ``fused_adamw`` (``None``: on for CUDA, off elsewhere)."""
    on_cuda = device.type == "cuda"
    notices = []
    use_compile = on_cuda if train_config.compile is None else train_config.compile
    if use_compile:
        ok, why = compile_available(device)
        if not ok:
            use_compile = False
            notices.append(f"torch.compile is off: {why}; training in eager mode (slower, same results)")
    autocast = train_config.autocast or ("bf16" if on_cuda else "off")
    fused = on_cuda if train_config.fused_adamw is None else train_config.fused_adamw
    if fused and not fused_adamw_available(device):
        raise RunSetupError(
            f"fused AdamW is not available for {device} in torch {torch.__version__}: "
            "leave out --fused-adamw (or set fused_adamw=False)"
        )
    return Switches(use_compile, autocast, fused), notices


def autocast_context(device: torch.device, mode: str) -> Callable[[], Any]:
    """A context factory: bfloat16 autocast on ``device`` for ``mode`` "bf16", nothing for "off"."""
    if mode == "bf16":
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext
