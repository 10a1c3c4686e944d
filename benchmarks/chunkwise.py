"""Time and peak memory of gated linear attention's forms over T: chunkwise, the recurrent loop, all prefix states.

One forward pass (no autograd) of ``course_utils.linear_attention`` on q, k, v of shape (1, T, D = Dv = 64),
float32, a gate per token, one thread:

- **recurrent**: ``gated_linear_attention_recurrent``, T sequential steps on a (D, Dv) state (the baseline: every
  figure is also printed as a ratio to its figure at the same T, measured in the same run);
- **chunkwise**: ``gated_linear_attention_chunkwise`` with ``--chunk-size`` (64), T / C sequential steps;
- **prefix**: ``gated_linear_attention_prefix_states``, all T states (T, D, Dv) at once (a parallel scan);
- **quadratic**: ``gated_linear_attention``, the (T, T) masked form (off by default; ``--forms`` adds it).

Time: the best of ``--repeats`` calls after a warm-up, wall clock and the process's CPU time. Peak memory: the
growth of the process's peak resident set size (VmHWM, reset through /proc/self/clear_refs) during one call, in a
fresh child process per case, where big allocations go to fresh mmap pages (``_common.big_blocks_from_mmap``), so
freed memory is not silently reused; noise floor about 1 MB. ``tracemalloc`` cannot see it: PyTorch allocates
outside Python. The result goes to ``benchmarks/results/chunkwise_cpu.json``, with the machine, date and command.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, beside this script
from _common import big_blocks_from_mmap, command_line, cpu_model, peak_rss_kb, reset_peak_rss  # noqa: E402

from course_utils.linear_attention import (  # noqa: E402
    gated_linear_attention,
    gated_linear_attention_chunkwise,
    gated_linear_attention_prefix_states,
    gated_linear_attention_recurrent,
)

FORMS = ("recurrent", "chunkwise", "prefix", "quadratic")
LENGTHS = (256, 1024, 4096)
D = 64
OUT = Path(__file__).resolve().parent / "results" / "chunkwise_cpu.json"


def form_fn(form: str, chunk_size: int):
    if form == "recurrent":
        return lambda q, k, v, g: gated_linear_attention_recurrent(q, k, v, g)[0]
    if form == "chunkwise":
        return lambda q, k, v, g: gated_linear_attention_chunkwise(q, k, v, g, chunk_size=chunk_size)[0]
    if form == "prefix":
        return gated_linear_attention_prefix_states
    if form == "quadratic":
        return gated_linear_attention
    raise ValueError(f"unknown form {form!r}; known: {', '.join(FORMS)}")


def _inputs(T: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, T, D, generator=g) / D**0.5 for _ in range(3))  # (1, T, D)
    return q, k, v, torch.sigmoid(torch.randn(1, T, generator=g) + 3.0)  # (1, T): gates near 0.95


def measure_time(form: str, T: int, repeats: int, chunk_size: int) -> dict:
    fn, args = form_fn(form, chunk_size), _inputs(T)
    wall, cpu = [], []
    with torch.no_grad():
        fn(*_inputs(64))  # warm-up
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            fn(*args)
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    return {"form": form, "T": T, "time_s": round(min(wall), 4), "cpu_s": round(min(cpu), 4)}


def measure_memory(cases: list[tuple[str, int]], chunk_size: int) -> list[float | None]:
    """Peak RSS growth (MB) of one call per (form, T), each in a fresh child process (memory an earlier case freed
    but the allocator kept would otherwise be reused unseen)."""
    peaks = []
    for case in cases:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--memory-child", json.dumps([[case], chunk_size])]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
        peaks.extend(json.loads(proc.stdout.splitlines()[-1]))
    return peaks


def _memory_child(cases: list, chunk_size: int) -> None:
    torch.set_num_threads(1)
    big_blocks_from_mmap()
    out = []
    with torch.no_grad():
        for form, T in cases:
            fn, args = form_fn(form, chunk_size), _inputs(T)
            fn(*_inputs(64))  # warm-up
            before = reset_peak_rss()
            result = fn(*args)
            after = peak_rss_kb()
            del result
            out.append(None if before is None or after is None else round((after - before) * 1024 / 1e6, 1))
    print(json.dumps(out))


def run(lengths, forms, repeats: int, chunk_size: int, threads: int = 1) -> dict:
    torch.set_num_threads(threads)
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    rows = [measure_time(form, T, repeats, chunk_size) for T in lengths for form in forms]
    for row, peak in zip(rows, measure_memory([(r["form"], r["T"]) for r in rows], chunk_size)):
        row["peak_mb"] = peak
    base = {r["T"]: r for r in rows if r["form"] == "recurrent"}
    for r in rows:
        for key in ("time_s", "cpu_s", "peak_mb"):
            b = base.get(r["T"])
            ok = b is not None and r[key] is not None and b[key]
            r[f"{key}_vs_recurrent"] = round(r[key] / b[key], 3) if ok else None
    meta = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "threads": threads,
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "command": command_line(),
        "shape": f"q, k (1, T, {D}), v (1, T, {D}), gate (1, T), float32, forward only",
        "chunk_size": chunk_size,
        "repeats": repeats,
    }
    return {"meta": meta, "rows": rows}


def table(data: dict) -> str:
    lines = [
        "| T | form | time s (x recurrent) | CPU s (x recurrent) | peak MB (x recurrent) |",
        "|---:|---|---:|---:|---:|",
    ]
    for r in data["rows"]:
        cells = [f"{r[key]}" + _ratio(r[f"{key}_vs_recurrent"]) for key in ("time_s", "cpu_s", "peak_mb")]
        lines.append(f"| {r['T']} | {r['form']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ratio(ratio: float | None) -> str:
    return f" ({ratio:g}x)" if ratio is not None else ""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--forms", nargs="+", default=["recurrent", "chunkwise", "prefix"], choices=FORMS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chunk-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        cases, chunk_size = json.loads(args.memory_child)
        return _memory_child(cases, chunk_size)
    data = run(args.lengths, args.forms, args.repeats, args.chunk_size, args.threads)
    print(table(data))
    m = data["meta"]
    print(f"{m['cpu']}, {m['cpus']} CPUs, {m['threads']} thread(s), torch {m['torch']} ({m['cpu_capability']})")
    print(f"{m['date']}; load average before {m['load_average_before']}, after {m['load_average_after']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
