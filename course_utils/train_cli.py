"""The command line of :func:`course_utils.train.train`: ``python -m course_utils.train`` runs :func:`main`.

Prints one JSON line at the end (the run's figures); progress and messages go to stderr::

    python -m course_utils.train --preset tiny --data datasets/shakespeare.txt --out runs/tiny
    python -m course_utils.train --preset gpu --data ... --out runs/gpu --resume     # continue a run
    torchrun --nproc_per_node=2 -m course_utils.train --preset gpu --data ... --out runs/ddp   # several GPUs

Exit codes: 0 done; 2 the run could not start (a problem found before the first step, printed in one line with
its fix); 1 it failed while training (a NaN or infinite loss; the last good checkpoint is kept). What
``--resume`` keeps, refuses and takes from the flags is :data:`course_utils.checkpoints.RESUME_RULES`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from course_utils.checkpoints import (
    KEEP,
    RESUME_RULES,
    SESSION,
    CheckpointError,
    export_model,
    load_checkpoint,
    saved_settings,
)
from course_utils.data import ChecksumError, load_text, sha256_file
from course_utils.gpt import PRESETS, GPTConfig
from course_utils.train import NonFiniteLossError, TrainConfig, train
from course_utils.train_setup import CHECKPOINT_NAME, RunSetupError, check_can_create, first_line

__all__ = ["main"]

DESCRIPTION = "Train the tiny GPT of notebook 10: one readable loop for the notebook and for the command line."


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m course_utils.train",
        description=DESCRIPTION,
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
    flags = [name for name, rule in RESUME_RULES.items() if rule.on_resume in (KEEP, SESSION) and rule.flag]
    overrides = {name: getattr(args, name) for name in flags if getattr(args, name) is not None}
    ckpt = Path(args.out) / CHECKPOINT_NAME
    if args.resume and ckpt.is_file() and not Path(args.out).is_file():
        state = load_checkpoint(ckpt)
        model_config = args.preset or GPTConfig.from_dict(state["model_config"])
        return model_config, dataclasses.replace(TrainConfig(**saved_settings(state)), **overrides)
    preset = args.preset or "tiny"
    return preset, TrainConfig.preset(preset, **overrides)


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m course_utils.train`` with ``argv`` (default: ``sys.argv[1:]``); return its exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    try:
        _check_numbers(args)
        if args.export:
            if Path(args.export).is_dir():
                raise RunSetupError(f"--export {args.export} is a folder, expected a file name such as model.pt")
            check_can_create(Path(args.export), "--export")
        if args.threads:
            torch.set_num_threads(args.threads)
        model_config, train_config = _cli_configs(args)
        result = train(
            model_config,
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
        print(f"error: {first_line(err)}", file=sys.stderr)  # found before the first step
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
