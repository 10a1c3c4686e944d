"""Train the tiny GPT of notebook 10: the settings, the schedule, evaluation, the loop and what a checkpoint holds.

The command line and the ``torchrun`` set-up are :mod:`course_utils.train_cli` (``python -m course_utils.train``).
A run killed at any moment loses at most ``checkpoint_interval`` steps and resumes bit for bit on a CPU (on the same
CPU kernels: AVX-512, AVX2 and plain ones round differently). Under ``torchrun`` every process draws the same batch
and trains on its own rows.
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
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from course_utils._files import atomic_path, clean_stale_tmp, sha256_bytes, write_atomic
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
    iter_eval_batches,
    load_text,
    split_data,
)
from course_utils.devices import pick_device
from course_utils.gpt import GPT, GPTConfig

__all__ = ["TrainConfig", "TRAIN_PRESETS", "learning_rate", "evaluating", "evaluate", "loss_by_position", "train",
           "NonFiniteLossError", "RunSetupError", "RunInterrupted", "CheckpointError", "save_checkpoint",
           "load_checkpoint", "export_model", "load_model", "finished_run", "check_given", "check_out_dir",
           "check_can_create", "check_out_file"]  # fmt: skip

CHECKPOINT_NAME, SUMMARY_NAME = "checkpoint.pt", "summary.json"
FORMAT, MODEL_FORMAT = "course_utils.train/1", "course_utils.model/1"  # a checkpoint; an exported model


class RunSetupError(ValueError):
    """The run cannot start as asked (output folder, data, resume): found before the first step, with the fix."""


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read or does not fit the run."""


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite; the last checkpoint on disk is still the last good one."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl+C during :func:`train` at ``step``; ``saved_step``: the step the ``checkpoint`` holds (None: none)."""

    def __init__(self, step: int, checkpoint: Path):
        state, _ = model_file(checkpoint)  # none, or damaged: no step to name
        self.step, self.checkpoint, self.saved_step = step, checkpoint, state and int(state["step"])
        kept = f"{checkpoint} holds step {self.saved_step}: resume=True goes on" if state else "nothing is saved"
        super().__init__(f"stopped at step {step}; {kept}")


# --- Settings and schedule


@dataclass(frozen=True)
class TrainConfig:
    """How to train; ``batch_size`` is over all processes; the GPU switches (None: on CUDA only) are this session's."""

    batch_size: int = 64
    max_steps: int = 5000
    learning_rate: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # math.inf: no clipping
    eval_interval: int = 500
    eval_batches: int = 20
    log_interval: int = 10
    checkpoint_interval: int = 1000
    seed: int = 1337
    compile: bool | None = None
    autocast: str | None = None  # "bf16", "off"
    fused_adamw: bool | None = None

    def __post_init__(self) -> None:
        for name in ("batch_size", "max_steps", "eval_interval", "eval_batches", "log_interval", "checkpoint_interval"):
            check_int(name, getattr(self, name))
        check_int("warmup_steps", self.warmup_steps, minimum=0)
        check_positive_number("learning_rate", self.learning_rate)
        interval = f"[0, learning_rate = {self.learning_rate}]"
        if not 0 <= check_number("min_lr", self.min_lr, f"a number in {interval}") <= self.learning_rate:
            raise ValueError(f"min_lr must be in {interval}, got {self.min_lr!r}: lower it with learning_rate (the "
                             "presets' is a tenth of it)")  # fmt: skip
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
        return from_preset(cls, TRAIN_PRESETS, name, overrides)


# fmt: off
TRAIN_PRESETS: dict[str, TrainConfig] = {  # one per model preset (gpt.PRESETS)
    "tiny": TrainConfig(batch_size=16, max_steps=200, learning_rate=3e-3, min_lr=3e-4, warmup_steps=10,
                        eval_interval=100, eval_batches=4, checkpoint_interval=100),
    "cpu": TrainConfig(batch_size=32, max_steps=1000, learning_rate=3e-3, min_lr=3e-4, warmup_steps=50,
                       eval_interval=500, eval_batches=8, log_interval=50, checkpoint_interval=250),
    "gpu": TrainConfig(log_interval=50),  # the defaults are the gpu preset's
}
# fmt: on


def learning_rate(step: int, train_config: TrainConfig) -> float:
    """Linear warmup over ``warmup_steps``, then a cosine from ``learning_rate`` to ``min_lr`` at ``max_steps``.
    Taught in notebook 10."""
    check_int("step", step, minimum=0)
    if not isinstance(train_config, TrainConfig):
        raise TypeError(f"train_config must be a TrainConfig (TrainConfig.preset('tiny'), say), got "
                        f"{type(train_config).__name__}")  # fmt: skip
    warmup, top, bottom = train_config.warmup_steps, train_config.learning_rate, train_config.min_lr
    if step < warmup:  # warmup may exceed max_steps: a short smoke run then stays on the ramp
        return top * (step + 1) / warmup
    if step >= train_config.max_steps:
        return bottom
    progress = (step - warmup) / max(1, train_config.max_steps - warmup)  # 0 -> 1
    return bottom + 0.5 * (1.0 + math.cos(math.pi * progress)) * (top - bottom)


# --- Evaluation


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """Inside: ``model`` in eval mode and no gradients; on leaving, back in the mode it was in."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)


def _window_losses(model: nn.Module, data: torch.Tensor, context_length: int, batch_size: int, device, autocast,
                   drop_last: bool) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Over ``data``'s consecutive windows: the summed loss at each position, and how many windows reach it."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (a GPT), got {type(model).__name__}")
    check_int("context_length", context_length)
    longest = getattr(getattr(model, "config", None), "context_length", None)
    if isinstance(longest, int) and context_length > longest:
        raise ValueError(f"context_length {context_length} is longer than the model's context ({longest}): windows "
                         f"of at most {longest} characters, e.g. model.config.context_length")  # fmt: skip
    total, count = torch.zeros(2, context_length, dtype=torch.float64)  # (T,) each
    with evaluating(model):
        for x, y in iter_eval_batches(data, batch_size, context_length, device=device, drop_last=drop_last):
            with autocast():
                logits, _ = model(x)  # (B, t, V), t = T but for a short last window
            losses = nn.functional.cross_entropy(logits.transpose(1, 2).float(), y, reduction="none")  # (B, t)
            total[: y.shape[1]] += losses.double().sum(dim=0).cpu()  # (t,)
            count[: y.shape[1]] += y.shape[0]
    return total, count


def evaluate(model: GPT, data: torch.Tensor, context_length: int, batch_size: int = 64,
             device: torch.device | str = "cpu", autocast: Any = contextlib.nullcontext) -> float:  # fmt: skip
    """The mean next-token loss over every target of ``data`` (consecutive windows, each target once, the short
    last one included). Shape: data (N,) token ids. Taught in notebook 10."""
    total, count = _window_losses(model, data, context_length, batch_size, device, autocast, drop_last=False)
    return (total.sum() / count.sum()).item()


def loss_by_position(model: nn.Module, data: torch.Tensor, context_length: int, batch_size: int = 64,
                     device: torch.device | str = "cpu") -> torch.Tensor:  # fmt: skip
    """The mean loss at each position of a window, over :func:`evaluate`'s full windows: entry t predicts the
    character after t + 1 characters of context. Shape: data (N,) -> (T,) float64. Taught in notebook 10."""
    total, count = _window_losses(model, data, context_length, batch_size, device, contextlib.nullcontext, True)
    return total / count


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
    progress: bool | None = None,
    callback: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Train a GPT (a config, or a preset name whose training preset is then the default) on the text at
    ``data_path``, saving checkpoints in ``out_dir``; return the run's figures (``{}`` in processes other than 0).

    ``resume`` continues the run in ``out_dir`` with its model and text, and ``train_config`` from its saved step (the
    run's own settings continue it bit for bit; a lower learning rate after a NaN, say, applies from there), or,
    without one, the checkpoint's;
    ``progress``: a tqdm bar and a line per evaluation (default: when stderr is a terminal).
    ``callback(event)`` gets ``{"kind": "train", "step", "loss", "lr", "tokens_per_s"}`` when a logged window closes
    (``loss``: its mean) and ``{"kind": "eval", "step", "train_loss", "val_loss"}`` at each evaluation; what it
    raises stops the run. Shape: each step's batch is (B, T) token ids, B over all processes. Taught in notebook 10.
    """
    wall_start = time.perf_counter()
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be a function taking one event dict, or None, got {type(callback).__name__}")
    if progress is not None:  # "no" would be true
        check_bool("progress", progress, "True, False or None (a bar when stderr is a terminal)")
    run = _Run(model_config, data_path, out_dir, train_config, device, resume, max_steps)
    try:
        return _loop(run, progress, callback, wall_start)
    finally:  # the summary written too: a second run into this --out may start now
        if run.lock is not None:
            run.lock.close()


def _loop(run: _Run, progress: bool | None, callback: Callable | None, wall_start: float) -> dict[str, Any]:
    """:func:`train`'s loop, then its summary."""
    train_config, model, optimizer, bar = run.train_config, run.model, run.optimizer, None
    if (sys.stderr.isatty() if progress is None else progress) and run.rank == 0:
        from tqdm.auto import tqdm

        bar = tqdm(total=train_config.max_steps, initial=run.step, unit="step", dynamic_ncols=True)
    start_step = run.step
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
            run.window.append(loss.detach())  # stays on the device until the window closes
            last = step == train_config.max_steps
            evaluate_now = step % train_config.eval_interval == 0 or last
            save_now = step % train_config.checkpoint_interval == 0 or last
            if not (step % train_config.log_interval == 0 or evaluate_now or save_now):
                continue

            # time and log: one synchronisation per window, for its losses
            losses, tokens_per_s = run.close_window()  # the losses averaged over processes
            mean_loss = sum(losses) / len(losses)
            if bar is not None:
                bar.update(len(losses))
                bar.set_postfix(loss=f"{mean_loss:.4f}", tok_s=f"{tokens_per_s:,.0f}")
            events = [{"kind": "train", "step": step, "loss": mean_loss, "lr": lr, "tokens_per_s": tokens_per_s}]

            # evaluate and save (process 0; the others wait at the barrier)
            if run.rank == 0 and evaluate_now:
                events.append(_evaluate_splits(run))
                if bar is not None:
                    bar.write(f"step {step}: train {run.evals[-1][1]:.4f}, val {run.evals[-1][2]:.4f}", file=bar.fp)
            if save_now:
                run.save()
            if callback is not None and run.rank == 0:  # after the checkpoint: a callback that raises is a kill
                for event in events:
                    callback(event)
            if run.world > 1:
                dist.barrier()
            run.window_start = time.perf_counter()  # evaluation and saving are not training time
    except KeyboardInterrupt:
        raise RunInterrupted(run.step, run.out_dir / CHECKPOINT_NAME) from None
    except RuntimeError as err:  # in the first step: out of memory, or torch.compile failing (no C++ compiler, say)
        if run.step > start_step:
            raise
        if _out_of_memory(err):
            raise RunSetupError(f"out of memory in the first step with batch_size {train_config.batch_size} and "
                                f"context_length {run.model_config.context_length} ({first_line(err)}): lower "
                                "batch_size (--batch-size on the command line), or the context_length (a --preset "
                                "with a shorter context)") from err  # fmt: skip
        if run.switches["compile"] and isinstance(err, torch._dynamo.exc.BackendCompilerFailed):
            raise RunSetupError(f"torch.compile failed in the first step ({first_line(err.inner_exception)}): "
                                "train without it: --no-compile (compile=False)") from err  # fmt: skip
        raise
    finally:
        if bar is not None:
            bar.close()
    return _summary(run, start_step, wall_start)


def _hold(out_dir: Path) -> Any:
    """``out_dir``/.lock, open and locked while this run trains (POSIX; None on Windows): a second run into the
    same --out is refused before its first step. Before, both trained and the last to save kept only its own."""
    try:
        import fcntl
    except ImportError:
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    lock = open(out_dir / ".lock", "a")  # noqa: SIM115 (held open until train() ends)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise RunSetupError(f"--out {out_dir} is in use by another run (a command or a notebook training there): "
                            "wait for it to end, or choose another --out") from None  # fmt: skip
    return lock


def _out_of_memory(err: RuntimeError) -> bool:  # CUDA's OutOfMemoryError, or the CPU's or MPS' RuntimeError
    text = str(err)
    return isinstance(err, torch.OutOfMemoryError) or "can't allocate memory" in text or "out of memory" in text


def _evaluate_splits(run: _Run) -> dict[str, Any]:
    """The mean loss on each split over ``eval_batches`` batches (the same ones every time), as an "eval" event."""
    means = []
    with evaluating(run.model):
        for offset, data in ((1, run.train_data), (2, run.val_data)):
            g, losses = torch.Generator().manual_seed(run.train_config.seed + offset), []
            for _ in range(run.train_config.eval_batches):
                x, y = get_batch(data, run.train_config.batch_size, run.model_config.context_length, g, run.device)
                with run.autocast():
                    losses.append(run.model(x, y)[1].float())
            means.append(torch.stack(losses).mean().item())
    train_loss, val_loss = means
    run.evals.append([run.step, train_loss, val_loss])
    return {"kind": "eval", "step": run.step, "train_loss": train_loss, "val_loss": val_loss}


def _summary(run: _Run, start_step: int, wall_start: float) -> dict[str, Any]:
    """The run's figures (val_loss over the whole validation split), also written to summary.json by process 0."""
    result: dict[str, Any] = {}
    if run.rank == 0:
        T, model = run.model_config.context_length, run.model
        val_loss = evaluate(model, run.val_data, T, max(run.train_config.batch_size, 64), run.device, run.autocast)
        if not run.evals or run.evals[-1][0] != run.step:  # resumed with max_steps at a checkpoint's step
            _evaluate_splits(run)
        steps_run, train_s, tokens_per_step = run.step - start_step, run.train_s, run.train_config.batch_size * T
        result = {
            "val_loss": val_loss,
            "train_loss": run.evals[-1][1],  # the last evaluation's
            "steps": run.step,
            "steps_this_run": steps_run,
            "tokens_per_s": steps_run * tokens_per_step / train_s if train_s > 0 else 0.0,
            "train_s": train_s,
            "wall_s": time.perf_counter() - wall_start,
            "params": model.num_parameters(),
            "flops_per_token": model.flops_per_token(),
            "device": str(run.device),
            "world_size": run.world,
            "compiled": run.switches["compile"],
            "autocast": run.switches["autocast"],
            "fused_adamw": run.switches["fused_adamw"],
            "notices": run.notices,
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


# --- Set-up: one run as the loop sees it, built before the first step


class _Run:
    """A run's settings, data, model, optimizer and random state, built or resumed and checked before the first step."""

    def __init__(self, model_config, data_path, out_dir, train_config, device, resume, max_steps):
        asked, preset = train_config, model_config if isinstance(model_config, str) else None
        model_config = GPTConfig.preset(preset) if preset is not None else model_config
        if not isinstance(model_config, GPTConfig):
            raise TypeError(f"model_config must be a GPTConfig or a preset name, got {type(model_config).__name__}")
        if train_config is not None and not isinstance(train_config, TrainConfig):
            raise TypeError(f"train_config must be a TrainConfig (TrainConfig.preset('tiny', batch_size=8), say) or "
                            f"None, got {type(train_config).__name__}")  # fmt: skip
        train_config = train_config or (TrainConfig.preset(preset) if preset is not None else TrainConfig())
        if max_steps is not None:
            check_int("max_steps", max_steps)
        dist_on = dist.is_available() and dist.is_initialized()
        self.rank, self.world = (dist.get_rank(), dist.get_world_size()) if dist_on else (0, 1)  # process 0 reports
        self.device = device = pick_device(device)  # ValueError with the fix for a device this machine lacks
        self.out_dir = out_dir = check_out_dir(out_dir, check_bool("resume", resume))
        if self.rank == 0:
            clean_stale_tmp(out_dir)  # a killed save's temporary files
        text = load_text(data_path)  # checks the course corpus' sha256
        self.text_sha256, state, self.notices = sha256_bytes(text.encode("utf-8")), None, []  # another text: refused
        if resume and (out_dir / CHECKPOINT_NAME).exists():
            state = load_checkpoint(out_dir / CHECKPOINT_NAME)
            model_config = same_run(state, out_dir / CHECKPOINT_NAME, model_config, self.text_sha256)
            if asked is None:  # the checkpoint's settings, with this session's GPU switches
                session = {name: getattr(train_config, name) for name in SESSION}
                train_config = TrainConfig(**{**saved_settings(state), **session})
            elif asked.seed != state["train_config"]["seed"]:  # the run goes on from its saved random state
                raise RunSetupError(f"--resume: the run's seed is {state['train_config']['seed']}, and it goes on "
                                    "from the random state its checkpoint holds: leave out --seed (the seed of the "
                                    "TrainConfig, from Python), or choose another --out for a new run")  # fmt: skip
        elif resume:  # a mistyped --out would otherwise start a new run unsaid
            self.notices = [f"--resume: no checkpoint in {out_dir}, so a new run starts there"]
        if max_steps is not None:
            train_config = dataclasses.replace(train_config, max_steps=max_steps)
        if state is not None:
            _refuse_nothing_to_train(state, out_dir, train_config.max_steps)
        if train_config.batch_size % self.world:
            raise RunSetupError(f"batch_size ({train_config.batch_size}) must be divisible by the number of "
                                f"processes ({self.world})")  # fmt: skip
        check_text_size(len(text), model_config.context_length, source=str(data_path))
        self.tokenizer = CharTokenizer(state["tokenizer"]) if state else CharTokenizer.from_text(text)
        self.train_data, self.val_data = split_data(self.tokenizer.encode(text))  # (N_train,), (N_val,) token ids
        self.model_config = model_config = dataclasses.replace(model_config, vocab_size=self.tokenizer.vocab_size)
        self.train_config, self.switches = train_config, gpu_switches(train_config, device)
        for notice in self.notices if self.rank == 0 else []:  # a --resume with no checkpoint to resume
            print(notice, file=sys.stderr, flush=True)

        torch.manual_seed(train_config.seed)  # the same initial weights in every process
        self.model = self.fwd = model = GPT(model_config).to(device)  # fwd: compiled and/or wrapped for torchrun
        params = list(model.parameters())  # AdamW decays the matrices, not biases, LayerNorm gains or positions
        positions = model.pos_emb.embedding.weight if model.pos_emb is not None else None
        decay = [p for p in params if p.dim() >= 2 and p is not positions]
        groups = [{"params": decay, "weight_decay": train_config.weight_decay},
                  {"params": [p for p in params if all(p is not d for d in decay)], "weight_decay": 0.0}]  # fmt: skip
        fused, betas = {"fused": True} if self.switches["fused_adamw"] else {}, (train_config.beta1, train_config.beta2)
        try:
            self.optimizer = torch.optim.AdamW(groups, lr=train_config.learning_rate, betas=betas, **fused)
        except RuntimeError as err:  # fused=True on a device this build has no fused step for
            raise RunSetupError(f"fused AdamW is not available for {device} in torch {torch.__version__} "
                                f"({first_line(err)}): leave out --fused-adamw") from err  # fmt: skip
        self.batch_gen = torch.Generator().manual_seed(train_config.seed)  # the same batches in every process
        self.step, self.history, self.evals = 0, [], []
        if state is not None:  # continue where the checkpoint left off, every random generator included
            model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            rng = state["rng"]
            torch.set_rng_state(rng["torch"])
            self.batch_gen.set_state(rng["batch"])
            if rng["cuda"] and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
                torch.cuda.set_rng_state_all(rng["cuda"])
            self.step, self.history, self.evals = state["step"], list(state["history"]), list(state["evals"])
        if self.rank > 0:  # dropout differs between processes, as between rows of a batch (a checkpoint has rank 0's)
            torch.manual_seed(train_config.seed + 1_000_003 * self.rank + self.step)
        if self.switches["compile"]:
            self.fwd = torch.compile(model)
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            self.fwd = DistributedDataParallel(self.fwd, device_ids=[device.index] if device.type == "cuda" else None)
        if device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        self.window, self.train_s = [], 0.0
        self.lock = _hold(out_dir) if self.rank == 0 else None  # last: released by train() after the summary
        self.window_start = time.perf_counter()

    def autocast(self) -> Any:
        on = self.switches["autocast"] == "bf16"
        return torch.autocast(self.device.type, dtype=torch.bfloat16) if on else contextlib.nullcontext()

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
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
            save_checkpoint(self.out_dir / CHECKPOINT_NAME, state)

    def close_window(self) -> tuple[list[float], float]:
        """The window's losses (averaged over processes, and added to ``history``) and its tokens per second;
        NonFiniteLossError for a NaN or infinite loss, naming its step."""
        window = torch.stack([p.float() for p in self.window])
        if self.world > 1:
            dist.all_reduce(window, op=dist.ReduceOp.SUM)
            window /= self.world
        losses, self.window = window.tolist(), []
        for step, loss in enumerate(losses, start=self.step - len(losses) + 1):
            if not math.isfinite(loss):  # before anything is saved
                saved, _ = model_file(self.out_dir / CHECKPOINT_NAME)
                lower = "a lower learning rate (--learning-rate N; learning_rate and min_lr in a TrainConfig)"
                if saved is None:
                    fix = f"nothing is saved: train again with {lower}"
                elif saved["history"][-1] > saved["history"][0]:  # it had diverged before it was saved
                    fix = f"its checkpoint's loss had risen to {saved['history'][-1]:.3g}: start again with {lower} in "
                    fix += "another --out"
                else:
                    fix = f"{self.out_dir / CHECKPOINT_NAME} holds step {saved['step']}: resume it with {lower}"
                raise NonFiniteLossError(f"the training loss became {loss} at step {step}; stopped: {fix}")
        self.history.extend(losses)
        elapsed = time.perf_counter() - self.window_start
        self.train_s += elapsed
        tokens_per_s = len(losses) * self.train_config.batch_size * self.model_config.context_length / elapsed
        return losses, tokens_per_s


# --- Resume: the checkpoint's model and text, with the settings given or else its own

SESSION = ("compile", "autocast", "fused_adamw")  # how this machine runs, not what the run is: the caller's


def saved_settings(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state["train_config"].items() if k not in SESSION}


def same_run(state: dict[str, Any], path: Path, model_config: GPTConfig, text_sha256: str) -> GPTConfig:
    """The model of the checkpoint ``state`` read from ``path``; RunSetupError if ``model_config`` or the text is
    another (what --resume refuses)."""
    saved_model = GPTConfig.from_dict(state["model_config"])
    differ = [f"{f.name} {getattr(saved_model, f.name)!r} there, {getattr(model_config, f.name)!r} asked"
              for f in dataclasses.fields(GPTConfig)
              if f.name != "vocab_size" and getattr(saved_model, f.name) != getattr(model_config, f.name)]  # fmt: skip
    new_run = "choose another --out for a new one"
    if differ:
        raise RunSetupError(f"--resume: {path} is a run of another model ({'; '.join(differ)}): leave out --preset to "
                            f"continue that run, or {new_run}")  # fmt: skip
    if state.get("text_sha256", text_sha256) != text_sha256:
        raise RunSetupError(f"--resume: {path} was trained on a text with sha256 {state['text_sha256'][:16]}..., but "
                            f"--data has {text_sha256[:16]}...: pass the same file to continue that run, or "
                            f"{new_run}")  # fmt: skip
    return saved_model


def _refuse_nothing_to_train(state: dict[str, Any], out_dir: Path, last: int) -> None:
    """RunSetupError if resuming the checkpoint ``state`` to step ``last`` would train nothing (a finished run, or
    ``last`` below its step); ``last`` equal to its step is let through when the summary is missing (written then)."""
    step = state["step"]
    if last < step or (last == step and (read_summary(out_dir) or {}).get("steps") == step):
        raise RunSetupError(f"--resume: {out_dir / CHECKPOINT_NAME} is at step {step} and max_steps is {last}, so "
                            f"resuming would train nothing: give a max_steps above {step} (--max-steps on the "
                            "command line, max_steps=N in train() from Python)")  # fmt: skip


def read_summary(out_dir: str | os.PathLike) -> dict[str, Any] | None:
    """``out_dir``'s summary.json, or None if it has none (a run stopped before or in its final evaluation)."""
    try:
        return dict(json.loads((Path(out_dir) / SUMMARY_NAME).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def finished_run(out_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The summary of the finished run in ``out_dir`` (:func:`train`'s result), or None if a ``resume=True`` would
    still train it (or there is none): a notebook's training cell, run again, loads the run. Notebook 10."""
    check_path("out_dir", out_dir)
    out_dir, summary = Path(out_dir), read_summary(out_dir)
    if summary is None or not (out_dir / CHECKPOINT_NAME).is_file():
        return None
    state = load_checkpoint(out_dir / CHECKPOINT_NAME)
    return summary if summary.get("steps") == state["step"] >= state["train_config"]["max_steps"] else None


# --- The checkpoint file, and the model file a learner loads


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically: readers see the old file or the new one, never half; CheckpointError
    in one line if it cannot be written (a full disk: torch says "unexpected pos")."""
    try:
        with atomic_path(path) as tmp:
            torch.save(state, tmp)
    except (OSError, RuntimeError) as err:
        raise CheckpointError(f"could not write {path} ({first_line(err)}): is its disk full? The file there before "
                              "is kept; free some space, or choose another folder") from err  # fmt: skip


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint written by :func:`train`; CheckpointError if it is damaged or of another kind."""
    return _read(path, "checkpoint", (FORMAT,), "train a model first (python -m course_utils.train ...)",
                 "Delete it to start again, or restore an intact copy.")  # fmt: skip


def export_model(checkpoint: str | os.PathLike, dest: str | os.PathLike, provenance: dict[str, Any]) -> Path:
    """Write to ``dest`` (atomically) what a learner needs of a checkpoint: weights, config, tokenizer, history and
    ``provenance``, not the optimizer and random states (two thirds of it). Read it with :func:`load_model`."""
    state = load_checkpoint(checkpoint)
    check_out_file(dest, "dest", MODEL_FORMAT, "model.pt")  # a folder, a place not writable, another kind of file
    if not isinstance(provenance, dict):
        raise TypeError(f"provenance must be a dict (what made the model: the command, the date, ...), got "
                        f"{type(provenance).__name__}")  # fmt: skip
    try:
        provenance = json.loads(json.dumps(provenance))  # plain data only
    except (TypeError, ValueError, RecursionError) as err:
        raise TypeError(f"provenance must hold plain data (str, numbers, lists, dicts), got {first_line(err)}") from err
    slim = {k: state[k] for k in ("model", "model_config", "tokenizer", "history", "evals", "step")}
    slim.update(format=MODEL_FORMAT, provenance=provenance)
    dest = Path(dest)
    clean_stale_tmp(dest.parent, dest.name)  # a killed export's temporary file
    save_checkpoint(dest, slim)
    return dest


def load_model(path: str | os.PathLike, device: str | torch.device = "cpu") -> tuple[GPT, CharTokenizer, dict]:
    """A trained :class:`GPT` in eval mode, its tokenizer, and the file's other contents (provenance, history), from
    an exported model or a checkpoint; CheckpointError if it is damaged or of another kind. Taught in notebook 10."""
    state = _read(path, "model file", (MODEL_FORMAT, FORMAT), "export one with export_model(checkpoint, dest, ...)",
                  "Fetch or export it again.")  # fmt: skip
    device = pick_device(device)
    model = GPT(GPTConfig.from_dict(state["model_config"]))
    model.load_state_dict(state["model"])
    info = {k: v for k, v in state.items() if k not in ("model", "optimizer", "rng")}
    return model.to(device).eval(), CharTokenizer(state["tokenizer"]), info


def _read(path: object, what: str, formats: tuple[str, ...], how: str, fix: str) -> dict[str, Any]:
    """The dict saved at ``path``; FileNotFoundError saying ``how`` to make one, CheckpointError if it is damaged."""
    check_path("path", path)
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder, not a {what}: move it away, or name the file inside it")
    if not path.is_file():
        raise FileNotFoundError(f"no {what} at {path}: {how}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated zip, bad pickle, foreign objects: all mean "cannot trust this file"
        with open(path, "rb") as f:
            began = f.read(4) == b"PK\x03\x04"  # torch.save writes a zip archive
        why = f"it is truncated or corrupt ({type(err).__name__}: {first_line(err)})" if began else (
            "it is not a file that torch.save writes (a text file, say)")  # fmt: skip
        raise CheckpointError(f"cannot read {what} {path}: {why}. {fix}") from err
    if not isinstance(state, dict) or state.get("format") not in formats:
        held = KINDS.get(state.get("format")) if isinstance(state, dict) else None  # an export as a checkpoint, say
        mine = f"a {what.removesuffix(' file')} written by course_utils.train"
        raise CheckpointError(f"{path} holds {held}, not {mine}" if held else f"{path} is not {mine}")
    return state


KINDS = {  # the model files of this course, by their "format": what a command names when it will not replace one
    FORMAT: "a training checkpoint (python -m course_utils.train --out)",
    MODEL_FORMAT: "a GPT exported by python -m course_utils.train --export",
    "course-induction-1": "an induction model (python -m course_utils.induction)",
}


def model_file(path: str | os.PathLike) -> tuple[dict[str, Any] | None, str]:
    """What a file holds: its dict (tensors mapped from the file, not read) and its kind in words (:data:`KINDS`), or
    None and "a file that is not a model of this course" (none there, a damaged file, a text file, foreign objects)."""
    with contextlib.suppress(Exception):
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        if isinstance(state, dict) and state.get("format") in KINDS:
            return state, KINDS[state["format"]]
    return None, "a file that is not a model of this course"


def first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


# --- Checked before the first step: the output folder and the GPU switches


def check_given(flag: str, path: str, expected: str) -> None:
    """RunSetupError for an empty path ``flag`` (`--out "$RUN"` with RUN unset: Path would read the current folder)."""
    if not path.strip():
        raise RunSetupError(f"{flag} is empty ({path!r}), expected {expected} (an unset shell variable?)")


def check_out_dir(out_dir: str | os.PathLike, resume: bool = False) -> Path:
    """``out_dir`` as a Path; RunSetupError: empty, a file, under a file, not writable, or a run without ``resume``."""
    check_path("out_dir", out_dir)
    folder = f"a folder for {CHECKPOINT_NAME} and {SUMMARY_NAME}"
    check_given("--out", os.fspath(out_dir), f"{folder}, such as runs/NAME in the course folder, or . for this one")
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise RunSetupError(
            f"--out {out_dir} is a file, expected {folder}: choose another --out, or move the file away"
        )
    check_can_create(out_dir, "--out", ", such as runs/NAME in the course folder")
    if not resume and (out_dir / CHECKPOINT_NAME).exists():
        raise RunSetupError(f"--out {out_dir} already holds a run ({CHECKPOINT_NAME}): add --resume to continue it, "
                            "or choose another --out for a new run (delete the folder to start it over)")  # fmt: skip
    return out_dir


def check_can_create(path: Path, flag: str, example: str = "") -> None:
    """RunSetupError unless this process may create or replace ``path``: its nearest existing folder is asked."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing != path and not existing.is_dir():
        raise RunSetupError(
            f"{flag} {path} cannot be created: {existing} is a file, not a folder; choose another {flag}"
        )
    folder = existing if existing.is_dir() else existing.parent
    if not os.access(folder, os.W_OK | os.X_OK):  # False on a read-only file system, even for root
        raise RunSetupError(f"{flag} {path} cannot be written here ({folder} is not writable): choose a folder you can "
                            f"write to{example}")  # fmt: skip


def check_out_file(path: str | os.PathLike, flag: str, fmt: str, example: str) -> dict[str, Any] | None:
    """The model file already at ``path`` (named ``flag``), None if none; RunSetupError, in one line with its fix, for a
    folder, a place that cannot be written, a file of another kind than ``fmt`` or a read-only one."""
    check_path(flag, path)
    check_given(flag, os.fspath(path), f"a file name such as {example}")
    if os.fspath(path).endswith(("/", os.sep)) or Path(path).is_dir():  # "new/" names a folder, there or not yet
        raise RunSetupError(f"{flag} {os.fspath(path)} is a folder, expected a file name such as {example}")
    path = Path(path)
    check_can_create(path, flag)
    if not path.exists():
        return None
    state, kind = model_file(path)
    if state is None or state["format"] != fmt:
        raise RunSetupError(f"{flag} {path} already holds {kind}: choose another {flag}, or move that file away first")
    if not path.stat().st_mode & 0o222:  # the mode, not os.access: root may write anyway
        raise RunSetupError(f"{flag} {str(path)!r} is read-only: it is not replaced (make it writable, or choose "
                            f"another {flag})")  # fmt: skip
    return state


def gpu_switches(train_config: TrainConfig, device: torch.device) -> dict[str, Any]:
    """The GPU switches this session uses: each as asked, else on for CUDA only (compile only where Triton is)."""
    cuda, triton = device.type == "cuda", importlib.util.find_spec("triton") is not None
    return {
        "compile": cuda and triton if train_config.compile is None else train_config.compile,
        "autocast": train_config.autocast or ("bf16" if cuda else "off"),
        "fused_adamw": cuda if train_config.fused_adamw is None else train_config.fused_adamw,
    }


if __name__ == "__main__":  # python -m course_utils.train (and torchrun -m ...): the command line's own module
    from course_utils._start import exit_now
    from course_utils.train_cli import main

    exit_now(main())
