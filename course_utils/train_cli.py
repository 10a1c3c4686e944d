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
    CheckpointError,
    NonFiniteLossError,
    RunInterrupted,
    RunSetupError,
    TrainConfig,
    check_can_create,
    export_model,
    first_line,
    load_checkpoint,
    model_file,
    saved_settings,
    train,
)

__all__ = ["main", "join_processes"]

PROG = "python -m course_utils.train"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
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
    p.add_argument("--max-steps", type=int, help="optimizer steps in all (the cosine schedule ends there)")
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
    p.add_argument("--threads", type=int, help="CPU threads for PyTorch (torch.set_num_threads), at least 1")
    p.add_argument("--progress", action=on_off, help="show a progress bar (default: when stderr is a terminal)")
    p.add_argument("--quiet", action="store_true", help="no messages on stderr besides errors and notices (a flag "
                   "--resume ignores, a switch that cannot work here)")  # fmt: skip
    p.add_argument("--export", metavar="PATH", help="also write the trained model (no optimizer state) with its "
                   "provenance to PATH; a file there must be this run's earlier export")  # fmt: skip
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


def _check_export(args: argparse.Namespace, model_config: GPTConfig | str) -> None:
    """RunSetupError unless ``--export`` can be written: a folder, a place that cannot be written, or a file that
    holds something else (another kind of model, another run's export: another model or other data) is refused
    before training, naming what is there; this run's earlier export (the same command re-run) may be replaced."""
    dest = Path(args.export)
    if dest.is_dir():
        raise RunSetupError(f"--export {dest} is a folder, expected a file name such as model.pt")
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


def _provenance(argv: list[str], result: dict[str, Any], data: str) -> dict[str, Any]:
    """Where a model came from: the command, the machine, the date, the data and the figures it reached."""
    device = result["device"]
    if device.startswith("cuda"):
        device += f" ({torch.cuda.get_device_name(torch.device(device))})"
    return {
        "command": f"{PROG} " + " ".join(argv),
        "device": device,
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "data": {"file": Path(data).name, "sha256": sha256_file(data), "characters": len(load_text(data))},
        **{k: result[k] for k in ("val_loss", "train_loss", "steps", "tokens_per_s", "train_s", "wall_s", "params")},
    }


def _stopped(err: RunInterrupted, argv: list[str]) -> str:
    """The one line Ctrl+C prints: where the run stopped, what is on disk, and the command that continues it."""
    again = shlex.join([*PROG.split(), *argv, *([] if "--resume" in argv else ["--resume"])])
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # torchrun's own flags are not ours to know
        again = f"your torchrun command with {' '.join(argv)}{'' if '--resume' in argv else ' --resume'}"
    if err.saved_step is None:
        return f"stopped at step {err.step}; no checkpoint was saved yet, so nothing is kept: {again} starts it over"
    return (
        f"stopped at step {err.step}; the checkpoint at {err.checkpoint} holds step {err.saved_step}; resume: {again}"
    )


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m course_utils.train`` with ``argv`` (default: ``sys.argv[1:]``); return its exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    try:
        _check_numbers(args)
        if args.threads:
            torch.set_num_threads(args.threads)
        model_config, train_config = _configs(args)
        if args.export:
            _check_export(args, model_config)
        device = join_processes() or args.device
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
            export_model(result["checkpoint"], args.export, _provenance(argv, result, args.data))
            result["export"] = str(args.export)
    except RunInterrupted as err:
        if int(os.environ.get("RANK", "0")) == 0:  # one line, from process 0
            print(_stopped(err, argv), file=sys.stderr, flush=True)
        return 130
    except KeyboardInterrupt:
        again = shlex.join([*PROG.split(), *argv])
        print(f"stopped by Ctrl+C before the first step or after the last: run it again with {again}", file=sys.stderr)
        return 130
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
