"""The command line of :func:`course_utils.train.train`, and the ``torchrun`` set-up: ``python -m course_utils.train``.

Prints one JSON line at the end (the run's figures); progress and messages go to stderr::

    python -m course_utils.train --preset tiny --data datasets/shakespeare.txt --out runs/tiny
    python -m course_utils.train --preset gpu --data ... --out runs/gpu --resume     # continue a run
    torchrun --nproc_per_node=2 -m course_utils.train --preset gpu --data ... --out runs/ddp   # several GPUs

Exit codes: 0 done; 2 the run could not start (a problem found before the first step, in one line with its fix);
1 it failed while training (a NaN or infinite loss; the last good checkpoint is kept); 130 stopped by Ctrl+C (one
line: the step, the checkpoint, the command that resumes it). What ``--resume`` keeps, refuses and takes from the
flags is :data:`course_utils.train.RESUME_RULES`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from course_utils.data import ChecksumError, load_text, sha256_file
from course_utils.gpt import PRESETS, GPTConfig
from course_utils.train import (
    CHECKPOINT_NAME,
    KEEP,
    MODEL_FORMAT,
    RESUME_RULES,
    SESSION,
    SUMMARY_NAME,
    CheckpointError,
    NonFiniteLossError,
    RunInterrupted,
    RunSetupError,
    TrainConfig,
    check_can_create,
    export_model,
    first_line,
    ignore_signals_until_exit,
    load_checkpoint,
    model_file,
    saved_settings,
    stop_code,
    stop_signals,
    summary_step,
    train,
)

__all__ = ["main", "join_processes"]

PROG = "python -m course_utils.train"
MAX_STEPS = 10**9  # a billion steps: years on any machine; above it a typo, refused
MAX_SEED = 2**63 - 1  # torch.manual_seed takes seeds in 0 .. 2**63 - 1
MAX_THREADS = 4 * (os.cpu_count() or 1)  # more threads than that only slow a run down (and 100000 crash PyTorch)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        allow_abbrev=False,  # --res is not --resume: a flag is spelt out
        description="Train the tiny GPT of notebook 10: one readable loop for the notebook and for the command line.",
        epilog="Exit codes: 0 done; 2 the run could not start (each problem in one line with its fix: --out, "
        "--device, --threads, the data, a resume that does not match); 1 it failed while training (NaN); "
        "130 stopped by Ctrl+C (the line says how to resume).",
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


def _check_numbers(args: argparse.Namespace) -> None:
    """RunSetupError for a count or a time that cannot be (argparse only checks that it is a number)."""
    if args.threads is not None and not 1 <= args.threads <= MAX_THREADS:
        raise RunSetupError(
            f"--threads must be a number of CPU threads from 1 to {MAX_THREADS} (4 per CPU here), got "
            f"{args.threads}; leave it out for PyTorch's default ({torch.get_num_threads()} here)"
        )
    if args.seed is not None and not 0 <= args.seed <= MAX_SEED:
        raise RunSetupError(f"--seed must be a whole number from 0 to 2**63 - 1 ({MAX_SEED}), got {args.seed}")
    if args.max_steps is not None and args.max_steps > MAX_STEPS:
        raise RunSetupError(f"--max-steps must be at most {MAX_STEPS:,} (a billion), got {args.max_steps}")
    for name in ("max_steps", "batch_size", "eval_interval", "log_interval", "checkpoint_interval"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise RunSetupError(f"--{name.replace('_', '-')} must be a positive whole number, got {value}")
    if args.learning_rate is not None and not args.learning_rate > 0:
        raise RunSetupError(f"--learning-rate must be a positive number, got {args.learning_rate}")


def _check_export(args: argparse.Namespace, model_config: GPTConfig | str, seed: int) -> None:
    """RunSetupError unless ``--export`` can be written: a folder, a path in ``--out``, a place that cannot be
    written, or a file that holds something else (another kind of model, another run's export: another model, other
    data, another --out or seed) is refused before training, naming what is there; this run's earlier export (the
    same command re-run) may be replaced."""
    dest, out = Path(args.export), Path(args.out)
    if dest.is_dir():
        raise RunSetupError(f"--export {dest} is a folder, expected a file name such as model.pt")
    if dest.resolve() == out.resolve() or out.resolve() in dest.resolve().parents:
        raise RunSetupError(
            f"--export {dest} is inside --out {out} (the run's own folder, for {CHECKPOINT_NAME} and "
            "summary.json): give --export a file outside it, such as checkpoints/model.pt"
        )
    check_can_create(dest, "--export")
    if not dest.exists():
        return
    state, kind = model_file(dest)
    fix = "choose another --export, or move that file away first"
    if state is None or state["format"] != MODEL_FORMAT:
        raise RunSetupError(f"--export {dest} already holds {kind}, not this run's export: {fix}")
    config = model_config if isinstance(model_config, GPTConfig) else GPTConfig.preset(model_config)
    saved = GPTConfig.from_dict(state["model_config"])
    data = state.get("provenance", {}).get("data", {})
    if dataclasses.replace(config, vocab_size=saved.vocab_size) != saved:
        raise RunSetupError(f"--export {dest} already holds the export of another model ({saved.num_layers} layers, "
                            f"{saved.embed_dim} wide, context {saved.context_length}): {fix}")  # fmt: skip
    if data.get("sha256") not in (None, sha256_file(args.data)):
        raise RunSetupError(
            f"--export {dest} already holds a model trained on other data ({data.get('file')}, sha256 "
            f"{data['sha256'][:16]}...): {fix}"
        )
    made_by = _export_run(state.get("provenance", {}))
    if made_by is not None and not _same_run(made_by, args.out, seed):
        raise RunSetupError(
            f"--export {dest} already holds the export of another run (--out {made_by[0]}, seed {made_by[1]}; "
            f"this run is --out {args.out}, seed {seed}): {fix}"
        )


def _export_run(provenance: dict[str, Any]) -> tuple[str, int] | None:
    """The run an export came from, (its --out, its seed), as recorded (an export before the record: read from its
    command), or None if neither says."""
    if "run" in provenance:
        return provenance["run"]["out"], provenance["run"]["seed"]
    words = shlex.split(provenance.get("command", ""))[len(PROG.split()) :]
    try:
        known, _ = _parser().parse_known_args(words)
    except SystemExit:  # a command this parser cannot read: no run to compare
        return None
    if known.out is None:
        return None
    return known.out, known.seed if known.seed is not None else TrainConfig.preset(known.preset or "tiny").seed


def _same_run(made_by: tuple[str, int], out: str, seed: int) -> bool:
    """Whether ``made_by`` (--out and seed) is this run: the same seed and the same folder (as written, or the same
    folder from here)."""
    there, here = Path(made_by[0]), Path(out)
    same_folder = os.path.normpath(there) == os.path.normpath(here) or there.resolve() == here.resolve()
    return same_folder and made_by[1] == seed


def _configs(args: argparse.Namespace) -> tuple[GPTConfig | str, TrainConfig]:
    """The model and the settings to pass to train: the preset's with the flags given, or, resuming a checkpoint,
    the checkpoint's with the flags given (so train's notices name exactly the flags it ignores)."""
    flags = [name for name, (rule, flag) in RESUME_RULES.items() if rule in (KEEP, SESSION) and flag]
    overrides = {name: getattr(args, name) for name in flags if getattr(args, name) is not None}
    ckpt = Path(args.out) / CHECKPOINT_NAME
    if args.resume and ckpt.is_file() and not Path(args.out).is_file():
        state = load_checkpoint(ckpt)
        model_config = args.preset or GPTConfig.from_dict(state["model_config"])
        return model_config, dataclasses.replace(TrainConfig(**saved_settings(state)), **overrides)
    preset = args.preset or "tiny"
    return preset, TrainConfig.preset(preset, **overrides)


def _saved_seed(args: argparse.Namespace) -> int:
    """The seed of the run checkpointed in --out (read only when resuming one)."""
    return load_checkpoint(Path(args.out) / CHECKPOINT_NAME)["train_config"]["seed"]


def _provenance(argv: list[str], result: dict[str, Any], data: str, out: str) -> dict[str, Any]:
    """Where a model came from: the command, the run (its --out and seed: another run's export is not replaced),
    the machine, the date, the data and the figures it reached."""
    device = result["device"]
    if device.startswith("cuda"):
        device += f" ({torch.cuda.get_device_name(torch.device(device))})"
    return {
        "command": f"{PROG} " + " ".join(argv),
        "run": {"out": out, "seed": result["train_config"]["seed"]},
        "device": device,
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "data": {"file": Path(data).name, "sha256": sha256_file(data), "characters": len(load_text(data))},
        **{k: result[k] for k in ("val_loss", "train_loss", "steps", "tokens_per_s", "train_s", "wall_s", "params")},
    }


def _again(argv: list[str], resume: bool) -> str:
    """The command to run next: this one, with --resume if ``resume`` (under torchrun, in words)."""
    extra = ["--resume"] if resume and "--resume" not in argv else []
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # torchrun's own flags are not ours to know
        return f"your torchrun command with {' '.join([*argv, *extra])}"
    return shlex.join([*PROG.split(), *argv, *extra])


def _stopped(err: RunInterrupted, argv: list[str], how: str) -> str:
    """The one line Ctrl+C prints: where the run stopped, what is on disk, and the command that continues it."""
    again = _again(argv, resume=True)
    if err.saved_step is None:
        return (
            f"stopped{how} at step {err.step}; no checkpoint was saved yet, so nothing is kept: {again} starts it over"
        )
    return (
        f"stopped{how} at step {err.step}; the checkpoint at {err.checkpoint} holds step {err.saved_step}; resume: "
        f"{again}"
    )


def _stopped_outside(args: argparse.Namespace, argv: list[str], how: str) -> str:
    """The one line for a stop outside the loop: before the first step (while setting up) or after the last (the
    final evaluation, the summary, the export), read from what the checkpoint on disk holds."""
    checkpoint = Path(args.out) / CHECKPOINT_NAME
    try:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True)
        step, last = int(state["step"]), int(args.max_steps or state["train_config"]["max_steps"])
    except Exception:  # noqa: BLE001 -- none, or not readable: nothing of this run is kept there
        return f"stopped{how} before the first step; nothing was trained: run it again with {_again(argv, False)}"
    if step < last:
        return (
            f"stopped{how} before the first step of this session; the checkpoint at {checkpoint} holds step {step}; "
            f"resume: {_again(argv, True)}"
        )
    what = f"{SUMMARY_NAME}" + (f" and the export {args.export}" if args.export else "")
    return (
        f"stopped{how} after the last step: the run finished at step {step} and the checkpoint at {checkpoint} holds "
        f"it, but {what} may be missing; write them (no training): {_again(argv, True)}"
    )


def _finished(args: argparse.Namespace) -> dict[str, Any] | None:
    """With --resume and --export, a run that finished and wrote its summary but not its export (stopped while
    exporting): its summary, so that only the export is written. None otherwise (train decides)."""
    checkpoint = Path(args.out) / CHECKPOINT_NAME
    if not (args.resume and args.export and checkpoint.is_file()):
        return None
    state = load_checkpoint(checkpoint)
    step = state["step"]
    if (
        args.max_steps not in (None, step)
        or step < state["train_config"]["max_steps"]
        or summary_step(args.out) != step
    ):
        return None
    there, _ = model_file(args.export) if Path(args.export).is_file() else (None, "")
    if there is not None and there.get("step") == step:
        return None  # exported already: train refuses a resume that would do nothing
    return json.loads((Path(args.out) / SUMMARY_NAME).read_text())


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m course_utils.train`` with ``argv`` (default: ``sys.argv[1:]``, the command: then Ctrl+C and
    SIGTERM stay handled until the process exits); return its exit code."""
    command, argv = argv is None, sys.argv[1:] if argv is None else list(argv)
    with stop_signals(restore=not command):
        try:
            return _main(argv)
        finally:
            if command:  # the line is printed: a later Ctrl+C cannot turn the exit into a traceback
                ignore_signals_until_exit()


def _main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    how = ""
    try:
        _check_numbers(args)
        if args.threads:
            torch.set_num_threads(args.threads)
        model_config, train_config = _configs(args)
        if args.export:  # a resumed run keeps its own seed, whatever --seed says
            resuming = args.resume and (Path(args.out) / CHECKPOINT_NAME).is_file()
            seed = _saved_seed(args) if resuming else train_config.seed
            _check_export(args, model_config, seed)
        device = join_processes() or args.device
        result = _finished(args)
        if result is None:
            result = train(
                model_config,
                args.data,
                args.out,
                train_config,
                device=device,
                resume=args.resume,
                max_steps=args.max_steps,
                max_seconds=args.max_seconds,
                progress=args.progress,
                verbose=not args.quiet,
            )
        if result and args.export:  # process 0 only
            export_model(result["checkpoint"], args.export, _provenance(argv, result, args.data, args.out))
            result["export"] = str(args.export)
    except KeyboardInterrupt as err:  # Ctrl+C or SIGTERM: later ones are ignored until the line is out
        how = " by SIGTERM" if stop_code() == 128 + signal.SIGTERM else ""
        line = _stopped(err, argv, how) if isinstance(err, RunInterrupted) else _stopped_outside(args, argv, how)
        if int(os.environ.get("RANK", "0")) == 0:  # one line, from process 0
            print(line, file=sys.stderr, flush=True)
        return stop_code()
    except NonFiniteLossError as err:  # the run started and failed: its last good checkpoint is kept
        print(f"error: {err}", file=sys.stderr)
        return 1
    except (RunSetupError, CheckpointError, ChecksumError, FileNotFoundError, ValueError, TypeError) as err:
        print(f"error: {first_line(err)}", file=sys.stderr)  # found before the first step
        return 2
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    if result:  # process 0 only
        print(json.dumps({k: v for k, v in result.items() if k not in ("history", "evals")}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
