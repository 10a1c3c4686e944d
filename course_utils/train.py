"""Train the tiny GPT of notebook 10: one readable loop for the notebook and for the command line.

Reading order: the training settings (:class:`TrainConfig`, with presets named like the model's), the
learning-rate schedule (:func:`learning_rate`), checkpoints (:func:`save_checkpoint`, :func:`load_checkpoint`),
evaluation (:func:`evaluate`, the mean loss over a whole split), the set-up checks that run before the first
step (:func:`check_out_dir`, :func:`gpu_switches`), the loop (:func:`train`: forward, backward, update; time and
log; evaluate and save) with the small pieces it calls beside it (the window of recent steps, the finite-loss
guard, the summary), then how a run is set up (``_set_up``: processes, data, resume, model, optimizer, compile).

Command line (prints one JSON line at the end; progress and messages go to stderr)::

    python -m course_utils.train --preset tiny --data datasets/shakespeare.txt --out runs/tiny
    python -m course_utils.train --preset gpu --data ... --out runs/gpu --resume     # continue a run
    torchrun --nproc_per_node=2 -m course_utils.train --preset gpu --data ... --out runs/ddp   # several GPUs

What makes it dependable:

* ``--resume`` continues exactly where the last checkpoint left off: model, optimizer, step, and every random
  number generator (PyTorch's, CUDA's and the batch sampler's) are saved, so on a CPU the resumed loss curve
  equals the uninterrupted one. Checkpoints are written every ``checkpoint_interval`` steps to a temporary file
  and renamed over the old one (``os.replace``), so a run killed at any moment loses at most that many steps and
  never leaves half a checkpoint. They hold only tensors and plain containers and load with
  ``torch.load(weights_only=True)``.
* A NaN or infinite loss stops the run with :class:`NonFiniteLossError` before anything is saved, so the last
  checkpoint on disk is the last good one.
* Under ``torchrun`` every process draws the *same* batch of ``batch_size`` windows and trains on its own slice
  of it, so N processes see exactly the data one process would: the runs differ only by rounding.
* Everything is checked before the first step (:func:`check_out_dir`, the device, the data's size, the course
  corpus' sha256, a resumed run's settings): a problem is one line with its fix, and the command line exits
  with code 2 (1 for a run that failed while training). Temporary files left by a killed save are removed at
  the start of the next run in that folder.
* The GPU recipe's parts switch on one by one, on any device: ``compile`` (``torch.compile``), ``autocast``
  (``"bf16"``) and ``fused_adamw``; by default all three on CUDA and none elsewhere. ``torch.compile`` is used
  only where it can work (Triton for CUDA, a C++ compiler for the CPU); otherwise a one-line notice and eager
  mode. The test suite runs all three on the CPU (tests/test_train_gpu_paths.py).

``--resume`` with a checkpoint continues *that* run: its model, data and settings. A ``--preset`` or ``--data``
that does not match it is refused (you most likely pointed at the wrong folder); a setting flag that differs
from the checkpoint's (``--batch-size``, ``--learning-rate``, ...) is ignored with a one-line notice saying so;
``--max-steps`` is obeyed (to train a run for longer); device, threads and the three GPU switches are this
session's. Notices go to stderr even with ``--quiet``.

Shapes: batches are (B, T) token ids, T = context_length.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from course_utils._files import atomic_path, clean_stale_tmp, probe_writable, write_atomic
from course_utils._validate import (
    check_bool,
    check_choice,
    check_fraction,
    check_int,
    check_nonnegative_number,
    check_number,
    check_path,
    check_positive_number,
    from_preset,
)
from course_utils.data import (
    CharTokenizer,
    ChecksumError,
    check_text_size,
    get_batch,
    is_course_corpus,
    iter_eval_batches,
    load_text,
    sha256_bytes,
    split_data,
)
from course_utils.devices import pick_device
from course_utils.gpt import GPT, PRESETS, GPTConfig

__all__ = [
    "TrainConfig",
    "TRAIN_PRESETS",
    "CheckpointError",
    "NonFiniteLossError",
    "RunSetupError",
    "learning_rate",
    "pick_device",
    "check_out_dir",
    "compile_available",
    "fused_adamw_available",
    "Switches",
    "gpu_switches",
    "save_checkpoint",
    "load_checkpoint",
    "export_model",
    "load_model",
    "evaluate",
    "train",
    "main",
]

CHECKPOINT_NAME = "checkpoint.pt"
SUMMARY_NAME = "summary.json"
_FORMAT = "course_utils.train/1"


# ----------------------------------------------------------------------------------------------
# Settings
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainConfig:
    """How to train (the model's shape is a :class:`~course_utils.gpt.GPTConfig`).

    ``batch_size`` is the whole batch of one optimizer step, summed over processes under ``torchrun``.
    The learning rate warms up linearly for ``warmup_steps``, then follows a cosine from ``learning_rate``
    down to ``min_lr`` at ``max_steps``. ``eval_interval`` steps apart, the loss is estimated on
    ``eval_batches`` batches of each split (the final ``val_loss`` is the mean over the whole validation
    split).

    Three switches for the GPU recipe, each on any device; ``None`` means "on for CUDA, off elsewhere":
    ``compile`` (``torch.compile``; off with a notice where it cannot work), ``autocast`` (``"bf16"`` for
    bfloat16 autocast, ``"off"``) and ``fused_adamw`` (AdamW's one-kernel step). They are how *this session*
    runs, not part of the run: a resumed run takes them from the caller, not from the checkpoint.
    """

    batch_size: int = 64
    max_steps: int = 5000
    learning_rate: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0
    eval_interval: int = 500
    eval_batches: int = 20
    log_interval: int = 10
    checkpoint_interval: int = 1000
    seed: int = 1337
    compile: bool | None = None
    autocast: str | None = None
    fused_adamw: bool | None = None

    def __post_init__(self) -> None:
        for name in ("batch_size", "max_steps", "eval_interval", "eval_batches", "log_interval", "checkpoint_interval"):
            check_int(name, getattr(self, name))
        check_int("warmup_steps", self.warmup_steps, minimum=0)
        check_positive_number("learning_rate", self.learning_rate)
        min_lr = check_number("min_lr", self.min_lr, f"a number in [0, learning_rate = {self.learning_rate}]")
        if not 0 <= min_lr <= self.learning_rate:
            raise ValueError(f"min_lr must be in [0, learning_rate = {self.learning_rate}], got {self.min_lr!r}")
        check_nonnegative_number("weight_decay", self.weight_decay)
        for name in ("beta1", "beta2"):
            check_fraction(name, getattr(self, name))
        if not check_number("grad_clip", self.grad_clip, "a positive number") > 0:
            raise ValueError(f"grad_clip must be positive (math.inf turns clipping off), got {self.grad_clip!r}")
        check_int("seed", self.seed, minimum=None)
        for name in ("compile", "fused_adamw"):
            if getattr(self, name) is not None:
                check_bool(name, getattr(self, name), "True, False or None (on for CUDA only)")
        check_choice("autocast", self.autocast, (None, "bf16", "off"), " (bf16 on CUDA only)")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> TrainConfig:
        """The training settings that go with the model preset of the same name, with fields replaced."""
        return from_preset(cls, TRAIN_PRESETS, name, overrides)


TRAIN_PRESETS: dict[str, TrainConfig] = {
    "tiny": TrainConfig(
        batch_size=16,
        max_steps=200,
        learning_rate=3e-3,
        min_lr=3e-4,
        warmup_steps=10,
        eval_interval=100,
        eval_batches=4,
        log_interval=10,
        checkpoint_interval=100,
    ),
    "cpu": TrainConfig(
        batch_size=32,
        max_steps=1000,
        learning_rate=3e-3,
        min_lr=3e-4,
        warmup_steps=50,
        eval_interval=500,
        eval_batches=8,
        log_interval=50,
        checkpoint_interval=250,
    ),
    "gpu": TrainConfig(
        batch_size=64,
        max_steps=5000,
        learning_rate=1e-3,
        min_lr=1e-4,
        warmup_steps=100,
        eval_interval=500,
        eval_batches=20,
        log_interval=50,
        checkpoint_interval=1000,
    ),
}
assert set(TRAIN_PRESETS) == set(PRESETS), "every model preset needs training settings of the same name"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read or does not fit the run."""


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite; the last checkpoint on disk is still the last good one."""


class RunSetupError(ValueError):
    """The run cannot start as asked (output folder, data, resume): found before the first step, with the fix."""


def learning_rate(step: int, train_config: TrainConfig) -> float:
    """Linear warmup over ``warmup_steps``, then a cosine from ``learning_rate`` to ``min_lr`` at ``max_steps``.

    ``warmup_steps`` may exceed ``max_steps`` on purpose (a short smoke run of a preset, ``--max-steps 3``): the
    rate then stays on its warmup ramp for the whole run."""
    step = check_int("step", step, minimum=0)
    if not isinstance(train_config, TrainConfig):
        raise TypeError(
            f"train_config must be a TrainConfig (TrainConfig.preset('tiny'), say), got {type(train_config).__name__}"
        )
    warmup, max_steps = train_config.warmup_steps, train_config.max_steps
    top, bottom = train_config.learning_rate, train_config.min_lr
    if step < warmup:
        return top * (step + 1) / warmup
    if step >= max_steps:
        return bottom
    progress = (step - warmup) / max(1, max_steps - warmup)  # 0 -> 1
    return bottom + 0.5 * (1.0 + math.cos(math.pi * progress)) * (top - bottom)


# ----------------------------------------------------------------------------------------------
# Checkpoints
# ----------------------------------------------------------------------------------------------


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically, with :func:`course_utils._files.atomic_path`.

    A temporary file of its own per writer, flushed to disk, then renamed over ``path``: readers see the old file
    or the new one, never half, and two runs saving into one folder never rename each other's file. One killed
    mid-save leaves its temporary file, which the next run in that folder removes (:func:`_clean_stale_tmp`).
    """
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


_REQUIRED = ("format", "model", "optimizer", "step", "model_config", "train_config", "rng", "tokenizer", "history")


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint written by :func:`train`, with ``weights_only=True``; CheckpointError if it is damaged."""
    path = _existing_file(path, "checkpoint", "train a model first (python -m course_utils.train ...)")
    state = _read_state(
        path, "checkpoint", "checkpoint", (_FORMAT,), "Delete it to start again, or restore an intact copy."
    )
    missing = [k for k in _REQUIRED if k not in state]
    if missing:
        raise CheckpointError(f"checkpoint {path} lacks {missing}: it was not written by this version")
    return state


def _read_state(path: Path, what: str, kind: str, formats: tuple[str, ...], fix: str) -> dict[str, Any]:
    """The dict that :func:`save_checkpoint` wrote to ``path``, read with ``weights_only=True`` onto the CPU:
    the one reader behind :func:`load_checkpoint` (resume, export) and :func:`load_model`.

    CheckpointError if the file ("cannot read ``what``") is damaged, the message ending with ``fix``, or if it
    holds none of ``formats`` ("not a ``kind`` written by course_utils.train").
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as err:  # truncated zip, bad pickle, foreign objects: all mean "cannot trust this file"
        raise CheckpointError(
            f"cannot read {what} {path}: it is truncated or corrupt ({type(err).__name__}: {_first_line(err)}). {fix}"
        ) from err
    if not isinstance(state, dict) or state.get("format") not in formats:
        raise CheckpointError(f"{path} is not a {kind} written by course_utils.train")
    return state


def _existing_file(path: object, what: str, how: str) -> Path:
    """``path`` as a Path if it names an existing file; TypeError for a non-path, FileNotFoundError saying how
    to make one otherwise (before torch.load, whose error comes from deep inside)."""
    check_path("path", path)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {what} at {path}: {how}")
    return path


def _first_line(err: BaseException) -> str:
    """The first line of an error's message (some of PyTorch's run to a page)."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


_MODEL_FORMAT = "course_utils.model/1"


def export_model(checkpoint: str | os.PathLike, dest: str | os.PathLike, provenance: dict[str, Any]) -> Path:
    """Write a small file with what a learner needs to use a trained model: weights, config, tokenizer, history.

    It leaves out the optimizer and random states (two thirds of a checkpoint), so it cannot resume a run;
    ``provenance`` (the command, device, date, figures) is stored with it. Written atomically; read it back
    with :func:`load_model`. Used by ``--export``; notebooks 10 and 11 load the course's committed one.
    """
    state = load_checkpoint(checkpoint)
    slim = {
        "format": _MODEL_FORMAT,
        "model": state["model"],
        "model_config": state["model_config"],
        "tokenizer": state["tokenizer"],
        "history": state["history"],
        "evals": state.get("evals", []),
        "step": state["step"],
        "provenance": json.loads(json.dumps(provenance)),
    }  # plain data only
    dest = Path(dest)
    clean_stale_tmp(dest.parent, dest.name)  # a killed export's temporary file
    save_checkpoint(dest, slim)
    return dest


def load_model(path: str | os.PathLike, device: str | torch.device = "cpu") -> tuple[GPT, CharTokenizer, dict]:
    """A trained :class:`GPT` (in eval mode), its tokenizer, and the file's other contents (provenance, history).

    Reads a file written by :func:`export_model` or a full training checkpoint, with ``weights_only=True``;
    :class:`CheckpointError` if it is damaged or of another kind.
    """
    path = _existing_file(path, "model file", "export one with export_model(checkpoint, dest, provenance)")
    device = pick_device(device)
    state = _read_state(path, "model file", "model", (_MODEL_FORMAT, _FORMAT), "Fetch or export it again.")
    model = GPT(GPTConfig.from_dict(state["model_config"]))
    model.load_state_dict(state["model"])
    info = {k: v for k, v in state.items() if k not in ("model", "optimizer", "rng")}
    return model.to(device).eval(), CharTokenizer(state["tokenizer"]), info


# ----------------------------------------------------------------------------------------------
# Evaluation
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def evaluate(
    model: GPT,
    data: torch.Tensor,
    context_length: int,
    batch_size: int = 64,
    device: torch.device | str = "cpu",
    autocast: Any = contextlib.nullcontext,
) -> float:
    """The mean next-token loss over *every* position of ``data``, in consecutive windows (not a sample).

    Each target in ``data[1:]`` is counted once (``iter_eval_batches`` with ``drop_last=False``); the loss is
    summed over targets and divided by their number, so a shorter last batch is weighted correctly.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (a GPT), got {type(model).__name__}")
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for x, y in iter_eval_batches(data, batch_size, context_length, device=device, drop_last=False):
        with autocast():
            logits, _ = model(x)  # (B, T, V)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum")
        total += loss.item()
        count += y.numel()
    model.train(was_training)
    return total / count


@torch.no_grad()
def _estimate(
    model: GPT,
    data: torch.Tensor,
    train_config: TrainConfig,
    context_length: int,
    device: torch.device,
    autocast: Any,
    seed: int,
) -> float:
    """Mean loss over ``eval_batches`` random batches drawn with their own generator (the same ones every time)."""
    was_training = model.training
    model.eval()
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(train_config.eval_batches):
        x, y = get_batch(data, train_config.batch_size, context_length, generator=g, device=device)
        with autocast():
            _, loss = model(x, y)
        losses.append(loss.float())
    model.train(was_training)
    return torch.stack(losses).mean().item()


# ----------------------------------------------------------------------------------------------
# Set-up: everything that can be checked is checked before the first step
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
    _check_can_create(out_dir, "--out")
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


def _check_can_create(path: Path, flag: str) -> None:
    """RunSetupError unless ``path`` (a folder or a file) can be created or replaced by this process."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent  # the nearest folder that is there: the run creates the rest
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
    existing = out_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing == out_dir:
        probe_writable(out_dir)
        return
    folder = tempfile.mkdtemp(dir=existing, prefix=".probe-", suffix=".tmp")
    try:
        probe_writable(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _clean_stale_tmp(out_dir: Path) -> list[Path]:
    """Remove the temporary checkpoints of saves that were killed (their process is gone); keep a live writer's."""
    return clean_stale_tmp(out_dir)


def _read_data(data_path: str | os.PathLike, say: Callable[[str], None]) -> str:
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


_SESSION_FIELDS = ("compile", "autocast", "fused_adamw")  # how this machine runs, not what the run is
_CLI_FLAGS = {"seed", "batch_size", "learning_rate", "eval_interval", "log_interval", "checkpoint_interval"}


def _describe_model(config: GPTConfig) -> str:
    preset = next(
        (name for name, p in PRESETS.items() if dataclasses.replace(p, vocab_size=config.vocab_size) == config), None
    )
    shape = f"{config.num_layers} layers, {config.embed_dim} wide, context {config.context_length}"
    shape += ", post-norm" if config.norm_position == "post" else ""  # else two refused models read the same
    return f"the {preset!r} preset ({shape})" if preset else f"a model of {shape}"


def _check_resume(
    state: dict[str, Any],
    ckpt_path: Path,
    config: GPTConfig,
    train_config: TrainConfig | None,
    text: str,
    max_steps: int | None,
) -> list[str]:
    """Refuse a resume that would be another run (another model, other text); list the settings it keeps.

    Returns one notice per setting in ``train_config`` that differs from the checkpoint's (the session's switches
    excepted): the run keeps its own, and the notice says so (``max_steps`` changes through train's argument).
    """
    saved = GPTConfig.from_dict(state["model_config"])
    if dataclasses.replace(config, vocab_size=saved.vocab_size) != saved:
        raise RunSetupError(
            f"--resume: {ckpt_path} is a run of {_describe_model(saved)}, not {_describe_model(config)} as asked: "
            "leave out --preset to continue that run, or choose another --out for a new one"
        )
    digest = sha256_bytes(text.encode("utf-8"))
    if state.get("text_sha256", digest) != digest:
        raise RunSetupError(
            f"--resume: {ckpt_path} was trained on a text with sha256 {state['text_sha256'][:16]}..., but --data "
            f"has {digest[:16]}...: pass the same file to continue that run, or choose another --out for a new one"
        )
    if train_config is None:
        return []
    kept = TrainConfig(**state["train_config"])
    notices = []
    for field in dataclasses.fields(TrainConfig):
        name = field.name
        if name in _SESSION_FIELDS or (name == "max_steps" and max_steps is not None):
            continue
        old, new = getattr(kept, name), getattr(train_config, name)
        if old != new:
            given = f"--{name.replace('_', '-')}" if name in _CLI_FLAGS else name
            how = f" (to change it, pass max_steps={new} to train)" if name == "max_steps" else ""
            notices.append(f"--resume: keeping the checkpoint's {name} {old}; your {given} {new} is ignored{how}")
    return notices


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


def gpu_switches(train_config: TrainConfig, device: torch.device) -> tuple[Switches, list[str]]:
    """Which of the GPU recipe's switches this session uses on ``device``, and a notice for each that cannot be."""
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


def _autocast(device: torch.device, mode: str) -> Callable[[], Any]:
    if mode == "bf16":
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


# ----------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------


def train(
    config: GPTConfig | str,
    data_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    train_config: TrainConfig | None = None,
    *,
    device: str | torch.device | None = None,
    resume: bool = False,
    max_steps: int | None = None,
    max_seconds: float | None = None,
    progress: bool | None = None,
    verbose: bool = False,
    callback: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Train a GPT on the text at ``data_path``; checkpoints go to ``out_dir/checkpoint.pt``. Taught in notebook 10.

    ``config`` is a :class:`~course_utils.gpt.GPTConfig` or a preset name (then ``train_config`` defaults to
    the training preset of that name). Its ``vocab_size`` is replaced by the tokenizer's. With ``resume`` and a
    checkpoint in ``out_dir``, the run's saved configurations are used instead of ``config`` and ``train_config``:
    another model or another text is refused (RunSetupError), a setting of ``train_config`` that differs is kept
    from the checkpoint with a notice on stderr; only ``max_steps`` (this argument) can change, to train a
    finished run for longer, and ``train_config``'s ``compile``, ``autocast`` and ``fused_adamw`` are this
    session's. Before the first step it checks the output folder (:func:`check_out_dir`: without ``resume`` it
    never overwrites a run), the device, the data (the course corpus by its sha256; enough text for the split and
    the context) and removes temporary files of killed saves in ``out_dir``. ``max_seconds`` stops the run early
    (after a checkpoint). ``progress`` shows a tqdm bar (default: when stderr is a terminal).
    ``callback(event)`` is called with ``{"kind": "train", "step", "loss", "lr", "tokens_per_s"}`` at every
    multiple of ``log_interval``, ``eval_interval`` and ``checkpoint_interval`` and at the last step (``loss`` is
    the mean over the steps since the previous one) and ``{"kind": "eval", "step", "train_loss", "val_loss"}``
    at each evaluation: every multiple of ``eval_interval`` and the last step, whatever the other two intervals;
    an exception it raises stops the run like a kill would.

    Returns a dict: ``val_loss`` (whole validation split), ``train_loss`` (estimate on ``eval_batches`` random
    training batches), ``steps``, ``tokens_per_s``, ``wall_s``, ``params``, ``device``, ``history`` (the loss of
    every step), ``evals``, ``compiled``, ``autocast``, ``fused_adamw``, ``notices``, and more (see
    :func:`_summary`); an empty dict in processes other than the first under ``torchrun``. Raises
    :class:`RunSetupError`, ValueError, FileNotFoundError or :class:`~course_utils.data.ChecksumError` before the
    first step, :class:`CheckpointError` when ``resume`` finds a damaged checkpoint, and
    :class:`NonFiniteLossError` on a NaN or infinite loss.

    Shapes: each step's batch is (B, T) token ids, B = ``batch_size`` (B / processes per process under
    ``torchrun``), T = ``context_length``.
    """
    wall_start = time.perf_counter()
    run = _set_up(
        config,
        data_path,
        out_dir,
        train_config,
        device=device,
        resume=resume,
        max_steps=max_steps,
        max_seconds=max_seconds,
        verbose=verbose,
        callback=callback,
    )
    train_config, model, optimizer = run.train_config, run.model, run.optimizer
    bar = _ProgressBar(progress, run)
    window = _Window(run, max_seconds)  # the steps since the last log line: their losses, tokens and time
    start_step, stop_reason = run.step, "max_steps"
    model.train()
    for step in range(start_step + 1, train_config.max_steps + 1):  # step: this update's number, from 1
        # forward, backward, update
        lr = learning_rate(step - 1, train_config)  # the schedule counts updates from 0
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = run.batch()  # (B / processes, T): this process' rows of the batch every process draws
        with run.autocast():
            _, loss = run.fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train_config.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        run.step = step
        window.add(loss)  # stays on the device until the window closes; times the first step on its own
        last = step == train_config.max_steps
        evaluate_now = step % train_config.eval_interval == 0 or last
        save_now = step % train_config.checkpoint_interval == 0 or last
        if not (step % train_config.log_interval == 0 or evaluate_now or save_now):
            continue

        # time and log: one synchronisation per window, for the losses and the "out of time" flag
        losses, out_of_time = window.sync()  # this window's losses, averaged over processes
        _check_finite(losses, step, run.ckpt_path, bar)  # before anything is saved
        run.history.extend(losses)
        tokens_per_s = window.close()
        mean_loss = sum(losses) / len(losses)
        bar.update(len(losses), mean_loss, tokens_per_s)
        events = [{"kind": "train", "step": step, "loss": mean_loss, "lr": lr, "tokens_per_s": tokens_per_s}]

        # evaluate and save (process 0; the others wait at the barrier)
        if run.master and evaluate_now:
            events.append(_evaluate_splits(run))
        if save_now or out_of_time:
            run.save_checkpoint()
        if callback is not None and run.master:  # after the checkpoint: a callback that raises is a kill
            for event in events:
                callback(event)
        if run.world > 1:
            dist.barrier()
        window.restart()  # evaluation and saving are not training time
        if out_of_time:
            stop_reason = "max_seconds"
            break
    bar.close()
    return _summary(run, window, start_step, stop_reason, wall_start)


class _ProgressBar:
    """A tqdm bar on process 0 if ``progress`` (None: when stderr is a terminal); otherwise it does nothing."""

    def __init__(self, progress: bool | None, run: _Run):
        self.bar = None
        if (sys.stderr.isatty() if progress is None else progress) and run.master:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=run.train_config.max_steps, initial=run.step, unit="step", dynamic_ncols=True)

    def update(self, steps: int, loss: float, tokens_per_s: float) -> None:
        if self.bar is not None:
            self.bar.update(steps)
            self.bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{tokens_per_s:,.0f}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _Window:
    """The steps since the last log line: their losses (kept on the device until then), tokens and time.

    ``sync`` fetches the losses, averaged over processes, with one flag that is true if any process ran past
    ``max_seconds``; ``close`` adds the window's time to ``train_s`` and gives its tokens per second; ``restart``
    opens the next window after evaluation and saving. ``first_step_s`` is the first step alone (it compiles).
    """

    def __init__(self, run: _Run, max_seconds: float | None):
        self.device, self.world, self.max_seconds = run.device, run.world, max_seconds
        self.tokens_per_step = run.train_config.batch_size * run.config.context_length
        self.losses: list[torch.Tensor] = []
        self.tokens, self.steps, self.train_s, self.first_step_s = 0, 0, 0.0, 0.0
        self.start = self.loop_start = time.perf_counter()

    def add(self, loss: torch.Tensor) -> None:
        self.losses.append(loss.detach())
        self.tokens += self.tokens_per_step
        self.steps += 1
        if self.steps == 1:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.first_step_s = time.perf_counter() - self.loop_start

    def sync(self) -> tuple[list[float], bool]:
        out_of_time = self.max_seconds is not None and time.perf_counter() - self.loop_start >= self.max_seconds
        flags = torch.stack([*(p.float() for p in self.losses), torch.tensor(float(out_of_time), device=self.device)])
        if self.world > 1:
            dist.all_reduce(flags, op=dist.ReduceOp.SUM)
            flags[:-1] /= self.world  # the losses' mean; the flag stays a count of processes out of time
        *losses, out_of_time = flags.tolist()
        self.losses = []
        return losses, out_of_time > 0

    def close(self) -> float:
        elapsed = time.perf_counter() - self.start
        self.train_s += elapsed
        tokens_per_s, self.tokens = self.tokens / elapsed, 0
        return tokens_per_s

    def restart(self) -> None:
        self.start = time.perf_counter()


def _check_finite(losses: list[float], step: int, ckpt_path: Path, bar: _ProgressBar) -> None:
    """NonFiniteLossError naming the first step whose loss is NaN or infinite; ``losses`` end at ``step``."""
    for loss_step, loss in enumerate(losses, start=step - len(losses) + 1):
        if not math.isfinite(loss):
            bar.close()
            raise NonFiniteLossError(
                f"the training loss became {loss} at step {loss_step}; stopped. The last good checkpoint is "
                f"{ckpt_path} (nothing was saved after it). Lower the learning rate or raise warmup_steps, then "
                "--resume."
            )


def _evaluate_splits(run: _Run) -> dict[str, Any]:
    """Estimate the loss on both splits (:func:`_estimate`), record and print it; the "eval" event."""
    train_config, T = run.train_config, run.config.context_length
    event = {
        "kind": "eval",
        "step": run.step,
        "train_loss": _estimate(
            run.model, run.train_data, train_config, T, run.device, run.autocast, train_config.seed + 1
        ),
        "val_loss": _estimate(
            run.model, run.val_data, train_config, T, run.device, run.autocast, train_config.seed + 2
        ),
    }
    run.evals.append([run.step, event["train_loss"], event["val_loss"]])
    run.say(f"step {run.step}: train {event['train_loss']:.4f}, val {event['val_loss']:.4f}")
    return event


def _summary(run: _Run, window: _Window, start_step: int, stop_reason: str, wall_start: float) -> dict[str, Any]:
    """The run's final figures (process 0 evaluates the whole validation split), also written to summary.json;
    an empty dict in the other processes."""
    result: dict[str, Any] = {}
    if run.master:
        train_config, T, model = run.train_config, run.config.context_length, run.model
        eval_start = time.perf_counter()
        val_loss = evaluate(
            model,
            run.val_data,
            T,
            batch_size=max(train_config.batch_size, 64),
            device=run.device,
            autocast=run.autocast,
        )
        train_loss = _estimate(model, run.train_data, train_config, T, run.device, run.autocast, train_config.seed + 1)
        final_eval_s = time.perf_counter() - eval_start
        steps_run, train_s = run.step - start_step, window.train_s
        tokens_per_step = train_config.batch_size * T
        after_first_s = train_s - window.first_step_s
        result = {
            "val_loss": val_loss,
            "train_loss": train_loss,
            "steps": run.step,
            "steps_this_run": steps_run,
            "tokens": run.step * tokens_per_step,
            "tokens_per_s": steps_run * tokens_per_step / train_s if train_s > 0 else 0.0,
            "tokens_per_s_after_first_step": (
                (steps_run - 1) * tokens_per_step / after_first_s if steps_run > 1 and after_first_s > 0 else 0.0
            ),
            "train_s": train_s,
            "first_step_s": window.first_step_s,
            "final_eval_s": final_eval_s,
            "wall_s": time.perf_counter() - wall_start,
            "params": model.num_parameters(),
            "flops_per_token": model.flops_per_token(),
            "device": str(run.device),
            "world_size": run.world,
            "compiled": run.switches.compile,
            "autocast": run.switches.autocast,
            "fused_adamw": run.switches.fused_adamw,
            "notices": run.notices,
            "stopped_by": stop_reason,
            "checkpoint": str(run.ckpt_path),
            "model_config": run.config.to_dict(),
            "train_config": dataclasses.asdict(train_config),
            "history": run.history,
            "evals": run.evals,
        }
        write_atomic(run.out_dir / SUMMARY_NAME, (json.dumps(result) + "\n").encode())  # never half a summary
    if run.world > 1:
        dist.barrier()
    return result


# ----------------------------------------------------------------------------------------------
# Set-up of a run: what train() builds before the first step
# ----------------------------------------------------------------------------------------------


@dataclass
class _Run:
    """One run as the loop sees it, built by :func:`_set_up`; the loop advances ``step``, ``history``, ``evals``."""

    train_config: TrainConfig
    config: GPTConfig
    device: torch.device
    rank: int  # this process under torchrun (0 alone); process 0 evaluates, saves and reports
    world: int  # the number of processes
    out_dir: Path
    tokenizer: CharTokenizer
    train_data: torch.Tensor  # (N_train,) token ids
    val_data: torch.Tensor  # (N_val,) token ids
    text_sha256: str  # a resumed run refuses other text
    model: GPT
    fwd: nn.Module  # what the loop calls: the model, compiled and/or wrapped in DistributedDataParallel
    optimizer: torch.optim.AdamW
    batch_gen: torch.Generator  # draws the batches: the same ones in every process
    autocast: Callable[[], Any]
    switches: Switches
    notices: list[str]
    say: Callable[[str], None]
    step: int = 0  # updates done
    history: list[float] = dataclasses.field(default_factory=list)  # the loss of every update
    evals: list[list[float]] = dataclasses.field(default_factory=list)  # [step, train_loss, val_loss] each

    @property
    def master(self) -> bool:
        return self.rank == 0

    @property
    def ckpt_path(self) -> Path:
        return self.out_dir / CHECKPOINT_NAME

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets, (B / processes, T) each, on the device: this process' rows of one shared batch."""
        x, y = get_batch(
            self.train_data, self.train_config.batch_size, self.config.context_length, generator=self.batch_gen
        )  # (B, T): the same in every process
        per_rank = self.train_config.batch_size // self.world
        rows = slice(self.rank * per_rank, (self.rank + 1) * per_rank)
        x, y = x[rows], y[rows]  # (B / processes, T)
        if self.device.type == "cuda":  # page-locked memory: the copy runs alongside the GPU instead of waiting
            x, y = x.pin_memory(), y.pin_memory()
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def save_checkpoint(self) -> None:
        """Process 0 writes everything a resumed run needs: model, optimizer, step, settings, random states."""
        if not self.master:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        save_checkpoint(
            self.ckpt_path,
            {
                "format": _FORMAT,
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "step": self.step,
                "model_config": self.config.to_dict(),
                "train_config": dataclasses.asdict(self.train_config),
                "rng": _rng_state(self.batch_gen),
                "tokenizer": list(self.tokenizer.chars),
                "history": self.history,
                "evals": self.evals,
                "text_sha256": self.text_sha256,
            },
        )


def _set_up(
    config: GPTConfig | str,
    data_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    train_config: TrainConfig | None,
    *,
    device: str | torch.device | None,
    resume: bool,
    max_steps: int | None,
    max_seconds: float | None,
    verbose: bool,
    callback: Any,
) -> _Run:
    """Everything :func:`train` does before the first step. The checks come first, in the order a user meets
    them (the arguments, the processes and the device, the output folder, the data, a resumed run, the GPU
    switches); then the model, the optimizer and the random state, drawn in the same order in every run."""
    config, train_config, asked = _configs(config, train_config)
    if max_seconds is not None and not max_seconds > 0:
        raise RunSetupError(f"--max-seconds must be a positive number of seconds, got {max_seconds!r}")
    rank, world, device = _processes(train_config, device)
    say = (lambda msg: print(msg, file=sys.stderr, flush=True)) if (verbose and rank == 0) else (lambda msg: None)
    check_bool("resume", resume)
    check_bool("verbose", verbose)
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be a function taking one event dict, or None, got {type(callback).__name__}")
    out_dir = check_out_dir(out_dir, resume)
    if rank == 0 and (removed := _clean_stale_tmp(out_dir)):
        say(f"removed {len(removed)} temporary file(s) left in {out_dir} by a save that was killed")
    text = _read_data(data_path, say)
    state, config, train_config, tokenizer, notices = _resume(
        out_dir, resume, config, train_config, asked, text, max_steps, say
    )
    if max_steps is not None:
        train_config = dataclasses.replace(train_config, max_steps=max_steps)
    check_text_size(len(text), config.context_length, source=str(data_path))
    if tokenizer is None:  # a new run: the vocabulary of its text
        tokenizer = CharTokenizer.from_text(text)
        config = dataclasses.replace(config, vocab_size=tokenizer.vocab_size)
    train_data, val_data = split_data(tokenizer.encode(text))
    switches, switch_notices = gpu_switches(train_config, device)
    notices += switch_notices
    if rank == 0:
        for notice in notices:  # what differs from what was asked is shown even when quiet
            print(notice, file=sys.stderr, flush=True)

    torch.manual_seed(train_config.seed)  # the same initial weights in every process
    model = GPT(config).to(device)
    run = _Run(
        train_config,
        config,
        device,
        rank,
        world,
        out_dir,
        tokenizer,
        train_data,
        val_data,
        text_sha256=sha256_bytes(text.encode("utf-8")),
        model=model,
        fwd=model,
        optimizer=_optimizer(model, train_config, switches.fused_adamw),
        batch_gen=torch.Generator().manual_seed(train_config.seed),  # the same batches everywhere
        autocast=_autocast(device, switches.autocast),
        switches=switches,
        notices=notices,
        say=say,
    )
    if state is not None:
        _restore(run, state)
    if rank > 0:  # dropout differs between processes, as it would between rows of one batch
        # (a checkpoint holds process 0's generator)
        torch.manual_seed(train_config.seed + 1_000_003 * rank + run.step)
    _compile_and_distribute(run)
    return run


def _configs(
    config: GPTConfig | str,
    train_config: TrainConfig | None,
) -> tuple[GPTConfig, TrainConfig, TrainConfig | None]:
    """The model and the settings asked for (a preset's name gives both), and ``train_config`` as it was given
    (a resumed run names the settings of it that it keeps)."""
    asked = train_config
    if isinstance(config, str):
        train_config = TrainConfig.preset(config) if train_config is None else train_config
        config = GPTConfig.preset(config)
    if not isinstance(config, GPTConfig):
        raise TypeError(f"config must be a GPTConfig or a preset name, got {type(config).__name__}")
    return config, TrainConfig() if train_config is None else train_config, asked


def _processes(train_config: TrainConfig, device: str | torch.device | None) -> tuple[int, int, torch.device]:
    """(rank, world size, device): under torchrun, join the process group, each process on its own GPU where
    there are GPUs; alone, (0, 1, the device asked for or the best one here)."""
    rank, world, local_rank = _distributed()
    if world > 1:
        if train_config.batch_size % world != 0:
            raise ValueError(
                f"batch_size ({train_config.batch_size}) must be divisible by the number of processes ({world})"
            )
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


def _resume(
    out_dir: Path,
    resume: bool,
    config: GPTConfig,
    train_config: TrainConfig,
    asked: TrainConfig | None,
    text: str,
    max_steps: int | None,
    say: Callable[[str], None],
) -> tuple[dict[str, Any] | None, GPTConfig, TrainConfig, CharTokenizer | None, list[str]]:
    """``(checkpoint, model config, settings, tokenizer, notices)`` of the run to continue: a resumed run's own,
    with this session's GPU switches, a notice for each setting of ``asked`` that it keeps, and RunSetupError if
    the checkpoint is another run (:func:`_check_resume`); ``(None, config, train_config, None, [])`` if new.
    """
    ckpt_path = out_dir / CHECKPOINT_NAME
    if not (resume and ckpt_path.exists()):
        if resume:
            say(f"no checkpoint at {ckpt_path}: starting from scratch")
        return None, config, train_config, None, []
    state = load_checkpoint(ckpt_path)
    notices = _check_resume(state, ckpt_path, config, asked, text, max_steps)
    tokenizer = CharTokenizer(state["tokenizer"])
    config = GPTConfig.from_dict(state["model_config"])
    session = {name: getattr(train_config, name) for name in _SESSION_FIELDS}
    # the run's own settings, this session's switches
    train_config = TrainConfig(**{**state["train_config"], **session})
    return state, config, train_config, tokenizer, notices


def _restore(run: _Run, state: dict[str, Any]) -> None:
    """Continue where the checkpoint left off: weights, optimizer, step, history and every random generator."""
    run.model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.step, run.history, run.evals = state["step"], list(state["history"]), list(state.get("evals", []))
    _set_rng_state(state["rng"], run.batch_gen)
    run.say(f"resumed from {run.ckpt_path} at step {run.step}")


def _compile_and_distribute(run: _Run) -> None:
    """What the loop calls (``run.fwd``): the model, compiled if switched on, wrapped in DistributedDataParallel
    under torchrun; TF32 matrix products on CUDA."""
    if run.switches.compile:
        run.fwd = torch.compile(run.model)
    if run.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [run.device.index] if run.device.type == "cuda" else None
        run.fwd = DistributedDataParallel(run.fwd, device_ids=device_ids)
    if run.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def _optimizer(model: GPT, train_config: TrainConfig, fused: bool) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on biases, LayerNorm gains or position vectors)."""
    params = list(model.parameters())  # each shared (tied) tensor once
    decay = [p for p in params if p.dim() >= 2 and (model.pos_emb is None or p is not model.pos_emb.embedding.weight)]
    decay_ids = {id(p) for p in decay}
    no_decay = [p for p in params if id(p) not in decay_ids]
    groups = [{"params": decay, "weight_decay": train_config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(
        groups,
        lr=train_config.learning_rate,
        betas=(train_config.beta1, train_config.beta2),
        **({"fused": True} if fused else {}),
    )


def _rng_state(batch_gen: torch.Generator) -> dict[str, Any]:
    return {
        "torch": torch.get_rng_state(),
        "batch": batch_gen.get_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def _set_rng_state(rng: dict[str, Any], batch_gen: torch.Generator) -> None:
    torch.set_rng_state(rng["torch"])
    batch_gen.set_state(rng["batch"])
    if rng.get("cuda") and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(rng["cuda"])


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m course_utils.train",
        description=__doc__.split("\n\n")[0],
        epilog="Exit codes: 0 done; 2 the run could not start (each problem in one line with its fix: --out, "
        "--device, --threads, the data, a resume that does not match); 1 it failed while training (NaN).",
    )
    p.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="model and training preset (default: tiny; with --resume, the checkpoint's)",
    )
    p.add_argument(
        "--data",
        required=True,
        help="a UTF-8 text file; first 90%% train, last 10%% validation "
        "(shakespeare.txt, the course corpus, is checked by its sha256)",
    )
    p.add_argument("--out", required=True, help="folder for checkpoint.pt and summary.json")
    p.add_argument("--max-steps", type=int, help="optimizer steps in all (the cosine schedule ends there)")
    p.add_argument("--max-seconds", type=float, help="stop after this much training time (after a checkpoint)")
    p.add_argument("--device", help="cuda, cuda:1, mps, cpu or auto (default: auto, the best available)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from OUT/checkpoint.pt if it exists, with its model, data and settings: another "
        "--preset or --data is refused, a setting flag that differs is ignored with a notice, "
        "--max-steps is obeyed",
    )
    p.add_argument("--seed", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--learning-rate", type=float)
    p.add_argument("--eval-interval", type=int)
    p.add_argument("--log-interval", type=int)
    p.add_argument("--checkpoint-interval", type=int)
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile the model (default: on CUDA with Triton only; --no-compile to turn it off)",
    )
    p.add_argument("--autocast", choices=["bf16", "off"], help="bfloat16 autocast (default: bf16 on CUDA only)")
    p.add_argument(
        "--fused-adamw",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="AdamW's fused step (default: on CUDA only; the CPU has one too)",
    )
    p.add_argument("--threads", type=int, help="CPU threads for PyTorch (torch.set_num_threads), at least 1")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar (default: when stderr is a terminal)",
    )
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no messages on stderr besides errors and notices (a flag --resume ignores, a switch that "
        "cannot work here)",
    )
    p.add_argument(
        "--export", metavar="PATH", help="also write the trained model (no optimizer state) with its provenance to PATH"
    )
    return p


def _provenance(argv: list[str], result: dict[str, Any], data: str) -> dict[str, Any]:
    """Where a model came from: the command, the machine, the date, the data and the figures it reached."""
    import datetime as dt
    import platform

    from course_utils.data import sha256_file

    command = "python -m course_utils.train " + " ".join(argv)
    device = result["device"]
    if device.startswith("cuda"):
        device += f" ({torch.cuda.get_device_name(torch.device(device))})"
    return {
        "command": command,
        "device": device,
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "data": {"file": Path(data).name, "sha256": sha256_file(data), "characters": len(load_text(data))},
        **{k: result[k] for k in ("val_loss", "train_loss", "steps", "tokens_per_s", "train_s", "wall_s", "params")},
    }


def _check_numbers(args: argparse.Namespace) -> None:
    """RunSetupError for a count or a time that cannot be (argparse only checks that it is a number)."""
    if args.threads is not None and args.threads < 1:
        raise RunSetupError(
            f"--threads must be a positive number of CPU threads, got {args.threads}; leave it out "
            f"for PyTorch's default ({torch.get_num_threads()} here)"
        )
    for name in ("max_steps", "batch_size", "eval_interval", "log_interval", "checkpoint_interval"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise RunSetupError(f"--{name.replace('_', '-')} must be a positive whole number, got {value}")
    if args.learning_rate is not None and not args.learning_rate > 0:
        raise RunSetupError(f"--learning-rate must be a positive number, got {args.learning_rate}")


def _cli_configs(args: argparse.Namespace) -> tuple[GPTConfig | str, TrainConfig]:
    """The model and the settings to pass to :func:`train`: the preset's with the flags given, or, resuming a
    checkpoint, the checkpoint's with the flags given (so train's notices name exactly the flags it ignores)."""
    overrides = {
        k: v
        for k, v in {
            "seed": args.seed,
            "batch_size": args.batch_size,
            "learning_rate": args.learning_rate,
            "eval_interval": args.eval_interval,
            "log_interval": args.log_interval,
            "checkpoint_interval": args.checkpoint_interval,
            "compile": args.compile,
            "autocast": args.autocast,
            "fused_adamw": args.fused_adamw,
        }.items()
        if v is not None
    }
    ckpt = Path(args.out) / CHECKPOINT_NAME
    if args.resume and ckpt.is_file() and not Path(args.out).is_file():
        state = load_checkpoint(ckpt)
        saved = {k: v for k, v in state["train_config"].items() if k not in _SESSION_FIELDS}
        config = args.preset or GPTConfig.from_dict(state["model_config"])
        return config, dataclasses.replace(TrainConfig(**saved), **overrides)
    preset = args.preset or "tiny"
    return preset, TrainConfig.preset(preset, **overrides)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    try:
        _check_numbers(args)
        if args.export:
            if Path(args.export).is_dir():
                raise RunSetupError(f"--export {args.export} is a folder, expected a file name such as model.pt")
            _check_can_create(Path(args.export), "--export")
        if args.threads:
            torch.set_num_threads(args.threads)
        config, train_config = _cli_configs(args)
        result = train(
            config,
            args.data,
            args.out,
            train_config,
            device=args.device,
            resume=args.resume,
            max_steps=args.max_steps,
            max_seconds=args.max_seconds,
            progress=args.progress,
            verbose=not args.quiet,
        )
    except NonFiniteLossError as err:  # the run started and failed: its last good checkpoint is kept
        print(f"error: {err}", file=sys.stderr)
        return 1
    except (RunSetupError, CheckpointError, ChecksumError, FileNotFoundError, ValueError, TypeError) as err:
        print(f"error: {_first_line(err)}", file=sys.stderr)  # found before the first step
        return 2
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    if result and args.export:
        export_model(result["checkpoint"], args.export, _provenance(argv, result, args.data))
        result["export"] = str(args.export)
    if result:  # process 0 only
        print(json.dumps({k: v for k, v in result.items() if k not in ("history", "evals")}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
