"""Writing files so that nothing a learner made is ever half-written or lost: the one home for atomic writes.

Every file the course writes goes through :func:`atomic_path` or :func:`write_atomic` (a temporary file
``.NAME.<pid>-<random>.tmp`` beside the target, flushed, then renamed over it); what a command would replace is
first kept beside it under a ``backup-`` name. The sha256 digests that check a file live here too.
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

TMP_SUFFIX = ".tmp"
HOME_ENV = "COURSE_HOME"  # where datasets/ and runs/ go for a package installed outside a course folder


def course_folder(package_dir: str | os.PathLike | None = None) -> Path:
    """The folder whose ``datasets/`` and ``runs/`` the package reads and writes: the course folder it sits in
    (the one holding ``course.py``); for a package installed elsewhere, ``COURSE_HOME`` if set, else
    ``~/attention-step-by-step``."""
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
    """Raise OSError unless a new file can be written in ``folder`` (made first, with its parents, if ``make``):
    an atomic write's temporary for ``name``, removed at once. Commands call it before long work."""
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
    """Remove the temporary files of :func:`atomic_path` (``.NAME.<pid>-*.tmp``, for ``name`` when given) in
    ``folder`` whose process is gone, so a run writing there right now keeps its file; return what was removed."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    for tmp in sorted(folder.glob(f".{name}.*{TMP_SUFFIX}" if name else f".*{TMP_SUFFIX}")):
        middle = tmp.name[: -len(TMP_SUFFIX)].rsplit(".", 1)[-1]  # "<pid>-<random>"
        pid_text = middle.split("-", 1)[0]
        if not pid_text.isdigit() or _pid_alive(int(pid_text)):
            continue
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
            removed.append(tmp)
    return removed


def backup_path(path: str | os.PathLike, now: datetime | None = None) -> Path:
    """A free name beside ``path`` to keep it under: ``backup-STEM-YYYYmmdd-HHMMSS[-N]SUFFIX`` (``-2``, ``-3``, ...
    when that name is taken, so an earlier backup is never replaced)."""
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
    Raises FileNotFoundError when ``path`` does not exist."""
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
