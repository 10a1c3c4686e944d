"""What the training benchmarks share: run the training command, time it, and record where it ran."""

from __future__ import annotations

import ctypes
import datetime as dt
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

import torch

try:
    import resource
except ImportError:  # Windows
    resource = None

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
TINY_SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"  # benchmarks only, never the course


def machine() -> dict:
    """Where and when: date, host, CPU count, load averages, torch version."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "load_average_1_5_15": load,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def run_training(args: list[str], env: dict | None = None) -> tuple[dict, float, str]:
    """Run ``python -m course_utils.train ARGS``; return its JSON result, the wall time, and the command."""
    cmd = [sys.executable, "-m", "course_utils.train", *args]
    command = " ".join(shlex.quote(c) for c in cmd)
    print(f"$ {command}", flush=True)
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN) if resource else None
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"training failed with exit code {proc.returncode}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1])
    if resource:  # CPU seconds used: less sensitive than wall time to what else the machine runs
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        result["cpu_s"] = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    return result, wall, command


def save(name: str, record: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"{name}-{stamp}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


# --- where a benchmark ran, and how much memory one call took ----------------------------------------------------


def cpu_model() -> str:
    """The processor's model name, as /proc/cpuinfo says it (or what platform knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def command_line() -> str:
    """The command line that ran the benchmark, with the interpreter as typed from the repository root."""
    if not (sys.argv and sys.argv[0].endswith(".py")):
        return "run() (imported)"
    exe = Path(sys.executable)
    exe_text = os.path.relpath(exe, ROOT) if exe.is_relative_to(ROOT) else str(exe)
    return shlex.join([exe_text, os.path.relpath(Path(sys.argv[0]).resolve(), ROOT), *sys.argv[1:]])


def big_blocks_from_mmap() -> None:
    """Make glibc serve (and return) blocks of 64 KiB and more with mmap, so freed memory is not silently reused."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 16)  # M_MMAP_THRESHOLD = 64 KiB
        libc.malloc_trim(0)
    except OSError:
        pass


def peak_rss_kb() -> int | None:
    """The process's peak resident set size (VmHWM) in KiB; None where /proc has no such line."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak_rss() -> int | None:
    """Reset the peak RSS to the current RSS (Linux) and return it; None where that cannot be done."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return peak_rss_kb()
    except OSError:
        return None
