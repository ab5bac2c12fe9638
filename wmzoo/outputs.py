"""Output paths: a command overwrites only its own earlier output.

Every file a command writes at a path the user names (``eval --json``, ``bench --json``,
``aggregate --json``, ``imagine --out``, ``evaluate --out``'s files) goes through
:func:`check_output` first: a path that holds nothing, or a file this kind of output wrote
before, may be (re)written — atomically, by :mod:`wmzoo.atomic`; anything else (a checkpoint,
a ``run.yaml``, a replay or dataset chunk, a user's own file) is refused with one line naming
what the file is, before any work is done. One mistyped or tab-completed argument then cannot
destroy a run.

An output kind recognises its own files by content, not by name: a JSON output by the keys of
its records, an image by its format's signature. Older files of the same kind keep their
structure, so re-running a command over its earlier output still works.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wmzoo.errors import WmzooError

MAX_RECOGNISED_BYTES = 64 * 2**20
"""A JSON output larger than this is not read to recognise it (outputs are far smaller)."""


@dataclass(frozen=True)
class OutputKind:
    """What a command writes: ``what`` names it in errors, ``recognise`` tells whether an existing
    file at the output path is an earlier output of this kind (so it may be replaced)."""

    what: str
    recognise: Callable[[Path], bool]


def json_output(what: str, fits: Callable[[Any], bool]) -> OutputKind:
    """An output kind of JSON files whose parsed content satisfies ``fits``."""

    def recognise(path: Path) -> bool:
        try:
            if path.stat().st_size > MAX_RECOGNISED_BYTES:
                return False
            return bool(fits(json.loads(path.read_bytes())))
        except (OSError, ValueError):
            return False

    return OutputKind(what, recognise)


def _records_with(keys: set[str]) -> Callable[[Any], bool]:
    """A JSON list (possibly empty) of objects that each carry ``keys``."""
    return lambda data: isinstance(data, list) and all(isinstance(r, dict) and keys <= r.keys() for r in data)


def _object_with(keys: set[str]) -> Callable[[Any], bool]:
    return lambda data: isinstance(data, dict) and keys <= data.keys()


EVAL_JSON = json_output("a `wmzoo eval --json` file", _object_with({"checkpoint", "env", "mean_return", "episodes"}))
BENCH_JSON = json_output("a `wmzoo bench --json` file", _records_with({"mode", "throughput", "peak_rss_mb"}))
AGGREGATE_JSON = json_output("a `wmzoo aggregate --json` file", _records_with({"group", "score", "runs", "metrics"}))
EVALUATE_JSON = json_output("a `wmzoo evaluate` result", _object_with({"protocol", "checkpoint", "data", "split"}))

_SIGNATURES = {".gif": (b"GIF87a", b"GIF89a"), ".png": (b"\x89PNG\r\n\x1a\n",)}


def _image(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return False
    return head.startswith(_SIGNATURES.get(path.suffix.lower(), ()))


IMAGE = OutputKind("a GIF or PNG image of the same format", _image)


def describe(path: Path) -> str:
    """What an existing file is, as far as wmzoo can tell from its name and first bytes."""
    from wmzoo.data.store import ChunkName

    if path.name == "run.yaml":
        return "a run's run.yaml"
    if ChunkName.parse(path.name):
        return "a replay or dataset chunk"
    if path.name in ("manifest.json", "env.json", "offline.json", "cell.json", "study.yaml"):
        return f"a wmzoo {path.name}"
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
        size = path.stat().st_size
    except OSError:
        return "an unreadable file or a broken link"
    if b"wmzoo-checkpoint" in head or path.suffix == ".safetensors":
        return "a checkpoint"
    return f"a file of another kind ({size:,} bytes)"


def check_output(path: str | Path, kind: OutputKind, flag: str) -> Path:
    """``path`` when ``kind`` may be written there: nothing is there yet, or an earlier output of
    ``kind`` is; otherwise one line naming the file (``flag``: the option that gave the path) and
    nothing written. A folder where a file belongs is refused too."""
    path = Path(path)
    if path.is_dir():
        raise WmzooError(f"{flag} {path}: is a folder; give a file name (nothing was written)")
    if (path.exists() or path.is_symlink()) and not kind.recognise(path):
        raise WmzooError(
            f"{flag} {path}: the file exists and is {describe(path)}, not {kind.what}; refusing to "
            "overwrite it (nothing was written): choose another path, or move that file away yourself"
        )
    return path


FOLDERS = {
    "checkpoint.safetensors": "a run folder (wmzoo run)",
    "manifest.json": "a dataset folder (wmzoo data)",
    "study.yaml": "a study folder (wmzoo study run)",
}
"""The file that marks each kind of folder wmzoo writes, and what the folder is."""


def check_output_folder(path: str | Path, marker: str, flag: str, *, only_empty: bool = True) -> Path:
    """``path`` when a command whose folders hold ``marker`` (a key of :data:`FOLDERS`) may write
    there: nothing yet, an empty folder, or one of its own (holding ``marker``: resumed). A file,
    a folder of another kind, and (``only_empty``) a non-empty folder without ``marker`` are
    refused with one line, nothing written."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise WmzooError(f"{flag} {path}: is {describe(path)}, not a folder; choose a new or empty folder "
                         "(nothing was written)")
    if not path.is_dir() or (path / marker).exists():
        return path
    for other, what in FOLDERS.items():
        if other != marker and (path / other).exists():
            raise WmzooError(f"{flag} {path}: the folder is {what}, not {FOLDERS[marker]}; choose a new or "
                             "empty folder (nothing was written)")
    if only_empty and any(path.iterdir()):
        raise WmzooError(f"{flag} {path}: the folder is not empty and holds no {marker}, so it is not "
                         f"{FOLDERS[marker]}; choose a new or empty folder (nothing was written)")
    return path
