"""Check a learner's exercises: run their notebooks cell by cell and print one row per exercise.

``python3 course.py check [NOTEBOOK or FOLDER ...]`` (default: the notebooks in ``notebooks/``) runs each
notebook in a fresh Python kernel of this environment, one at a time, with a time limit per cell
(``--timeout``, 120 s). As it runs it prints a line when each notebook starts, one per exercise as soon as
its check cell has run (key, title, verdict), one per cell that raises an error, a "still running" line
every 10 s while a cell runs longer, and a line when the notebook ends (with its time and its first error,
if any). Then it prints a table of notebook, exercise and verdict (passed / failed with the
named mistake / not attempted / not run, with the reason), a total, and writes the same rows as JSON
(``--json``, default ``reports/exercises.json``) for an instructor to collect.

A folder stands for the notebooks in it (not ``backup-*.ipynb``, not ``.ipynb_checkpoints/``). A notebook's
exercises are those its cells check (``check("NN.K", ...)``) and, for a file named ``NN_*.ipynb``, the
course's exercises of notebook NN. Exit status: 0 when every exercise ran and none that was attempted
failed; 1 when an attempted exercise failed, a cell raised an error or ran out of time, or a notebook could
not be read; 2 when a path does not exist, holds no notebooks, or a notebook named on the command line has no
exercises; 130 when interrupted (Ctrl+C): the kernel is shut down, the table shows the verdicts that
finished, marked as interrupted, and the JSON report is left as it was. The report's path is checked before
any notebook runs. The JSON report is written atomically, and never replaced by an empty one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course_utils._files import clean_stale_tmp, probe_writable, write_atomic
from course_utils.checking import FAILED, NOT_ATTEMPTED, PASSED, REPORT_ENV
from course_utils.exercises import all_exercises

__all__ = [
    "DEFAULT_TIMEOUT",
    "HEARTBEAT",
    "NOT_RUN",
    "NotebookRun",
    "expand",
    "run_notebook",
    "rows_for",
    "verdict",
    "grade",
    "main",
]

ROOT = Path(__file__).resolve().parent.parent
NOT_RUN = "not run"
DEFAULT_TIMEOUT = 120.0
DEFAULT_REPORT = ROOT / "reports" / "exercises.json"
HEARTBEAT = 10.0  # seconds between "still running" lines while one cell runs
_CHECK = re.compile(r"""\bcheck\(\s*["'](?P<key>\d+\.\d+)["']""")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_SYNTAX_WHERE = re.compile(r"\s*\((?:<[^>]*>|[^()\s]+\.py), line (\d+)\)")


# ------------------------------------------------------------------------------------------- which notebooks


def expand(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """The notebooks the paths stand for (a folder: its ``*.ipynb``, less backups and checkpoints), and one
    line per path that does not exist or is a folder without notebooks."""
    found, problems = [], []
    for p in paths:
        if p.is_dir():
            inside = sorted(q for q in p.glob("*.ipynb") if q.is_file() and not q.name.startswith("backup-"))
            if not inside:
                problems.append(f"{p}: this folder has no notebooks (*.ipynb)")
            found += inside
        elif p.is_file():
            found.append(p)
        else:
            problems.append(f"{p}: no such file or folder")
    unique = list(dict.fromkeys(q.resolve() for q in found))
    return unique, problems


# ------------------------------------------------------------------------------------------ running a notebook


def _plain(text: str) -> str:
    return _ANSI.sub("", str(text))


def _first_line(source: str) -> str:
    for line in source.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= 60 else line[:57] + "..."
    return "(empty)"


def _describe(nb: nbformat.NotebookNode, index: int) -> str:
    """``cell 7 (`while True:`)``: the cell's place among all cells, counting from 1, and its first line."""
    return f"cell {index + 1} (`{_first_line(nb.cells[index].source)}`)"


def _error_text(ename: str, evalue: str) -> str:
    ename, evalue = _plain(ename), _plain(evalue).strip()
    if ename in ("SyntaxError", "IndentationError", "TabError"):
        evalue = _SYNTAX_WHERE.sub(lambda m: f" (line {m.group(1)} of the cell)", evalue)
    first = evalue.splitlines()[0] if evalue else ""
    if len(first) > 300:
        first = first[:297] + "..."
    return f"{ename}: {first}" if first else ename


@dataclass
class NotebookRun:
    """What running one notebook gave: the check records (in order), which cell reported which key, the
    first error that was not an exercise's own failure, and where the run stopped early (if it did)."""

    path: Path
    keys: list[str] = field(default_factory=list)  # the exercise keys its cells check, in order
    check_cells: dict[str, int] = field(default_factory=dict)  # key -> index of the cell that checks it
    records: list[dict] = field(default_factory=list)
    cell_errors: dict[int, str] = field(default_factory=dict)  # index -> "cell N (`...`): Name: message"
    first_error: str | None = None
    stopped: str | None = None  # why the rest of the notebook did not run
    stopped_at: int | None = None  # index of the cell where it stopped (None: before the first cell)
    interrupted: bool = False  # stopped by Ctrl+C (KeyboardInterrupt); the kernel is shut down all the same
    seconds: float = 0.0


def _read(path: Path) -> nbformat.NotebookNode:
    """The notebook at ``path``; ValueError saying what the file is instead when it is not one."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"not a notebook: the file is not UTF-8 text ({e.reason} at byte {e.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not a notebook: invalid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    if not isinstance(data, dict) or "cells" not in data or "nbformat" not in data:
        got = f"keys {', '.join(map(str, list(data)[:5]))}" if isinstance(data, dict) else type(data).__name__
        raise ValueError(f'not a notebook: JSON without the "cells" and "nbformat" of a notebook (got {got})')
    try:
        return nbformat.reads(text, as_version=4)
    except Exception as e:  # nbformat raises several kinds for a malformed notebook
        raise ValueError(f"not a notebook nbformat can read: {_plain(e).splitlines()[0]}") from None


def _scan(nb: nbformat.NotebookNode, run: NotebookRun) -> None:
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            for key in _CHECK.findall(cell.source):
                if key not in run.check_cells:
                    run.check_cells[key] = i
                    run.keys.append(key)


def _kernel_manager():
    """A kernel manager that starts a Python kernel of *this* environment, whatever the notebook names."""
    import ipykernel.kernelspec
    from jupyter_client import AsyncKernelManager
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return KernelSpec(resource_dir=ipykernel.kernelspec.RESOURCES, **ipykernel.kernelspec.get_kernel_dict())

    return AsyncKernelManager(kernel_name="course-check", kernel_spec_manager=ThisPython())


def _records(report: Path, start: int) -> list[dict]:
    lines = report.read_text(encoding="utf-8").splitlines()[start:] if report.exists() else []
    return [json.loads(ln) for ln in lines if ln.strip()]


class _StillRunning:
    """While a cell runs, say so every ``every`` seconds (from a thread of its own), so a learner sees life."""

    def __init__(self, every: float, say: Callable[[str], None] | None, label: str):
        self.stop = threading.Event()
        self.thread = None
        if say is not None and every > 0:
            t0 = time.monotonic()

            def tick():
                while not self.stop.wait(every):
                    say(f"    ... {label}: still running, {time.monotonic() - t0:.0f} s")

            self.thread = threading.Thread(target=tick, daemon=True)
            self.thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.thread is not None:
            self.thread.join()


def verdict(row: dict) -> str:
    """A row's verdict in words: ``passed``, ``failed (mistake)``, ``failed: message``, ``not run: why``."""
    text = row["status"]
    if row["status"] == FAILED:
        text += f" ({row['mistake']})" if row.get("mistake") else f": {row.get('message')}"
    elif row["status"] == NOT_RUN:
        text += f": {row.get('message')}"
    return text


def run_notebook(
    path: Path,
    timeout: float = DEFAULT_TIMEOUT,
    has_exercises=None,
    progress: Callable[[str], None] | None = None,
    heartbeat: float = HEARTBEAT,
) -> NotebookRun:
    """Run the notebook at ``path`` cell by cell in a fresh kernel and collect its exercise verdicts.

    Every cell runs, whatever the cells before it raised (as nbval does), so one failing exercise does not
    hide the next; a cell still running after ``timeout`` seconds stops the notebook there.
    ``has_exercises(run)``, when given, is asked after reading: False skips running it. ``progress``, when
    given, is called with a line for each verdict as soon as its check cell has run, for each cell that
    raises an error, and every ``heartbeat`` seconds while one cell runs. Ctrl+C (KeyboardInterrupt) stops
    the run where it is: the kernel is shut down and the run returned with ``interrupted`` set.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    run = NotebookRun(path)
    t0 = time.monotonic()
    try:
        nb = _read(path)
    except (OSError, ValueError) as e:
        run.stopped = run.first_error = str(e)
        return run
    _scan(nb, run)
    if has_exercises is not None and not has_exercises(run):
        return run
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.jsonl"
        report.touch()
        env = dict(os.environ, **{REPORT_ENV: str(report)})
        env.setdefault("COURSE_GPT_SIZE", "ci")  # checking exercises needs no full training run of notebook 10
        client = NotebookClient(
            nb,
            km=_kernel_manager(),
            timeout=timeout,
            shutdown_kernel="immediate",
            resources={"metadata": {"path": str(path.parent)}},
        )
        seen, current = 0, None
        try:
            with client.setup_kernel(env=env, cleanup_kc=True, stderr=subprocess.DEVNULL):
                for i, cell in enumerate(nb.cells):
                    if cell.cell_type != "code":
                        continue
                    current, error = i, None
                    try:
                        with _StillRunning(heartbeat, progress, _describe(nb, i)):
                            client.execute_cell(cell, i)
                    except CellTimeoutError:
                        run.stopped_at = i
                        run.stopped = (
                            f"{_describe(nb, i)} ran out of time: still running after {timeout:g} s "
                            "(the time limit per cell; a longer one: --timeout SECONDS)"
                        )
                        run.first_error = run.first_error or run.stopped
                        if progress:
                            progress(f"    stopped: {run.stopped}")
                        break
                    except CellExecutionError as e:
                        error = _error_text(e.ename, e.evalue)
                    new = _records(report, seen)
                    seen += len(new)
                    run.records += new
                    for r in new if progress else []:
                        progress(f"    {r.get('key')} {r.get('title', '')}: {verdict(r)}")
                    if error and not any(r.get("status") == FAILED for r in new):  # not a check's own verdict
                        run.cell_errors[i] = f"{_describe(nb, i)}: {error}"
                        run.first_error = run.first_error or run.cell_errors[i]
                        if progress:
                            progress(f"    error in {run.cell_errors[i]}")
        except KeyboardInterrupt:  # Ctrl+C: setup_kernel has shut the kernel down on the way out
            run.interrupted, run.stopped_at = True, current
            where = f"while {_describe(nb, current)} ran" if current is not None else "before its first cell ran"
            run.stopped = f"interrupted (Ctrl+C) {where}"
        except Exception as e:  # the kernel would not start, or died
            run.stopped = f"the Python kernel failed: {_error_text(type(e).__name__, str(e))}"
            run.first_error = run.first_error or run.stopped
        run.records += _records(report, seen)
    run.seconds = time.monotonic() - t0
    return run


# ----------------------------------------------------------------------------------------------------- rows


def _own_keys(run: NotebookRun, exercises: dict) -> list[str]:
    """The notebook's exercises: those its cells check, then the course's exercises of its number (NN_*)."""
    keys = [k for k in run.keys if k in exercises]
    number = re.match(r"(\d\d)_", run.path.name)
    if number:
        keys += [k for k in exercises if k.split(".")[0] == number.group(1) and k not in keys]
    keys += [r["key"] for r in run.records if r.get("key") in exercises and r["key"] not in keys]
    return keys


def _why_not_run(run: NotebookRun, key: str) -> str:
    where = run.check_cells.get(key)
    if where is None:
        if run.stopped and run.stopped_at is None:
            return run.stopped
        return f'no cell of this notebook calls check("{key}", ...)'
    if run.stopped and (run.stopped_at is None or run.stopped_at <= where):
        return run.stopped
    if where in run.cell_errors:
        return f"its check cell raised an error: {run.cell_errors[where]}"
    first = f"; the first error in this notebook: {run.first_error}" if run.first_error else ""
    return f"its check (cell {where + 1}) reported no verdict{first}"


def rows_for(run: NotebookRun, exercises: dict) -> list[dict]:
    """One row per exercise of the notebook: the last verdict its check reported, or why it has none."""
    latest = {r["key"]: r for r in run.records}
    rows = []
    for key in _own_keys(run, exercises):
        r = latest.get(key)
        if r is None:
            rows.append(
                {
                    "notebook": run.path.name,
                    "key": key,
                    "title": exercises[key].title,
                    "status": NOT_RUN,
                    "mistake": None,
                    "message": _why_not_run(run, key),
                }
            )
        else:
            rows.append({"notebook": run.path.name, **r})
    return rows


def grade(notebooks: list[Path], timeout: float = DEFAULT_TIMEOUT) -> list[dict]:
    """Run the notebooks and return one row per exercise they contain."""
    exercises = all_exercises()
    return [row for nb in notebooks for row in rows_for(run_notebook(nb, timeout), exercises)]


# ---------------------------------------------------------------------------------------------------- output


def _counts(rows: list[dict]) -> str:
    counts = {s: sum(r["status"] == s for r in rows) for s in (PASSED, FAILED, NOT_ATTEMPTED, NOT_RUN)}
    return ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no exercises"


def print_table(rows: list[dict], interrupted: bool = False) -> None:
    if not rows:
        print(
            "no exercise verdicts before the interruption" if interrupted else "no exercises found in these notebooks"
        )
        return
    wn = max(len(r["notebook"]) for r in rows)
    wt = max(len(f"{r['key']} {r['title']}") for r in rows)
    if interrupted:
        print("\ninterrupted (Ctrl+C): the verdicts of what had finished")
    print(f"\n{'notebook':<{wn}}  {'exercise':<{wt}}  verdict")
    print(f"{'-' * wn}  {'-' * wt}  {'-' * 40}")
    for r in rows:
        print(f"{r['notebook']:<{wn}}  {r['key'] + ' ' + r['title']:<{wt}}  {verdict(r)}")
    counts = {s: sum(r["status"] == s for r in rows) for s in (PASSED, FAILED, NOT_ATTEMPTED, NOT_RUN)}
    total = "total so far (interrupted)" if interrupted else "total"
    print(f"\n{total}: {len(rows)} exercises, " + ", ".join(f"{n} {s}" for s, n in counts.items()))


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds such as 120, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds such as 120, got {text!r}")
    return value


def _report_problem(report: Path, named: str) -> str | None:
    """Why the JSON report cannot be written at ``report`` (``named``: how the learner gave it), or None.

    Asked before any notebook runs: the report's folder, or the nearest one above it that exists (the folder is
    made when the report is written), must be a folder that takes a new file. A probe file with the name of an
    atomic write's temporary is made there and removed at once."""
    fix = f"give --json a file in a folder you can write to, e.g. --json {Path.home() / 'exercises.json'}"
    if report.is_dir():
        return f"{named}: this is a folder; give a file name such as {report / 'exercises.json'}"
    link = next((p for p in (report, *report.parents) if p.is_symlink()), None)
    if link is not None and (link == report or not link.exists()):  # a link as the report, or a broken folder link
        return (
            f"{named}: {link} is a symbolic link{'' if link.exists() else ' to nothing'}; check writes the report "
            f"only as a plain file, never through a link; {fix}"
        )
    folder = next((p for p in report.parents if p.exists()), None)
    if folder is None:
        return None
    if not folder.is_dir():
        return f"{named}: cannot write the report there: {folder} is a file, not a folder; {fix}"
    try:
        probe_writable(folder, report.name)
    except OSError as e:
        return f"{named}: cannot write the report there: {folder} does not take new files ({e.strerror}); {fix}"
    return None


def _check_one(path: Path, tag: str, timeout: float, exercises: dict, named: bool, rows: list[dict]) -> int:
    """Run one notebook for ``main``, print its lines, add its rows to ``rows``; return its exit code (0, 1, 2,
    or 130 when Ctrl+C stopped it)."""
    print(f"{tag}: running (at most {timeout:g} s a cell) ...", flush=True)
    run = run_notebook(
        path,
        timeout,
        has_exercises=lambda r: bool(_own_keys(r, exercises)),
        progress=lambda line: print(line, flush=True),
    )
    mine = rows_for(run, exercises)
    if not mine and not run.stopped:
        print(
            f'{tag}: no exercises in this notebook (no cell calls check("NN.K", ...)); '
            f"{'nothing to check' if named else 'skipped'}",
            flush=True,
        )
        return 2 if named else 0
    rows += mine
    if run.interrupted:
        print(f"{tag}: {run.stopped} after {run.seconds:.1f} s: {_counts(mine)}", flush=True)
        return 130
    end = f"{tag}: finished in {run.seconds:.1f} s: {_counts(mine)}"
    if run.first_error:
        end += f"; first error: {run.first_error}"
    print(end, flush=True)
    return 1 if run.first_error else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check your exercises and print a table of verdicts.")
    parser.add_argument(
        "notebooks", nargs="*", type=Path, help="notebooks or folders of notebooks to check (default: notebooks/)"
    )
    parser.add_argument(
        "--json", type=Path, default=None, help="where to write the table as JSON (default: reports/exercises.json)"
    )
    parser.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"time limit for each cell (default: {DEFAULT_TIMEOUT:g})",
    )
    args = parser.parse_args(argv)
    named = [p.resolve() for p in args.notebooks if p.is_file()]  # files asked for by name, not via a folder
    notebooks, problems = expand(args.notebooks or [ROOT / "notebooks"])
    if args.json is None:
        args.json = DEFAULT_REPORT
        problem = _report_problem(args.json, f"the report {args.json} (the default of --json)")
    else:
        problem = _report_problem(args.json, f"--json {args.json}")
    if problem:
        problems.append(problem)
    if problems:
        for p in problems:
            print(f"course check: {p}", file=sys.stderr)
        return 2
    clean_stale_tmp(args.json.parent, args.json.name)
    exercises = all_exercises()
    rows, code, total_t, left = [], 0, time.monotonic(), []
    try:
        for n, path in enumerate(notebooks, 1):
            left = notebooks[n - 1 :]
            code = max(
                code,
                _check_one(path, f"[{n}/{len(notebooks)}] {path.name}", args.timeout, exercises, path in named, rows),
            )
            if code == 130:
                break
            left = notebooks[n:]
    except KeyboardInterrupt:  # Ctrl+C: the table of what finished, the report left as it was
        code = 130
    if code == 130:
        print_table(rows, interrupted=True)
        if left:
            print(f"not run to the end: {', '.join(p.name for p in left)}")
        kept = "left as it was" if args.json.exists() else "not written"
        print(f"{args.json} is {kept}: run `python3 course.py check` again for a whole report")
        return 130
    print_table(rows)
    if rows:
        write_atomic(args.json, (json.dumps(rows, indent=2) + "\n").encode("utf-8"))
        print(f"written: {args.json} ({time.monotonic() - total_t:.1f} s in all)")
    else:
        kept = "left as it was" if args.json.exists() else "not written"
        print(f"no exercise verdicts, so {args.json} is {kept}")
        code = code or 2
    if any(r["status"] in (FAILED, NOT_RUN) for r in rows):
        code = max(code, 1)
    return code


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # before any notebook ran (main handles one during the runs)
        print("course check: interrupted (Ctrl+C) before any notebook ran", file=sys.stderr)
        sys.exit(130)
