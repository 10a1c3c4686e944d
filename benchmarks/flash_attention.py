"""Training cost of exact attention: peak memory and time of forward plus backward, against T (notebook 08).

Usage (from the repository root)::

    nice .venv/bin/python benchmarks/flash_attention.py            # T = 1k .. 8k, writes the JSON below
    nice .venv/bin/python benchmarks/flash_attention.py --sweep    # flash_attention's tile sizes at T = 4096
    .venv/bin/python benchmarks/flash_attention.py --lengths 256 512 --out /tmp/small.json

Methods, on q, k, v of shape (B=1, H=4, T, D=64) in float32, no mask (S = T); one call is a forward pass and a
backward pass with a fixed output gradient:

- ``plain``: ``course_utils.attention.scaled_dot_product_attention`` under autograd: it keeps the (T, T)
  weights (and more) for the backward pass;
- ``tiled``: ``course_utils.fast_attention.tiled_attention`` under autograd: it never holds all (T, T) scores
  at once, but autograd keeps every tile for the backward pass;
- ``flash``: ``course_utils.fast_attention.flash_attention``: keeps q, k, v, the output and one logsumexp per
  query; its backward pass recomputes each tile;
- ``sdpa``: ``F.scaled_dot_product_attention``, PyTorch's fused CPU kernel, forward and backward.

``tiled`` and ``flash`` use the same tiles (``--q-tile``, ``--kv-tile``; default flash_attention's own).

Time: the best of ``--repeats`` calls (after one warm-up call per method), in seconds, wall clock and CPU time
of this process; one thread by default (``--threads``): on a shared machine a second OpenMP thread spends its
time waiting for a core, and the many small operations of the tiled methods suffer most from that. On a busy
machine CPU time is the steadier figure; both are recorded.

Memory: two figures per call, both over the forward and the backward pass.
``saved_mb`` is *counted*: the bytes of the distinct storages autograd keeps from the forward pass for the
backward pass (``torch.autograd.graph.saved_tensors_hooks`` sees every saved tensor, those of the fused kernel
and of flash_attention's autograd.Function included). It includes q, k and v themselves (3 x 4 MB per 1k
positions here), which every method keeps.
``peak_mb`` is *measured*: the growth of the process's peak resident set size (VmHWM in /proc/self/status,
reset before the call by writing 5 to /proc/self/clear_refs; large allocations come from fresh mmap pages via
mallopt, so freed memory is not silently reused). That mallopt setting makes every tile an mmap and slows the
tiled methods by up to half, so memory is measured in a child process of its own and time in this one, with
the ordinary malloc. It includes everything the call allocates: the output, the
gradients dq, dk, dv (4 MB each per 1k positions here), what is saved, and every temporary. Noise floor: a few
MB. Linux only; None elsewhere. ``tracemalloc`` would see none of it: PyTorch allocates outside Python.
Each figure is also given as a ratio to ``sdpa``'s at the same T, measured in the same run.

Goals (issue #18): flash's peak memory grows linearly in T and stays within 2x of sdpa's at T = 8192; its time
within 3x of sdpa's at T = 4096.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    RESULTS,
    big_blocks_from_mmap,
    command_line,
    cpu_model,
    machine,
    peak_rss_kb,
    reset_peak_rss,
)

from course_utils.attention import scaled_dot_product_attention  # noqa: E402
from course_utils.fast_attention import flash_attention, tiled_attention  # noqa: E402

DEFAULT_OUT = RESULTS / "flash_attention_cpu.json"
SWEEP_OUT = RESULTS / "flash_attention_sweep_cpu.json"
B, H, D = 1, 4, 64
METHODS = ("sdpa", "flash", "tiled", "plain")
LENGTHS = (1024, 2048, 4096, 8192)
SWEEP_TILES = ((64, 64), (128, 128), (128, 256), (256, 128), (256, 256), (512, 512))
GOAL_MEMORY_T, GOAL_MEMORY_RATIO = 8192, 2.0
GOAL_TIME_T, GOAL_TIME_RATIO = 4096, 3.0
LINEAR_SLOPE_SPREAD = 1.25  # linear: the slopes between lengths agree within 25% (quadratic: each doubles)


def _default_tiles() -> tuple[int, int]:
    """flash_attention's own default tile sizes, read from its signature."""
    import inspect

    params = inspect.signature(flash_attention).parameters
    return params["q_tile"].default, params["kv_tile"].default


def attention_fn(method: str, q_tile: int, kv_tile: int) -> Callable:
    """``fn(q, k, v) -> out`` for one method."""
    if method == "sdpa":
        return F.scaled_dot_product_attention
    if method == "flash":
        return lambda q, k, v: flash_attention(q, k, v, q_tile=q_tile, kv_tile=kv_tile)
    if method == "tiled":
        return lambda q, k, v: tiled_attention(q, k, v, q_tile=q_tile, kv_tile=kv_tile)
    if method == "plain":
        return lambda q, k, v: scaled_dot_product_attention(q, k, v)[0]
    raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")


def _inputs(T: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, D, generator=g).requires_grad_() for _ in range(3))
    return q, k, v, torch.randn(B, H, T, D, generator=g)  # the last: the gradient arriving at the output


# --- memory: saved bytes counted, peak RSS measured ----------------------------------------------------


def memory_of_one_call(fn: Callable, q, k, v, dout) -> tuple[float, float | None]:
    """(saved_mb, peak_mb) of one forward + backward: see the module docstring."""
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()  # views of one storage (k's tiles) count once
        return t

    before = reset_peak_rss()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(q, k, v)
    out.backward(dout)
    after = peak_rss_kb()
    del out
    q.grad = k.grad = v.grad = None
    peak = None if before is None or after is None else (after - before) * 1024 / 1e6
    return sum(storages.values()) / 1e6, peak


# --- time ------------------------------------------------------------------------------------------------


def time_calls(fn: Callable, q, k, v, dout, repeats: int) -> tuple[float, float]:
    """Best wall-clock and best CPU seconds of ``repeats`` forward + backward calls."""
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn(q, k, v).backward(dout)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        q.grad = k.grad = v.grad = None
    return min(wall), min(cpu)


def measure_time(method: str, T: int, repeats: int, q_tile: int, kv_tile: int) -> dict:
    """One method at one length: the best of ``repeats`` timed calls."""
    wall, cpu = time_calls(attention_fn(method, q_tile, kv_tile), *_inputs(T), repeats)
    return {
        "method": method,
        "T": T,
        "q_tile": q_tile if method in ("flash", "tiled") else None,
        "kv_tile": kv_tile if method in ("flash", "tiled") else None,
        "time_s": round(wall, 4),
        "cpu_s": round(cpu, 4),
    }


def measure_memory(cases: list[tuple[str, int, int, int]]) -> list[dict]:
    """``saved_mb`` and ``peak_mb`` of each (method, T, q_tile, kv_tile), measured in a child process."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--memory-child", json.dumps(cases)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(proc.stdout.splitlines()[-1])


def _memory_child(cases: list) -> None:
    """In the child: mallopt, a warm-up, then one measured call per case; one JSON line on stdout."""
    torch.set_num_threads(1)
    big_blocks_from_mmap()
    _warm_up({c[0] for c in cases}, 128, 128)
    out = []
    for method, T, q_tile, kv_tile in cases:
        saved, peak = memory_of_one_call(attention_fn(method, q_tile, kv_tile), *_inputs(T))
        out.append({"saved_mb": round(saved, 2), "peak_mb": None if peak is None else round(peak, 1)})
    print(json.dumps(out))


def _warm_up(methods, q_tile: int, kv_tile: int) -> None:
    q, k, v, dout = _inputs(256)
    for method in methods:
        attention_fn(method, q_tile, kv_tile)(q, k, v).backward(dout)


def _ratios(rows: list[dict]) -> None:
    """Add each row's figures over sdpa's at the same T (None where sdpa was not measured)."""
    sdpa = {r["T"]: r for r in rows if r["method"] == "sdpa" and r.get("q_tile") is None}
    for r in rows:
        base = sdpa.get(r["T"])
        for key in ("time_s", "cpu_s", "saved_mb", "peak_mb"):
            ok = base is not None and r[key] is not None and base[key]
            r[f"{key}_vs_sdpa"] = round(r[key] / base[key], 3) if ok else None


# --- the run, its record, its table ----------------------------------------------------------------------


def _meta(threads: int, repeats: int, q_tile: int, kv_tile: int, load_before) -> dict:
    where = machine()
    return {
        "device": f"cpu ({cpu_model()}), {threads} thread(s)",
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command_line(),
        "torch": where["torch"],
        "python": where["python"],
        "cpu_count": where["cpus"],
        "load_average_1_5_15min": {"before": load_before, "after": where["load_average_1_5_15"]},
        "shape": {"B": B, "H": H, "D": D, "dtype": "float32", "mask": None},
        "tiles": {"q_tile": q_tile, "kv_tile": kv_tile},
        "time_s": f"best of {repeats} forward + backward calls after a warm-up, wall clock, seconds",
        "cpu_s": f"best of {repeats} calls, CPU time of this process (user + system), seconds",
        "saved_mb": "bytes of the distinct storages autograd saves for the backward pass (saved_tensors_hooks), "
        "q, k, v included, MB (1e6 bytes)",
        "peak_mb": "growth of peak RSS (VmHWM) during one forward + backward, MB; noise floor a few MB",
        "ratios": "<figure>_vs_sdpa: the figure over F.scaled_dot_product_attention's at the same T, same run",
        "goals": {
            "memory": f"flash peak_mb linear in T and <= {GOAL_MEMORY_RATIO}x sdpa's at T = {GOAL_MEMORY_T}",
            "time": f"flash time_s <= {GOAL_TIME_RATIO}x sdpa's at T = {GOAL_TIME_T}",
        },
    }


def run(
    lengths=LENGTHS, methods=METHODS, repeats: int = 2, threads: int = 1, q_tile=None, kv_tile=None, verbose=True
) -> dict:
    """Every method at every length; ``{"meta": ..., "results": [...], "goals": ...}``."""
    default_q, default_kv = _default_tiles()
    q_tile, kv_tile = q_tile or default_q, kv_tile or default_kv
    torch.set_num_threads(threads)
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    _warm_up(methods, q_tile, kv_tile)
    results = []
    for T in lengths:
        for method in methods:
            results.append(measure_time(method, T, repeats, q_tile, kv_tile))
            if verbose:
                r = results[-1]
                print(f"T={T:5d} {method:>6}: {r['time_s']:8.3f} s (cpu {r['cpu_s']:8.3f} s)", flush=True)
    for r, mem in zip(results, measure_memory([(r["method"], r["T"], q_tile, kv_tile) for r in results])):
        r.update(mem)
        if verbose:
            print(f"T={r['T']:5d} {r['method']:>6}: saved {r['saved_mb']:8.1f} MB  peak {r['peak_mb']} MB", flush=True)
    _ratios(results)
    data = {"meta": _meta(threads, repeats, q_tile, kv_tile, load_before), "results": results}
    data["goals"] = goals(data)
    return data


def goals(data: dict) -> dict:
    """The issue's goals, read from the results: each a figure and whether it is met (None if not measured)."""
    by = {(r["method"], r["T"]): r for r in data["results"]}
    flash = sorted((r for r in data["results"] if r["method"] == "flash"), key=lambda r: r["T"])
    out = {}
    mem = by.get(("flash", GOAL_MEMORY_T))
    out["memory_vs_sdpa_at_8192"] = mem and mem["peak_mb_vs_sdpa"]
    out["memory_met"] = (
        None if not mem or mem["peak_mb_vs_sdpa"] is None else mem["peak_mb_vs_sdpa"] <= GOAL_MEMORY_RATIO
    )
    per_position = [round(r["peak_mb"] / r["T"] * 1024, 2) for r in flash if r["peak_mb"] is not None]
    out["flash_peak_mb_per_1k_positions"] = per_position  # constant if linear: T doubles, peak doubles
    doublings = [round(b["peak_mb"] / a["peak_mb"], 2) for a, b in zip(flash, flash[1:]) if a["peak_mb"]]
    out["flash_peak_growth_per_doubling_of_T"] = doublings  # 2.0 linear without a constant part, 4.0 quadratic
    steps = [
        round((b["peak_mb"] - a["peak_mb"]) / (b["T"] - a["T"]) * 1024, 2)
        for a, b in zip(flash, flash[1:])
        if a["peak_mb"] is not None and b["peak_mb"] is not None
    ]
    out["flash_peak_mb_added_per_1k_positions"] = steps  # the slope between lengths: constant if linear
    out["memory_linear"] = None if len(steps) < 2 or min(steps) <= 0 else max(steps) / min(steps) <= LINEAR_SLOPE_SPREAD
    if out["memory_met"] is not None and out["memory_linear"] is not None:
        out["memory_met"] = out["memory_met"] and out["memory_linear"]  # the goal is both
    tim = by.get(("flash", GOAL_TIME_T))
    out["time_vs_sdpa_at_4096"] = tim and tim["time_s_vs_sdpa"]
    out["cpu_time_vs_sdpa_at_4096"] = tim and tim["cpu_s_vs_sdpa"]
    out["time_met"] = None if not tim or tim["time_s_vs_sdpa"] is None else tim["time_s_vs_sdpa"] <= GOAL_TIME_RATIO
    out["cpu_time_met"] = None if not tim or tim["cpu_s_vs_sdpa"] is None else tim["cpu_s_vs_sdpa"] <= GOAL_TIME_RATIO
    return out


def sweep(T: int = 4096, tiles=SWEEP_TILES, repeats: int = 2, threads: int = 1, verbose=True) -> dict:
    """flash_attention's time and peak memory over tile sizes at one length, against sdpa in the same run."""
    torch.set_num_threads(threads)
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    _warm_up(("sdpa", "flash"), 128, 128)
    cases = [("sdpa", T, 0, 0)] + [("flash", T, q_tile, kv_tile) for q_tile, kv_tile in tiles]
    results = [measure_time(*case[:2], repeats, *case[2:]) for case in cases]
    for r, mem in zip(results, measure_memory(cases)):
        r.update(mem)
        if verbose:
            print(
                f"T={T} {r['method']} {r['q_tile']} x {r['kv_tile']}: {r['time_s']:.3f} s (cpu {r['cpu_s']:.3f} s)"
                f"  peak {r['peak_mb']} MB",
                flush=True,
            )
    sdpa = results[0]
    for r in results:
        for key in ("time_s", "cpu_s", "saved_mb", "peak_mb"):
            ok = r[key] is not None and sdpa[key]
            r[f"{key}_vs_sdpa"] = round(r[key] / sdpa[key], 3) if ok else None
    return {"meta": _meta(threads, repeats, None, None, load_before), "results": results}


def table(data: dict) -> str:
    """Time, CPU time, saved and peak memory per method, each with its ratio to sdpa."""
    rows = data["results"]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    lengths = sorted({r["T"] for r in rows})
    by = {(r["method"], r["T"]): r for r in rows}
    lines = []
    for key, title in (
        ("time_s", "time, s, forward + backward (x sdpa)"),
        ("cpu_s", "CPU time, s (x sdpa)"),
        ("saved_mb", "saved for backward, MB counted (x sdpa)"),
        ("peak_mb", "peak memory growth, MB measured (x sdpa)"),
    ):
        lines += [title, f"{'T':>6} " + " ".join(f"{m:>18}" for m in methods)]
        for T in lengths:
            cells = []
            for m in methods:
                r = by.get((m, T))
                ratio = r and r.get(f"{key}_vs_sdpa")
                value = "-" if not r or r[key] is None else f"{r[key]:.3f}" if key.endswith("_s") else f"{r[key]:.1f}"
                cells.append(value + (f" ({ratio:.2f}x)" if ratio is not None else ""))
            lines.append(f"{T:>6} " + " ".join(f"{c:>18}" for c in cells))
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--q-tile", type=int, default=None, help="default: flash_attention's own")
    parser.add_argument("--kv-tile", type=int, default=None, help="default: flash_attention's own")
    parser.add_argument("--sweep", action="store_true", help="time flash_attention's tile sizes at --sweep-length")
    parser.add_argument("--sweep-length", type=int, default=4096)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)  # the child process that measures memory
    args = parser.parse_args(argv)
    if args.memory_child:
        return _memory_child(json.loads(args.memory_child))
    if args.sweep:
        data = sweep(args.sweep_length, repeats=args.repeats, threads=args.threads)
        out = args.out or SWEEP_OUT
    else:
        data = run(args.lengths, args.methods, args.repeats, args.threads, args.q_tile, args.kv_tile)
        print()
        print(table(data))
        print("goals:", json.dumps(data["goals"]))
        out = args.out or DEFAULT_OUT
    print(f"device: {data['meta']['device']}, {data['meta']['date']}, torch {data['meta']['torch']}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
