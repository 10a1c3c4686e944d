"""Train the tiny GPT of notebook 10: one readable loop for the notebook and for the command line.

Reading order: the training settings (:class:`TrainConfig`, with presets named like the model's), the
learning-rate schedule (:func:`learning_rate`), evaluation (:func:`evaluate`, the mean loss over a whole split),
then the loop (:func:`train`: forward, backward, update; time and log; evaluate and save) with the small pieces
it calls beside it (the window of recent steps, the finite-loss guard, the summary), and how a run is built
before its first step (``_set_up``).

Beside it: :mod:`course_utils.checkpoints` (the checkpoint file, and the rules of ``--resume`` in one table),
:mod:`course_utils.train_setup` (what is checked before the first step: the output folder, the processes and the
device, the data, the GPU switches) and :mod:`course_utils.train_cli`, the command line that
``python -m course_utils.train`` and ``torchrun -m course_utils.train`` run.

What makes it dependable: a run killed at any moment loses at most ``checkpoint_interval`` steps and resumes
exactly where it stopped; a NaN or infinite loss stops it with :class:`NonFiniteLossError` before anything is
saved, so the last checkpoint is the last good one; under ``torchrun`` every process draws the *same* batch of
``batch_size`` windows and trains on its own slice of it, so N processes see exactly the data one process would.
The GPU recipe's parts switch on one by one, on any device: ``compile`` (``torch.compile``), ``autocast``
(``"bf16"``) and ``fused_adamw``; by default all three on CUDA and none elsewhere (the test suite runs all three
on the CPU: tests/test_train_gpu_paths.py).

A ``callback`` passed to :func:`train` is called with ``{"kind": "train", "step", "loss", "lr", "tokens_per_s"}``
at every multiple of ``log_interval``, ``eval_interval`` and ``checkpoint_interval`` and at the last step (``loss``
is the mean over the steps since the previous one), and with ``{"kind": "eval", "step", "train_loss",
"val_loss"}`` at every multiple of ``eval_interval`` and the last step; an exception it raises stops the run
like a kill would.

Shapes: batches are (B, T) token ids, T = context_length.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from course_utils._files import clean_stale_tmp, write_atomic
from course_utils._moved import moved_names
from course_utils._validate import (
    check_bool,
    check_choice,
    check_fraction,
    check_int,
    check_nonnegative_number,
    check_number,
    check_positive_number,
    from_preset,
)
from course_utils.checkpoints import RESUME_RULES, checkpoint_state, restore, resume_run, save_checkpoint
from course_utils.data import CharTokenizer, check_text_size, get_batch, iter_eval_batches, sha256_bytes, split_data
from course_utils.gpt import GPT, PRESETS, GPTConfig
from course_utils.train_setup import (
    CHECKPOINT_NAME,
    SUMMARY_NAME,
    RunSetupError,
    Switches,
    autocast_context,
    check_out_dir,
    gpu_switches,
    join_processes,
    read_data,
)

__all__ = ["TrainConfig", "TRAIN_PRESETS", "NonFiniteLossError", "learning_rate", "evaluate", "train"]


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
assert {f.name for f in dataclasses.fields(TrainConfig)} <= set(RESUME_RULES), "every setting needs a resume rule"


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite; the last checkpoint on disk is still the last good one."""


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
# The loop
# ----------------------------------------------------------------------------------------------


def train(
    model_config: GPTConfig | str,
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
    """Train a GPT on the text at ``data_path``, saving checkpoints in ``out_dir``. Taught in notebook 10.

    ``model_config``: a :class:`~course_utils.gpt.GPTConfig` or a preset name (whose training preset is then the
    default ``train_config``); its ``vocab_size`` becomes the tokenizer's. ``resume`` continues the run in
    ``out_dir`` as :data:`~course_utils.checkpoints.RESUME_RULES` says; ``max_steps`` replaces the settings' (to
    train a run for longer); ``max_seconds`` stops early, after a checkpoint. ``progress``: a tqdm bar (default:
    when stderr is a terminal); ``callback(event)`` gets each "train" and "eval" event (the module's docstring).
    Everything is checked before the first step (:mod:`course_utils.train_setup`); a NaN or infinite loss raises
    :class:`NonFiniteLossError`. Returns the run's figures (:func:`_summary`; ``{}`` in the other processes).
    Shapes: each step's batch is (B, T) token ids, B = ``batch_size`` over all processes, T = ``context_length``.
    """
    wall_start = time.perf_counter()
    run = _set_up(
        model_config,
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
        self.tokens_per_step = run.train_config.batch_size * run.model_config.context_length
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
    train_config, T = run.train_config, run.model_config.context_length
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
        train_config, T, model = run.train_config, run.model_config.context_length, run.model
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
            "model_config": run.model_config.to_dict(),
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
    model_config: GPTConfig
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
            self.train_data, self.train_config.batch_size, self.model_config.context_length, generator=self.batch_gen
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
        state = checkpoint_state(
            model=self.model,
            optimizer=self.optimizer,
            step=self.step,
            model_config=self.model_config,
            train_config=dataclasses.asdict(self.train_config),
            batch_gen=self.batch_gen,
            tokenizer=self.tokenizer,
            history=self.history,
            evals=self.evals,
            text_sha256=self.text_sha256,
        )
        save_checkpoint(self.ckpt_path, state)


def _set_up(
    model_config: GPTConfig | str,
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
    model_config, train_config, asked = _configs(model_config, train_config)
    if max_seconds is not None and not max_seconds > 0:
        raise RunSetupError(f"--max-seconds must be a positive number of seconds, got {max_seconds!r}")
    rank, world, device = join_processes(train_config.batch_size, device)
    say = (lambda msg: print(msg, file=sys.stderr, flush=True)) if (verbose and rank == 0) else (lambda msg: None)
    check_bool("resume", resume)
    check_bool("verbose", verbose)
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be a function taking one event dict, or None, got {type(callback).__name__}")
    out_dir = check_out_dir(out_dir, resume)
    if rank == 0 and (removed := clean_stale_tmp(out_dir)):
        say(f"removed {len(removed)} temporary file(s) left in {out_dir} by a save that was killed")
    text = read_data(data_path, say)

    resumed, ckpt_path = None, out_dir / CHECKPOINT_NAME
    if resume and ckpt_path.exists():  # the run's own model, settings and vocabulary, by RESUME_RULES
        given = None if asked is None else dataclasses.asdict(asked)
        resumed = resume_run(ckpt_path, model_config, dataclasses.asdict(train_config), given, text, max_steps)
        model_config, train_config = resumed.model_config, TrainConfig(**resumed.train_config)
    elif resume:
        say(f"no checkpoint at {ckpt_path}: starting from scratch")
    if max_steps is not None:
        train_config = dataclasses.replace(train_config, max_steps=max_steps)
    check_text_size(len(text), model_config.context_length, source=str(data_path))
    if resumed is None:  # a new run: the vocabulary of its text
        tokenizer = CharTokenizer.from_text(text)
        model_config = dataclasses.replace(model_config, vocab_size=tokenizer.vocab_size)
    else:
        tokenizer = resumed.tokenizer
    train_data, val_data = split_data(tokenizer.encode(text))
    switches, switch_notices = gpu_switches(train_config, device)
    notices = (resumed.notices if resumed else []) + switch_notices
    if rank == 0:
        for notice in notices:  # what differs from what was asked is shown even when quiet
            print(notice, file=sys.stderr, flush=True)

    torch.manual_seed(train_config.seed)  # the same initial weights in every process
    model = GPT(model_config).to(device)
    run = _Run(
        train_config,
        model_config,
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
        autocast=autocast_context(device, switches.autocast),
        switches=switches,
        notices=notices,
        say=say,
    )
    if resumed is not None:  # continue where the checkpoint left off, every random generator included
        state = resumed.state
        restore(state, run.model, run.optimizer, run.batch_gen)
        run.step, run.history, run.evals = state["step"], list(state["history"]), list(state.get("evals", []))
        say(f"resumed from {ckpt_path} at step {run.step}")
    if rank > 0:  # dropout differs between processes, as it would between rows of one batch
        # (a checkpoint holds process 0's generator)
        torch.manual_seed(train_config.seed + 1_000_003 * rank + run.step)
    _compile_and_distribute(run)
    return run


def _configs(
    model_config: GPTConfig | str,
    train_config: TrainConfig | None,
) -> tuple[GPTConfig, TrainConfig, TrainConfig | None]:
    """The model and the settings asked for (a preset's name gives both), and ``train_config`` as it was given
    (a resumed run names the settings of it that it keeps)."""
    asked = train_config
    if isinstance(model_config, str):
        train_config = TrainConfig.preset(model_config) if train_config is None else train_config
        model_config = GPTConfig.preset(model_config)
    if not isinstance(model_config, GPTConfig):
        raise TypeError(f"model_config must be a GPTConfig or a preset name, got {type(model_config).__name__}")
    return model_config, TrainConfig() if train_config is None else train_config, asked


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


# Names train.py held before it was split (#20): code written then is told their one home in one line.
__getattr__ = moved_names(
    __name__,
    {
        "CheckpointError": "course_utils.checkpoints.CheckpointError",
        "load_checkpoint": "course_utils.checkpoints.load_checkpoint",
        "export_model": "course_utils.checkpoints.export_model",
        "load_model": "course_utils.checkpoints.load_model",
        "pick_device": "course_utils.devices.pick_device",
        "compile_available": "course_utils.train_setup.compile_available",
        "fused_adamw_available": "course_utils.train_setup.fused_adamw_available",
        "main": "course_utils.train_cli.main",
    },
)


if __name__ == "__main__":  # python -m course_utils.train (and torchrun -m ...): the command line's own module
    from course_utils.train_cli import main

    sys.exit(main())
