"""Benchmark: the `gpu` preset (nanoGPT's baby Shakespeare model) on tiny Shakespeare, on one GPU.

Goal: validation loss <= 1.47 (mean over the whole validation split) in <= 60 s on one H100, with bfloat16
autocast, torch.compile, fused AdamW and the flash attention kernel. Reports tokens/s and the model FLOPs
utilisation (MFU): FLOPs per token (6 N for the weights plus 6 L T C for causal attention, forward and
backward; see GPT.flops_per_token) times tokens/s, divided by the GPU's dense bfloat16 peak.

    .venv/bin/python benchmarks/train_gpu.py [--data PATH] [--peak-tflops 989]

Without a CUDA GPU it stops at once with exit code 2 and says so.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import TINY_SHAKESPEARE, machine, run_training, save  # noqa: E402

GOAL = {"val_loss_at_most": 1.47, "wall_s_at_most": 60}

# Dense bfloat16 tensor-core peaks from the vendors' data sheets (TFLOP/s, without sparsity).
PEAK_BF16_TFLOPS = {
    "H100 PCIe": 756.0,
    "H100 NVL": 835.0,
    "H100": 989.0,
    "H200": 989.0,
    "GH200": 989.0,
    "A100": 312.0,
    "L40S": 362.0,
    "L4": 121.0,
    "A10G": 70.0,
    "RTX 4090": 165.0,
}


def peak_tflops(name: str) -> tuple[float | None, str]:
    """The first table entry whose key is in the device name (the more specific names come first)."""
    for key, value in PEAK_BF16_TFLOPS.items():
        if key in name:
            return value, f"{key} dense bf16 data-sheet peak"
    return None, "unknown device: pass --peak-tflops"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=TINY_SHAKESPEARE)
    p.add_argument("--peak-tflops", type=float, help="the GPU's dense bf16 peak (default: from its name)")
    p.add_argument("--max-steps", type=int, help="override the preset's 5,000 steps")
    p.add_argument("--no-compile", action="store_true")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print(
            "train_gpu.py needs a CUDA GPU, and torch.cuda.is_available() is False here. "
            "On a CPU, run benchmarks/train_cpu.py instead.",
            file=sys.stderr,
        )
        return 2
    if not args.data.exists():
        print(f"no data at {args.data}: pass --data PATH to tiny Shakespeare", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(0)
    peak, peak_source = (args.peak_tflops, "--peak-tflops") if args.peak_tflops else peak_tflops(name)
    before = machine()
    out = Path(tempfile.mkdtemp(prefix="train_gpu-"))
    cli = [
        "--preset",
        "gpu",
        "--data",
        str(args.data),
        "--out",
        str(out),
        "--device",
        "cuda",
        "--no-progress",
    ]
    if args.max_steps:
        cli += ["--max-steps", str(args.max_steps)]
    if args.no_compile:
        cli += ["--no-compile"]
    result, wall, command = run_training(cli)
    flops = result["flops_per_token"]
    steps, after_first_s = result["steps_this_run"], result["train_s"] - result["first_step_s"]
    tokens_per_step = result["train_config"]["batch_size"] * result["model_config"]["context_length"]
    rate = (steps - 1) * tokens_per_step / after_first_s if steps > 1 and after_first_s > 0 else result["tokens_per_s"]
    mfu = flops * rate / (peak * 1e12) if peak else None
    record = {
        "benchmark": "train_gpu",
        "command": command,
        "gpu": name,
        "machine_before": before,
        "machine_after": machine(),
        "val_loss": result["val_loss"],
        "wall_s": wall,
        "train_s": result["train_s"],
        "first_step_s": result["first_step_s"],
        "tokens_per_s": result["tokens_per_s"],
        "tokens_per_s_after_first_step": rate,
        "flops_per_token": flops,
        "peak_tflops": peak,
        "peak_source": peak_source,
        "mfu": mfu,
        "params": result["params"],
        "steps": result["steps"],
        "goal": GOAL,
        "result": result,
    }
    print(
        f"gpu preset on {name}: val_loss {result['val_loss']:.4f}  wall {wall:.1f} s (training "
        f"{result['train_s']:.1f} s, of which the first, compiling step {result['first_step_s']:.1f} s)"
    )
    print(
        f"{rate:,.0f} tokens/s after the first step, {flops / 1e6:.1f} MFLOP/token -> "
        f"{flops * rate / 1e12:.1f} TFLOP/s"
        + (f" = MFU {mfu:.1%} of {peak:.0f} TFLOP/s ({peak_source})" if mfu else "")
    )
    met = result["val_loss"] <= GOAL["val_loss_at_most"] and wall <= GOAL["wall_s_at_most"]
    print(
        f"goal: val_loss <= {GOAL['val_loss_at_most']} in <= {GOAL['wall_s_at_most']} s: {'met' if met else 'NOT met'}"
    )
    print(f"{record['machine_after']['date']}  torch {torch.__version__}  results: {save('train_gpu', record)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
