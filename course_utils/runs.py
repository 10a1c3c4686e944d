"""Notebook 10's training runs: how big a run is on each machine, the baselines to beat, what a run should reach.

One switch sizes notebook 10: ``COURSE_GPT_SIZE`` (``ci``, ``cpu`` or ``gpu``); unset, ``gpu`` on a CUDA machine and
``cpu`` elsewhere. ``python3 course.py test`` sets ``ci``: CI runs the notebook on a CPU in a minute or two.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from course_utils._files import course_folder
from course_utils._validate import check_int, check_number, check_str, is_integer_tensor
from course_utils.gpt import GPTConfig
from course_utils.train import TrainConfig

__all__ = ["SIZE_ENV", "RUNS_ENV", "RunSize", "RUN_SIZES", "choose_size", "run_folder", "unigram_loss",
           "bigram_loss", "check_expectations"]  # fmt: skip

SIZE_ENV = "COURSE_GPT_SIZE"
RUNS_ENV = "COURSE_RUNS_DIR"


@dataclass(frozen=True)
class RunSize:
    """A model and its training settings, for one kind of machine; ``about`` says how long a run takes, and
    ``expected_val_loss`` is the range of validation loss it should reach, ``source`` where that figure comes from."""

    model_config: GPTConfig
    train_config: TrainConfig
    about: str
    expected_val_loss: tuple[float, float]
    source: str


# The ci and cpu losses were measured on the course corpus (datasets/shakespeare.txt) with notebook 10's training
# cell (see benchmarks/TRAINING.md for the commands and machines); the gpu one is an estimate, as its source says.
# The ranges leave room for other machines and seeds.
# fmt: off
RUN_SIZES: dict[str, RunSize] = {
    "ci": RunSize(GPTConfig.preset("tiny"),
                  TrainConfig.preset("tiny", batch_size=32, max_steps=500, learning_rate=1e-2, min_lr=1e-3,
                                     eval_interval=125, checkpoint_interval=250),
                  "2 layers, 32 wide, context 32: seconds on any CPU (CI and quick looks)",
                  (2.00, 2.45), "measured 2026-11-29 on a 2-core CPU VM under load, one thread: val_loss 2.22 after "
                  "500 steps, about 9 s of CPU time (2.38 with another training seed)"),
    "cpu": RunSize(GPTConfig.preset("cpu"), TrainConfig.preset("cpu"),
                   "3 layers, 96 wide, context 64, rotary positions: a few minutes on a laptop CPU",
                   (1.70, 1.85), "measured 2026-11-23 on a 2-core CPU VM, two threads, quiet: val_loss 1.77 after "
                   "82 s of training (the shipped model's run)"),
    "gpu": RunSize(GPTConfig.preset("gpu"), TrainConfig.preset("gpu"),
                   "nanoGPT's baby Shakespeare model, 6 layers, 384 wide, context 256: minutes on one GPU",
                   (1.30, 1.55), "estimate, not yet measured on this corpus: the 1.47 is nanoGPT's figure for this "
                   "model on its own data (tiny Shakespeare, 65 characters, its own 90/10 split) after about 3 "
                   "minutes on one A100, not a loss measured on this course's corpus"),
}
# fmt: on


def choose_size(device: str, environ: Mapping[str, str] = os.environ) -> str:
    """``COURSE_GPT_SIZE`` if set (any case), else ``gpu`` on CUDA and ``cpu`` anywhere else; ValueError for an
    unknown size."""
    asked = environ.get(SIZE_ENV, "").strip()
    if asked and asked.lower() not in RUN_SIZES:
        raise ValueError(f"{SIZE_ENV}={asked!r} is not a run size; choose one of {sorted(RUN_SIZES)}")
    return asked.lower() or ("gpu" if str(device).startswith("cuda") else "cpu")


def run_folder(size: str, environ: Mapping[str, str] = os.environ) -> Path:
    """The folder of notebook 10's run of ``size``: ``10_<size>/`` under ``COURSE_RUNS_DIR`` if set (the test suite
    sets a fresh one, so every test run trains instead of resuming an earlier run), else in the course's ``runs/``."""
    if size not in RUN_SIZES:
        raise ValueError(f"size must be one of {sorted(RUN_SIZES)}, got {size!r}")
    where = environ.get(RUNS_ENV, "").strip()
    return (Path(where).expanduser() if where else course_folder() / "runs") / f"10_{size}"


def _check_split_ids(train_ids: object, val_ids: object, vocab_size: int, at_least: int) -> None:
    """ValueError unless both are 1-D integer tensors (not bool or complex) of ``at_least`` ids in 0 .. V - 1."""
    check_int("vocab_size", vocab_size)
    for name, ids in (("train_ids", train_ids), ("val_ids", val_ids)):
        tensor = isinstance(ids, torch.Tensor)
        if not (tensor and ids.dim() == 1 and ids.numel() >= at_least and is_integer_tensor(ids)):
            got = f" {tuple(ids.shape)} {ids.dtype}" if tensor else ""
            raise ValueError(
                f"{name} must be a 1-D tensor of {at_least} or more integer ids, got {type(ids).__name__}{got}"
            )
        if int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
            raise ValueError(f"{name} holds ids outside 0 .. {vocab_size - 1} (vocab_size = {vocab_size})")


def unigram_loss(train_ids: torch.Tensor, val_ids: torch.Tensor, vocab_size: int) -> float:
    """Cross-entropy (nats per character) on ``val_ids`` of predicting each character by its training frequency,
    counts smoothed by adding one: the best a model that ignores the context can do. Taught in notebook 10.

    Shape:
        train_ids: (N,), val_ids: (M,) integer ids in 0 .. vocab_size - 1 -> a float
    """
    _check_split_ids(train_ids, val_ids, vocab_size, 1)
    counts = torch.bincount(train_ids, minlength=vocab_size).double() + 1.0  # (V,)
    log_probs = (counts / counts.sum()).log()  # (V,)
    return float(-log_probs[val_ids].mean())


def bigram_loss(train_ids: torch.Tensor, val_ids: torch.Tensor, vocab_size: int) -> float:
    """Cross-entropy on the M - 1 pairs of ``val_ids`` of predicting each character from the one before it, by the
    training pair counts plus one, each row normalised: about the best a model that reads only the previous
    character can do. Taught in notebook 10.

    Shape:
        train_ids: (N,), val_ids: (M,) integer ids in 0 .. vocab_size - 1, N and M at least 2 -> a float
    """
    _check_split_ids(train_ids, val_ids, vocab_size, 2)
    V = vocab_size
    pairs = train_ids[:-1].long() * V + train_ids[1:].long()  # (N - 1,): previous * V + next
    counts = torch.bincount(pairs, minlength=V * V).double().view(V, V) + 1.0  # (V, V): row = previous
    log_probs = (counts / counts.sum(dim=1, keepdim=True)).log()  # (V, V): each row a distribution
    return float(-log_probs[val_ids[:-1].long(), val_ids[1:].long()].mean())


def check_expectations(result: Mapping, size: str) -> tuple[bool, str]:
    """Compare the validation loss of a finished run of ``size`` (any case; the dict :func:`course_utils.train.train`
    returns) with the size's range: ``(within, message)``, the message saying what was expected and what happened.
    The loss is judged as printed, to 2 decimals; NaN or infinity is outside, with the likely cause."""
    check_str("size", size, f"a str, one of {sorted(RUN_SIZES)}")
    if (key := size.strip().lower()) not in RUN_SIZES:
        raise ValueError(f"size must be one of {sorted(RUN_SIZES)} (any case), got {size!r}")
    if not isinstance(result, Mapping):
        why = ": None means the run has not finished (finished_run returns None then)" if result is None else ""
        got = type(result).__name__
        raise TypeError(f"result must be the dict that course_utils.train.train returns, got {got}{why}")
    if missing := [name for name in ("val_loss", "steps") if name not in result]:
        raise ValueError(f"result lacks {missing[0]!r}: pass the dict that course_utils.train.train returned")
    loss = result["val_loss"]
    if isinstance(loss, torch.Tensor) and loss.dim() == 0:
        loss = loss.item()  # a float, so that within is a bool, not a tensor
    loss = check_number("result['val_loss']", loss)
    run, shown = RUN_SIZES[key], round(loss, 2)  # judged as printed: 1.9999 shows as 2.00 and is within 2.00 to 2.45
    lo, hi = run.expected_val_loss
    within = lo <= shown <= hi  # False for NaN and infinities
    diverged = "" if math.isfinite(loss) else " (the run diverged: lower the learning rate)"
    return within, (
        f"Size {key!r}: expected val_loss {lo:.2f} to {hi:.2f} ({run.source}).\n"
        f"{'✓' if within else '! outside the range:'} val_loss {loss:.2f} after {result['steps']} steps{diverged}"
    )
