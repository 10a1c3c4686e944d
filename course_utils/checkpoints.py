"""Checkpoints of a training run, and the rules of ``--resume``, read in one place.

Reading order: the file (:func:`save_checkpoint`, :func:`load_checkpoint`, what :func:`checkpoint_state` puts
in it), the small file a learner loads (:func:`export_model`, :func:`load_model`), then resuming
(:data:`RESUME_RULES`, :func:`resume_run`, :func:`restore`).

A checkpoint holds everything a resumed run needs: model, optimizer, step, both configurations, and every random
number generator (PyTorch's, CUDA's and the batch sampler's), so on a CPU the resumed loss curve equals the
uninterrupted one. It is written every ``checkpoint_interval`` steps to a temporary file and renamed over the old
one (``os.replace``): a run killed at any moment loses at most that many steps and never leaves half a
checkpoint. It holds only tensors and plain containers and loads with ``torch.load(weights_only=True)``.

``--resume`` with a checkpoint continues *that* run: :data:`RESUME_RULES` says, part by part, what must match
(another model or other text is refused), what the run keeps from its checkpoint (a setting asked for that
differs is ignored with a one-line notice), and what is this session's (the GPU switches). Notices go to stderr
even with ``--quiet``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from course_utils._files import atomic_path, clean_stale_tmp
from course_utils._validate import check_path
from course_utils.data import CharTokenizer, sha256_bytes
from course_utils.devices import pick_device
from course_utils.gpt import GPT, PRESETS, GPTConfig
from course_utils.train_setup import RunSetupError, first_line

__all__ = [
    "CheckpointError",
    "save_checkpoint",
    "load_checkpoint",
    "checkpoint_state",
    "export_model",
    "load_model",
    "RESUME_RULES",
    "saved_settings",
    "Resumed",
    "resume_run",
    "restore",
]

_FORMAT = "course_utils.train/1"  # a training checkpoint (the file format is unchanged since the first)
_MODEL_FORMAT = "course_utils.model/1"  # an exported model
_REQUIRED = ("format", "model", "optimizer", "step", "model_config", "train_config", "rng", "tokenizer", "history")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read or does not fit the run."""


# ----------------------------------------------------------------------------------------------
# The checkpoint file
# ----------------------------------------------------------------------------------------------


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically, with :func:`course_utils._files.atomic_path`.

    A temporary file of its own per writer, flushed to disk, then renamed over ``path``: readers see the old file
    or the new one, never half, and two runs saving into one folder never rename each other's file. One killed
    mid-save leaves its temporary file, which the next run in that folder removes
    (:func:`course_utils._files.clean_stale_tmp`).
    """
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint written by :func:`course_utils.train.train`, with ``weights_only=True``; CheckpointError if
    it is damaged."""
    path = _existing_file(path, "checkpoint", "train a model first (python -m course_utils.train ...)")
    state = _read_state(
        path, "checkpoint", "checkpoint", (_FORMAT,), "Delete it to start again, or restore an intact copy."
    )
    missing = [k for k in _REQUIRED if k not in state]
    if missing:
        raise CheckpointError(f"checkpoint {path} lacks {missing}: it was not written by this version")
    return state


def checkpoint_state(
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    step: int,
    model_config: GPTConfig,
    train_config: dict[str, Any],
    batch_gen: torch.Generator,
    tokenizer: CharTokenizer,
    history: list[float],
    evals: list[list[float]],
    text_sha256: str,
) -> dict[str, Any]:
    """What a checkpoint holds: everything a resumed run needs, as tensors and plain containers only."""
    return {
        "format": _FORMAT,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "step": step,
        "model_config": model_config.to_dict(),
        "train_config": train_config,
        "rng": {
            "torch": torch.get_rng_state(),
            "batch": batch_gen.get_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        },
        "tokenizer": list(tokenizer.chars),
        "history": history,
        "evals": evals,
        "text_sha256": text_sha256,
    }


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
            f"cannot read {what} {path}: it is truncated or corrupt ({type(err).__name__}: {first_line(err)}). {fix}"
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


# ----------------------------------------------------------------------------------------------
# The model file a learner loads
# ----------------------------------------------------------------------------------------------


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
# Resuming a run
# ----------------------------------------------------------------------------------------------

MATCH = "must match"  # another value is another run: the resume is refused (RunSetupError)
KEEP = "the checkpoint's"  # a value asked for that differs is ignored, with a notice naming it
SESSION = "this session's"  # how this machine runs, not what the run is: taken from the caller
ARGUMENT = "train's max_steps argument"  # when given (--max-steps); otherwise kept like KEEP


class Rule(NamedTuple):
    on_resume: str  # MATCH, KEEP, SESSION or ARGUMENT
    flag: str | None  # the command line's flag a notice names (None: the notice names the field)
    why: str


_SETTING = "a setting of the run: another value halfway would make another loss curve"
_MACHINE = "how this machine runs (the GPU recipe's switches), not what the run is"

# Every part of a run, and where a resumed run takes it from. The model and the text are checked by
# resume_run; each TrainConfig field has a row (course_utils.train checks that none is missing).
RESUME_RULES: dict[str, Rule] = {
    "model_config": Rule(MATCH, "--preset", "another model is another run (vocab_size: the checkpoint's tokenizer)"),
    "text": Rule(MATCH, "--data", "other text is another run (compared by sha256)"),
    "max_steps": Rule(ARGUMENT, None, "to train a finished run for longer"),
    "batch_size": Rule(KEEP, "--batch-size", _SETTING),
    "learning_rate": Rule(KEEP, "--learning-rate", _SETTING),
    "min_lr": Rule(KEEP, None, _SETTING),
    "warmup_steps": Rule(KEEP, None, _SETTING),
    "weight_decay": Rule(KEEP, None, _SETTING),
    "beta1": Rule(KEEP, None, _SETTING),
    "beta2": Rule(KEEP, None, _SETTING),
    "grad_clip": Rule(KEEP, None, _SETTING),
    "eval_interval": Rule(KEEP, "--eval-interval", _SETTING),
    "eval_batches": Rule(KEEP, None, _SETTING),
    "log_interval": Rule(KEEP, "--log-interval", _SETTING),
    "checkpoint_interval": Rule(KEEP, "--checkpoint-interval", _SETTING),
    "seed": Rule(KEEP, "--seed", "the batches and the dropout drawn so far came from it"),
    "compile": Rule(SESSION, "--compile", _MACHINE),
    "autocast": Rule(SESSION, "--autocast", _MACHINE),
    "fused_adamw": Rule(SESSION, "--fused-adamw", _MACHINE),
}


def saved_settings(state: dict[str, Any]) -> dict[str, Any]:
    """The run's own training settings in a checkpoint: all but this session's switches."""
    return {
        k: v for k, v in state["train_config"].items() if k not in RESUME_RULES or RESUME_RULES[k].on_resume != SESSION
    }


class Resumed(NamedTuple):
    """The run a checkpoint continues (see :func:`resume_run`)."""

    state: dict[str, Any]  # the checkpoint
    model_config: GPTConfig  # its model
    train_config: dict[str, Any]  # its settings, with this session's switches (TrainConfig(**train_config))
    tokenizer: CharTokenizer  # its vocabulary
    notices: list[str]  # one per setting asked for that the run keeps


def resume_run(
    ckpt_path: Path,
    model_config: GPTConfig,
    train_config: dict[str, Any],
    asked: dict[str, Any] | None,
    text: str,
    max_steps: int | None,
) -> Resumed:
    """The run saved at ``ckpt_path``, continued under :data:`RESUME_RULES`.

    RunSetupError if ``model_config`` or ``text`` is another run's; the switches are ``train_config``'s (this
    session's); each setting of ``asked`` (the training settings as given, None if none were) that differs from
    the checkpoint's gets a notice; ``max_steps`` (train's argument) replaces the saved one when it is not None.
    """
    state = load_checkpoint(ckpt_path)
    _refuse_another_run(state, ckpt_path, model_config, text)
    saved = saved_settings(state)
    notices = []
    for name, new in (asked or {}).items():
        rule = RESUME_RULES[name]
        if rule.on_resume == SESSION or (rule.on_resume == ARGUMENT and max_steps is not None):
            continue
        if saved.get(name) != new:
            how = f" (to change it, pass max_steps={new} to train)" if rule.on_resume == ARGUMENT else ""
            notices.append(
                f"--resume: keeping the checkpoint's {name} {saved.get(name)}; your {rule.flag or name} {new} is "
                f"ignored{how}"
            )
    session = {k: v for k, v in train_config.items() if RESUME_RULES[k].on_resume == SESSION}
    return Resumed(
        state,
        GPTConfig.from_dict(state["model_config"]),
        {**saved, **session},
        CharTokenizer(state["tokenizer"]),
        notices,
    )


def _refuse_another_run(state: dict[str, Any], ckpt_path: Path, model_config: GPTConfig, text: str) -> None:
    """RunSetupError if the checkpoint is a run of another model or of other text: the rows marked MATCH."""
    saved = GPTConfig.from_dict(state["model_config"])
    if dataclasses.replace(model_config, vocab_size=saved.vocab_size) != saved:
        raise RunSetupError(
            f"--resume: {ckpt_path} is a run of {_describe_model(saved)}, not {_describe_model(model_config)} as "
            f"asked: leave out {RESUME_RULES['model_config'].flag} to continue that run, or choose another --out for a "
            "new one"
        )
    digest = sha256_bytes(text.encode("utf-8"))
    if state.get("text_sha256", digest) != digest:
        raise RunSetupError(
            f"--resume: {ckpt_path} was trained on a text with sha256 {state['text_sha256'][:16]}..., but "
            f"{RESUME_RULES['text'].flag} has {digest[:16]}...: pass the same file to continue that run, or choose "
            "another --out for a new one"
        )


def _describe_model(model_config: GPTConfig) -> str:
    preset = next(
        (
            name
            for name, p in PRESETS.items()
            if dataclasses.replace(p, vocab_size=model_config.vocab_size) == model_config
        ),
        None,
    )
    c = model_config
    shape = f"{c.num_layers} layers, {c.embed_dim} wide, context {c.context_length}"
    shape += ", post-norm" if c.norm_position == "post" else ""  # else two refused models read the same
    return f"the {preset!r} preset ({shape})" if preset else f"a model of {shape}"


def restore(
    state: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer, batch_gen: torch.Generator
) -> None:
    """Load a checkpoint's weights, optimizer state and every random generator's state (CUDA's where the same
    GPUs are there); the run's step, history and evals are the caller's to take from ``state``."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    rng = state["rng"]
    torch.set_rng_state(rng["torch"])
    batch_gen.set_state(rng["batch"])
    if rng.get("cuda") and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(rng["cuda"])
