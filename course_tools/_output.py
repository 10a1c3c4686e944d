"""Where the authors' commands write (``room``, ``package``, ``site``): one home for refusing an output that
would lose something, and for the ledger of what a command wrote.

:func:`free_output` says, before anything is written or downloaded, whether an output path may be used: never
one that holds the course or lies in one of its source folders (:func:`in_course_sources`, which ``check
--summary`` asks too), one elsewhere in the course or one that exists
(a link among them) only with ``force``, and then what is there is first moved aside, whole. Each command keeps
its own words in an :class:`Output`. :func:`make_output_folder` makes the folder and proves a file can be
written in it. A :class:`Ledger` records the sha256 of each file a command wrote into its folder, so that a
second run moves aside only the files someone changed since.

What each build of the course holds (``COMMON``, ``INSTRUCTOR_ONLY``) is here too: ``room`` packs it and
``site`` refuses to write into its folders.
"""

from __future__ import annotations

import errno
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from course_utils._files import backup_path, move_aside, probe_writable, sha256_bytes, sha256_file, write_atomic

ROOT = Path(__file__).resolve().parent.parent

# What each build holds. Paths are relative to the course root; folders end in "/".
COMMON = (
    "README.md",
    "course.py",
    "requirements.txt",
    "pyproject.toml",
    ".gitignore",
    "conftest.py",
    "course_utils/",
    "course_tools/",
    "notebooks/",
    "datasets/",
    "checkpoints/",
    "lock/",
    "benchmarks/",  # notebooks 08 and 11 read its saved results, and 08 runs attention_cost.py live
)
INSTRUCTOR_ONLY = ("solutions/", "course_source/", "tests/", "docs/", ".ci/", "tools/")
PACKED_FOLDERS = tuple(f.rstrip("/") for f in COMMON + INSTRUCTOR_ONLY if f.endswith("/"))  # what the zips pack
# Folders of the course that hold its sources (those the zips pack, and git's and the venv's): site and check
# --summary never write into one of them.
SOURCE_FOLDERS = PACKED_FOLDERS + (".git", ".venv")


def inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def blocked_by_a_file(path: Path) -> Path | None:
    """The nearest existing folder above ``path`` when it is a file (so nothing can be made below it), else None."""
    for above in path.parents:
        if above.exists():
            return None if above.is_dir() else above
    return None


def cannot_write(out: Path, what: str, why: str) -> ValueError:
    return ValueError(
        f"cannot write {what} to {out}: {why}; give {what} a path in a folder you can write to, "
        f"e.g. {Path.home() / out.name}"
    )


def make_output_folder(out: Path, what: str, target: Path | None = None) -> None:
    """Make the folder ``out`` (and the folders above it) and make sure a file can be written in it.

    ``target``: the file to be written in ``out`` (a zip), named in the message instead of ``out``.

    ValueError, one line saying what was asked, why it cannot be written and what to do, when ``out`` lies below
    a file, when the system refuses a folder or a file there (no permission, a read-only disk, /sys, /proc).
    The probe file is an atomic-write temporary (``.NAME.<pid>-*.tmp``), removed at once."""
    blocker = blocked_by_a_file(out)
    if blocker is not None:
        raise cannot_write(target or out, what, f"{blocker} is a file, not a folder")
    try:
        probe_writable(out, make=True)
    except OSError as e:
        where = next((p for p in (out, *out.parents) if p.exists()), out)
        if isinstance(e, PermissionError) or e.errno == errno.EROFS:
            why = f"the system does not let this user write in {where} ({e.strerror})"
        else:
            why = f"the system refuses new files or folders in {where} ({e.strerror})"
        raise cannot_write(target or out, what, why) from None


@dataclass(frozen=True)
class Output:
    """An output of a command, and the words its refusals use (``{what}``, ``{noun}`` and ``{example}`` in them
    are filled in)."""

    what: str  # "the room folder", "the zip", "the site"
    noun: str  # what the reader is asked for: "path" or "folder"
    folders: tuple[str, ...]  # folders of the course it is never written into
    in_folder: str  # why one of them is refused, after "is inside NAME/, a folder of the course"
    holds_course: str  # what to do when it holds the course folder itself
    link: str  # why a symbolic link is refused
    other_folder: str  # what an existing folder it may not reuse is called
    example: str | None = None  # a name for the "e.g." beside the course; None: the output's own name
    mark: str | None = None  # a file marking a folder this command made: it writes into that folder again


def in_course_sources(out: Path, rules: Output) -> str | None:
    """Why ``out`` may never be written into, whatever the command's flags, or None: it holds the course folder
    itself, or lies in one of ``rules.folders`` (links followed). One sentence, for the command's refusal."""
    out = Path(out).expanduser().absolute()
    real = out.resolve()
    words = {"what": rules.what, "noun": rules.noun, "example": ROOT.parent / (rules.example or out.name)}
    if inside(ROOT, real):
        return f"{out} holds the course folder {ROOT} itself; {rules.holds_course.format(**words)}"
    for name in rules.folders:
        if inside(real, (ROOT / name).resolve()):
            return (
                f"{out} is inside {name}/, a folder of the course{rules.in_folder}; give {rules.what} a "
                f"{rules.noun} outside the course, e.g. {words['example']}"
            )
    return None


def free_output(out: Path, force: bool, rules: Output) -> tuple[Path, bool]:
    """``out`` made absolute, and whether an existing path there must be moved aside first.

    ValueError (naming ``--force`` where it helps) for an output that holds the course, lies in one of
    ``rules.folders``, lies elsewhere in the course or exists (a link among them), the last two unless ``force``.
    An empty folder, or one holding ``rules.mark``, is written into as it is.
    """
    out = Path(out).expanduser().absolute()
    real = out.resolve()
    words = {"what": rules.what, "noun": rules.noun, "example": ROOT.parent / (rules.example or out.name)}
    refused = in_course_sources(out, rules)
    if refused:
        raise ValueError(f"{refused} (--force does not change this)")
    if inside(real, ROOT) and not force:
        raise ValueError(
            f"{out} is inside the course folder {ROOT}; give {rules.what} a {rules.noun} outside it, e.g. "
            f"{words['example']}, or add --force to write it there anyway"
        )
    blocker = blocked_by_a_file(out)
    if blocker is not None:  # said before anything is downloaded or moved aside
        raise cannot_write(out, rules.what, f"{blocker} is a file, not a folder")
    exists = out.exists() or out.is_symlink()
    if exists and rules.mark and out.is_dir() and not out.is_symlink():
        if not any(out.iterdir()) or (out / rules.mark).is_file():
            return out, False  # empty, or made by this command before: it adds to it, keeping what was changed
    if exists and not force and out.is_symlink():
        raise ValueError(
            f"{out} is a symbolic link (to {real}); {rules.link.format(**words)}: give the {rules.noun} itself "
            f"({real}) or a new one, or add --force to move the link aside as {backup_path(out).name} (what it "
            "points to is left as it is)"
        )
    if exists and not force:
        kind = rules.other_folder if out.is_dir() else "a file"
        raise ValueError(
            f"{out} already exists ({kind}); it is never replaced silently: give {rules.what} a new {rules.noun}, "
            f"or add --force to replace it (what is there now is first moved aside, whole, as "
            f"{backup_path(out).name} with the time of the run; nothing is deleted)"
        )
    return out, exists


class Ledger:
    """The files a command wrote into its folder, with their sha256, kept in the folder's ``mark`` file.

    Before a command replaces one of its files, :meth:`free` moves it aside if it is not as the command left it
    (someone edited it): a second run adds to the folder without losing anyone's change. ``record`` holds what
    else the mark keeps (a room folder's platforms), with the values a new folder starts from.
    """

    def __init__(self, out: Path, mark: str, now: datetime | None, since: str, record: dict | None = None):
        self.out, self.mark, self.now, self.since, self.notes = out, mark, now, since, []
        self.data = {**(record or {}), "files": {}}  # unknown: every existing file counts as changed
        try:
            data = json.loads((out / mark).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if isinstance(data, dict) and all(isinstance(data.get(k), type(v)) for k, v in self.data.items()):
            self.data.update((k, data[k]) for k in self.data)

    @property
    def files(self) -> dict[str, str]:
        return self.data["files"]

    def free(self, rel: str) -> None:
        path = self.out / rel
        if path.is_file() and sha256_file(path) != self.files.get(rel):
            self.notes.append(f"{rel} was changed since {self.since}: kept as {move_aside(path, self.now).name}")

    def wrote(self, rel: str) -> None:
        self.files[rel] = sha256_file(self.out / rel)

    def write(self, rel: str, data: bytes) -> None:
        """Write ``data`` to ``rel`` atomically, a changed file there first moved aside."""
        self.free(rel)
        write_atomic(self.out / rel, data)
        self.files[rel] = sha256_bytes(data)

    def save(self) -> None:
        self.data["files"] = dict(sorted(self.files.items()))
        write_atomic(self.out / self.mark, (json.dumps(self.data, indent=1) + "\n").encode("utf-8"))
