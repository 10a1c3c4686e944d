"""Writing files so that nothing a learner made is ever half-written or lost: the one home for atomic writes.

Every command of the course that writes a file (checkpoints, the corpus, reports, notebooks, zips) writes it
through :func:`atomic_path` or :func:`write_atomic`: into a temporary file beside the target, flushed to disk,
then renamed over the target. A reader sees the old file or the whole new one, never half of it. Temporary
files are named ``.NAME.<pid>-<random>.tmp`` so two writers never share one, and :func:`clean_stale_tmp`
removes those left behind by a process that was killed. What a command would replace is first kept beside it
under a ``backup-`` name (:func:`backup_path`, :func:`move_aside`, :func:`keep_copy`): nothing is deleted.
The digests that tell whether a file is still what was written (:func:`sha256_bytes`, :func:`sha256_file`) live
here too, beside the writes they check.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

__all__ = [
    "course_folder",
    "atomic_path",
    "probe_writable",
    "write_atomic",
    "clean_stale_tmp",
    "TMP_SUFFIX",
    "backup_path",
    "move_aside",
    "keep_copy",
    "sha256_bytes",
    "sha256_file",
]

TMP_SUFFIX = ".tmp"
HOME_ENV = "COURSE_HOME"  # where datasets/ and runs/ go for a package installed outside a course folder


def course_folder(package_dir: str | os.PathLike | None = None) -> Path:
    """The folder whose ``datasets/`` and ``runs/`` the package reads and writes.

    The course folder the package sits in (a clone or the learner zip, installed editable as ``course.py`` and
    the hosted setup cell install it: it holds ``course.py``); for a package installed elsewhere (a wheel in
    site-packages, where a ``datasets/`` folder would become an importable package and outlive an uninstall),
    ``COURSE_HOME`` if set, else ``~/attention-step-by-step``.
    """
    here = Path(package_dir) if package_dir is not None else Path(__file__).resolve().parent
    if (here.parent / "course.py").is_file():
        return here.parent
    home = os.environ.get(HOME_ENV, "").strip()
    if home:
        return Path(home).expanduser().absolute()  # fixed now, not following later changes of folder
    try:
        return Path.home() / "attention-step-by-step"
    except RuntimeError:  # no HOME and no passwd entry (a container run as an arbitrary uid)
        return Path.cwd() / "attention-step-by-step"


def _tmp_prefix(path: Path) -> str:
    return f".{path.name}.{os.getpid()}-"


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, mode: int = 0o644) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on a clean exit it is flushed and renamed over ``path``.

    On any error (or KeyboardInterrupt) the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=_tmp_prefix(path), suffix=TMP_SUFFIX)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # mkstemp makes 0600; a course file should be readable like any other
        os.replace(tmp, path)  # atomic on POSIX and Windows
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def probe_writable(folder: str | os.PathLike, name: str = "probe", make: bool = False) -> None:
    """Raise OSError unless a new file can be written in ``folder`` (made first, with its parents, if ``make``).

    Commands call it before long work (a download, a whole check run) so that a folder they could not write in
    is said at once. The probe is an atomic write's temporary for ``name``, removed at once.
    """
    folder = Path(folder)
    if make:
        folder.mkdir(parents=True, exist_ok=True)
    fd, probe = tempfile.mkstemp(dir=folder, prefix=_tmp_prefix(folder / name), suffix=TMP_SUFFIX)
    os.close(fd)
    os.unlink(probe)


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists (another user's), or we cannot tell: keep its file
    return True


def clean_stale_tmp(folder: str | os.PathLike, name: str | None = None) -> list[Path]:
    """Remove temporary files in ``folder`` left by writers that no longer run; return what was removed.

    Only files made by :func:`atomic_path` (``.NAME.<pid>-*.tmp``, for ``name`` when given) whose process is
    gone are removed, so a run writing into the same folder right now keeps its file. With ``name``, the
    ``NAME.<pid>-<thread>.tmp`` files of the course's earlier checkpoint writer are cleaned the same way.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    patterns = [f".{name}.*{TMP_SUFFIX}", f"{name}.*{TMP_SUFFIX}"] if name else [f".*{TMP_SUFFIX}"]
    for tmp in sorted({p for pattern in patterns for p in folder.glob(pattern)}):
        middle = tmp.name[: -len(TMP_SUFFIX)].rsplit(".", 1)[-1]  # "<pid>-<random>"
        pid_text = middle.split("-", 1)[0]
        if not pid_text.isdigit() or _pid_alive(int(pid_text)):
            continue
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
            removed.append(tmp)
    return removed


def backup_path(path: str | os.PathLike, now: datetime | None = None) -> Path:
    """A free name beside ``path`` to keep it under: ``backup-STEM-YYYYmmdd-HHMMSS[-N]SUFFIX``.

    ``notebooks/03_masking.ipynb`` -> ``notebooks/backup-03_masking-20260102-030405.ipynb``; ``-2``, ``-3``, ...
    are added when that name is taken, so an earlier backup is never replaced. The course's commands ignore
    ``backup-*`` names.
    """
    path = Path(path)
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    stem, suffix = (path.stem, path.suffix) if path.suffix and not path.is_dir() else (path.name, "")
    candidate = path.with_name(f"backup-{stem}-{stamp}{suffix}")
    n = 1
    while candidate.exists() or candidate.is_symlink():
        n += 1
        candidate = path.with_name(f"backup-{stem}-{stamp}-{n}{suffix}")
    return candidate


def move_aside(path: str | os.PathLike, now: datetime | None = None) -> Path:
    """Rename ``path`` (a file or a whole folder) to :func:`backup_path` beside it and return the new name.

    Nothing is copied or deleted: the same bytes stay on disk under the new name. Raises FileNotFoundError
    when ``path`` does not exist.
    """
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise FileNotFoundError(f"cannot keep {path} aside: it does not exist")
    target = backup_path(path, now)
    os.rename(path, target)
    return target


def keep_copy(path: str | os.PathLike, now: datetime | None = None) -> Path:
    """Copy the file ``path`` to :func:`backup_path` beside it (atomically) and return the copy's name."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"cannot keep a copy of {path}: it is not a file")
    target = backup_path(path, now)
    with atomic_path(target, mode=path.stat().st_mode & 0o777) as tmp:
        shutil.copy2(path, tmp)
    return target


def sha256_bytes(data: bytes) -> str:
    """The sha256 hex digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    """The sha256 hex digest of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
