"""The one home for atomic writes: a reader never sees half a file, and stale temporaries are cleaned."""

import os

import pytest

from course_utils._files import atomic_path, clean_stale_tmp, write_atomic


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
