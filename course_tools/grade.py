"""Check a learner's exercises: run their notebooks cell by cell and print one row per exercise.

``python3 course.py check [NOTEBOOK or FOLDER ...]`` (default: the notebooks in ``notebooks/``) runs each
notebook in a fresh Python kernel of this environment, one at a time, with a time limit per cell
(``--timeout``, 120 s). As it runs it prints a line when each notebook starts, one per exercise as soon as
its check cell has run (key, title, verdict), one per cell that raises an error, a "still running" line
every 10 s while a cell runs longer, and a line when the notebook ends (with its time and its first error,
if any). Then it prints a table of notebook, exercise and verdict (passed / failed with the
named mistake / not attempted / not run, with the reason), a total, and writes a report for an instructor to
collect: ``reports/exercises-NAME.json`` (``--json`` for another file), which names the learner, the course's
version, the time (UTC) and the paths checked, then holds the same rows. One file per learner, so two
learners' reports never replace each other; a learner's new report replaces only their own, and their
previous one is kept beside it as ``exercises-NAME.json.previous``.

The learner's name: ``--learner NAME`` (remembered in ``reports/learner.txt`` for the next runs), else the
remembered one, else asked once on a terminal (and remembered), else (no terminal: CI, a script) the login
name, said so with how to set another. A name is written as people write it (``--learner "Ada Lovelace"``,
"José", "李雷"): Unicode-normalised (NFC, spaces collapsed), shown and kept as typed, and its file named by a safe
form of it (``exercises-Ada-Lovelace.json``, :func:`learner_file_name`). Refused: an empty name, one over 80
characters, one with an invisible or control character (named by its code point).

``check --summary FOLDER [--out DIR]`` turns a folder of collected reports into the class table, in DIR
(default: FOLDER itself): ``class-summary.html``, one self-contained page with a compact grid (learners down,
exercises across grouped by notebook, one coloured cell each, the named mistake on hover) and "what to
re-teach" (for each exercise, how many learners made each named mistake, most first);
``class-summary.csv``, the grid as text with the counts below it; and ``class-mistakes.csv``, the re-teach
list, one row per exercise and mistake. The course version shown is the package's (a learner's edited
notebooks make git's ``-dirty``, which says nothing). Nothing an instructor edited is lost: a table
file changed since the run that wrote it (``.class-summary-files``, with their sha256) is first moved aside
as ``backup-NAME-DATE``, as the site keeps its pages. Reports of another course version than this course's
(their exercise numbers may name other exercises) are said on the terminal and listed apart, never merged into
the grid or the counts. The table is never written in the course's source folders (``notebooks/``,
``course_utils/``, ...: the learner zip would carry every learner's name), and elsewhere in the course only with a
warning.

A folder stands for the notebooks in it (not ``backup-*.ipynb``, not ``.ipynb_checkpoints/``). A notebook's
exercises are those its cells check (``check("NN.K", ...)``) and, for a file named ``NN_*.ipynb``, the
course's exercises of notebook NN. Exit status: 0 when every exercise ran and none that was attempted failed;
1 when an attempted exercise failed, a cell raised an error or ran out of time; 2 when a path does not exist,
holds no notebooks, is a file named on the command line that is not a notebook (its name does not end in
.ipynb, or it is not notebook JSON: said before any kernel starts; one in a folder is reported as not read, exit
1, and the folder's other notebooks still run), a notebook named on the command line has no exercises,
the learner's name is refused (empty, too long, an invisible character), or ``--json`` does not end in
``.json``; 130 when interrupted (Ctrl+C): the kernel is shut down, the table shows the verdicts that finished,
marked as interrupted, and the JSON report is left as it was. The report's path is checked before any notebook
runs. The JSON report is written atomically, and never replaced by an empty one. ``--summary``: 0 when the
table was written (a file that is not a report is skipped, and of two reports of one learner the newest is
taken, each said in a line), 2 when FOLDER is not a folder or holds no report.
"""

from __future__ import annotations

import argparse
import csv
import getpass
import hashlib
import html
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import nbformat

from course_tools._output import SOURCE_FOLDERS, Ledger, Output, in_course_sources, inside
from course_utils._files import clean_stale_tmp, probe_writable, write_atomic
from course_utils.exercises import all_exercises
from course_utils.exercises._engine import FAILED, NOT_ATTEMPTED, PASSED, REPORT_ENV

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
    "learner_problem",
    "normalise_learner",
    "learner_file_name",
    "read_report",
    "summarize",
    "class_table",
    "mistake_counts",
    "main",
]

ROOT = Path(__file__).resolve().parent.parent
NOT_RUN = "not run"
DEFAULT_TIMEOUT = 120.0
REPORTS = ROOT / "reports"  # where reports/exercises-NAME.json goes
LEARNER_FILE = REPORTS / "learner.txt"  # the learner's name, remembered between runs
REPORT_KIND = "attention course exercise report"  # the "kind" of a report file, so that a summary knows one
REPORT_VERSION = 1
SUMMARY_NAME = "class-summary"  # --summary writes class-summary.csv and class-summary.html
MAX_NAME = 80  # characters of a learner's name, as typed
MAX_FILE_NAME = 40  # characters of its safe form in the report's file name (learner_file_name)
MAX_REPORT_BYTES = 5_000_000
HEARTBEAT = 10.0  # seconds between "still running" lines while one cell runs
_CHECK = re.compile(r"""\bcheck\(\s*["'](?P<key>\d+\.\d+)["']""")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_SYNTAX_WHERE = re.compile(r"\s*\((?:<[^>]*>|[^()\s]+\.py), line (\d+)\)")


# ------------------------------------------------------------------------------------------- which notebooks


def expand(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """The notebooks the paths stand for (a folder: its ``*.ipynb``, less backups and checkpoints), and one
    line per path that does not exist, is a folder without notebooks, or is a file that is not a notebook (its
    name does not end in .ipynb, or it does not read as one), so that ``main`` refuses them before any kernel
    starts. A notebook in a folder that does not read is left to the run, which reports it beside the others."""
    found, problems = [], []
    for p in paths:
        if p.is_dir():
            inside = sorted(q for q in p.glob("*.ipynb") if q.is_file() and not q.name.startswith("backup-"))
            if not inside:
                problems.append(f"{p}: this folder has no notebooks (*.ipynb)")
            found += inside
        elif p.is_file() and p.suffix != ".ipynb":
            problems.append(f"{p}: not a notebook (a notebook's file name ends in .ipynb); give a notebook or a folder")
        elif p.is_file():
            try:  # a notebook named on the command line; one in a folder that does not read is reported as it runs
                _read(p)
                found.append(p)
            except (OSError, ValueError) as e:
                problems.append(f"{p}: {e}")
        else:
            problems.append(f"{p}: no such file or folder")
    return list(dict.fromkeys(q.resolve() for q in found)), problems


# ------------------------------------------------------------------------------------------ running a notebook


def _plain(text: str) -> str:
    return _ANSI.sub("", str(text))


def _first_line(source: str) -> str:
    """The cell's first line of code, cut to 60 characters: blank lines and comments (an nbval marker such as
    ``# NBVAL_IGNORE_OUTPUT`` included) skipped, unless the cell holds nothing else."""
    lines = [line.strip() for line in source.splitlines() if line.strip()]
    line = next((line for line in lines if not line.startswith("#")), lines[0] if lines else "(empty)")
    return line if len(line) <= 60 else line[:57] + "..."


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
    """The notebook's exercises in course order: those its cells check, and the course's exercises of its number
    (NN_*) whether checked or not (before: a check cell the learner deleted put its row after the next ones)."""
    keys = {k for k in run.keys if k in exercises} | {r["key"] for r in run.records if r.get("key") in exercises}
    number = re.match(r"(\d\d)_", run.path.name)
    if number:
        keys |= {k for k in exercises if k.split(".")[0] == number.group(1)}
    return sorted(keys, key=_key_order)


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
    if report.suffix.lower() != ".json":  # a notebook or reports/learner.txt given by mistake would be replaced
        return (
            f"{named}: a report is a .json file, and this name ends in {report.suffix or 'no suffix'!r} "
            f"(a notebook or another file there would be replaced); give a name such as "
            f"{report.with_name('exercises.json')}"
        )
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


# ----------------------------------------------------------------------------------------- the learner's name


def normalise_learner(name: str) -> str:
    """A name as the report keeps and shows it: Unicode NFC (a decomposed "José", ``e`` and a combining accent,
    becomes the one character a keyboard types), the white space around it removed and each run inside it one
    space."""
    return " ".join(unicodedata.normalize("NFC", name).split())


_JOINERS = ("\u200c", "\u200d")  # zero-width non-joiner and joiner: part of a spelling between two characters


def learner_problem(name: object) -> str | None:
    """Why ``name`` (normalised: :func:`normalise_learner`) cannot be a learner's name, or None.

    Any printable name is one ("Ada Lovelace", "José", "李雷", Persian "علی‌رضا", "👩‍💻 Dev"): at least one
    character, at most ``MAX_NAME``, none of them invisible or a control character (a zero-width space, a
    right-to-left override, a NUL), except a zero-width non-joiner or joiner (U+200C, U+200D) between two visible
    characters, where it is part of the spelling (Persian) or of an emoji. (A tab or a newline never gets here:
    :func:`normalise_learner` makes each run of white space one space.) The name is shown as given; its file
    takes a safe form of it (:func:`learner_file_name`)."""
    if not isinstance(name, str) or not name.strip():
        return "a learner's name must not be empty"
    if len(name) > MAX_NAME:
        return f"a learner's name has at most {MAX_NAME} characters, this one has {len(name)}"

    def visible(i: int) -> bool:
        return 0 <= i < len(name) and name[i].isprintable() and not name[i].isspace()

    at = next(
        (
            i
            for i, c in enumerate(name)
            if not c.isprintable() and not (c in _JOINERS and visible(i - 1) and visible(i + 1))
        ),
        None,
    )
    if at is not None:
        c = name[at]
        what = unicodedata.name(c, "a character without a name")
        return (
            f"a learner's name is printable characters only, and character {at + 1} is an invisible or control "
            f"character, U+{ord(c):04X} ({what}); type the name again without it"
        )
    return None


def learner_file_name(name: str) -> str:
    """The safe form of a learner's name in the file ``exercises-FORM.json``: its letters, digits and marks (of
    any script), ``_`` and ``.`` kept, every other run of characters (a space, ``/``, an emoji) one ``-``, no
    ``-`` or ``.`` at either end: "Ada Lovelace" -> ``Ada-Lovelace``, "../x" -> ``x``. A name with none of
    those, or a form longer than ``MAX_FILE_NAME`` characters, gets 8 hex digits of its sha256 instead or as
    its end, so that the file name says who it is whenever it can and never is empty.

    Two names may share a form ("Ana Silva" and "Ana-Silva"): the report inside names its learner, and ``check``
    never replaces another learner's report; the second learner's file ends in their name's digest instead
    (``exercises-Ana-Silva-1a2b3c4d.json``)."""
    name = normalise_learner(name)
    kept = "".join(c if unicodedata.category(c)[0] in "LNM" or c in "_." else "-" for c in name)
    form = re.sub(r"-{2,}", "-", kept).strip("-.")
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:8]
    if not form:
        return f"learner-{digest}"
    if len(form) > MAX_FILE_NAME:
        return f"{form[: MAX_FILE_NAME - 9].rstrip('-.')}-{digest}"
    return form


def _login_name() -> str:
    try:
        name = getpass.getuser()
    except Exception:  # no USER and no passwd entry (a container run as an arbitrary uid)
        return "learner"
    return name if learner_problem(name) is None else "learner"


def _remembered() -> tuple[str | None, str | None]:
    """(the remembered name or None, a warning when the file holds something that is not a name)."""
    try:
        name = normalise_learner(LEARNER_FILE.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError) as e:
        return None, f"{LEARNER_FILE} could not be read ({e}); ignored"
    problem = learner_problem(name)
    return (None, f"{LEARNER_FILE} holds no usable name ({problem}); ignored") if problem else (name, None)


def _ask(default: str) -> str | None:
    """Ask for the name on the terminal until it is a usable one; None at end of input."""
    while True:
        try:
            answer = normalise_learner(input(f"Your name for the exercise report [{default}]: "))
        except EOFError:
            return None
        answer = answer or default
        problem = learner_problem(answer)
        if problem is None:
            return answer
        print(f"  {problem}; try again")


def _interactive() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):  # a closed or replaced stdin
        return False


def resolve_learner(given: str | None) -> tuple[str, str, bool]:
    """(name, how it was found, whether to remember it): --learner, the remembered name, the terminal's
    answer, or the login name. Raises ValueError for a --learner that cannot be a name."""
    how_to = "another: --learner NAME"
    if given is not None:
        name = normalise_learner(given)
        problem = learner_problem(name)
        if problem:
            raise ValueError(f'--learner {given!r}: {problem}, e.g. --learner "Ana Silva"')
        return name, f"from --learner, remembered in {LEARNER_FILE} for the next runs", True
    name, warning = _remembered()
    if warning:
        print(f"course check: {warning}", file=sys.stderr)
    if name:
        return name, f"remembered in {LEARNER_FILE}; {how_to}", False
    default = _login_name()
    if _interactive():
        asked = _ask(default)
        if asked:
            return asked, f"remembered in {LEARNER_FILE}; {how_to}", True
    return default, f"your login name: no --learner given and no terminal to ask; {how_to}", False


def _remember(name: str) -> None:
    try:
        if LEARNER_FILE.is_symlink():
            raise OSError("it is a symbolic link")
        write_atomic(LEARNER_FILE, (name + "\n").encode("utf-8"))
    except OSError as e:
        print(f"course check: could not remember the name in {LEARNER_FILE} ({e}); give --learner next time")


# ------------------------------------------------------------------------------------------------ the report


def course_version() -> dict:
    """The course's version: the package's (from its installed metadata) and git's (``git describe --always
    --dirty`` of the course folder, when it is a git clone and git is installed); None for what is unknown."""
    from importlib import metadata

    try:
        package = metadata.version("course_utils")
    except metadata.PackageNotFoundError:
        package = None
    described = None
    if (ROOT / ".git").exists():
        try:
            proc = subprocess.run(
                ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            described = proc.stdout.strip() or None if proc.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):
            pass
    return {"package": package, "git": described}


def _version_text(version: object) -> str:
    if not isinstance(version, dict):
        return ""
    parts = [str(version["package"])] if version.get("package") else []
    parts += [f"git {version['git']}"] if version.get("git") else []
    return ", ".join(parts)


def make_report(learner: str, checked: list[Path], rows: list[dict], now: datetime | None = None) -> dict:
    """What ``reports/exercises-NAME.json`` holds (see the module's docstring)."""
    now = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return {
        "kind": REPORT_KIND,
        "version": REPORT_VERSION,
        "learner": learner,
        "course_version": course_version(),
        "checked_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "checked": [str(p) for p in checked],
        "exercises": rows,
    }


_KEY = re.compile(r"\d+\.\d+")
_STATUSES = (PASSED, FAILED, NOT_ATTEMPTED, NOT_RUN)


def _when(text: object) -> datetime:
    if not isinstance(text, str):
        raise ValueError
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def read_report(path: Path) -> dict:
    """The report in ``path``; ValueError saying why when the file is not one."""
    if path.stat().st_size > MAX_REPORT_BYTES:
        raise ValueError(f"{path.stat().st_size} bytes, too large for an exercise report")
    try:
        data = json.loads(path.read_bytes().decode("utf-8-sig"))  # a BOM, as Windows Notepad saves, is no matter
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON ({e.msg} at line {e.lineno})") from None
    if isinstance(data, list):
        raise ValueError(
            "a report of an older `check`, without the learner's name: ask them to run "
            "`python3 course.py check --learner NAME` again"
        )
    if not isinstance(data, dict) or data.get("kind") != REPORT_KIND:
        raise ValueError(f'not an exercise report (no "kind": "{REPORT_KIND}")')
    if data.get("version") != REPORT_VERSION:
        raise ValueError(f"a report of version {data.get('version')!r}; this course reads version {REPORT_VERSION}")
    if isinstance(data.get("learner"), str):
        data["learner"] = normalise_learner(data["learner"])
    problem = learner_problem(data.get("learner"))
    if problem:
        raise ValueError(f"its learner {data.get('learner')!r} is not a name: {problem}")
    try:
        _when(data.get("checked_at"))
    except ValueError:
        raise ValueError(
            f"its checked_at {data.get('checked_at')!r} is not a time such as 2026-11-26T08:00:00Z"
        ) from None
    rows = data.get("exercises")
    if not isinstance(rows, list):
        raise ValueError('its "exercises" is not a list')
    for n, row in enumerate(rows, 1):
        ok = isinstance(row, dict) and isinstance(row.get("key"), str) and _KEY.fullmatch(row["key"])
        if not ok or row.get("status") not in _STATUSES or not isinstance(row.get("mistake") or "", str):
            raise ValueError(f"exercise {n} of its list is not a row with a key such as 01.1 and a known status")
    return data


# ----------------------------------------------------------------------------------------- the class summary


def _key_order(key: str) -> tuple[int, ...]:
    return tuple(int(part) for part in key.split("."))


def _cell(row: dict | None) -> tuple[str, str]:
    """(class, text) of one learner's verdict on one exercise."""
    if row is None:
        return "not-checked", "not checked"
    if row["status"] == FAILED:
        return "failed", row.get("mistake") or "failed"
    return row["status"].replace(" ", "-"), row["status"]


def _csv_text(value: str) -> str:
    """A cell a spreadsheet shows as text, never runs as a formula (a report's mistake names are free text)."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def collect_reports(folder: Path) -> tuple[list[dict], list[str]]:
    """The newest report of each learner among ``folder``'s ``*.json`` files (not its sub-folders), sorted by
    name, and one line for each file skipped (not a report, or an older report of a learner)."""
    found: dict[str, list[tuple[datetime, float, Path, dict]]] = {}
    notes = []
    for path in sorted(folder.glob("*.json")):
        if not path.is_file():  # said, as a learner's report copied as a link to their stick would be missing
            what = "a link to nothing" if path.is_symlink() and not path.exists() else "not a file"
            notes.append(f"skipped {path.name}: {what}")
            continue
        try:
            data = read_report(path)
        except (OSError, ValueError) as e:
            notes.append(f"skipped {path.name}: {e}")
            continue
        when = _when(data["checked_at"])
        found.setdefault(data["learner"].casefold(), []).append((when, path.stat().st_mtime, path, data))
    reports = []
    for entries in found.values():
        entries.sort(key=lambda e: (e[0], e[1]))
        newest = entries[-1]
        reports.append({**newest[3], "file": newest[2].name})
        for _, _, path, data in entries[:-1]:
            notes.append(
                f"{newest[3]['learner']} has {len(entries)} reports: took {newest[2].name} (checked at "
                f"{newest[3]['checked_at']}), the newest; skipped {path.name} (checked at {data['checked_at']})"
            )
    reports.sort(key=lambda r: (r["learner"].casefold(), r["learner"]))
    return reports, notes


def this_version() -> str | None:
    """The package version of the course that makes the summary (None when it is not installed)."""
    from importlib import metadata

    try:
        return metadata.version("course_utils")
    except metadata.PackageNotFoundError:
        return None


def split_versions(reports: list[dict], version: str | None) -> tuple[list[dict], list[dict], str | None]:
    """(the reports of the course's version, those of another or of none, the version they were compared with).

    An exercise's number names another exercise in another version of the course (0.0.3's 04.2 is not 0.1.0's),
    so reports are merged only within one version: ``version`` (this course's), or when that is unknown the one
    most reports have. The others are set apart, each said, never filed under a number that means another thing."""
    versions = [_package_version(r.get("course_version")) for r in reports]
    if version is None:
        named = [v for v in versions if v]
        version = max(dict.fromkeys(named), key=named.count) if named else None
    if version is None:  # no version anywhere: nothing to tell apart
        return list(reports), [], None
    same = [r for r, v in zip(reports, versions) if v == version]
    other = [r for r, v in zip(reports, versions) if v != version]
    return same, other, version


def class_table(reports: list[dict]) -> tuple[list[tuple[str, str]], list[dict]]:
    """(the exercises as (key, title) in course order, one dict per learner: learner, checked_at, version (the
    package's), version_full (with git's description), passed, checked (how many exercises their report has),
    and key -> (class, text))."""
    titles: dict[str, str] = {}
    for r in reports:
        for row in r["exercises"]:
            titles.setdefault(row["key"], str(row.get("title") or ""))
    keys = sorted(titles, key=_key_order)
    learners = []
    for r in reports:
        latest = {row["key"]: row for row in r["exercises"]}
        cells = {k: _cell(latest.get(k)) for k in keys}
        version = r.get("course_version")
        learners.append(
            {
                "learner": r["learner"],
                "checked_at": r["checked_at"],
                "version": _package_version(version),
                "version_full": _version_text(version),
                "passed": sum(c[0] == "passed" for c in cells.values()),
                "checked": sum(c[0] != "not-checked" for c in cells.values()),  # the exercises in their report
                "cells": cells,
            }
        )
    return [(k, titles[k]) for k in keys], learners


def _package_version(version: object) -> str:
    """The package's version from a report's ``course_version`` (git's ``-dirty`` says only that a learner
    edited their notebooks, which every learner does)."""
    return str(version["package"]) if isinstance(version, dict) and version.get("package") else ""


UNNAMED = "(no named mistake)"  # a failure whose check matched none of the exercise's known mistakes
UNNAMED_HINT = "no mistake the check knows matched: their notebook shows what they wrote"


def mistake_counts(exercises: list[tuple[str, str]], learners: list[dict]) -> list[dict]:
    """What to re-teach: one entry per exercise and mistake that at least one learner made (key, title,
    mistake, learners: their names, checked: how many learners' reports have the exercise, hint: the
    catalogue's hint for a known mistake, else ""), the named mistakes first, the most learners first, then in
    course order; failures no known mistake names (``UNNAMED``, nothing to say about them) after all of those."""
    catalogue = all_exercises()
    found = []
    for order, (key, title) in enumerate(exercises):
        made: dict[str, list[str]] = {}
        checked = sum(r["cells"][key][0] != "not-checked" for r in learners)
        for r in learners:
            kind, text = r["cells"][key]
            if kind == "failed":
                made.setdefault(text if text != "failed" else UNNAMED, []).append(r["learner"])
        known = {m.name: m.hint for m in catalogue[key].mistakes} if key in catalogue else {}
        for mistake, names in made.items():
            found.append(
                {
                    "key": key,
                    "title": title,
                    "mistake": mistake,
                    "learners": names,
                    "checked": checked,
                    "hint": UNNAMED_HINT if mistake == UNNAMED else known.get(mistake, ""),
                    "order": order,
                }
            )
    found.sort(key=lambda m: (m["mistake"] == UNNAMED, -len(m["learners"]), m["order"], m["mistake"]))
    return [{k: v for k, v in m.items() if k != "order"} for m in found]


def _many(n: int, thing: str) -> str:
    return f"{n} {thing}{'' if n == 1 else 's'}"


def _version_said(report: dict) -> str:
    version = _package_version(report.get("course_version"))
    return f"course version {version}" if version else "no course version in it"


def _summary_csv(
    exercises: list[tuple[str, str]], learners: list[dict], apart: list[dict] = (), version: str | None = None
) -> bytes:
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["learner", "checked at (UTC)", "course version", "passed", *[k for k, _ in exercises]])
    for r in learners:
        verdicts = []
        for k, _ in exercises:
            kind, text = r["cells"][k]
            verdicts.append(f"failed ({text})" if kind == "failed" and text != "failed" else text)
        w.writerow(  # every text a report brings (its course version too) is written as text, never a formula
            [_csv_text(r["learner"]), _csv_text(r["checked_at"]), _csv_text(r["version"])]
            + [f"{r['passed']} of {r['checked']}"]
            + [_csv_text(v) for v in verdicts]
        )
    if apart:
        w.writerow([])
        w.writerow([f"set apart: reports of another course version than {version} (not in the grid or the counts)"])
        w.writerow(["learner", "checked at (UTC)", "course version", "file"])
        for r in apart:
            w.writerow(
                [_csv_text(r["learner"]), _csv_text(r["checked_at"])]
                + [_csv_text(_package_version(r.get("course_version"))), _csv_text(r["file"])]
            )
    return out.getvalue().encode("utf-8-sig")  # with a BOM, so that spreadsheets read the names as UTF-8


def _mistakes_csv(mistakes: list[dict]) -> bytes:
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["learners", "of who checked it", "exercise", "title", "mistake", "who", "hint"])
    for m in mistakes:
        w.writerow(
            [len(m["learners"]), m["checked"], m["key"]]
            + [_csv_text(m[k]) for k in ("title", "mistake")]
            + [_csv_text("; ".join(m["learners"])), _csv_text(m["hint"])]
        )
    return out.getvalue().encode("utf-8-sig")


_PAGE_STYLE = """
:root { color-scheme: light dark; --bg: #ffffff; --fg: #1d1d1f; --muted: #5c5c66; --line: #d0d0d8;
  --group: #8a8a96; --passed: #1f7a3a; --passed-fg: #ffffff; --failed: #c42b2b; --failed-fg: #ffffff;
  --not-attempted: #e4e4ea; --not-attempted-fg: #3d3d48; --not-run: #f2c744; --not-run-fg: #3b2c00;
  --not-checked: transparent; --not-checked-fg: #6e6e7a; --bar: #c42b2b33; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #17181c; --fg: #e8e8ec; --muted: #a6a6b2; --line: #34353d; --group: #6a6a78;
    --passed: #2e9d52; --passed-fg: #06140a; --failed: #ff7b7b; --failed-fg: #2a0505;
    --not-attempted: #2c2d34; --not-attempted-fg: #c9c9d3; --not-run: #e0b43a; --not-run-fg: #231900;
    --not-checked-fg: #8e8e9a; --bar: #ff7b7b40; }
}
body { background: var(--bg); color: var(--fg); font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif;
  margin: 1rem; }
h1 { font-size: 1.3rem; margin: 0 0 .2rem; }
h2 { font-size: 1.1rem; margin: 1.6rem 0 .3rem; }
p { color: var(--muted); margin: .2rem 0 .8rem; max-width: 62rem; }
.wrap { overflow-x: auto; }
table { border-collapse: collapse; }
#class-summary th, #class-summary td { border: 1px solid var(--line); padding: 0; text-align: center;
  vertical-align: middle; }
#class-summary thead th { position: sticky; top: 0; background: var(--bg); font-weight: 600; font-size: 12px; }
#class-summary thead tr:nth-child(2) th { top: 1.3rem; }
#class-summary th.notebook { padding: 0 .2rem; height: 1.3rem; }
#class-summary th.key { width: 1.15rem; min-width: 1.15rem; max-width: 1.15rem; height: 1.5rem; color: var(--muted);
  font-weight: 500; }
#class-summary .first { border-left: 2px solid var(--group); }
#class-summary tbody th, #class-summary tfoot th { text-align: left; padding: 0 .4rem; white-space: nowrap;
  max-width: 9rem; overflow: hidden; text-overflow: ellipsis; font-weight: 600; }
#class-summary tbody th, #class-summary tfoot th, #class-summary thead th.learner { position: sticky; left: 0;
  z-index: 2; background: var(--bg); box-shadow: inset -1px 0 var(--line); }
#class-summary td.meta, #class-summary th.meta { color: var(--muted); white-space: nowrap; font-size: 12px;
  padding: 0 .25rem; font-variant-numeric: tabular-nums; }
#class-summary td.v { height: 1.5rem; font-size: 12px; font-weight: 700; cursor: default; }
#class-summary tfoot td { color: var(--muted); font-size: 11px; font-variant-numeric: tabular-nums; }
td.passed, .legend .passed { background: var(--passed); color: var(--passed-fg); }
td.failed, .legend .failed { background: var(--failed); color: var(--failed-fg); }
td.not-attempted, .legend .not-attempted { background: var(--not-attempted); color: var(--not-attempted-fg); }
td.not-run, .legend .not-run { background: var(--not-run); color: var(--not-run-fg); }
td.not-checked, .legend .not-checked { background: var(--not-checked); color: var(--not-checked-fg); }
.legend span { display: inline-block; padding: .05rem .45rem; margin: 0 .3rem .2rem 0; border-radius: 3px;
  font-size: 12px; }
.legend .not-checked { border: 1px solid var(--line); }
#reteach { border-collapse: collapse; }
#reteach th, #reteach td { border-bottom: 1px solid var(--line); padding: .25rem .6rem; text-align: left;
  vertical-align: top; }
#reteach td.count { font-weight: 700; white-space: nowrap; font-variant-numeric: tabular-nums;
  background: linear-gradient(to right, var(--bar) var(--share), transparent var(--share)); }
#reteach td.who, #reteach td.hint { color: var(--muted); font-size: 13px; }
#reteach td.hint { max-width: 30rem; }
#apart th, #apart td { border-bottom: 1px solid var(--line); padding: .25rem .6rem; text-align: left; }
"""

_GLYPH = {"passed": "✓", "failed": "✗", "not-attempted": "·", "not-run": "!", "not-checked": ""}
_LEGEND = (
    ("passed", "passed"),
    ("failed", "failed: hover for the mistake its check named"),
    ("not-attempted", "not attempted"),
    ("not-run", "not run: an error or the time limit stopped it"),
    ("not-checked", "not checked: not in this learner's report"),
)


def _notebook_names() -> dict[str, str]:
    """ "01" -> "01_dot_product_toy", from the course's notebooks (for the grid's group headings)."""
    return {p.name[:2]: p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}


def _grid(exercises: list[tuple[str, str]], learners: list[dict]) -> str:
    e = html.escape
    groups: dict[str, list[tuple[str, str]]] = {}
    for key, title in exercises:
        groups.setdefault(key.split(".")[0], []).append((key, title))
    names = _notebook_names()
    first = {ks[0][0] for ks in groups.values()}
    edge = {k: " first" if k in first else "" for k, _ in exercises}
    top = "".join(
        f'<th scope="colgroup" colspan="{len(ks)}" class="notebook first" title="{e(names.get(nb, "notebook " + nb))}"'
        f">{e(nb)}</th>"
        for nb, ks in groups.items()
    )
    keys = "".join(
        f'<th scope="col" class="key{edge[k]}" data-key="{e(k)}" title="{e(k)} {e(t)}">{e(k.split(".", 1)[1])}</th>'
        for k, t in exercises
    )
    body = []
    one_day = len({r["checked_at"][:10] for r in learners}) == 1
    for r in learners:
        cells = []
        for k, t in exercises:
            kind, text = r["cells"][k]
            said = f"failed: {text}" if kind == "failed" and text != "failed" else text
            tip = f"{r['learner']}, {k} {t}: {said}"
            cells.append(
                f'<td class="v {kind}{edge[k]}" data-key="{e(k)}" data-verdict="{kind}" data-text="{e(text)}" '
                f'title="{e(tip)}" aria-label="{e(said)}">{_GLYPH[kind]}</td>'
            )
        when = r["checked_at"]
        short = when[11:16] if one_day else when[5:16].replace("T", " ")  # 09:05, or 11-26 09:05
        body.append(
            f'<tr data-learner="{e(r["learner"])}"><th scope="row" title="{e(r["learner"])}">{e(r["learner"])}</th>'
            f'<td class="meta" title="{r["passed"]} passed of the {r["checked"]} exercises in their report">'
            f"{r['passed']}/{r['checked']}</td>"
            f'<td class="meta" title="checked at {e(when)}">{e(short)}</td>'
            f'<td class="meta" title="{e(r["version_full"] or "no version in the report")}">{e(r["version"])}</td>'
            f"{''.join(cells)}</tr>"
        )
    passed = "".join(
        f'<td class="{edge[k].strip()}" data-key="{e(k)}" title="{e(k)}: {n} of the {m} who checked it passed">{n}</td>'
        for k, _ in exercises
        for n, m in [
            (
                sum(r["cells"][k][0] == "passed" for r in learners),
                sum(r["cells"][k][0] != "not-checked" for r in learners),
            )
        ]
    )
    return f"""<table id="class-summary">
<thead><tr><th scope="col" rowspan="2" class="learner">learner</th><th scope="col" rowspan="2" class="meta"
title="exercises passed">passed</th><th scope="col" rowspan="2" class="meta" title="checked at (UTC)">at</th>
<th scope="col" rowspan="2" class="meta" title="the course package's version">version</th>{top}</tr>
<tr>{keys}</tr></thead>
<tbody>
{chr(10).join(body)}
</tbody>
<tfoot><tr><th scope="row">passed</th>{'<td class="meta"></td>' * 3}{passed}</tr></tfoot>
</table>"""


def _reteach(mistakes: list[dict]) -> str:
    e = html.escape
    if not mistakes:
        return "<p>No learner's check named a mistake: nothing to re-teach from these reports.</p>"
    rows = "".join(
        f'<tr data-key="{e(m["key"])}" data-mistake="{e(m["mistake"])}" data-learners="{len(m["learners"])}">'
        f'<td class="count" style="--share: {100 * len(m["learners"]) / m["checked"]:.0f}%">'
        f"{len(m['learners'])} of {m['checked']} who checked it</td>"
        f'<td class="exercise">{e(m["key"])} {e(m["title"])}</td><td class="mistake">{e(m["mistake"])}</td>'
        f'<td class="hint">{e(m["hint"])}</td><td class="who">{e(", ".join(m["learners"]))}</td></tr>'
        for m in mistakes
    )
    return (
        '<table id="reteach"><thead><tr><th scope="col">learners</th><th scope="col">exercise</th>'
        '<th scope="col">mistake</th><th scope="col">what the check tells them</th><th scope="col">who</th></tr>'
        f"</thead><tbody>{rows}</tbody></table>"
    )


def _apart(apart: list[dict], version: str | None) -> str:
    e = html.escape
    if not apart:
        return ""
    rows = "".join(
        f'<tr data-learner="{e(r["learner"])}"><th scope="row">{e(r["learner"])}</th>'
        f"<td>{e(_package_version(r.get('course_version')) or 'none')}</td><td>{e(r['checked_at'])}</td>"
        f"<td>{e(r['file'])}</td></tr>"
        for r in apart
    )
    return f"""<h2 id="another-version">Reports of another course version</h2>
<p>Not in the grid or the counts: an exercise's number names another exercise in another version of the course
than {e(str(version))}, the version of these reports.</p>
<table id="apart"><thead><tr><th scope="col">learner</th><th scope="col">course version</th>
<th scope="col">checked at (UTC)</th><th scope="col">file</th></tr></thead><tbody>{rows}</tbody></table>
"""


def _summary_html(
    exercises: list[tuple[str, str]],
    learners: list[dict],
    mistakes: list[dict],
    made: str,
    apart: list[dict] = (),
    version: str | None = None,
) -> bytes:
    e = html.escape
    legend = " ".join(f'<span class="{c}">{_GLYPH[c] or "&nbsp;"} {t}</span>' for c, t in _LEGEND)
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Exercises: the class</title>
<style>{_PAGE_STYLE}</style>
</head>
<body>
<h1>Exercises: the class</h1>
<p>{_many(len(learners), "learner")}, {_many(len(exercises), "exercise")}; made {e(made)} by
<code>python3 course.py check --summary</code>. One cell per learner and exercise, the exercises grouped by
notebook; hover over a cell for the exercise and the mistake its check named.</p>
<p class="legend">{legend}</p>
<div class="wrap">
{_grid(exercises, learners)}
</div>
<h2 id="what-to-reteach">What to re-teach</h2>
<p>Each mistake a check named, with how many of the learners who checked the exercise made it, most first;
then the failures no known mistake names (also in <code>class-mistakes.csv</code>).</p>
{_reteach(mistakes)}
{_apart(apart, version)}</body>
</html>
"""
    return page.encode("utf-8")


SUMMARY_LEDGER = ".class-summary-files"  # in the --out folder: the table files check wrote, with their sha256
_SUMMARY_OUT = Output(  # the words of --summary's refusal (course_tools._output.in_course_sources)
    "the class table",
    noun="folder",
    folders=SOURCE_FOLDERS,
    in_folder=" (the learner zip and git carry it, and the table names every learner with their verdicts)",
    holds_course="give {what} a {noun} outside the course (with --out), e.g. {example}",
    link="",
    other_folder="",
    example="class-table",
)


def _summary_out_problem(out: Path, folder: Path) -> tuple[str | None, str | None]:
    """(why the class table may not be written in ``out``, a warning when it may but lies in the course folder).

    Never in the course's source folders, which ``package`` zips for learners and git carries (as ``site``
    refuses them); elsewhere in the course (``reports/``) it is written, said with a warning."""
    given = "--out" if out is not folder else "--summary (the table goes beside the reports without --out)"
    refused = in_course_sources(out, _SUMMARY_OUT)
    if refused:
        return f"{given} {out}: {refused}", None
    if inside(Path(out).expanduser().resolve(), ROOT):
        return None, (
            f"warning: {out} is inside the course folder {ROOT}: the class table names every learner with their "
            "verdicts; keep it out of what you share (a folder outside the course, with --out, is safer)"
        )
    return None, None


def summarize(folder: Path, out: Path | None = None) -> int:
    """``check --summary FOLDER [--out DIR]``: the class table of the reports in FOLDER, as CSV and HTML in DIR
    (default: FOLDER). Returns the exit code."""
    out = folder if out is None else out
    if not folder.is_dir():
        what = "a file, not a folder" if folder.exists() else "no such folder"
        print(
            f"course check: --summary {folder}: {what}; give the folder you collected the reports in", file=sys.stderr
        )
        return 2
    if out.exists() and not out.is_dir():
        print(f"course check: --out {out}: a file, not a folder", file=sys.stderr)
        return 2
    refused, warning = _summary_out_problem(out, folder)
    if refused:
        print(f"course check: {refused}", file=sys.stderr)
        return 2
    if warning:
        print(f"course check: {warning}", file=sys.stderr)
    reports, notes = collect_reports(folder)
    for note in notes:
        print(f"course check: {note}", file=sys.stderr)
    if not reports:
        print(
            f"course check: --summary {folder}: no exercise reports in this folder (each learner's "
            "reports/exercises-NAME.json, from `python3 course.py check --learner NAME`)",
            file=sys.stderr,
        )
        return 2
    reports, apart, version = split_versions(reports, this_version())
    for r in apart:
        print(
            f"course check: set apart {r['file']} ({r['learner']}): {_version_said(r)}, not {version} as this "
            "course; its exercise numbers may name other exercises, so it is not in the grid or the counts "
            "(listed apart in the table)",
            file=sys.stderr,
        )
    if not reports:
        print(
            f"course check: --summary {folder}: no report of this course's version {version}; make the table with "
            "the course of the reports' version",
            file=sys.stderr,
        )
        return 2
    exercises, learners = class_table(reports)
    mistakes = mistake_counts(exercises, learners)
    made = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    targets = {
        f"{SUMMARY_NAME}.csv": _summary_csv(exercises, learners, apart, version),
        f"{SUMMARY_NAME}.html": _summary_html(exercises, learners, mistakes, made, apart, version),
        "class-mistakes.csv": _mistakes_csv(mistakes),
    }
    try:
        out.mkdir(parents=True, exist_ok=True)
        ledger = Ledger(out, SUMMARY_LEDGER, None, "the class table was written")
        for rel, data in targets.items():
            if (out / rel).is_symlink():
                raise OSError(f"{out / rel} is a symbolic link")
            ledger.write(rel, data)  # a file changed since check wrote it is first moved aside, whole
        ledger.save()
    except OSError as e:
        print(f"course check: cannot write the class table in {out}: {e}", file=sys.stderr)
        return 2
    counted = [_many(len(learners), "learner"), _many(len(exercises), "exercise"), _many(len(reports), "report")]
    aside = f" (course version {version}); {_many(len(apart), 'report')} of another version set apart" if apart else ""
    print(f"{counted[0]}, {counted[1]}, from {counted[2]} in {folder}{aside}")
    for note in ledger.notes:
        print(f"kept: {note}")
    for rel in targets:
        print(f"written: {out / rel}")
    return 0


# ---------------------------------------------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python3 course.py check",
        description="Check your exercises: run each notebook, print a table of verdicts and write your report "
        "(reports/exercises-NAME.json). Instructors: --summary FOLDER makes the class table of collected reports.",
        epilog="Your name is asked once on a terminal and remembered in reports/learner.txt; --learner NAME sets "
        "it (and remembers it); with neither and no terminal (CI), your login name is used. A new report "
        "replaces only your own; the previous one is kept as exercises-NAME.json.previous.",
    )
    parser.add_argument(
        "notebooks", nargs="*", type=Path, help="notebooks or folders of notebooks to check (default: notebooks/)"
    )
    parser.add_argument(
        "--learner",
        metavar="NAME",
        help='your name as you write it, e.g. "Ada Lovelace" (its file: reports/exercises-Ada-Lovelace.json)',
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="PATH",
        help="where to write your report (default: reports/exercises-NAME.json)",
    )
    parser.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"time limit for each cell (default: {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--summary",
        type=Path,
        metavar="FOLDER",
        help="(instructors) run no notebook: turn the reports (*.json) in FOLDER into one class table, "
        f"{SUMMARY_NAME}.csv and {SUMMARY_NAME}.html",
    )
    parser.add_argument(
        "--out", type=Path, metavar="DIR", help="with --summary: where to write the class table (default: FOLDER)"
    )
    return parser


def _other_learner(report: Path, learner: str) -> str | None:
    """The learner of the report already at ``report`` when it is another learner's, else None."""
    if not report.is_file():
        return None
    try:
        data = read_report(report)
    except (OSError, ValueError):
        return None
    return data["learner"] if data["learner"].casefold() != learner.casefold() else None


def _report_files(learner: str) -> list[Path]:
    """Where a learner's report goes, in order: ``reports/exercises-FORM.json``, and when another learner's name
    has that form ("Ana Silva", "Ana-Silva"; "../x", "x"), the same with 8 hex digits of the name's sha256."""
    form = learner_file_name(learner)
    digest = hashlib.sha256(normalise_learner(learner).encode("utf-8")).hexdigest()[:8]
    files = [REPORTS / f"exercises-{form}.json"]
    if not form.endswith(digest):  # a long name's form ends in its digest already
        files.append(REPORTS / f"exercises-{form[: MAX_FILE_NAME - 9].rstrip('-.')}-{digest}.json")
    return files


class _Taken(Exception):
    """Each file a report may go to holds another learner's report (args: those learners)."""


def _create_new(path: Path, data: bytes) -> bool:
    """Write ``data`` as the new file ``path``, whole, only if nothing is there (False: a file is). The bytes go
    to a temporary first, then are linked as ``path``, which fails if another run made it meanwhile; a file system
    without hard links (FAT) gets an exclusive create instead."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:  # no hard links here
            try:
                new = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(new, "wb") as f:
                f.write(data)
        return True
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_own_report(files: list[Path], learner: str, data: bytes) -> tuple[Path, Path | None]:
    """Write the report to the first of ``files`` that is not another learner's, asked again at the moment of
    writing (another check may have written there while the notebooks ran): (the file, where the learner's
    previous report there was kept, or None). A new file is created only if none is there, so two checks at once
    never replace each other's report. Raises _Taken when every file is another learner's."""
    others = []
    for path in files:
        for _ in range(3):  # a file made by another run between the look and the write: look again
            if path.exists() or path.is_symlink():
                other = _other_learner(path, learner)
                if other:
                    others.append(other)
                    break
                previous = path.with_name(path.name + ".previous")
                write_atomic(previous, path.read_bytes())
                write_atomic(path, data)
                return path, previous
            if _create_new(path, data):
                return path, None
        else:
            raise OSError(f"{path} kept changing while the report was written")
    raise _Taken(*others)


def _dash_names(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """``--learner -Ana`` as ``--learner=-Ana``: argparse takes a value that starts with "-" for a flag of its
    own and stops ("expected one argument"), yet "-Ana" is a name. A value that is one of the flags (or an
    abbreviation of one) is left for argparse."""
    flags = [s for action in parser._actions for s in action.option_strings]

    def is_flag(arg: str) -> bool:
        name = arg.split("=", 1)[0]
        return name in flags or (name.startswith("--") and len(name) > 2 and any(f.startswith(name) for f in flags))

    out, i = [], 0
    while i < len(argv):
        if argv[i] == "--":
            return out + argv[i:]
        if argv[i] == "--learner" and i + 1 < len(argv) and argv[i + 1].startswith("-") and not is_flag(argv[i + 1]):
            out.append(f"--learner={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(_dash_names(sys.argv[1:] if argv is None else list(argv), parser))
    if args.summary is not None:
        if args.notebooks or args.learner or args.json:
            print(
                "course check: --summary runs no notebook and writes no report: give it alone (with --out DIR)",
                file=sys.stderr,
            )
            return 2
        return summarize(args.summary, args.out)
    if args.out is not None:
        print("course check: --out goes with --summary FOLDER (for your own report: --json PATH)", file=sys.stderr)
        return 2
    named = [p.resolve() for p in args.notebooks if p.is_file()]  # files asked for by name, not via a folder
    checked = [p.resolve() for p in args.notebooks] or [ROOT / "notebooks"]
    notebooks, problems = expand(args.notebooks or [ROOT / "notebooks"])
    if problems:  # said before asking for a name
        for p in problems:
            print(f"course check: {p}", file=sys.stderr)
        return 2
    try:
        learner, how, remember = resolve_learner(args.learner)
    except ValueError as e:
        print(f"course check: {e}", file=sys.stderr)
        return 2
    given_json = args.json is not None
    if not given_json:  # the first file of the learner's own, asked again when it is written
        files = _report_files(learner)
        args.json = next((f for f in files if not _other_learner(f, learner)), files[-1])
        problem = _report_problem(args.json, f"the report {args.json} (the default of --json)")
        other = None if problem else _other_learner(args.json, learner)
        if other:
            problem = (
                f"the reports {' and '.join(map(str, files))} are other learners' with a name like {learner}; "
                "tell yourself apart in your name, e.g. with your family name"
            )
    else:
        files = [args.json]
        problem = _report_problem(args.json, f"--json {args.json}")
        other = None if problem else _other_learner(args.json, learner)
        if other:
            problem = f"--json {args.json} holds the report of {other}, not {learner}: give a file of your own"
    if problem:
        print(f"course check: {problem}", file=sys.stderr)
        return 2
    if remember:
        _remember(learner)
    print(f"learner: {learner} ({how})", flush=True)
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
        report = make_report(learner, checked, rows)
        data = (json.dumps(report, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        try:
            written, previous = write_own_report(files[files.index(args.json) :], learner, data)
        except _Taken as taken:  # another check wrote there while the notebooks ran
            print(
                f"course check: {args.json} became the report of {', '.join(taken.args)} while the notebooks ran; "
                f"yours is not written: run the check again{' with another --json' if given_json else ''}",
                file=sys.stderr,
            )
            return 2
        except OSError as e:
            print(f"course check: cannot write the report {args.json}: {e}", file=sys.stderr)
            return 2
        kept = f"; your previous report is kept as {previous}" if previous else ""
        print(f"written: {written} (learner {learner}, {time.monotonic() - total_t:.1f} s in all){kept}")
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
