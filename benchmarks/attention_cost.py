"""Time and peak memory of attention variants against sequence length (notebook 08's cost curves).

Usage (from the repository root)::

    .venv/bin/python benchmarks/attention_cost.py                      # 128 .. 8192, writes the JSON below
    .venv/bin/python benchmarks/attention_cost.py --lengths 128 256 512 --out /tmp/small.json

Methods, all on q, k, v of shape (B=1, H=4, T, D=64) (AFT on x of shape (1, T, C=256)):

- ``naive``: ``course_utils.attention.scaled_dot_product_attention`` with a (T, T) causal mask: it
  materialises the (B, H, T, T) scores and weights;
- ``torch_sdpa``: ``F.scaled_dot_product_attention(..., is_causal=True)`` (a fused kernel);
- ``tiled``: ``course_utils.fast_attention.tiled_attention(..., is_causal=True)``, tiles of 256 queries by
  256 keys: exact causal attention that never builds the (T, T) scores, in plain PyTorch with Python loops;
- ``sliding_window``: ``sliding_window_attention``, window 256, chunks of 256 queries (causal);
- ``topk``: ``topk_attention``, top_k 32, chunks of 256 queries, causal (O(chunk * T) memory, O(T^2) work);
- ``linformer``: ``linformer_attention`` with R = 256 summary rows (not causal);
- ``aft_simple``: ``aft_simple`` (not causal, O(T * C)).

Time: the best of at least ``--repeats`` calls after one warm-up call (fast calls are repeated for half a
second, at most 100 times), in milliseconds, with PyTorch's default thread count; ``ratio`` is each method's
time divided by ``naive``'s at the same length, measured in the same process.

Memory: two figures per call.
``peak_mb`` is *measured*: the growth of the process's peak resident set size (VmHWM in /proc/self/status,
reset before each call by writing 5 to /proc/self/clear_refs; large allocations are forced to come from
fresh mmap pages via mallopt so that freed memory is not silently reused). It includes everything the call
allocates, temporaries and output, and has a noise floor of a few MB. Linux only; None elsewhere.
``analytic_mb`` is *computed*: the size of the largest score-like intermediate the method builds
(B * H * rows * cols * 4 bytes; one (256, 256) tile for ``tiled``), None for the fused kernel whose
internals we do not model.
``tracemalloc`` would see none of this: PyTorch allocates outside Python's allocator.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import big_blocks_from_mmap, command_line, cpu_model, peak_rss_kb, reset_peak_rss  # noqa: E402

from course_utils.attention import scaled_dot_product_attention  # noqa: E402
from course_utils.fast_attention import tiled_attention  # noqa: E402
from course_utils.masking import causal_mask  # noqa: E402
from course_utils.variants import aft_simple, linformer_attention, sliding_window_attention, topk_attention  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "attention_cost_cpu.json"
B, H, D = 1, 4, 64
WINDOW, CHUNK, TOP_K, PROJ_DIM, TILE = 256, 256, 32, 256, 256
METHODS = ("naive", "torch_sdpa", "tiled", "sliding_window", "topk", "linformer", "aft_simple")


def _inputs(T: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, T, D, generator=g) for _ in range(3))


def make_call(method: str, T: int) -> Callable[[], torch.Tensor]:
    """A zero-argument function running ``method`` at length T on fixed random inputs."""
    q, k, v = _inputs(T)
    if method == "naive":
        return lambda: scaled_dot_product_attention(q, k, v, causal_mask(T))[0]
    if method == "torch_sdpa":
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if method == "tiled":
        return lambda: tiled_attention(q, k, v, is_causal=True, q_tile=TILE, kv_tile=TILE)
    if method == "sliding_window":
        return lambda: sliding_window_attention(q, k, v, WINDOW, chunk_size=CHUNK)
    if method == "topk":
        return lambda: topk_attention(q, k, v, TOP_K, chunk_size=CHUNK, causal=True)
    if method == "linformer":
        g = torch.Generator().manual_seed(1)
        proj_k, proj_v = (torch.randn(PROJ_DIM, T, generator=g) / PROJ_DIM**0.5 for _ in range(2))
        return lambda: linformer_attention(q, k, v, proj_k, proj_v)
    if method == "aft_simple":
        x = [t.transpose(1, 2).reshape(B, T, H * D) for t in (q, k, v)]  # (B, T, C)
        return lambda: aft_simple(*x)
    raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")


def analytic_mb(method: str, T: int) -> float | None:
    """Size of the largest score-like intermediate, in MB (1e6 bytes)."""
    rows_cols = {
        "naive": (T, T),
        "torch_sdpa": None,
        "tiled": (min(TILE, T), min(TILE, T)),
        "sliding_window": (min(CHUNK, T), min(CHUNK + WINDOW - 1, T)),
        "topk": (min(CHUNK, T), T),
        "linformer": (T, min(PROJ_DIM, T)),
        "aft_simple": (T, H * D // H),  # (B, T, C) softmax over positions: T * C floats in all
    }[method]
    if rows_cols is None:
        return None
    return B * H * rows_cols[0] * rows_cols[1] * 4 / 1e6


MIN_TIMING_S, MAX_CALLS = 0.5, 100  # fast calls are repeated until this much time: the best survives a busy moment


def measure(method: str, T: int, repeats: int = 3, min_time_s: float = MIN_TIMING_S) -> dict:
    """Best time (ms) over at least ``repeats`` calls and peak memory growth (MB) of one call.

    A call faster than a few scheduler time slices is repeated until ``min_time_s`` have passed (at most
    ``MAX_CALLS`` calls): on a shared machine one busy moment can multiply a millisecond call's time, and the
    best of many is the call that ran undisturbed. A call over 5 s is timed once.
    """
    call = make_call(method, T)
    call()  # warm-up
    times = []
    start = time.perf_counter()
    while len(times) < repeats or (time.perf_counter() - start < min_time_s and len(times) < MAX_CALLS):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
        if times[-1] > 5.0:
            break
    big_blocks_from_mmap()
    before = reset_peak_rss()
    out = call()
    after = peak_rss_kb()
    del out
    peak = None if before is None or after is None else round((after - before) * 1024 / 1e6, 1)
    return {
        "method": method,
        "T": T,
        "time_ms": round(1000 * min(times), 3),
        "peak_mb": peak,
        "analytic_mb": None if analytic_mb(method, T) is None else round(analytic_mb(method, T), 2),
    }


def run(
    lengths=(128, 256, 512, 1024, 2048, 4096, 8192),
    methods=METHODS,
    repeats: int = 3,
    verbose: bool = True,
    min_time_s: float = MIN_TIMING_S,
) -> dict:
    """Measure every method at every length; return ``{"meta": ..., "results": [...]}``."""
    big_blocks_from_mmap()
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    results = []
    for T in lengths:
        row = {m: measure(m, T, repeats, min_time_s) for m in methods}
        naive = row.get("naive")
        for r in row.values():
            r["ratio"] = round(r["time_ms"] / naive["time_ms"], 3) if naive else None
            results.append(r)
            if verbose:
                print(f"T={T:5d} {r['method']:>15}: {r['time_ms']:10.2f} ms  peak {r['peak_mb']} MB", flush=True)
    meta = {
        "device": f"cpu ({cpu_model()}), {torch.get_num_threads()} threads",
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command_line(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "load_average_1_5_15min": {
            "before": load_before,
            "after": os.getloadavg() if hasattr(os, "getloadavg") else None,
        },
        "shape": {
            "B": B,
            "H": H,
            "D": D,
            "window": WINDOW,
            "chunk_size": CHUNK,
            "top_k": TOP_K,
            "proj_dim": PROJ_DIM,
            "tile": TILE,
        },
        "time": f"best of at least {repeats} calls after a warm-up (calls repeated for {min_time_s} s, at most "
        f"{MAX_CALLS}), ms",
        "peak_mb": "growth of peak RSS (VmHWM) during one call, MB; noise floor a few MB",
        "analytic_mb": "largest score-like intermediate, B*H*rows*cols*4 bytes, MB",
    }
    return {"meta": meta, "results": results}


def table(data: dict) -> str:
    """The results as a fixed-width text table: time (ratio to naive) and measured / analytic memory."""
    methods = list(dict.fromkeys(r["method"] for r in data["results"]))
    lengths = sorted({r["T"] for r in data["results"]})
    by = {(r["method"], r["T"]): r for r in data["results"]}
    lines = ["time in ms (x naive)", f"{'T':>6} " + " ".join(f"{m:>17}" for m in methods)]
    for T in lengths:
        cells = []
        for m in methods:
            r = by.get((m, T))
            ratio = f" ({r['ratio']:.2f}x)" if r and r.get("ratio") is not None else ""
            cells.append(f"{r['time_ms']:.1f}{ratio}" if r else "-")
        lines.append(f"{T:>6} " + " ".join(f"{c:>17}" for c in cells))
    lines += ["", "peak memory growth, MB measured / analytic", f"{'T':>6} " + " ".join(f"{m:>17}" for m in methods)]
    for T in lengths:
        cells = []
        for m in methods:
            r = by.get((m, T))
            cells.append(f"{r['peak_mb']} / {r['analytic_mb'] if r['analytic_mb'] is not None else '-'}" if r else "-")
        lines.append(f"{T:>6} " + " ".join(f"{c:>17}" for c in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024, 2048, 4096, 8192])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    data = run(args.lengths, args.methods, args.repeats)
    print()
    print(table(data))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
