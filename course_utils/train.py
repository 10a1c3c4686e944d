"""Train the tiny GPT of notebook 10: one readable loop for the notebook and for the command line.

Reading order: the settings (:class:`TrainConfig`), the learning-rate schedule, evaluation, the loop (:func:`train`,
in three labelled phases) with its small named pieces beside it (set-up, resume, the window of recent steps, the
summary), what a checkpoint holds and the model file a learner loads, and what is checked before the first step.
The command line and the ``torchrun`` set-up are :mod:`course_utils.train_cli`.

A run killed at any moment loses at most ``checkpoint_interval`` steps and resumes bit for bit on a CPU (a checkpoint
holds every random generator and is renamed over the old one, never half written); a NaN or infinite loss stops it
before anything is saved. Under ``torchrun`` every process draws the same batch and trains on its own rows. The GPU
recipe (``compile``, ``autocast="bf16"``, ``fused_adamw``) is on for CUDA only by default, and each switch works on
any device (tests/test_train_gpu_paths.py runs all three on the CPU).

``callback(event)`` gets ``{"kind": "train", "step", "loss", "lr", "tokens_per_s"}`` whenever a window of steps
closes (every multiple of ``log_interval``, ``eval_interval`` or ``checkpoint_interval``, and the last step; ``loss``
is the window's mean) and ``{"kind": "eval", "step", "train_loss", "val_loss"}`` at every multiple of
``eval_interval`` and the last step; an exception it raises stops the run as a kill would. Shapes: batches are
(B, T) token ids, T = context_length.
"""

from __future__ import annotations

if __name__ == "__main__":  # Ctrl+C or SIGTERM while PyTorch loads (seconds): one line, not a traceback
    from course_utils._start import quiet_start_up

    quiet_start_up()

import contextlib
import dataclasses
import importlib.util
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from course_utils._files import atomic_path, clean_stale_tmp, probe_writable, sha256_bytes, write_atomic
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
    check_text_size,
    get_batch,
    is_course_corpus,
    iter_eval_batches,
    load_text,
    split_data,
)
from course_utils.devices import pick_device
from course_utils.gpt import GPT, PRESETS, GPTConfig

__all__ = ["TrainConfig", "TRAIN_PRESETS", "learning_rate", "evaluate", "loss_by_position", "train",
           "NonFiniteLossError", "RunSetupError", "RunInterrupted", "CheckpointError", "save_checkpoint",
           "load_checkpoint", "export_model", "load_model", "finished_run", "RESUME_RULES", "check_out_dir",
           "check_can_create", "compile_available", "fused_adamw_available"]  # fmt: skip

CHECKPOINT_NAME, SUMMARY_NAME = "checkpoint.pt", "summary.json"
FORMAT = "course_utils.train/1"  # a training checkpoint (unchanged since the first)
MODEL_FORMAT = "course_utils.model/1"  # an exported model (checkpoints/shakespeare_cpu.pt)


class RunSetupError(ValueError):
    """The run cannot start as asked (output folder, data, resume): found before the first step, with the fix."""


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read or does not fit the run."""


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite; the last checkpoint on disk is still the last good one."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl+C during :func:`train`: ``step`` (updates done), ``checkpoint`` (its path) and ``saved_step`` (the step
    it holds, read from the file: None if there is none). A KeyboardInterrupt: a notebook stops as it always does."""

    def __init__(self, step: int, checkpoint: Path):
        super().__init__(f"stopped at step {step}")
        self.step, self.checkpoint, self.saved_step = step, checkpoint, None
        self.saved_step = saved_step(checkpoint)


def saved_step(checkpoint: Path) -> int | None:
    """The step a checkpoint on disk holds, or None if there is none (a file being renamed over the old one
    this instant is read again: the rename is atomic, so the second read sees one whole file)."""
    for _ in range(3):
        try:
            return int(torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True)["step"])
        except FileNotFoundError:
            return None
        except Exception:  # noqa: BLE001 -- replaced while read, or damaged: try again, then name no step
            time.sleep(0.05)
    return None


# --- Stopping by a signal: Ctrl+C (SIGINT) or SIGTERM, in the commands

_caught: list[int | None] = [None]  # the signal that stopped the command, once one has


def ignore_stop_signals() -> None:
    """Later signals do nothing: a handler that returns, not SIG_IGN, since one already pending would then raise
    "OSError: Signal 15 ignored due to race condition" (a SIGTERM and a SIGINT arriving together)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _ignore)


def _ignore(signum, frame) -> None:
    pass


def ignore_signals_until_exit() -> None:
    """A command's last act: SIGINT and SIGTERM ignored by the system (SIG_IGN), which, unlike a Python handler,
    holds while the interpreter shuts down (a late Ctrl+C would otherwise kill it, -2). signal.signal runs a
    signal already pending first, with the handler it replaces."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


@contextlib.contextmanager
def stop_signals(restore: bool = True):
    """While inside, the first SIGINT or SIGTERM raises KeyboardInterrupt and every later one is ignored, so the
    command's one line is printed whatever the user presses next (:func:`stop_code` gives its exit code). With
    ``restore``, the caller's handlers come back on leaving; a command passes False and exits holding them."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    previous = {signum: h for signum, h in previous.items() if h is not signal.SIG_IGN}  # ignored by who started us
    _caught[0] = None

    def stop(signum, frame):
        ignore_stop_signals()
        _caught[0] = signum
        raise KeyboardInterrupt

    for signum in previous:
        signal.signal(signum, stop)
    try:
        yield
    finally:
        if restore:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def defer_stop_signals() -> None:
    """From now on a SIGINT or SIGTERM is only recorded (:func:`stop_code`): for a write that must finish whole."""
    if threading.current_thread() is not threading.main_thread():
        return

    def record(signum, frame):
        _caught[0] = _caught[0] or signum

    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, record)


def stop_code() -> int:
    """The exit code of a command stopped by a signal: 130 for Ctrl+C (SIGINT), 143 for SIGTERM."""
    return 128 + (_caught[0] or signal.SIGINT)


def stopped_by_signal() -> bool:
    """Whether a SIGINT or SIGTERM came since :func:`stop_signals` began (one recorded while deferred included)."""
    return _caught[0] is not None


# --- Settings and schedule


@dataclass(frozen=True)
class TrainConfig:
    """How to train (the model's shape is a :class:`~course_utils.gpt.GPTConfig`).

    ``batch_size`` is the whole batch of one step, over all processes. The rate warms up linearly for
    ``warmup_steps``, then follows a cosine from ``learning_rate`` to ``min_lr`` at ``max_steps``. Every
    ``eval_interval`` steps the loss is estimated on ``eval_batches`` batches of each split. The GPU recipe's
    switches (``None``: on for CUDA only) are how this session runs, not part of the run: a resume takes them
    from the caller.
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
        check_fraction("beta1", self.beta1)
        check_fraction("beta2", self.beta2)
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


# fmt: off
TRAIN_PRESETS: dict[str, TrainConfig] = {
    "tiny": TrainConfig(batch_size=16, max_steps=200, learning_rate=3e-3, min_lr=3e-4, warmup_steps=10,
                        eval_interval=100, eval_batches=4, checkpoint_interval=100),
    "cpu": TrainConfig(batch_size=32, max_steps=1000, learning_rate=3e-3, min_lr=3e-4, warmup_steps=50,
                       eval_interval=500, eval_batches=8, log_interval=50, checkpoint_interval=250),
    "gpu": TrainConfig(batch_size=64, max_steps=5000, learning_rate=1e-3, min_lr=1e-4, warmup_steps=100,
                       log_interval=50),  # the defaults above are the gpu preset's
}
# fmt: on
assert set(TRAIN_PRESETS) == set(PRESETS), "every model preset needs training settings of the same name"


def learning_rate(step: int, train_config: TrainConfig) -> float:
    """Linear warmup over ``warmup_steps``, then a cosine from ``learning_rate`` to ``min_lr`` at ``max_steps``.
    (``warmup_steps`` may exceed ``max_steps``: a short smoke run then stays on the ramp.) Taught in notebook 10."""
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


# --- Evaluation


@torch.no_grad()
def evaluate(
    model: GPT,
    data: torch.Tensor,
    context_length: int,
    batch_size: int = 64,
    device: torch.device | str = "cpu",
    autocast: Any = contextlib.nullcontext,
) -> float:
    """The mean next-token loss over *every* target of ``data`` (consecutive windows, each target once), summed
    and divided by the number of targets, so a shorter last batch weighs right. Taught in notebook 10."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (a GPT), got {type(model).__name__}")
    was_training, total, count = model.training, 0.0, 0
    model.eval()
    for x, y in iter_eval_batches(data, batch_size, context_length, device=device, drop_last=False):
        with autocast():
            logits, _ = model(x)  # (B, T, V)
        total += nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum").item()
        count += y.numel()
    model.train(was_training)
    return total / count


@torch.no_grad()
def loss_by_position(
    model: nn.Module, data: torch.Tensor, context_length: int, batch_size: int = 64, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """The mean next-token loss at each position of a window, over the consecutive windows :func:`evaluate`
    walks (full windows only): entry t is the loss of predicting the character after t + 1 characters of context.
    Its mean is :func:`evaluate`'s loss without the short last window. Shape: -> (T,) float64. Taught in notebook 10.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (a GPT), got {type(model).__name__}")
    check_int("context_length", context_length)
    longest = getattr(getattr(model, "config", None), "context_length", None)
    if isinstance(longest, int) and context_length > longest:
        raise ValueError(
            f"context_length {context_length} is longer than the model's context ({longest}): windows of at most "
            f"{longest} characters, e.g. model.config.context_length"
        )
    was_training, total, count = model.training, torch.zeros(context_length, dtype=torch.float64), 0
    model.eval()
    for x, y in iter_eval_batches(data, batch_size, context_length, device=device):
        logits, _ = model(x)  # (B, T, V)
        losses = nn.functional.cross_entropy(logits.transpose(1, 2).float(), y, reduction="none")  # (B, T)
        total += losses.double().sum(dim=0).cpu()  # (T,)
        count += y.shape[0]
    model.train(was_training)
    return total / count


@torch.no_grad()
def _estimate(run: _Run, data: torch.Tensor, seed: int) -> float:
    """Mean loss over ``eval_batches`` random batches drawn with their own generator (the same ones every time)."""
    was_training = run.model.training
    run.model.eval()
    g, losses = torch.Generator().manual_seed(seed), []
    for _ in range(run.train_config.eval_batches):
        x, y = get_batch(data, run.train_config.batch_size, run.model_config.context_length, g, device=run.device)
        with run.autocast():
            losses.append(run.model(x, y)[1].float())
    run.model.train(was_training)
    return torch.stack(losses).mean().item()


# --- The loop


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

    ``model_config``: a GPTConfig or a preset name (whose training preset is then the default); ``resume``
    continues the run in ``out_dir`` as :data:`RESUME_RULES` says; ``max_steps`` replaces the settings' (to train
    a run for longer); ``max_seconds`` stops early, after a checkpoint; ``progress``: a tqdm bar (default: when
    stderr is a terminal). Under torchrun, join the process group first (:func:`course_utils.train_cli.main` does).
    Everything is checked before the first step (RunSetupError); Ctrl+C raises :class:`RunInterrupted`. Returns
    the run's figures (:func:`_summary`; ``{}`` in the other processes).
    Shapes: each step's batch is (B, T) token ids, B = ``batch_size`` over all processes, T = ``context_length``.
    """
    wall_start = time.perf_counter()
    if max_seconds is not None and not max_seconds > 0:
        raise RunSetupError(f"--max-seconds must be a positive number of seconds, got {max_seconds!r}")
    run = _set_up(model_config, data_path, out_dir, train_config, device, resume, max_steps, verbose, callback)
    train_config, model, optimizer = run.train_config, run.model, run.optimizer
    window, bar = _Window(run, max_seconds), _progress_bar(progress, run)
    start_step, stop_reason = run.step, "max_steps"
    try:
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
            window.add(loss)  # stays on the device until the window closes
            last = step == train_config.max_steps
            evaluate_now = step % train_config.eval_interval == 0 or last
            save_now = step % train_config.checkpoint_interval == 0 or last
            if not (step % train_config.log_interval == 0 or evaluate_now or save_now):
                continue

            # time and log: one synchronisation per window, for the losses and the "out of time" flag
            losses, out_of_time = window.sync()  # this window's losses, averaged over processes
            _check_finite(losses, step, run)  # before anything is saved
            run.history.extend(losses)
            tokens_per_s, mean_loss = window.close(), sum(losses) / len(losses)
            if bar is not None:
                bar.update(len(losses))
                bar.set_postfix(loss=f"{mean_loss:.4f}", tok_s=f"{tokens_per_s:,.0f}")
            events = [{"kind": "train", "step": step, "loss": mean_loss, "lr": lr, "tokens_per_s": tokens_per_s}]

            # evaluate and save (process 0; the others wait at the barrier)
            if run.rank == 0 and evaluate_now:
                events.append(_evaluate_splits(run))
            if save_now or out_of_time:
                run.save()
            if callback is not None and run.rank == 0:  # after the checkpoint: a callback that raises is a kill
                for event in events:
                    callback(event)
            if run.world > 1:
                dist.barrier()
            window.restart()  # evaluation and saving are not training time
            if out_of_time:
                stop_reason = "max_seconds"
                break
    except KeyboardInterrupt:
        raise RunInterrupted(run.step, run.out_dir / CHECKPOINT_NAME) from None
    finally:
        if bar is not None:
            bar.close()
    return _summary(run, window, start_step, stop_reason, wall_start)


def _progress_bar(progress: bool | None, run: _Run) -> Any:
    """A tqdm bar on process 0 if ``progress`` (None: when stderr is a terminal), else None."""
    if not ((sys.stderr.isatty() if progress is None else progress) and run.rank == 0):
        return None
    from tqdm.auto import tqdm

    return tqdm(total=run.train_config.max_steps, initial=run.step, unit="step", dynamic_ncols=True)


class _Window:
    """The steps since the last log line: their losses (on the device until then), tokens and time.

    ``sync`` fetches the losses, averaged over processes, with a flag: did any process run past ``max_seconds``;
    ``close`` adds the window's time to ``train_s``; ``restart`` opens the next one after evaluation and saving.
    ``first_step_s`` times the first step alone (it compiles)."""

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


def _check_finite(losses: list[float], step: int, run: _Run) -> None:
    """NonFiniteLossError naming the first step whose loss is NaN or infinite; ``losses`` end at ``step``."""
    for loss_step, loss in enumerate(losses, start=step - len(losses) + 1):
        if not math.isfinite(loss):
            raise NonFiniteLossError(
                f"the training loss became {loss} at step {loss_step}; stopped. The last good checkpoint is "
                f"{run.out_dir / CHECKPOINT_NAME} (nothing was saved after it). Lower the learning rate or raise "
                "warmup_steps, then --resume."
            )


def _evaluate_splits(run: _Run) -> dict[str, Any]:
    """Estimate the loss on both splits, record and print it; the "eval" event."""
    seed = run.train_config.seed
    train_loss, val_loss = _estimate(run, run.train_data, seed + 1), _estimate(run, run.val_data, seed + 2)
    run.evals.append([run.step, train_loss, val_loss])
    run.say(f"step {run.step}: train {train_loss:.4f}, val {val_loss:.4f}")
    return {"kind": "eval", "step": run.step, "train_loss": train_loss, "val_loss": val_loss}


def _summary(run: _Run, window: _Window, start_step: int, stop_reason: str, wall_start: float) -> dict[str, Any]:
    """The run's final figures (process 0 evaluates the whole validation split), also written to summary.json;
    an empty dict in the other processes."""
    result: dict[str, Any] = {}
    if run.rank == 0:
        T, model, eval_start = run.model_config.context_length, run.model, time.perf_counter()
        batch_size = max(run.train_config.batch_size, 64)
        val_loss = evaluate(model, run.val_data, T, batch_size, device=run.device, autocast=run.autocast)
        train_loss = _estimate(run, run.train_data, run.train_config.seed + 1)
        final_eval_s = time.perf_counter() - eval_start
        steps_run, train_s, tokens_per_step = run.step - start_step, window.train_s, run.train_config.batch_size * T
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
            "compiled": run.switches["compile"],
            "autocast": run.switches["autocast"],
            "fused_adamw": run.switches["fused_adamw"],
            "notices": run.notices,
            "stopped_by": stop_reason,
            "checkpoint": str(run.out_dir / CHECKPOINT_NAME),
            "model_config": run.model_config.to_dict(),
            "train_config": dataclasses.asdict(run.train_config),
            "history": run.history,
            "evals": run.evals,
        }
        write_atomic(run.out_dir / SUMMARY_NAME, (json.dumps(result) + "\n").encode())  # never half a summary
    if run.world > 1:
        dist.barrier()
    return result


# --- Set-up: what train() builds before the first step


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
    optimizer: torch.optim.AdamW
    batch_gen: torch.Generator  # draws the batches: the same ones in every process
    switches: dict[str, Any]  # this session's GPU recipe: compile, autocast, fused_adamw
    notices: list[str]
    say: Callable[[str], None]
    fwd: nn.Module | None = None  # what the loop calls: the model, compiled and/or wrapped for torchrun
    step: int = 0  # updates done
    history: list[float] = dataclasses.field(default_factory=list)  # the loss of every update
    evals: list[list[float]] = dataclasses.field(default_factory=list)  # [step, train_loss, val_loss] each

    def autocast(self) -> Any:
        on = self.switches["autocast"] == "bf16"
        return torch.autocast(self.device.type, dtype=torch.bfloat16) if on else contextlib.nullcontext()

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets, (B / processes, T) each, on the device: this process' rows of one shared batch."""
        T, B = self.model_config.context_length, self.train_config.batch_size
        x, y = get_batch(self.train_data, B, T, generator=self.batch_gen)  # (B, T): the same in every process
        rows = slice(self.rank * B // self.world, (self.rank + 1) * B // self.world)
        x, y = x[rows], y[rows]  # (B / processes, T)
        if self.device.type == "cuda":  # page-locked memory: the copy runs alongside the GPU instead of waiting
            x, y = x.pin_memory(), y.pin_memory()
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def save(self) -> None:
        """Process 0 writes what a checkpoint holds: everything a resumed run needs, as plain data and tensors."""
        if self.rank == 0:
            state = {
                "format": FORMAT,
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "step": self.step,
                "model_config": self.model_config.to_dict(),
                "train_config": dataclasses.asdict(self.train_config),
                "rng": {
                    "torch": torch.get_rng_state(),
                    "batch": self.batch_gen.get_state(),
                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                },
                "tokenizer": list(self.tokenizer.chars),
                "history": self.history,
                "evals": self.evals,
                "text_sha256": self.text_sha256,
            }
            self.out_dir.mkdir(parents=True, exist_ok=True)
            save_checkpoint(self.out_dir / CHECKPOINT_NAME, state)


def _set_up(model_config, data_path, out_dir, train_config, device, resume, max_steps, verbose, callback) -> _Run:
    """Everything :func:`train` does before the first step. The checks come first, in the order a user meets
    them (the arguments, the device, the output folder, the data, a resumed run, the GPU switches); then the
    model, the optimizer and the random state, drawn in the same order in every run."""
    asked = train_config
    if isinstance(model_config, str):
        train_config = TrainConfig.preset(model_config) if train_config is None else train_config
        model_config = GPTConfig.preset(model_config)
    if not isinstance(model_config, GPTConfig):
        raise TypeError(f"model_config must be a GPTConfig or a preset name, got {type(model_config).__name__}")
    train_config = TrainConfig() if train_config is None else train_config
    if max_steps is not None:
        check_int("max_steps", max_steps)
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_available() and dist.is_initialized() else (0, 1)
    device = pick_device(device)  # ValueError with the fix for a device this machine does not have
    say = (lambda msg: print(msg, file=sys.stderr, flush=True)) if (verbose and rank == 0) else (lambda msg: None)
    check_bool("resume", resume)
    check_bool("verbose", verbose)
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be a function taking one event dict, or None, got {type(callback).__name__}")
    out_dir = check_out_dir(out_dir, resume)
    if rank == 0 and (removed := clean_stale_tmp(out_dir)):
        say(f"removed {len(removed)} temporary file(s) left in {out_dir} by a save that was killed")
    text = load_text(data_path)  # checks the course corpus' sha256
    say(
        f"data: {data_path} is the course corpus, sha256 verified"
        if is_course_corpus(data_path)
        else f"data: {data_path} is your own text (not the course corpus): used as it is, not verified against a "
        "pinned sha256"
    )
    text_sha256, state, notices = sha256_bytes(text.encode("utf-8")), None, []
    if resume and (out_dir / CHECKPOINT_NAME).exists():
        state = load_checkpoint(out_dir / CHECKPOINT_NAME)
        model_config, train_config, notices = _resume(state, out_dir, model_config, train_config, asked, max_steps,
                                                      text_sha256)  # fmt: skip
    elif resume:
        say(f"no checkpoint at {out_dir / CHECKPOINT_NAME}: starting from scratch")
    if max_steps is not None:
        train_config = dataclasses.replace(train_config, max_steps=max_steps)
    if train_config.batch_size % world:
        raise RunSetupError(
            f"batch_size ({train_config.batch_size}) must be divisible by the number of processes ({world})"
        )
    check_text_size(len(text), model_config.context_length, source=str(data_path))
    tokenizer = CharTokenizer(state["tokenizer"]) if state else CharTokenizer.from_text(text)
    model_config = dataclasses.replace(model_config, vocab_size=tokenizer.vocab_size)
    switches, switch_notices = gpu_switches(train_config, device)
    notices += switch_notices
    for notice in notices if rank == 0 else []:  # what differs from what was asked is shown even when quiet
        print(notice, file=sys.stderr, flush=True)

    torch.manual_seed(train_config.seed)  # the same initial weights in every process
    model = GPT(model_config).to(device)
    optimizer = _optimizer(model, train_config, switches["fused_adamw"])
    batch_gen = torch.Generator().manual_seed(train_config.seed)  # the same batches in every process
    run = _Run(train_config, model_config, device, rank, world, out_dir, tokenizer, *split_data(tokenizer.encode(text)),
               text_sha256, model, optimizer, batch_gen, switches, notices, say, fwd=model)  # fmt: skip
    if state is not None:  # continue where the checkpoint left off, every random generator included
        _restore(state, run)
        say(f"resumed from {out_dir / CHECKPOINT_NAME} at step {run.step}")
    if rank > 0:  # dropout differs between processes, as between rows of one batch (a checkpoint holds rank 0's)
        torch.manual_seed(train_config.seed + 1_000_003 * rank + run.step)
    if switches["compile"]:
        run.fwd = torch.compile(model)
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        run.fwd = DistributedDataParallel(run.fwd, device_ids=[device.index] if device.type == "cuda" else None)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    return run


def _optimizer(model: GPT, train_config: TrainConfig, fused: bool) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on biases, LayerNorm gains or position vectors)."""
    params = list(model.parameters())  # each shared (tied) tensor once
    decay = [p for p in params if p.dim() >= 2 and (model.pos_emb is None or p is not model.pos_emb.embedding.weight)]
    no_decay = [p for p in params if all(p is not d for d in decay)]
    groups = [{"params": decay, "weight_decay": train_config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    betas = (train_config.beta1, train_config.beta2)
    return torch.optim.AdamW(groups, lr=train_config.learning_rate, betas=betas, **({"fused": True} if fused else {}))


def _restore(state: dict[str, Any], run: _Run) -> None:
    """Load a checkpoint's weights, optimizer, step, history and every random generator (CUDA's where the same
    GPUs are there)."""
    run.model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    rng = state["rng"]
    torch.set_rng_state(rng["torch"])
    run.batch_gen.set_state(rng["batch"])
    if rng.get("cuda") and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(rng["cuda"])
    run.step = state["step"]
    run.history, run.evals = list(state["history"]), list(state.get("evals", []))


# --- Resume: what --resume keeps, refuses and takes from the caller

MATCH, KEEP, SESSION, ARGUMENT = "must match", "the checkpoint's", "this session's", "train's max_steps argument"

# What --resume does with each part of a run, and the flag its message names (None: the field's name). MATCH:
# another value is another run, refused. KEEP: the checkpoint's (another value halfway would make another loss curve);
# a value asked for that differs is named in a notice. SESSION: the GPU recipe's switches, how this machine runs, not
# what the run is: the caller's. ARGUMENT: train's max_steps argument when given (to train a run for longer), else KEEP.
# fmt: off
RESUME_RULES: dict[str, tuple[str, str | None]] = {
    "model_config": (MATCH, "--preset"),  # vocab_size excepted: the checkpoint's tokenizer decides it
    "text": (MATCH, "--data"),  # compared by sha256
    "max_steps": (ARGUMENT, None),
    **{name: (KEEP, None) for name in ("min_lr", "warmup_steps", "weight_decay", "beta1", "beta2", "grad_clip",
                                       "eval_batches")},
    **{name: (KEEP, "--" + name.replace("_", "-")) for name in ("batch_size", "learning_rate", "eval_interval",
                                                                "log_interval", "checkpoint_interval", "seed")},
    **{name: (SESSION, "--" + name.replace("_", "-")) for name in ("compile", "autocast", "fused_adamw")},
}
# fmt: on
assert {f.name for f in dataclasses.fields(TrainConfig)} <= set(RESUME_RULES), "every setting needs a resume rule"


def saved_settings(state: dict[str, Any]) -> dict[str, Any]:
    """The run's own training settings in a checkpoint: all but this session's switches."""
    return {k: v for k, v in state["train_config"].items() if RESUME_RULES.get(k, (KEEP,))[0] != SESSION}


def _resume(
    state, out_dir, model_config, train_config, asked, max_steps, text_sha256
) -> tuple[GPTConfig, TrainConfig, list]:
    """The checkpoint's model and settings, with this session's switches and a notice per setting ``asked`` (as
    given; None if none were) that the run keeps. RunSetupError if the model or the text is another run's."""
    path, saved_model = out_dir / CHECKPOINT_NAME, GPTConfig.from_dict(state["model_config"])
    differ = [
        f"{f.name} {getattr(saved_model, f.name)!r} there, {getattr(model_config, f.name)!r} asked"
        for f in dataclasses.fields(GPTConfig)
        if f.name != "vocab_size" and getattr(saved_model, f.name) != getattr(model_config, f.name)
    ]
    if differ:
        raise RunSetupError(
            f"--resume: {path} is a run of {_describe_model(saved_model)}, not {_describe_model(model_config)} as "
            f"asked ({'; '.join(differ)}): leave out --preset to continue that run, or choose another --out for a "
            "new one"
        )
    if state.get("text_sha256", text_sha256) != text_sha256:
        raise RunSetupError(
            f"--resume: {path} was trained on a text with sha256 {state['text_sha256'][:16]}..., but --data has "
            f"{text_sha256[:16]}...: pass the same file to continue that run, or choose another --out for a new one"
        )
    step, summarised = state["step"], summary_step(out_dir) == state["step"]
    if max_steps is not None and (max_steps < step or (max_steps == step and summarised)):
        raise RunSetupError(
            f"--resume: {path} is at step {step} already, so --max-steps {max_steps} would train nothing: "
            f"give a --max-steps above {step} to train it further"
        )
    if max_steps is None and step >= state["train_config"]["max_steps"] and summarised:
        raise RunSetupError(
            f"--resume: {path} finished at step {step} (its {SUMMARY_NAME} is written), so --resume would train "
            f"nothing: give a --max-steps above {step} to train it further"
        )
    saved, notices = saved_settings(state), []
    for name, new in (dataclasses.asdict(asked) if asked is not None else {}).items():
        rule, flag = RESUME_RULES[name]
        if (rule == KEEP or (rule == ARGUMENT and max_steps is None)) and saved.get(name) != new:
            how = f" (to change it, pass max_steps={new} to train)" if rule == ARGUMENT else ""
            notices.append(
                f"--resume: keeping the checkpoint's {name} {saved.get(name)}; your {flag or name} {new} is "
                f"ignored{how}"
            )
    session = {k: v for k, v in dataclasses.asdict(train_config).items() if RESUME_RULES[k][0] == SESSION}
    return saved_model, TrainConfig(**{**saved, **session}), notices


def summary_step(out_dir: Path) -> int | None:
    """The step ``out_dir``'s summary.json was written at, or None if it has none (a run stopped during its final
    evaluation: a --resume then writes it, training nothing)."""
    try:
        return int(json.loads((Path(out_dir) / SUMMARY_NAME).read_text())["steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def finished_run(out_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The summary (:func:`train`'s result, read from summary.json) of the finished run in ``out_dir``, or None when
    there is none to load: no checkpoint, or one a ``resume=True`` would still train (stopped before its last step,
    or during its final evaluation). The same test :func:`train` makes before it refuses to resume a finished run,
    so a notebook's training cell, run again, loads the run instead of raising RunSetupError."""
    out_dir = Path(out_dir)
    step = summary_step(out_dir)
    if step is None or not (out_dir / CHECKPOINT_NAME).is_file():
        return None
    state = load_checkpoint(out_dir / CHECKPOINT_NAME)
    if state["step"] != step or step < state["train_config"]["max_steps"]:
        return None
    return json.loads((out_dir / SUMMARY_NAME).read_text())


def _describe_model(c: GPTConfig) -> str:
    preset = next((n for n, p in PRESETS.items() if dataclasses.replace(p, vocab_size=c.vocab_size) == c), None)
    shape = f"{c.num_layers} layers, {c.embed_dim} wide, context {c.context_length}"
    shape += ", post-norm" if c.norm_position == "post" else ""
    return f"the {preset!r} preset ({shape})" if preset else f"a model of {shape}"


# --- The checkpoint file, and the model file a learner loads


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically (:func:`course_utils._files.atomic_path`): readers see the old file or
    the new one, never half; a save killed midway leaves a temporary file the next run in that folder removes."""
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint written by :func:`train`, with ``weights_only=True``; CheckpointError if it is damaged."""
    state = _read(path, "checkpoint", (FORMAT,), "train a model first (python -m course_utils.train ...)")
    missing = [k for k in ("model", "optimizer", "step", "model_config", "train_config", "rng", "tokenizer",
                           "history") if k not in state]  # fmt: skip
    if missing:
        raise CheckpointError(f"checkpoint {path} lacks {missing}: it was not written by this version")
    return state


def export_model(checkpoint: str | os.PathLike, dest: str | os.PathLike, provenance: dict[str, Any]) -> Path:
    """Write what a learner needs to use a trained model (weights, config, tokenizer, history, ``provenance``),
    without the optimizer and random states (two thirds of a checkpoint): it cannot resume a run. Atomic; read
    it back with :func:`load_model`. Used by ``--export``; notebooks 10 and 11 load the course's committed one."""
    state = load_checkpoint(checkpoint)
    slim = {k: state.get(k, []) for k in ("model", "model_config", "tokenizer", "history", "evals", "step")}
    slim.update(format=MODEL_FORMAT, provenance=json.loads(json.dumps(provenance)))  # plain data only
    dest = Path(dest)
    clean_stale_tmp(dest.parent, dest.name)  # a killed export's temporary file
    save_checkpoint(dest, slim)
    return dest


def load_model(path: str | os.PathLike, device: str | torch.device = "cpu") -> tuple[GPT, CharTokenizer, dict]:
    """A trained :class:`GPT` (in eval mode), its tokenizer, and the file's other contents (provenance, history),
    from a file :func:`export_model` wrote or a full checkpoint; CheckpointError if it is damaged or of another
    kind. Taught in notebook 10."""
    state = _read(path, "model file", (MODEL_FORMAT, FORMAT), "export one with export_model(checkpoint, dest, ...)")
    device = pick_device(device)
    model = GPT(GPTConfig.from_dict(state["model_config"]))
    model.load_state_dict(state["model"])
    info = {k: v for k, v in state.items() if k not in ("model", "optimizer", "rng")}
    return model.to(device).eval(), CharTokenizer(state["tokenizer"]), info


def _read(path: object, what: str, formats: tuple[str, ...], how: str) -> dict[str, Any]:
    """The dict saved at ``path`` (``weights_only=True``, onto the CPU): FileNotFoundError saying ``how`` to make
    one, CheckpointError if it is damaged or holds none of ``formats``."""
    check_path("path", path)
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder, not a {what}: move it away, or name the file inside it")
    if not path.is_file():
        raise FileNotFoundError(f"no {what} at {path}: {how}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated zip, bad pickle, foreign objects: all mean "cannot trust this file"
        fix = (
            "Delete it to start again, or restore an intact copy."
            if what == "checkpoint"
            else "Fetch or export it again."
        )
        raise CheckpointError(
            f"cannot read {what} {path}: it is truncated or corrupt ({type(err).__name__}: {first_line(err)}). {fix}"
        ) from err
    if not isinstance(state, dict) or state.get("format") not in formats:
        kind = "checkpoint" if what == "checkpoint" else "model"
        raise CheckpointError(f"{path} is not a {kind} written by course_utils.train")
    return state


# The model files of this course, by their "format": what a command names when it will not replace one.
KINDS = {
    FORMAT: "a training checkpoint (python -m course_utils.train --out)",
    MODEL_FORMAT: "a GPT exported by python -m course_utils.train --export",
    "course-induction-1": "an induction model (python -m course_utils.induction)",
}


def model_file(path: str | os.PathLike) -> tuple[dict[str, Any] | None, str]:
    """What an existing file holds, read with ``weights_only=True``: its dict and its kind in words (:data:`KINDS`),
    or None and "a file that is not a model of this course"."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # damaged, a text file, foreign objects
        state = None
    kind = state.get("format") if isinstance(state, dict) else None
    return (state, KINDS[kind]) if kind in KINDS else (None, "a file that is not a model of this course")


def first_line(err: BaseException) -> str:
    """The first line of an error's message (some of PyTorch's run to a page)."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


# --- Checked before the first step: the output folder and the GPU switches


def check_out_dir(out_dir: str | os.PathLike, resume: bool = False) -> Path:
    """``out_dir`` as a Path, or RunSetupError: it is empty, a file, under a file, cannot be written, or holds a
    checkpoint that a run without ``resume`` would overwrite."""
    check_path("out_dir", out_dir)
    if not os.fspath(out_dir).strip():  # `--out "$RUN"` with RUN unset: Path("") is the current folder
        raise RunSetupError(
            f"--out is empty ({os.fspath(out_dir)!r}), expected a folder for {CHECKPOINT_NAME} and {SUMMARY_NAME}, "
            "such as runs/NAME in the course folder (an unset shell variable?); give . for the current folder"
        )
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise RunSetupError(
            f"--out {out_dir} is a file, expected a folder for {CHECKPOINT_NAME} and {SUMMARY_NAME}: choose another "
            "--out, or move the file away"
        )
    existing = check_can_create(out_dir, "--out")
    try:  # the permission bits can say yes where the system says no (root under /proc, a full or read-only disk)
        if existing == out_dir:
            probe_writable(out_dir)
        else:  # a folder made and removed at once: a refused run leaves nothing
            folder = tempfile.mkdtemp(dir=existing, prefix=".probe-", suffix=".tmp")
            try:
                probe_writable(folder)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    except OSError as e:
        raise RunSetupError(
            f"--out {out_dir} cannot be written here ({e.strerror or e}): choose a folder you can write to, "
            "such as runs/NAME in the course folder"
        ) from None
    if not resume and (out_dir / CHECKPOINT_NAME).exists():
        raise RunSetupError(
            f"--out {out_dir} already holds a run ({CHECKPOINT_NAME}): add --resume to continue it, or choose "
            "another --out for a new run (delete the folder to start it over)"
        )
    return out_dir


def check_can_create(path: Path, flag: str) -> Path:
    """The nearest existing folder or file at or above ``path``; RunSetupError unless ``path`` (a folder or a
    file) can be created or replaced there by this process."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing != path and not existing.is_dir():
        raise RunSetupError(
            f"{flag} {path} cannot be created: {existing} is a file, not a folder; choose another {flag}"
        )
    folder = existing if existing.is_dir() else existing.parent
    if not os.access(folder, os.W_OK | os.X_OK):  # also False on a read-only file system, even for root
        raise RunSetupError(
            f"{flag} {path}: {folder} is not writable here; choose a folder you can write to, such as runs/NAME in "
            "the course folder"
        )
    return existing


def compile_available(device: torch.device) -> tuple[bool, str]:
    """Whether ``torch.compile`` can work on ``device`` here, and if not, why: CUDA needs Triton (PyPI has none
    for Windows); the CPU needs a C++ compiler for inductor's kernels."""
    if device.type == "cuda" and importlib.util.find_spec("triton") is None:
        return False, "Triton is not installed (PyPI has no Triton for Windows)"
    if device.type == "cpu" and not any(
        name and shutil.which(name) for name in (os.environ.get("CXX", ""), "g++", "clang++", "c++", "cl")
    ):
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


def gpu_switches(train_config: TrainConfig, device: torch.device) -> tuple[dict[str, Any], list[str]]:
    """Which of the GPU recipe's switches this session uses on ``device`` (``None``: on for CUDA only), and a
    notice for each that cannot work here; RunSetupError for a fused AdamW this build lacks."""
    on_cuda, notices = device.type == "cuda", []
    use_compile = on_cuda if train_config.compile is None else train_config.compile
    if use_compile and not (available := compile_available(device))[0]:
        use_compile = False
        notices.append(f"torch.compile is off: {available[1]}; training in eager mode (slower, same results)")
    fused = on_cuda if train_config.fused_adamw is None else train_config.fused_adamw
    if fused and not fused_adamw_available(device):
        raise RunSetupError(
            f"fused AdamW is not available for {device} in torch {torch.__version__}: leave out --fused-adamw (or "
            "set fused_adamw=False)"
        )
    autocast = train_config.autocast or ("bf16" if on_cuda else "off")
    return {"compile": use_compile, "autocast": autocast, "fused_adamw": fused}, notices


if __name__ == "__main__":  # python -m course_utils.train (and torchrun -m ...): the command line's own module
    from course_utils.train_cli import main

    sys.exit(main())
