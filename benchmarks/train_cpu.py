"""Benchmark: the `cpu` preset on tiny Shakespeare, against nanoGPT's CPU recipe on the same machine.

nanoGPT's CPU recipe (4 layers, 4 heads, 128 wide, context 64, batch 12, 2,000 iterations, dropout 0,
lr 1e-3) reaches a validation loss of 1.898 (mean over the whole validation split) in 72 to 102 s on a
2-core machine. Goal: the `cpu` preset reaches <= 1.80 in the same wall time or less.

    .venv/bin/python benchmarks/train_cpu.py                 # the cpu preset, 2 threads
    .venv/bin/python benchmarks/train_cpu.py --baseline      # and nanoGPT's recipe through the same trainer

Prints val_loss, wall_s and tokens/s with the command, date, device, torch version and machine load, and
writes them to benchmarks/results/train_cpu-DATE.json. Timings depend on what else the machine is doing:
compare runs made at the same time, on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import TINY_SHAKESPEARE, machine, run_training, save  # noqa: E402

GOAL_VAL_LOSS = 1.80
NANOGPT = {"val_loss": 1.898, "wall_s": [72, 102]}


def baseline(data: Path, out: Path, threads: int) -> dict:
    """nanoGPT's CPU recipe, trained by course_utils.train (so both runs share the machine and the trainer)."""
    import torch

    from course_utils.gpt import GPTConfig
    from course_utils.train import TrainConfig, train

    torch.set_num_threads(threads)
    model = GPTConfig(context_length=64, embed_dim=128, num_heads=4, num_layers=4, dropout=0.0)
    settings = TrainConfig(
        batch_size=12,
        max_steps=2000,
        learning_rate=1e-3,
        min_lr=1e-4,
        warmup_steps=100,
        eval_interval=250,
        eval_batches=20,
        log_interval=50,
        checkpoint_interval=2000,
    )
    start, cpu_start = time.perf_counter(), time.process_time()
    result = train(model, data, out, settings, progress=False)
    result["process_wall_s"] = time.perf_counter() - start
    result["cpu_s"] = time.process_time() - cpu_start
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=TINY_SHAKESPEARE)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="override the preset's 1,000 steps (its schedule then ends there): a quicker run, not the tuned one",
    )
    p.add_argument("--baseline", action="store_true", help="also run nanoGPT's recipe through the same trainer")
    args = p.parse_args()
    if not args.data.exists():
        sys.exit(f"no data at {args.data}: pass --data PATH to tiny Shakespeare (1,115,394 characters)")
    before = machine()
    out = Path(tempfile.mkdtemp(prefix="train_cpu-"))
    cli = [
        "--preset",
        "cpu",
        "--data",
        str(args.data),
        "--out",
        str(out / "cpu"),
        "--device",
        "cpu",
        "--threads",
        str(args.threads),
        "--no-progress",
    ]
    if args.max_steps:
        cli += ["--max-steps", str(args.max_steps)]
    env = {"OMP_NUM_THREADS": str(args.threads)}
    result, wall, command = run_training(cli, env)
    record = {
        "benchmark": "train_cpu",
        "command": command,
        "machine_before": before,
        "machine_after": machine(),
        "val_loss": result["val_loss"],
        "wall_s": wall,
        "train_s": result["train_s"],
        "tokens_per_s": result["tokens_per_s"],
        "cpu_s": result.get("cpu_s"),
        "steps": result["steps"],
        "params": result["params"],
        "device": result["device"],
        "threads": args.threads,
        "goal": {"val_loss_at_most": GOAL_VAL_LOSS, "nanogpt_reference": NANOGPT},
        "result": result,
    }
    print(
        f"cpu preset:  val_loss {result['val_loss']:.4f}  wall {wall:.1f} s (training {result['train_s']:.1f} s)  "
        f"{result['tokens_per_s']:,.0f} tokens/s  {result['steps']} steps  {result['params']:,} parameters  "
        f"CPU time {result.get('cpu_s', float('nan')):.1f} s"
    )
    if args.baseline:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
        base = baseline(args.data, out / "baseline", args.threads)
        record["baseline"] = {
            k: base[k] for k in ("val_loss", "train_s", "tokens_per_s", "steps", "params", "process_wall_s", "cpu_s")
        }
        print(
            f"nanoGPT recipe, same trainer:  val_loss {base['val_loss']:.4f}  wall {base['process_wall_s']:.1f} s  "
            f"{base['tokens_per_s']:,.0f} tokens/s  CPU time {base['cpu_s']:.1f} s"
        )
    loss_ok, time_ok = result["val_loss"] <= GOAL_VAL_LOSS, wall <= NANOGPT["wall_s"][1]
    print(
        f"goal: val_loss <= {GOAL_VAL_LOSS} in nanoGPT's wall time ({NANOGPT['wall_s'][0]}-{NANOGPT['wall_s'][1]} s "
        f"for {NANOGPT['val_loss']}): val_loss {'met' if loss_ok else 'NOT met'}, wall time "
        f"{'met' if time_ok else 'NOT met'} ({wall:.1f} s)"
    )
    m = record["machine_after"]
    print(
        f"{m['date']}  device {result['device']}  threads {args.threads}  torch {m['torch']}  "
        f"load average before {before['load_average_1_5_15']}, after {m['load_average_1_5_15']}"
    )
    print(f"results: {save('train_cpu', record)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
