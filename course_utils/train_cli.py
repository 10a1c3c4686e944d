"""Train the tiny GPT of notebook 10 from the command line (course_utils.train.train), alone or under torchrun:

    python -m course_utils.train --preset tiny --data datasets/shakespeare.txt --out runs/tiny
    python -m course_utils.train --preset gpu --data ... --out runs/gpu --resume     # continue a run
    torchrun --nproc_per_node=2 -m course_utils.train --preset gpu --data ... --out runs/ddp   # several GPUs

One JSON line at the end (the run's figures); messages go to stderr. Exit codes: 0 done; 2 the run could not start
(each problem in one line with its fix: --out, --device, --threads, the data, a resume that does not match, a
first step that does not fit in memory); 1 it
failed while training (NaN); 130 stopped by Ctrl+C, 143 by SIGTERM (one line: the step, the checkpoint, the command
that continues it). ``python -m course_utils.induction`` stops the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import platform
import shlex
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from course_utils.data import ChecksumError, load_text, sha256_file
from course_utils.gpt import PRESETS, GPTConfig
from course_utils.train import (
    CHECKPOINT_NAME,
    FLAGS,
    FORMAT,
    MODEL_FORMAT,
    SUMMARY_NAME,
    CheckpointError,
    NonFiniteLossError,
    RunInterrupted,
    RunSetupError,
    TrainConfig,
    check_can_create,
    check_given,
    export_model,
    finished_run,
    first_line,
    load_checkpoint,
    model_file,
    saved_settings,
    train,
)

__all__ = ["main", "join_processes", "run_command", "check_numbers", "check_out_file", "report_stop",
           "stop_signals", "defer_stop_signals", "stop_code", "stopped_by_signal"]  # fmt: skip

PROG = "python -m course_utils.train"
MAX_STEPS = 10**9  # a billion steps: years on any machine; above it a typo, refused
MAX_SEED = 2**63 - 1  # torch.manual_seed takes seeds in 0 .. 2**63 - 1
MAX_THREADS = 4 * (os.cpu_count() or 1)  # more threads than that only slow a run down (and 100000 crash PyTorch)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(  # allow_abbrev: --res is not --resume, a flag is spelt out
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    p.add_argument("--preset", choices=sorted(PRESETS), help="model and training preset (default: tiny; with "
                   "--resume, the checkpoint's)")  # fmt: skip
    p.add_argument("--data", required=True, help="a UTF-8 text file; first 90%% train, last 10%% validation "
                   "(shakespeare.txt, the course corpus, is checked by its sha256)")  # fmt: skip
    p.add_argument("--out", required=True, help="folder for checkpoint.pt and summary.json")
    p.add_argument("--max-steps", type=int, help=f"optimizer steps in all, 1 to {MAX_STEPS:,} (the cosine schedule "
                   "ends there)")  # fmt: skip
    p.add_argument("--max-seconds", type=float, help="stop after this much training time (after a checkpoint)")
    p.add_argument("--device", help="cuda, cuda:1, mps, cpu or auto (default: auto, the best available)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt if it exists, with its "
                   "model, data and settings: another --preset or --data is refused, a setting flag that differs is "
                   "ignored with a notice, --max-steps is obeyed")  # fmt: skip
    for flag, kind in (("--seed", int), ("--batch-size", int), ("--learning-rate", float), ("--eval-interval", int),
                       ("--log-interval", int), ("--checkpoint-interval", int)):  # fmt: skip
        p.add_argument(flag, type=kind)
    on_off = argparse.BooleanOptionalAction
    p.add_argument("--compile", action=on_off, help="torch.compile the model (default: on CUDA with Triton only)")
    p.add_argument("--autocast", choices=["bf16", "off"], help="bfloat16 autocast (default: bf16 on CUDA only)")
    p.add_argument("--fused-adamw", action=on_off, help="AdamW's fused step (default: on CUDA only; the CPU has one)")
    p.add_argument("--threads", type=int, help=f"CPU threads for PyTorch (torch.set_num_threads), 1 to {MAX_THREADS} "
                   "here (4 per CPU)")  # fmt: skip
    p.add_argument("--progress", action=on_off, help="show a progress bar (default: when stderr is a terminal)")
    p.add_argument("--quiet", action="store_true", help="no messages on stderr besides errors and notices (a flag "
                   "--resume ignores, a switch that cannot work here)")  # fmt: skip
    p.add_argument("--export", metavar="PATH", help="also write the trained model (no optimizer state) with its "
                   "provenance to PATH, outside --out; a file there must be this run's earlier export (the same "
                   "--out, seed, model and data)")  # fmt: skip
    return p


def join_processes() -> torch.device | None:
    """Under torchrun (``WORLD_SIZE`` > 1), join the process group (NCCL with GPUs, gloo without) and return this
    process' GPU, or None to let :func:`~course_utils.train.train` pick the device; alone, do nothing (None)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    if not torch.cuda.is_available():
        return None
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
    return device


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m course_utils.train`` with ``argv`` (default: ``sys.argv[1:]``, the command: then Ctrl+C and
    SIGTERM stay handled until the process exits); return its exit code."""
    return run_command(_main, argv)


def _main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        check_given("--data", args.data, "a UTF-8 text file such as datasets/shakespeare.txt")
        if args.export is not None:
            check_given("--export", args.export, "a file name such as checkpoints/model.pt")
        check_numbers(args.seed, args.max_steps, args.threads)
        if args.threads:
            torch.set_num_threads(args.threads)
        model_config, train_config, seed = _configs(args)
        if args.export:
            _check_export(args, model_config, seed)
        device = join_processes() or args.device
        result = _finished(args)
        if result is None:
            result = train(model_config, args.data, args.out, train_config, device=device, resume=args.resume,
                           max_steps=args.max_steps, max_seconds=args.max_seconds, progress=args.progress,
                           verbose=not args.quiet)  # fmt: skip
        if result and args.export:  # process 0 only
            export_model(result["checkpoint"], args.export, _provenance(argv, result, args.data, args.out))
            result["export"] = str(args.export)
        if result:  # process 0 only
            print(json.dumps({k: v for k, v in result.items() if k not in ("history", "evals")}), flush=True)
        return 0
    except KeyboardInterrupt as err:  # Ctrl+C or SIGTERM: later ones are ignored until the line is out
        return report_stop(_where_stopped(err, args, argv))
    except NonFiniteLossError as err:  # the run started and failed: its last good checkpoint is kept
        print(f"error: {err}", file=sys.stderr)
        return 1
    except (RunSetupError, CheckpointError, ChecksumError, FileNotFoundError, ValueError, TypeError) as err:
        print(f"error: {first_line(err)}", file=sys.stderr)  # found before the first step
        return 2
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


def run_command(main_fn: Callable[[list[str]], int], argv: list[str] | None) -> int:
    """``main_fn(argv)``'s exit code, inside :func:`stop_signals`; with ``argv`` None (the command itself),
    ``sys.argv[1:]``, and Ctrl+C and SIGTERM stay ignored once it returns, until the process exits."""
    command = argv is None
    with stop_signals(restore=not command):
        try:
            return main_fn(sys.argv[1:] if command else list(argv))
        finally:
            if command:  # the line is printed: SIG_IGN, unlike a Python handler, holds while the interpreter exits
                for signum in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(signum, signal.SIG_IGN)


# --- Before the first step: the numbers, the settings, the export


def check_numbers(seed: int | None, max_steps: int | None, threads: int | None = None) -> None:
    """RunSetupError for a thread count, seed or step count (None: not given) out of range, for both commands
    (argparse checks only that each is a number)."""
    if threads is not None and not 1 <= threads <= MAX_THREADS:
        raise RunSetupError(f"--threads must be a number of CPU threads from 1 to {MAX_THREADS} (4 per CPU here), got "
                            f"{threads}; leave it out for PyTorch's default ({torch.get_num_threads()} "
                            "here)")  # fmt: skip
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise RunSetupError(f"--seed must be a whole number from 0 to 2**63 - 1 ({MAX_SEED}), got {seed}")
    if max_steps is not None and not 1 <= max_steps <= MAX_STEPS:
        raise RunSetupError(f"--max-steps must be a whole number from 1 to {MAX_STEPS:,} (a billion), got {max_steps}")


def _configs(args: argparse.Namespace) -> tuple[GPTConfig | str, TrainConfig, int]:
    """The model and the settings to pass to train, and the run's seed: the preset's with the flags given, or,
    resuming, the checkpoint's with the flags given (train's notices then name exactly the flags it ignores)."""
    overrides = {name: getattr(args, name) for name in FLAGS if getattr(args, name) is not None}
    if args.resume and (Path(args.out) / CHECKPOINT_NAME).is_file():
        state = load_checkpoint(Path(args.out) / CHECKPOINT_NAME)
        saved = TrainConfig(**saved_settings(state))  # a resumed run keeps its own seed, whatever --seed says
        model_config = args.preset or GPTConfig.from_dict(state["model_config"])
        return model_config, dataclasses.replace(saved, **overrides), saved.seed
    train_config = TrainConfig.preset(args.preset or "tiny", **overrides)
    return args.preset or "tiny", train_config, train_config.seed


def _check_export(args: argparse.Namespace, model_config: GPTConfig | str, seed: int) -> None:
    """RunSetupError unless ``--export`` can be written: a path in ``--out``, or :func:`check_out_file`'s refusals
    (a file there must be this run's earlier export: the same model, data, --out and seed)."""
    dest, out = Path(args.export), Path(args.out)
    if dest.resolve() == out.resolve() or out.resolve() in dest.resolve().parents:
        raise RunSetupError(f"--export {dest} is inside --out {out} (the run's own folder, for {CHECKPOINT_NAME} and "
                            "summary.json): give --export a file outside it, such as checkpoints/model.pt")  # fmt: skip
    config = model_config if isinstance(model_config, GPTConfig) else GPTConfig.preset(model_config)

    def another(state: dict[str, Any]) -> str | None:  # what the export there is, if not this run's
        saved, provenance = GPTConfig.from_dict(state["model_config"]), state.get("provenance", {})
        data, run = provenance.get("data", {}), provenance.get("run", {"out": args.out, "seed": seed})  # none: ours
        there = run["out"]
        if dataclasses.replace(config, vocab_size=saved.vocab_size) != saved:
            return (f"the export of another model ({saved.num_layers} layers, {saved.embed_dim} wide, context "
                    f"{saved.context_length})")  # fmt: skip
        if data.get("sha256") not in (None, sha256_file(args.data)):
            return f"a model trained on other data ({data.get('file')}, sha256 {data['sha256'][:16]}...)"
        same_folder = os.path.normpath(there) == os.path.normpath(out) or Path(there).resolve() == out.resolve()
        if not (same_folder and run["seed"] == seed):
            return (f"the export of another run (--out {there}, seed {run['seed']}; this run is --out {args.out}, "
                    f"seed {seed})")  # fmt: skip
        return None

    check_out_file(dest, "--export", MODEL_FORMAT, "model.pt", another)


def check_out_file(path: str | os.PathLike, flag: str, fmt: str, example: str,
                   another: Callable[[dict[str, Any]], str | None]) -> None:  # fmt: skip
    """RunSetupError unless a command may write its model file ``path`` (named ``flag``): a folder, a place that
    cannot be written, a file of another kind than ``fmt``, one that ``another(state)`` says is not this run's (in
    words: "the export of another run (...)"), or a read-only one are refused, each in one line with its fix."""
    path = Path(path)
    if path.is_dir():
        raise RunSetupError(f"{flag} {path} is a folder, expected a file name such as {example}")
    check_can_create(path, flag)
    if not path.exists():
        return
    state, kind = model_file(path)
    there = kind if state is None or state["format"] != fmt else another(state)
    if there:
        raise RunSetupError(f"{flag} {path} already holds {there}: choose another {flag}, or move that file away first")
    if not path.stat().st_mode & 0o222:  # the mode, not os.access: root may write anyway
        raise RunSetupError(f"{flag} {str(path)!r} is read-only: it is not replaced (make it writable, or choose "
                            f"another {flag})")  # fmt: skip


def _finished(args: argparse.Namespace) -> dict[str, Any] | None:
    """With --resume and --export, the summary of a finished run stopped while exporting (so that only the export is
    written); None otherwise (train decides)."""
    result = finished_run(args.out) if args.resume and args.export else None
    if result is None or args.max_steps not in (None, result["steps"]):
        return None
    there, _ = model_file(args.export) if Path(args.export).is_file() else (None, "")
    return None if there is not None and there.get("step") == result["steps"] else result  # exported: train refuses


# --- After: the provenance of an export, and the one line Ctrl+C prints


def _provenance(argv: list[str], result: dict[str, Any], data: str, out: str) -> dict[str, Any]:
    """Where a model came from: the command, the run, the machine, the date, the data and the figures it reached."""
    device = result["device"]
    if device.startswith("cuda"):
        device += f" ({torch.cuda.get_device_name(torch.device(device))})"
    return {
        "command": f"{PROG} " + " ".join(argv),
        "run": {"out": out, "seed": result["train_config"]["seed"]},  # another run's export is not replaced
        "device": device,
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "data": {"file": Path(data).name, "sha256": sha256_file(data), "characters": len(load_text(data))},
        **{k: result[k] for k in ("val_loss", "train_loss", "steps", "tokens_per_s", "train_s", "wall_s", "params")},
    }


def _where_stopped(err: KeyboardInterrupt, args: argparse.Namespace, argv: list[str]) -> str:
    """Where the run stopped, what the checkpoint on disk holds, and the command that continues it."""

    def again(resume: bool) -> str:  # this command, with --resume (under torchrun, in words: its flags are not ours)
        words = [*argv, *(["--resume"] if resume and "--resume" not in argv else [])]
        return f"your torchrun command with {' '.join(words)}" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else (
            shlex.join([*PROG.split(), *words]))  # fmt: skip

    checkpoint = Path(args.out) / CHECKPOINT_NAME  # RunInterrupted's too
    if isinstance(err, RunInterrupted):  # inside the loop
        if err.saved_step is None:
            return f"at step {err.step}; no checkpoint was saved yet, so nothing is kept: {again(True)} starts it over"
        where, step = f"at step {err.step}", err.saved_step
    else:  # before the first step (setting up) or after the last
        state, _ = model_file(checkpoint)
        if state is None or state["format"] != FORMAT:  # nothing of this run is kept there
            return f"before the first step; nothing was trained: run it again with {again(False)}"
        step, last = state["step"], args.max_steps or state["train_config"]["max_steps"]
        if step >= last:
            what = SUMMARY_NAME + (f" and the export {args.export}" if args.export else "")
            return (f"after the last step: the run finished at step {step} and the checkpoint at {checkpoint} holds "
                    f"it, but {what} may be missing; write them (no training): {again(True)}")  # fmt: skip
        where = "before the first step of this session"
    return f"{where}; the checkpoint at {checkpoint} holds step {step}; resume: {again(True)}"


# --- Stopping by a signal, for this command and python -m course_utils.induction

_caught: list[int | None] = [None]  # the signal that stopped the command, once one has


def _handle(handler: Any) -> None:
    """``handler`` for SIGINT and SIGTERM, except where whoever started us ignores one (``cmd &``)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, handler)


@contextlib.contextmanager
def stop_signals(restore: bool = True):
    """While inside, the first SIGINT or SIGTERM raises KeyboardInterrupt and later ones are ignored, so the
    command's one line is printed whatever is pressed next; with ``restore``, the caller's handlers come back."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    _caught[0] = None

    def stop(signum, frame):
        _handle(lambda signum, frame: None)  # not SIG_IGN: one pending would raise "Signal ignored due to race"
        _caught[0] = signum
        raise KeyboardInterrupt

    _handle(stop)
    try:
        yield
    finally:
        if restore:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def defer_stop_signals() -> None:
    """From now on a SIGINT or SIGTERM is only recorded (:func:`stopped_by_signal`): for a write that must finish."""

    def record(signum, frame):
        _caught[0] = _caught[0] or signum

    if threading.current_thread() is threading.main_thread():
        _handle(record)


def report_stop(what: str) -> int:
    """Print a stopped command's one line (from process 0 only under torchrun): "stopped" (" by SIGTERM") ``what``;
    return its exit code, 130 for Ctrl+C or 143 for SIGTERM."""
    code = stop_code()
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"stopped{' by SIGTERM' if code == 128 + signal.SIGTERM else ''} {what}", file=sys.stderr, flush=True)
    return code


def stop_code() -> int:
    """The exit code of a command stopped by a signal: 130 for Ctrl+C (SIGINT), 143 for SIGTERM."""
    return 128 + (_caught[0] or signal.SIGINT)


def stopped_by_signal() -> bool:
    """Whether a SIGINT or SIGTERM came since :func:`stop_signals` began (one recorded while deferred included)."""
    return _caught[0] is not None


if __name__ == "__main__":
    sys.exit(main())
