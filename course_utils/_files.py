"""Writing files so that nothing a learner made is ever half-written or lost: the one home for atomic writes.

Every command of the course that writes a file (checkpoints, the corpus, reports, notebooks, zips) writes it
through :func:`atomic_path` or :func:`write_atomic`: into a temporary file beside the target, flushed to disk,
then renamed over the target. A reader sees the old file or the whole new one, never half of it. Temporary
files are named ``.NAME.<pid>-<random>.tmp`` so two writers never share one, and :func:`clean_stale_tmp`
removes those left behind by a process that was killed.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "write_atomic", "clean_stale_tmp", "TMP_SUFFIX"]

TMP_SUFFIX = ".tmp"


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
    gone are removed, so a run writing into the same folder right now keeps its file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    pattern = f".{name}.*{TMP_SUFFIX}" if name else f".*{TMP_SUFFIX}"
    for tmp in folder.glob(pattern):
        middle = tmp.name[: -len(TMP_SUFFIX)].rsplit(".", 1)[-1]  # "<pid>-<random>"
        pid_text = middle.split("-", 1)[0]
        if not pid_text.isdigit() or _pid_alive(int(pid_text)):
            continue
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
            removed.append(tmp)
    return removed
