"""Chunk files: how a replay's rows are laid out on disk.

A chunk is a run of consecutive rows of one stream, saved with :func:`numpy.savez` under the keys
of :data:`FIELDS` (``obs`` uint8 ``[N, C, H, W]``, ``action`` int64 ``[N]`` or float32 ``[N, A]``,
``reward`` float32 ``[N]``, ``terminal`` and ``is_first`` bool ``[N]``). The observations of an env
whose spec is not the one ``image`` entry (:class:`wmzoo.interfaces.EnvInfo`) are one array per
entry instead of ``obs``, ``obs.<name>`` (images uint8 ``[N, C, H, W]``, vectors float32 ``[N, D]``):
a pixel env's chunks are exactly those written before the observation spec. A chunk may hold further
arrays (offline datasets add per-row ``phase``, ``teleport_to`` and ``probe_<name>`` targets and
deflate their members; see ``docs/datasets.md``); the replay reads only :data:`FIELDS`. Chunks are
named ``{order:09d}-{stream}-{index:06d}-{rows}.npz``:

- ``order``: the chunk's place in the global write order of the directory (its age),
- ``stream``: 32 hex digits (a uuid4) naming the stream the rows belong to,
- ``index``: the chunk's sequence number within its stream (consecutive chunks join on load),
- ``rows``: how many rows the chunk holds.

Files are written through :func:`wmzoo.atomic.atomic_path`: a temporary file next to the final
name, ending in :data:`wmzoo.atomic.TMP_SUFFIX`, moved into place once complete, so a reader only
ever sees complete files or leftover temporary files.
"""

from __future__ import annotations

import re
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wmzoo.atomic import atomic_path

FIELDS = ("obs", "action", "reward", "terminal", "is_first")
"""The arrays of a row, in the order of :class:`wmzoo.interfaces.Batch` (``obs``: a pixel env's;
see :func:`row_fields` for the others)."""

OBS_PREFIX = "obs."
"""Chunk arrays ``obs.<name>`` hold the entry ``<name>`` of a dict observation."""


def obs_fields(obs: Any) -> dict[str, Any]:
    """Observations as chunk arrays: ``{"obs": array}`` for a pixel env's, else ``obs.<name>``."""
    if isinstance(obs, dict):
        return {OBS_PREFIX + key: value for key, value in obs.items()}
    return {"obs": obs}


def fields_obs(data: dict[str, Any]) -> Any:
    """The inverse of :func:`obs_fields` over a chunk's arrays (other keys ignored)."""
    if "obs" in data:
        return data["obs"]
    return {key[len(OBS_PREFIX):]: value for key, value in data.items() if key.startswith(OBS_PREFIX)}


def row_fields(keys: Any) -> tuple[str, ...]:
    """The row arrays among a chunk's ``keys``: the observation arrays, then :data:`FIELDS`' others
    (``ValueError`` naming what is missing)."""
    keys = set(keys)
    obs = ("obs",) if "obs" in keys else tuple(sorted(k for k in keys if k.startswith(OBS_PREFIX)))
    missing = (["obs"] if not obs else []) + sorted(set(FIELDS[1:]) - keys)
    if missing:
        raise ValueError(f"keys {sorted(keys)} lack {missing}")
    return (*obs, *FIELDS[1:])


def split_row(data: dict[str, Any]) -> dict[str, Any]:
    """Chunk-array dict → :class:`wmzoo.interfaces.Batch` fields (``obs`` one array or a dict)."""
    return {"obs": fields_obs(data), **{key: data[key] for key in FIELDS[1:]}}

RowSpec = dict[str, tuple[tuple[int, ...], np.dtype]]
"""Per field: the shape of one row and the stored dtype."""

_NAME = re.compile(r"^(\d+)-([0-9a-f]{32})-(\d+)-(\d+)\.npz$")


def new_stream_id() -> str:
    """A stream id that no earlier or later run reuses."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class ChunkName:
    """The parsed name of a chunk file."""

    order: int
    stream: str
    index: int
    rows: int

    @property
    def filename(self) -> str:
        return f"{self.order:09d}-{self.stream}-{self.index:06d}-{self.rows}.npz"

    @staticmethod
    def parse(filename: str) -> ChunkName | None:
        """The name's parts, or ``None`` when ``filename`` is not a chunk file."""
        match = _NAME.match(filename)
        if match is None:
            return None
        order, stream, index, rows = match.groups()
        return ChunkName(int(order), stream, int(index), int(rows))


def write_chunk(path: Path, data: dict[str, np.ndarray]) -> None:
    """Save ``data`` to ``path`` atomically (:func:`wmzoo.atomic.atomic_path`)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **data)


def read_chunk(path: Path, rows: int) -> tuple[dict[str, np.ndarray], RowSpec]:
    """Load a chunk file fully into memory with its row spec; ``ValueError`` when it does not
    hold ``rows`` valid rows.

    Other errors (a truncated or foreign file) propagate as whatever numpy or zipfile raise.
    """
    with np.load(path, allow_pickle=False) as f:
        # extra arrays (a dataset's phase or probe targets) are left unread
        data = {key: f[key] for key in row_fields(f.files)}
    for key, value in data.items():
        if len(value) != rows:
            raise ValueError(f"{key} has {len(value)} rows, the file name says {rows}")
    return data, row_spec(data)


def peek_chunk(path: Path, rows: int) -> RowSpec:
    """A chunk file's row spec read from the array headers alone (no data loaded, nothing
    unpickled); ``ValueError`` when it lacks a field, holds object arrays or not ``rows`` rows.
    Other errors (not a zip file, a truncated one) propagate as zipfile or numpy raise them."""
    shapes: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    with zipfile.ZipFile(path) as archive:
        members = {name[:-4] for name in archive.namelist() if name.endswith(".npy")}
        try:
            keys = row_fields(members)
        except ValueError:
            raise ValueError(f"it lacks the arrays {sorted(set(FIELDS) - members)}") from None
        for key in keys:
            with archive.open(f"{key}.npy") as f:
                version = np.lib.format.read_magic(f)
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                shape, _, dtype = read(f)
            if dtype.hasobject:
                raise ValueError(f"{key} holds Python objects (a pickle), which wmzoo never loads")
            if not shape or shape[0] != rows:
                raise ValueError(f"{key} has {shape[0] if shape else 0} rows, the file name says {rows}")
            shapes[key] = (tuple(shape), dtype)
    empty = {key: np.empty((0, *shape[1:]), dtype) for key, (shape, dtype) in shapes.items()}
    return row_spec(empty)


def row_spec(data: dict[str, np.ndarray]) -> RowSpec:
    """The row spec of chunk arrays; ``ValueError`` naming the first field breaking the format."""
    action = data["action"]
    action_ok = (action.dtype == np.int64 and action.ndim == 1) or (
        action.dtype == np.float32 and action.ndim == 2
    )
    obs = {key: value for key, value in data.items() if key == "obs" or key.startswith(OBS_PREFIX)}
    expected = {
        **{key: (value.dtype == np.uint8 and value.ndim == 4) or (key != "obs" and value.dtype == np.float32
                                                                   and value.ndim == 2) for key, value in obs.items()},
        "action": action_ok,
        "reward": data["reward"].dtype == np.float32 and data["reward"].ndim == 1,
        "terminal": data["terminal"].dtype == np.bool_ and data["terminal"].ndim == 1,
        "is_first": data["is_first"].dtype == np.bool_ and data["is_first"].ndim == 1,
    }
    for key, ok in expected.items():
        if not ok:
            value = data[key]
            raise ValueError(f"{key} is {value.dtype} {list(value.shape)}, not a valid chunk array")
    return {key: (tuple(data[key].shape[1:]), data[key].dtype) for key in (*obs, *FIELDS[1:])}
