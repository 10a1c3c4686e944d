"""Train the tiny GPT of notebook 10 from the command line (course_utils.train.train), alone or under torchrun:

    python -m course_utils.train --preset tiny --data datasets/shakespeare.txt --out runs/tiny
    python -m course_utils.train --preset gpu --data ... --out runs/gpu --resume     # continue a run
    torchrun --nproc_per_node=2 -m course_utils.train --preset gpu --data ... --out runs/ddp   # several GPUs

One JSON line at the end (the run's figures); messages go to stderr. Exit codes: 0 done; 2 the run could not start
(each problem in one line with its fix: --out, --device, --threads, the data, a resume that does not match, a
first step that does not fit in memory or does not compile), or a checkpoint could not be written (a full disk:
the one before is kept); 1 it failed while training (NaN); 130 stopped by Ctrl+C, 143 by SIGTERM (one line: the
step, the checkpoint, the command that continues it).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from course_utils._files import sha256_bytes
from course_utils._start import StopSignals, exit_now, pasteable
from course_utils.data import ChecksumError, load_text, sha256_file
from course_utils.gpt import PRESETS, GPTConfig
from course_utils.train import (
    CHECKPOINT_NAME,
    FORMAT,
    MODEL_FORMAT,
    SESSION,
    CheckpointError,
    NonFiniteLossError,
    RunInterrupted,
    RunSetupError,
    TrainConfig,
    check_given,
    check_out_file,
    export_model,
    finished_run,
    first_line,
    load_checkpoint,
    model_file,
    same_run,
    saved_settings,
    train,
)

__all__ = ["main", "join_processes", "check_numbers"]

PROG = "python -m course_utils.train"
FLAGS = ("batch_size", "learning_rate", "eval_interval", "log_interval", "checkpoint_interval", "seed", *SESSION)
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
    p.add_argument("--device", help="cuda, cuda:1, mps, cpu or auto (default: auto, the best available)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt if it exists, with its "
                   "model, data and settings: another --preset, --data or --seed is refused; a setting flag given "
                   "applies from the saved step (a lower --learning-rate after a NaN, say)")  # fmt: skip
    for flag, kind in (("--seed", int), ("--batch-size", int), ("--learning-rate", float), ("--eval-interval", int),
                       ("--log-interval", int), ("--checkpoint-interval", int)):  # fmt: skip
        p.add_argument(flag, type=kind, help="the peak; the cosine ends at a tenth of it" if "rate" in flag else None)
    on_off = argparse.BooleanOptionalAction
    p.add_argument("--compile", action=on_off, help="torch.compile the model (default: on CUDA with Triton only)")
    p.add_argument("--autocast", choices=["bf16", "off"], help="bfloat16 autocast (default: bf16 on CUDA only)")
    p.add_argument("--fused-adamw", action=on_off, help="AdamW's fused step (default: on CUDA only; the CPU has one)")
    p.add_argument("--threads", type=int, help=f"CPU threads for PyTorch (torch.set_num_threads), 1 to {MAX_THREADS} "
                   "here (4 per CPU)")  # fmt: skip
    p.add_argument("--progress", action=on_off, help="show a progress bar and a line per evaluation (default: when "
                   "stderr is a terminal)")  # fmt: skip
    p.add_argument("--export", metavar="PATH", help="also write the trained model (no optimizer state) with its "
                   "provenance to PATH, outside --out; a file there must be an earlier export")  # fmt: skip
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
    """Run ``python -m course_utils.train`` with ``argv`` (default: ``sys.argv[1:]``); return its exit code."""
    with StopSignals(restore=argv is not None) as stop:
        argv = sys.argv[1:] if argv is None else list(argv)
        args = _parser().parse_args(argv)
        try:
            check_given("--data", args.data, "a UTF-8 text file such as datasets/shakespeare.txt")
            check_numbers(args.seed, args.max_steps, args.threads)
            if args.threads:
                torch.set_num_threads(args.threads)
            model_config, train_config = _configs(args)
            if args.export is not None:
                _check_export(args.export, args.out)
            device = join_processes() or args.device
            result = _finished(args, model_config) if args.resume and args.export else None  # stopped exporting
            if not result or args.max_steps not in (None, result["steps"]):
                result = train(model_config, args.data, args.out, train_config, device=device, resume=args.resume,
                               max_steps=args.max_steps, progress=args.progress)  # fmt: skip
            if result and args.export:  # process 0 only
                export_model(result["checkpoint"], args.export, _provenance(argv, result, args.data))
                result["export"] = str(args.export)
            if result:  # process 0 only
                print(json.dumps({k: v for k, v in result.items() if k not in ("history", "evals")}), flush=True)
            return 0
        except KeyboardInterrupt as err:  # Ctrl+C, or SIGTERM
            return stop.report(_where_stopped(err, args, argv))
        except NonFiniteLossError as err:  # the run started and failed: its last good checkpoint is kept
            print(f"error: {err}", file=sys.stderr)
            return 1
        except (RunSetupError, CheckpointError, ChecksumError, FileNotFoundError, ValueError, TypeError) as err:
            line, name = first_line(err), first_line(err).split(" ", 1)[0]  # found before the first step
            flag = "--" + name.replace("_", "-") if name in FLAGS else name  # a setting is named by its flag
            print(f"error: {flag}{line[len(name) :]}", file=sys.stderr)
            return 2
        finally:
            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()


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


def _configs(args: argparse.Namespace) -> tuple[GPTConfig | str, TrainConfig]:
    """The model and the settings to pass to train: the preset's with the flags given, or, resuming, the
    checkpoint's with the flags given, which apply from its step."""
    overrides = {name: getattr(args, name) for name in FLAGS if getattr(args, name) is not None}
    model_config, base = args.preset or "tiny", TrainConfig.preset(args.preset or "tiny")
    if args.resume and (Path(args.out) / CHECKPOINT_NAME).is_file():
        state = load_checkpoint(Path(args.out) / CHECKPOINT_NAME)
        model_config = args.preset or GPTConfig.from_dict(state["model_config"])
        base = TrainConfig(**saved_settings(state))
    if overrides.get("learning_rate", base.learning_rate) != base.learning_rate:  # min_lr follows, a tenth as in
        overrides["min_lr"] = overrides["learning_rate"] / 10  # every preset (before: a lower rate was refused)
    return model_config, dataclasses.replace(base, **overrides)


def _finished(args: argparse.Namespace, model_config: GPTConfig | str) -> dict[str, Any] | None:
    """The finished run in ``--out`` (None: none) to export without training again, after a stop during --export;
    RunSetupError, as --resume says it, for another --preset or --data."""
    result = finished_run(args.out)
    if result is not None:
        model_config = GPTConfig.preset(model_config) if isinstance(model_config, str) else model_config
        text_sha256 = sha256_bytes(load_text(args.data).encode("utf-8"))  # what train() records
        same_run(load_checkpoint(result["checkpoint"]), Path(result["checkpoint"]), model_config, text_sha256)
    return result


def _check_export(export: str, out: str) -> None:
    """RunSetupError unless ``--export`` can be written: check_out_file's refusals, or a place inside ``--out`` (or
    around it); the notice that an earlier export will be replaced."""
    there = check_out_file(export, "--export", MODEL_FORMAT, "model.pt")  # the string: "new/" ends in a slash
    dest, run = Path(export).resolve(), Path(out).resolve()
    if dest == run or run in dest.parents:
        raise RunSetupError(f"--export {Path(export)} is inside --out {Path(out)} (the run's own folder, for "
                            f"{CHECKPOINT_NAME} and summary.json): give --export a file outside it")  # fmt: skip
    if dest in run.parents:  # before: trained, then "dest ... is a folder"
        raise RunSetupError(f"--out {Path(out)} is inside --export {Path(export)}: --export names a file outside the "
                            "run's folder")  # fmt: skip
    if there is not None and int(os.environ.get("RANK", "0")) == 0:  # said before training: Ctrl+C keeps it
        made_by = there.get("provenance", {}).get("command", "no command recorded")
        print(f"--export {Path(export)} holds a model of {there['step']} steps ({made_by}): this run will replace it",
              file=sys.stderr, flush=True)  # fmt: skip


# --- After: the provenance of an export, and the one line Ctrl+C prints


def _provenance(argv: list[str], result: dict[str, Any], data: str) -> dict[str, Any]:
    device = result["device"]
    if device.startswith("cuda"):
        device += f" ({torch.cuda.get_device_name(torch.device(device))})"
    return {
        "command": f"{PROG} " + " ".join(argv),
        "device": device,
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "data": {"file": Path(data).name, "sha256": sha256_file(data)},
        **{k: result[k] for k in ("val_loss", "steps", "train_s")},
    }


def _where_stopped(err: KeyboardInterrupt, args: argparse.Namespace, argv: list[str]) -> str:
    """Where the run stopped, what the checkpoint on disk holds, and the command that continues it (or, with
    nothing saved, starts it again)."""
    checkpoint = Path(args.out) / CHECKPOINT_NAME
    state, _ = model_file(checkpoint)
    saved = state is not None and state["format"] == FORMAT
    words = [*argv, *([] if "--resume" in argv or not saved else ["--resume"])]
    again = pasteable("course_utils.train", words)  # the interpreter that ran: `python` may lack torch
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # torchrun's own flags are not in argv
        again = f"your torchrun command with {' '.join(words)}"
    held = f"the checkpoint at {checkpoint} holds step {state['step']}; resume" if saved else ""
    where = f"at step {err.step}" if isinstance(err, RunInterrupted) else "before the first step or after the last"
    return f"{where}; {held or 'nothing is saved yet; start again'}: {again}"


if __name__ == "__main__":
    exit_now(main())
