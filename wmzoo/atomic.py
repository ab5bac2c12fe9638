"""Atomic file writes: every file wmzoo writes for a user or a later run appears whole or not at all.

A writer gets a temporary path next to the final one from :func:`atomic_path`, writes it in
full, and the file is flushed to disk (fsync) and renamed over the final path
(:func:`os.replace`, atomic within a folder), and the folder is flushed too (the rename survives a
power loss); on an error the temporary file is removed and an
existing file at the final path is left as it was. Checkpoints, replay and dataset chunk files,
manifests, ``env.json``, ``run.yaml``, JSON results and images all go through here.

The temporary file is ``.{name}.{pid}{TMP_SUFFIX}`` in the final file's folder: hidden, unique
per process, and recognisable by its suffix, so a reader of a folder of chunk files skips (and a
writer cleans up) what an interrupted process left behind (:mod:`wmzoo.data.replay`,
:mod:`wmzoo.data.generate`).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TMP_SUFFIX = ".tmp"
"""The suffix of every temporary file: a file ending in it is an unfinished write."""


def is_temporary(path: Path) -> bool:
    """Whether ``path`` is an unfinished write: a file ending in :data:`TMP_SUFFIX` (in the
    folders wmzoo owns: a run, its replay, a dataset split)."""
    return path.name.endswith(TMP_SUFFIX) and path.is_file()


def remove_temporaries(folder: Path) -> list[Path]:
    """Delete the temporary files an interrupted writer left in ``folder`` (only files named as
    :func:`temporary_path` names them; nothing else is touched); returns them."""
    found = [path for path in folder.iterdir() if is_temporary(path)] if folder.is_dir() else []
    for path in found:
        path.unlink(missing_ok=True)
    return found


def temporary_path(path: Path) -> Path:
    """The temporary file :func:`atomic_path` writes ``path`` through."""
    return path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path in ``path``'s folder (created if missing) for the caller to write;
    when the block ends normally the file is fsynced and renamed over ``path``, when it raises the
    temporary file is removed and ``path`` is untouched."""
    path = Path(path)
    if path.is_dir():  # never write a temporary file beside a folder meant as a file name
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_folder(path.parent)  # the rename itself survives a power loss
    finally:
        tmp.unlink(missing_ok=True)


def _fsync_folder(folder: Path) -> None:
    """Flush a folder's entries to disk (POSIX; a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on a folder
        pass
    finally:
        os.close(fd)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write a text file atomically; returns its path."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return path
