"""Atomic writes: the file appears whole or not at all, and no temporary file stays behind."""

from __future__ import annotations

import pytest

from wmzoo.atomic import TMP_SUFFIX, atomic_path, temporary_path, write_text_atomic


def test_write_text_atomic_replaces_and_leaves_no_temp(tmp_path):
    path = write_text_atomic(tmp_path / "sub" / "run.yaml", "a: 1\n")
    write_text_atomic(path, "a: 2\n")
    assert path.read_text() == "a: 2\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["run.yaml"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary_one(tmp_path):
    path = write_text_atomic(tmp_path / "a.json", "old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("interrupted")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_the_temporary_file_sits_next_to_the_final_one_and_ends_in_the_suffix(tmp_path):
    with atomic_path(tmp_path / "x.npz") as tmp:
        assert tmp == temporary_path(tmp_path / "x.npz")
        assert tmp.parent == tmp_path and tmp.name.endswith(TMP_SUFFIX)
        tmp.write_bytes(b"data")
        assert not (tmp_path / "x.npz").exists()  # nothing at the final name until the end
    assert (tmp_path / "x.npz").read_bytes() == b"data" and not tmp.exists()


def test_the_folder_is_flushed_after_the_rename(tmp_path, monkeypatch):
    # Catches: a rename that a power loss could undo (the folder entry never reached the disk).
    import os
    import stat

    from wmzoo.atomic import write_text_atomic

    synced: list[bool] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(stat.S_ISDIR(os.fstat(fd).st_mode)) or real(fd))
    write_text_atomic(tmp_path / "run.yaml", "a: 1\n")
    assert synced == [False, True]  # the file's data, then the folder's entries
