"""The one home for atomic writes: a reader never sees half a file, and stale temporaries are cleaned."""

import os
import subprocess
import sys
from datetime import datetime

import pytest

from course_utils._files import atomic_path, backup_path, clean_stale_tmp, keep_copy, move_aside, write_atomic

NOW = datetime(2026, 1, 2, 3, 4, 5)


def test_write_atomic_replaces_whole_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "sub" / "a.txt"
    write_atomic(target, b"old")
    write_atomic(target, b"new contents")
    assert target.read_bytes() == b"new contents"
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.txt"]
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)


def test_atomic_path_keeps_old_file_on_error(tmp_path):
    target = tmp_path / "a.txt"
    target.write_bytes(b"learner's work")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("boom")
    assert target.read_bytes() == b"learner's work"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_clean_stale_tmp_removes_only_dead_writers_files(tmp_path):
    dead = 2**22 + 12345  # above any pid_max default of 4194304: no such process
    stale = tmp_path / f".ckpt.pt.{dead}-abc.tmp"
    live = tmp_path / f".ckpt.pt.{os.getpid()}-def.tmp"
    other = tmp_path / "notes.tmp"
    for p in (stale, live, other):
        p.write_bytes(b"x")
    assert clean_stale_tmp(tmp_path, "ckpt.pt") == [stale]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])
    assert clean_stale_tmp(tmp_path / "missing") == []


def test_a_killed_writer_leaves_a_temporary_that_the_next_run_cleans(tmp_path):
    """A real process killed in the middle of an atomic write: the target keeps its old bytes, the temporary
    stays behind until clean_stale_tmp runs (as each command does when it starts)."""
    target = tmp_path / "report.json"
    target.write_bytes(b"earlier report")
    code = (
        "import os, sys\nfrom course_utils._files import atomic_path\n"
        "with atomic_path(sys.argv[1]) as tmp:\n    tmp.write_bytes(b'half')\n    os._exit(9)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, timeout=120)
    assert proc.returncode == 9, proc.stderr
    left = [p for p in tmp_path.iterdir() if p.name != "report.json"]
    assert len(left) == 1 and left[0].name.startswith(".report.json.") and left[0].name.endswith(".tmp")
    assert target.read_bytes() == b"earlier report"
    assert clean_stale_tmp(tmp_path, "report.json") == left
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_backup_path_never_reuses_a_name(tmp_path):
    nb = tmp_path / "03_masking.ipynb"
    assert backup_path(nb, NOW) == tmp_path / "backup-03_masking-20260102-030405.ipynb"
    (tmp_path / "backup-03_masking-20260102-030405.ipynb").touch()
    assert backup_path(nb, NOW).name == "backup-03_masking-20260102-030405-2.ipynb"
    (tmp_path / "room").mkdir()
    assert backup_path(tmp_path / "room", NOW).name == "backup-room-20260102-030405"


def test_move_aside_keeps_a_file_or_a_folder_whole(tmp_path):
    work = tmp_path / "course.zip"
    work.write_bytes(b"a learner's file")
    kept = move_aside(work, NOW)
    assert kept.name == "backup-course-20260102-030405.zip" and kept.read_bytes() == b"a learner's file"
    assert not work.exists()
    room = tmp_path / "room"
    (room / "wheels").mkdir(parents=True)
    (room / "wheels" / "a.whl").write_bytes(b"w")
    kept = move_aside(room, NOW)
    assert (kept / "wheels" / "a.whl").read_bytes() == b"w" and not room.exists()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        move_aside(tmp_path / "missing", NOW)


def test_keep_copy_copies_and_leaves_the_original(tmp_path):
    nb = tmp_path / "03_masking.ipynb"
    nb.write_text("mine")
    kept = keep_copy(nb, NOW)
    assert kept.read_text() == "mine" and nb.read_text() == "mine"
    assert keep_copy(nb, NOW).name == "backup-03_masking-20260102-030405-2.ipynb"
    with pytest.raises(FileNotFoundError, match="not a file"):
        keep_copy(tmp_path, NOW)


def test_probe_writable_makes_the_folder_leaves_nothing_and_raises_where_nothing_can_be_written(tmp_path):
    from course_utils._files import probe_writable

    probe_writable(tmp_path / "new" / "deeper", "report.json", make=True)
    assert list((tmp_path / "new" / "deeper").iterdir()) == []
    with pytest.raises(FileNotFoundError):
        probe_writable(tmp_path / "absent")  # not made without make=True
    (tmp_path / "file").write_text("mine")
    with pytest.raises(NotADirectoryError):
        probe_writable(tmp_path / "file" / "below", make=True)
    assert (tmp_path / "file").read_text() == "mine"
