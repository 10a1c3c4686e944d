"""Reset one exercise, or a whole notebook, to its clean learner copy without losing the learner's work.

``python3 course.py reset notebooks/03_masking.ipynb`` replaces the notebook with its clean learner copy;
``python3 course.py reset notebooks/03_masking.ipynb --exercise 03.2`` replaces only the cells of exercise
03.2 (its stub and its check) and keeps every other cell as the learner left it. Either way the learner's
file is first copied beside it, as ``notebooks/backup-03_masking-YYYYmmdd-HHMMSS.ipynb`` (a name that the
course's own commands do not pick up as a notebook of the course). A file that already is the clean copy, or is
the notebook as the course shipped it (executed, outputs and all: ``.course/shipped.json`` in a zip, else git),
is left as it is: nothing written, no backup.

The clean copy is built from ``course_source/`` (``course_tools.build.make_notebook(..., learner=True)``);
in a learner build of the course (``python3 course.py package --learner``), which has no sources, it is the
copy packed in ``.course/clean/``; failing both, it comes from git (the committed ``notebooks/<name>``).

Only the course's own notebooks in ``notebooks/`` are reset: a file anywhere else (``solutions/``, the
instructor's complete notebooks, among them), a backup, or a notebook the course does not have is refused
with a message naming what is accepted. Every write is atomic, and temporary files left by a killed run are
removed by the next one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shlex
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import nbformat

from course_utils._files import backup_path, clean_stale_tmp, keep_copy, write_atomic

__all__ = [
    "clean_copy",
    "exercise_cells",
    "backup_path",
    "course_notebooks",
    "resettable",
    "reset_notebook",
    "reset_exercise",
]

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIR, LEARNER_DIR, CLEAN_DIR = ROOT / "course_source", ROOT / "notebooks", ROOT / ".course" / "clean"
# sha256 of each notebook of notebooks/ as the course shipped it (executed, with outputs), written by `package`
SHIPPED = ROOT / ".course" / "shipped.json"
_CHECK = re.compile(r"""\bcheck\(\s*["'](?P<key>\d+\.\d+)["']""")


def clean_copy(name: str) -> nbformat.NotebookNode:
    """The clean learner copy (unexecuted) of the notebook called ``name`` (e.g. ``03_masking.ipynb``)."""
    stem = Path(name).stem
    source = SOURCE_DIR / f"{stem}.py"
    if source.exists():
        # the authors' tool, imported here because learner builds leave it out
        from course_tools.build import make_notebook, parse_source

        return make_notebook(parse_source(source.read_text(encoding="utf-8")), learner=True, name=stem)
    if (CLEAN_DIR / f"{stem}.ipynb").exists():
        return nbformat.read(CLEAN_DIR / f"{stem}.ipynb", as_version=4)
    rel = (LEARNER_DIR / f"{stem}.ipynb").relative_to(ROOT).as_posix()
    proc = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise FileNotFoundError(f"no clean copy of {name}: neither {source.relative_to(ROOT)} nor {rel} in git")
    nb = nbformat.reads(proc.stdout, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def exercise_cells(nb: nbformat.NotebookNode) -> dict[str, list[int]]:
    """Indices of each exercise's code cells: the cell that calls ``check("NN.k", ...)`` and any cells
    before it (since the previous check) that hold a stub (``# YOUR CODE HERE``). ``nb`` is a learner copy."""
    found: dict[str, list[int]] = {}
    pending: list[int] = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        keys = _CHECK.findall(cell.source)
        if keys:
            for key in keys:
                found.setdefault(key, []).extend([*pending, i])
            pending = []
        elif "# YOUR CODE HERE" in cell.source:
            pending.append(i)
    return found


def course_notebooks() -> list[str]:
    """The file names of the course's notebooks (``03_masking.ipynb``, ...): those with a source in
    ``course_source/`` or a clean copy in ``.course/clean/``, else those committed in ``notebooks/``."""
    names = {f"{p.stem}.ipynb" for p in SOURCE_DIR.glob("[0-9][0-9]_*.py")}
    names |= {p.name for p in CLEAN_DIR.glob("[0-9][0-9]_*.ipynb")}
    if not names:
        rel = LEARNER_DIR.relative_to(ROOT).as_posix()
        proc = subprocess.run(
            ["git", "ls-tree", "--name-only", "HEAD", f"{rel}/"], cwd=ROOT, capture_output=True, text=True
        )
        names = {Path(n).name for n in proc.stdout.split() if re.fullmatch(r"\d\d_.*\.ipynb", Path(n).name)}
    return sorted(names)


def resettable(path: Path, folder: Path | None = None) -> Path:
    """``path``, resolved, when it is one of the course's notebooks in ``folder`` (default ``notebooks/``) and
    not a symbolic link; ValueError saying what is accepted otherwise."""
    folder = Path(folder or LEARNER_DIR).resolve()
    path = Path(path)
    target = path.resolve()
    names = course_notebooks()
    shown = "notebooks/" if folder == LEARNER_DIR.resolve() else f"{folder}/"
    accepted = f"reset puts back only the course's own notebooks in {shown} ({', '.join(names) or 'none found'})"
    if path.is_symlink():
        raise ValueError(
            f"{path} is a symbolic link (to {target}); reset refuses links so that it never writes "
            f"outside {shown} or into another notebook: remove the link (the file it points to stays "
            f"as it is) and run reset again for a clean copy in its place. {accepted}"
        )
    if target.parent != folder:
        where = ""
        if target.parent == (ROOT / "solutions").resolve():
            where = "; solutions/ holds the instructor's complete notebooks, which reset never changes"
        raise ValueError(f"{path} is not in {shown}{where}. {accepted}")
    if target.name not in names:
        what = (
            "a backup, which reset never changes"
            if target.name.startswith("backup-")
            else "not a notebook of the course"
        )
        raise ValueError(f"{path} is {what}. {accepted}")
    return target


def shipped_digest(name: str) -> str | None:
    """The sha256 of ``notebooks/<name>`` as the course shipped it (the executed notebook, outputs and all): from
    ``.course/shipped.json`` in a zip made by `package`, else from the file committed in git; None if neither."""
    try:
        recorded = json.loads(SHIPPED.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        recorded = {}
    if isinstance(recorded, dict) and isinstance(recorded.get(name), str):
        return recorded[name]
    proc = subprocess.run(["git", "show", f"HEAD:notebooks/{name}"], cwd=ROOT, capture_output=True)
    return hashlib.sha256(proc.stdout).hexdigest() if proc.returncode == 0 else None


def as_shipped(path: Path) -> bool:
    """Whether the file at ``path`` is byte for byte the course's notebook of that name as shipped: untouched, so
    as clean as the clean copy (which is the same notebook before it was run)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() == shipped_digest(path.name)
    except OSError:
        return False


def _encoded(nb: nbformat.NotebookNode) -> bytes:
    text = nbformat.writes(nb)
    return (text if text.endswith("\n") else text + "\n").encode("utf-8")


def _replace(path: Path, nb: nbformat.NotebookNode, now: datetime | None) -> Path | None:
    """Write ``nb`` over ``path``, the learner's file first kept as a backup; return the backup. When the file
    already holds exactly ``nb``, or is the notebook as shipped (untouched, with the outputs it came with), nothing
    is written and no backup is made (None): a reset that changes nothing leaves no file behind."""
    data = _encoded(nb)
    if as_shipped(path):
        return None
    if path.exists():
        try:
            same = path.read_bytes() == data or nbformat.reads(path.read_text(encoding="utf-8"), as_version=4) == nb
        except Exception:  # not a notebook (a whole reset replaces it, keeping it as a backup)
            same = False
        if same:
            return None
    backup = keep_copy(path, now) if path.exists() else None
    write_atomic(path, data)
    return backup


def reset_notebook(path: Path, now: datetime | None = None, folder: Path | None = None) -> Path | None:
    """Replace the notebook at ``path`` (one of the course's notebooks in ``folder``, default ``notebooks/``)
    with its clean learner copy; return the backup (None if there was no file to keep, or the file already was
    the clean copy: then nothing is written)."""
    path = resettable(path, folder)
    clean_stale_tmp(path.parent)
    return _replace(path, clean_copy(path.name), now)


def _find_cell(nb: nbformat.NotebookNode, cell: nbformat.NotebookNode, key: str, used: set[int]) -> int | None:
    """Where the learner's copy of a clean cell is: the same cell id, else the same check call or the same
    first line (``def my_causal_mask(T):``)."""
    for i, c in enumerate(nb.cells):
        if i not in used and c.get("id") and c.get("id") == cell.get("id") and c.cell_type == cell.cell_type:
            return i
    first = cell.source.strip().splitlines()[0] if cell.source.strip() else None
    for i, c in enumerate(nb.cells):
        if i in used or c.cell_type != "code":
            continue
        if (_CHECK.search(cell.source) and key in _CHECK.findall(c.source)) or (
            first and c.source.strip().splitlines()[:1] == [first]
        ):
            return i
    return None


def reset_exercise(path: Path, key: str, now: datetime | None = None, folder: Path | None = None) -> Path:
    """Replace only exercise ``key``'s cells of the notebook at ``path`` (one of the course's notebooks in
    ``folder``, default ``notebooks/``) with the clean learner cells (outputs cleared); every other cell stays
    as it is. Return the backup of the learner's file (None when its cells already read as the clean ones, outputs
    aside, as in an untouched notebook where neither git nor ``.course/shipped.json`` says how it shipped: then
    nothing is written)."""
    path = resettable(path, folder)
    clean_stale_tmp(path.parent)
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist; to get a clean copy run: python3 course.py reset {shlex.quote(str(path))}"
        )
    clean = clean_copy(path.name)
    clean_cells = exercise_cells(clean)
    if key not in clean_cells:
        known = ", ".join(clean_cells) or "none"
        raise KeyError(f"{path.name} has no exercise {key}; its exercises are: {known}")
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:  # not JSON, or not a notebook: nbformat raises several kinds
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"{path} cannot be read as a notebook ({first}); reset the whole notebook instead (your "
            f"file is kept as a backup): python3 course.py reset {shlex.quote(str(path))}"
        ) from None
    used: set[int] = set()
    places = []
    for ci in clean_cells[key]:
        li = _find_cell(nb, clean.cells[ci], key, used)
        if li is None:
            raise LookupError(
                f"cannot find exercise {key}'s cell in {path.name} (was it deleted?); reset the "
                f"whole notebook instead: python3 course.py reset {shlex.quote(str(path))}"
            )
        used.add(li)
        places.append((li, ci))
    if all(nb.cells[li].source == clean.cells[ci].source for li, ci in places):
        return None  # its cells already read as the clean ones: their outputs alone are not worth a backup
    for li, ci in places:
        new = nbformat.from_dict(dict(clean.cells[ci]))
        new["id"] = nb.cells[li].get("id", new.get("id"))
        nb.cells[li] = new
    return _replace(path, nb, now)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 course.py reset", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    parser.add_argument("notebook", type=Path, help="the learner's notebook, e.g. notebooks/03_masking.ipynb")
    parser.add_argument("--exercise", metavar="NN.K", help="reset only this exercise (e.g. 03.2)")
    args = parser.parse_args(argv)
    existed = args.notebook.exists()
    try:
        if args.exercise:
            backup = reset_exercise(args.notebook, args.exercise)
            what = f"exercise {args.exercise} in {args.notebook}"
        else:
            backup = reset_notebook(args.notebook)
            what = str(args.notebook)
    except (FileNotFoundError, KeyError, LookupError, ValueError) as e:
        print(f"cannot reset: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    if existed and backup is None:
        print(f"{what} already is the clean learner copy: nothing written, no backup made.")
        return 0
    others = "; your other cells are unchanged" if args.exercise else ""
    print(f"{what} is back to its clean learner copy{others}.")
    if backup:
        print(f"your previous file is kept as {backup}")
    print(
        "If JupyterLab has the notebook open, close its tab without saving (or use File > Reload Notebook "
        "from Disk) so that it shows the reset version."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
