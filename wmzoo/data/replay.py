"""The replay buffer: one continuous stream of rows per environment worker, in memory and on disk.

Rows follow :mod:`wmzoo.interfaces`: an episode of ``n`` steps is ``n + 1`` rows, and each
worker's rows form one *stream* across episodes (DreamerV3 style) in which ``is_first`` marks
where an episode starts. Sampled windows may cross episode boundaries; ``is_first`` tells the
model where to reset.

A stream is cut into chunks of ``chunk_size`` rows. A worker's newest rows wait in a *pending*
chunk (already sampleable); once it is full, or on :meth:`Replay.flush`, it becomes a finished
chunk and, when the replay has a directory, a file in the format of :mod:`wmzoo.data.store`.
Opening a directory loads the newest valid chunk files that fit the capacity (a writable
replay deletes the older valid ones and leftover temporary files); a file that is not a valid
chunk, or holds rows of another shape than most rows, is skipped with a warning and never
deleted. A new process always starts new streams, so old streams stay sampleable but are never
appended to, and no window joins two streams (nor two pieces of a stream that a missing or
corrupt file separates).

The buffer is not thread-safe: one thread adds and samples.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from numpy.typing import ArrayLike

from wmzoo.atomic import is_temporary
from wmzoo.data.store import (
    FIELDS,
    OBS_PREFIX,
    ChunkName,
    RowSpec,
    new_stream_id,
    obs_fields,
    split_row,
    peek_chunk,
    read_chunk,
    write_chunk,
)
from wmzoo.errors import WmzooError
from wmzoo.interfaces import Batch

Sampling = Literal["uniform", "recency"]


class _Stream:
    """One worker's rows across episodes: a linked list of chunks, appended at ``last``."""

    __slots__ = ("id", "next_index", "last")

    def __init__(self, stream_id: str) -> None:
        self.id = stream_id
        self.next_index = 0  # sequence number of the stream's next chunk file
        self.last: _Chunk | None = None

    @property
    def end(self) -> int:
        """Position just past the stream's newest row (positions count from its first row ever)."""
        return 0 if self.last is None else self.last.start + self.last.rows


class _Chunk:
    """Consecutive rows ``[start, start + rows)`` of a stream.

    A pending chunk's arrays are preallocated buffers longer than ``rows``; ``order`` is ``None``
    until the chunk is finished. Evicted chunks drop their arrays (``data`` is ``None``).
    """

    __slots__ = ("stream", "index", "start", "rows", "data", "next", "order", "path", "firsts")

    def __init__(
        self, stream: _Stream, index: int, start: int, data: dict[str, np.ndarray]
    ) -> None:
        self.stream = stream
        self.index = index
        self.start = start
        self.rows = 0
        self.data: dict[str, np.ndarray] | None = data
        self.next: _Chunk | None = None
        self.order: int | None = None
        self.path: Path | None = None
        self.firsts: np.ndarray | None = None  # offsets of is_first rows, cached once finished

    def episode_starts(self) -> np.ndarray:
        if self.firsts is not None:
            return self.firsts
        return np.flatnonzero(self.data["is_first"][: self.rows])

    def finish(self, order: int) -> None:
        """Freeze the chunk: trim a partly filled buffer and cache its episode starts."""
        if len(self.data["reward"]) != self.rows:
            self.data = {key: value[: self.rows].copy() for key, value in self.data.items()}
        self.order = order
        self.firsts = np.flatnonzero(self.data["is_first"])


class Replay:
    """Per-worker streams of rows with uniform or recency-biased window sampling.

    Args:
        directory: where chunk files live; ``None`` keeps everything in memory. An existing
            directory is loaded (resume); new rows go to new streams in it.
        capacity: rows kept. Past it the oldest finished chunks are evicted and their files
            deleted, so after each :meth:`add` the buffer holds at most ``capacity`` rows unless
            the pending rows alone exceed it (pending rows are never evicted).
        chunk_size: rows per chunk file.
        seed: seeds the numpy generator behind every random choice, so the same seed and the
            same data give the same batches.
        sampling: how :meth:`sample` picks window starts. ``"uniform"``: every valid window is
            equally likely. ``"recency"``: a valid window starting at a row of age ``a`` has
            probability proportional to ``0.5 ** (a / halflife)``. The age of a row counts the
            rows stored after it in storage order: finished chunks in the order they were
            finished, then the pending rows of each worker (by worker id). With one worker this
            is exactly the number of rows added since; with several it is exact up to a chunk.
        halflife: rows over which the recency weight halves; ``None`` uses a quarter of the rows
            currently stored, so the newest quarter is sampled about twice as often as the next.
        readonly: load ``directory`` without ever writing, deleting or appending to it (offline
            datasets; see :meth:`load`).
    """

    def __init__(
        self,
        directory: str | Path | None,
        capacity: int,
        chunk_size: int = 1024,
        seed: int = 0,
        sampling: Sampling = "uniform",
        halflife: float | None = None,
        *,
        readonly: bool = False,
    ) -> None:
        if capacity < 1 or chunk_size < 1:
            raise WmzooError(
                f"replay capacity ({capacity}) and chunk_size ({chunk_size}) must be at least 1"
            )
        if sampling not in ("uniform", "recency"):
            raise WmzooError(f"replay sampling must be 'uniform' or 'recency', got {sampling!r}")
        if halflife is not None and not halflife > 0:
            raise WmzooError(f"replay halflife must be a positive number of rows, got {halflife}")
        self.directory = None if directory is None else Path(directory)
        self.capacity = capacity
        self.chunk_size = chunk_size
        self.sampling = sampling
        self.halflife = halflife
        self.readonly = readonly
        self._rng = np.random.default_rng(seed)
        self._spec: RowSpec | None = None
        self._finished: deque[_Chunk] = deque()  # oldest first
        self._pending: dict[int, _Chunk] = {}  # worker -> its unfinished chunk
        self._live: dict[int, _Stream] = {}  # worker -> the stream it appends to
        self._size = 0
        self._episodes = 0
        self._next_order = 0
        if self.directory is None:
            if readonly:
                raise WmzooError("a read-only replay needs a directory to load")
            return
        if readonly and not self.directory.is_dir():
            raise WmzooError(f"replay directory {self.directory} does not exist; check the path")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._load()

    @classmethod
    def load(
        cls,
        directory: str | Path,
        capacity: int | None = None,
        seed: int = 0,
        sampling: Sampling = "uniform",
        halflife: float | None = None,
    ) -> Replay:
        """A read-only replay of a directory of chunk files, e.g. recorded episodes for offline
        training; ``capacity=None`` keeps every file (otherwise the newest ``capacity`` rows)."""
        return cls(
            directory,
            sys.maxsize if capacity is None else capacity,
            seed=seed,
            sampling=sampling,
            halflife=halflife,
            readonly=True,
        )

    # ------------------------------------------------------------------------------ size

    def __len__(self) -> int:
        """Rows stored, pending ones included."""
        return self._size

    @property
    def episodes(self) -> int:
        """Episode starts (``is_first`` rows) stored."""
        return self._episodes

    # ------------------------------------------------------------------------------ writing

    def add(
        self,
        worker: int,
        obs: ArrayLike,
        action: ArrayLike,
        reward: ArrayLike,
        terminal: ArrayLike,
        is_first: ArrayLike,
    ) -> None:
        """Append one row to ``worker``'s stream.

        ``obs`` uint8 ``[C, H, W]`` (a pixel env) or a dict of entries (images uint8 ``[C, H, W]``,
        vectors float32 ``[D]``); ``action`` an integer (discrete) or a float vector ``[A]``;
        ``reward`` a number; ``terminal`` and ``is_first`` bools. Every row must have the shapes
        and kinds of the first one (``ValueError`` naming the field otherwise).
        """
        if self.readonly:
            raise WmzooError(
                f"replay of {self.directory} is read-only; open it with Replay(...) to add"
            )
        row = self._check_row(obs, action, reward, terminal, is_first)
        chunk = self._pending.get(worker)
        if chunk is not None and chunk.order is not None:  # frozen, its write was cut short
            self._finish(worker)
            chunk = None
        if chunk is None:
            chunk = self._pending[worker] = self._open_chunk(worker)
        for key in self._spec:
            chunk.data[key][chunk.rows] = row[key]
        chunk.rows += 1
        self._size += 1
        self._episodes += int(row["is_first"])
        if chunk.rows == self.chunk_size:
            self._finish(worker)
        self._evict()

    def flush(self) -> None:
        """Finish (and write) every worker's pending rows, e.g. before a checkpoint.

        A worker's next rows start a new chunk of the same stream.
        """
        for worker in sorted(self._pending):
            self._finish(worker)

    def _check_row(self, obs: ArrayLike, *values: ArrayLike) -> dict[str, np.ndarray]:
        row = {key: np.asarray(value) for key, value in obs_fields(obs).items()}
        row.update({key: np.asarray(value) for key, value in zip(FIELDS[1:], values)})
        if self._spec is None:
            self._spec = _infer_spec(row)
        if set(row) != set(self._spec):
            raise ValueError(f"replay row obs: entries {_names(row)} differ from the stored rows' {_names(self._spec)}")
        for key, (shape, dtype) in self._spec.items():
            value = row[key]
            if key == "obs" or key.startswith(OBS_PREFIX):  # observations are stored as given: no silent casts
                castable = value.dtype == dtype
            else:
                castable = np.can_cast(value.dtype, dtype, "same_kind")
            if value.shape != shape or not castable:
                raise ValueError(
                    f"replay row {key}: expected {dtype} {list(shape)} like the stored rows, "
                    f"got {value.dtype} {list(value.shape)}"
                )
        return row

    def _open_chunk(self, worker: int) -> _Chunk:
        stream = self._live.get(worker)
        if stream is None:
            stream = self._live[worker] = _Stream(new_stream_id())
        data = {
            key: np.empty((self.chunk_size, *shape), dtype)
            for key, (shape, dtype) in self._spec.items()
        }
        chunk = _Chunk(stream, stream.next_index, stream.end, data)
        stream.next_index += 1
        if stream.last is not None:
            stream.last.next = chunk
        stream.last = chunk
        return chunk

    def _finish(self, worker: int) -> None:
        """Freeze ``worker``'s pending chunk and write its file. The chunk stops being pending
        only once the file is written, so a write cut short (SIGTERM or Ctrl-C in the middle, a
        full disk) leaves it pending and the next :meth:`flush` writes it again."""
        chunk = self._pending[worker]
        if chunk.order is None:
            chunk.finish(self._next_order)
            self._next_order += 1
        if self.directory is not None:
            assert chunk.order is not None
            path = self.directory / ChunkName(chunk.order, chunk.stream.id, chunk.index, chunk.rows).filename
            write_chunk(path, chunk.data)
            chunk.path = path
        del self._pending[worker]
        self._finished.append(chunk)

    def _evict(self) -> None:
        while self._size > self.capacity and self._finished:
            chunk = self._finished.popleft()
            self._size -= chunk.rows
            self._episodes -= len(chunk.firsts)
            if chunk.path is not None:
                chunk.path.unlink(missing_ok=True)
            chunk.data = None

    # ------------------------------------------------------------------------------ loading

    def _load(self) -> None:
        """Load the newest valid chunk files that fit ``capacity``; delete (writable replays
        only) valid ones older than those.

        Every chunk-named file is first checked by content (its array headers: the fields, no
        object arrays, the row count its name gives); the row spec that most rows share is the
        replay's. A file that fails, or holds rows of another spec, is skipped with a warning
        naming it and is never deleted, and it never counts against the capacity: nothing is
        deleted that was not read and validated first.
        """
        names: list[tuple[ChunkName, Path]] = []
        for path in sorted(self.directory.iterdir()):
            if is_temporary(path):  # an interrupted write of ours
                if not self.readonly:
                    path.unlink(missing_ok=True)
                continue
            name = ChunkName.parse(path.name)
            if name is not None:
                names.append((name, path))
        if not names:
            return
        self._next_order = max(name.order for name, _ in names) + 1
        names.sort(key=lambda item: item[0].order, reverse=True)
        specs: list[tuple[ChunkName, Path, RowSpec]] = []
        for name, path in names:
            try:
                specs.append((name, path, peek_chunk(path, name.rows)))
            except Exception as error:  # any unreadable file is skipped, never fatal, never deleted
                warnings.warn(f"replay: skipping {path}: {error}", stacklevel=3)
        if not specs:
            return
        votes: dict[str, int] = {}
        for name, _, spec in specs:
            votes[repr(spec)] = votes.get(repr(spec), 0) + name.rows
        self._spec = next(spec for _, _, spec in specs if votes[repr(spec)] == max(votes.values()))
        loaded: list[_Chunk] = []
        full = False
        for name, path, spec in specs:
            if spec != self._spec:
                warnings.warn(f"replay: skipping {path}: its rows {spec} differ from the other chunks' {self._spec}", stacklevel=3)
                continue
            full = full or self._size + name.rows > self.capacity
            if full:  # read and validated, older than what fits: evicted
                if not self.readonly:
                    path.unlink(missing_ok=True)
                continue
            data = self._read(path, name.rows)
            if data is None:
                continue
            chunk = _Chunk(_Stream(name.stream), name.index, 0, data)
            chunk.rows = name.rows
            chunk.finish(name.order)
            chunk.path = path
            loaded.append(chunk)
            self._size += chunk.rows
            self._episodes += len(chunk.firsts)
        self._link(loaded)
        self._finished = deque(sorted(loaded, key=lambda c: c.order))

    def _read(self, path: Path, rows: int) -> dict[str, np.ndarray] | None:
        """A chunk file's arrays, or ``None`` with a warning when they cannot be used (a file
        whose headers were fine but whose data is truncated)."""
        try:
            data, spec = read_chunk(path, rows)
            if spec != self._spec:
                raise ValueError(f"its rows {spec} differ from the other chunks' {self._spec}")
        except Exception as error:  # any unreadable file is skipped, never fatal
            warnings.warn(f"replay: skipping {path}: {error}", stacklevel=4)
            return None
        return data

    @staticmethod
    def _link(chunks: list[_Chunk]) -> None:
        """Join loaded chunks into streams: consecutive indices of one stream id, in order.

        A missing index (a corrupt, deleted or evicted file) starts a new stream, so no window
        ever joins rows that were not consecutive.
        """
        by_id: dict[str, list[_Chunk]] = {}
        for chunk in chunks:
            by_id.setdefault(chunk.stream.id, []).append(chunk)
        for group in by_id.values():
            group.sort(key=lambda c: c.index)
            prev: _Chunk | None = None
            for chunk in group:
                if prev is not None and chunk.index == prev.index + 1:
                    chunk.stream = prev.stream
                    chunk.start = prev.start + prev.rows
                    prev.next = chunk
                chunk.stream.last = chunk
                prev = chunk

    # ------------------------------------------------------------------------------ sampling

    def sample(self, batch_size: int, seq_len: int) -> Batch:
        """``batch_size`` windows of ``seq_len`` consecutive rows of one stream each.

        Windows may span chunks and episode boundaries; starts follow ``sampling`` (see the
        class docstring), pending rows included. ``is_first`` is returned as stored, so
        ``is_first[:, 0]`` is usually false: the model starts every window from its initial
        state anyway and only needs the flags to reset inside the window.
        """
        _check_sizes(batch_size, seq_len)
        chunks, start, rows, end = self._table()
        valid = np.clip(end - seq_len + 1 - start, 0, rows)  # window starts per chunk (a prefix)
        if valid.sum() == 0:
            raise WmzooError(
                f"replay has no stream with {seq_len} consecutive rows yet ({len(self)} rows "
                "stored); collect more steps before training or sample shorter sequences"
            )
        if self.sampling == "uniform":
            which, offset = self._pick_uniform(valid, batch_size)
        else:
            which, offset = self._pick_recent(rows, valid, batch_size)
        out = self._empty(batch_size, seq_len)
        for b, (c, o) in enumerate(zip(which.tolist(), offset.tolist())):
            self._copy(chunks[c], o, seq_len, out, b)
        return _to_batch(out)

    def stream(self, batch_size: int, seq_len: int, episode_rows: int | None = None) -> ReplayStream:
        """Consecutive windows per batch slot for truncated BPTT, or aligned to episodes of
        ``episode_rows`` rows; see :class:`ReplayStream`."""
        return ReplayStream(self, batch_size, seq_len, episode_rows)

    def episode_lengths(self) -> np.ndarray:
        """The rows of every stored episode: from its ``is_first`` row to the next one of its
        stream, or to the stream's end (the last episode of a live stream may still grow). Rows
        before a stream's first stored ``is_first`` belong to no episode."""
        chunks, start, _, end = self._table()
        streams: dict[int, tuple[list[np.ndarray], int]] = {}
        for chunk, s, e in zip(chunks, start.tolist(), end.tolist()):
            streams.setdefault(id(chunk.stream), ([], e))[0].append(chunk.episode_starts() + s)
        lengths = [np.diff(np.append(np.sort(np.concatenate(firsts)), stream_end))
                   for firsts, stream_end in streams.values()]
        return np.concatenate(lengths) if lengths else np.zeros(0, np.int64)

    def _table(self) -> tuple[list[_Chunk], np.ndarray, np.ndarray, np.ndarray]:
        """Every chunk in storage order with its start, rows and its stream's end."""
        chunks = [*self._finished, *(self._pending[w] for w in sorted(self._pending))]
        n = len(chunks)
        start = np.fromiter((c.start for c in chunks), np.int64, n)
        rows = np.fromiter((c.rows for c in chunks), np.int64, n)
        end = np.fromiter((c.stream.end for c in chunks), np.int64, n)
        return chunks, start, rows, end

    def _pick_uniform(self, valid: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        cum = np.cumsum(valid)
        flat = self._rng.integers(cum[-1], size=size)
        which = np.searchsorted(cum, flat, side="right")
        return which, flat - (cum[which] - valid[which])

    def _pick_recent(
        self, rows: np.ndarray, valid: np.ndarray, size: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Draw starts with weight ``r ** age``, ``r = 0.5 ** (1 / halflife)``, exactly: first a
        chunk by its total weight, then an offset by inverting the truncated geometric CDF."""
        total = int(rows.sum())
        halflife = self.halflife if self.halflife is not None else total / 4
        log_r = -math.log(2.0) / halflife
        n = valid.astype(np.float64)
        first = np.cumsum(rows) - rows  # storage position of each chunk's first row
        youngest = total - first - n  # age of each chunk's last valid start
        with np.errstate(divide="ignore"):  # chunks without valid starts get weight 0
            log_mass = log_r * youngest + np.log(-np.expm1(log_r * n)) - np.log(-np.expm1(log_r))
        p = np.exp(log_mass - log_mass.max())
        which = self._rng.choice(len(n), size=size, p=p / p.sum())
        m = n[which]
        k = np.floor(np.log1p(self._rng.random(size) * np.expm1(log_r * m)) / log_r)
        k = np.clip(k, 0, m - 1)  # rows younger than the youngest valid start, P ~ r ** k
        return which, (m - 1 - k).astype(np.int64)

    def _episode_starts(self, size: int, seq_len: int) -> list[tuple[_Chunk, int]]:
        """Uniformly drawn ``is_first`` rows with ``seq_len`` rows of their stream from them on."""
        chunks, start, _, end = self._table()
        firsts = [c.episode_starts() for c in chunks]
        counts = np.array(
            [
                np.searchsorted(f, e - seq_len - s, side="right")
                for f, s, e in zip(firsts, start, end)
            ],
            dtype=np.int64,
        )
        if counts.sum() == 0:
            raise WmzooError(
                f"replay has no episode start followed by {seq_len} rows yet ({len(self)} rows "
                "stored); collect more steps before training or use shorter segments"
            )
        which, offset = self._pick_uniform(counts, size)
        return [(chunks[c], int(firsts[c][o])) for c, o in zip(which, offset)]

    def _empty(self, batch_size: int, seq_len: int) -> dict[str, np.ndarray]:
        return {
            key: np.empty((batch_size, seq_len, *shape), dtype)
            for key, (shape, dtype) in self._spec.items()
        }

    @staticmethod
    def _copy(
        chunk: _Chunk, offset: int, seq_len: int, out: dict[str, np.ndarray], b: int
    ) -> tuple[_Chunk, int]:
        """Copy ``seq_len`` rows from ``offset`` in ``chunk`` on into ``out[:, b]``; return the
        position just after them."""
        t = 0
        while True:
            take = min(chunk.rows - offset, seq_len - t)
            for key, value in chunk.data.items():
                out[key][b, t : t + take] = value[offset : offset + take]
            t += take
            offset += take
            if t == seq_len:
                return chunk, offset
            chunk, offset = chunk.next, 0


class ReplayStream(Iterator[Batch]):
    """Batches of consecutive segments per slot, for truncated backpropagation through time.

    Each of the ``batch_size`` slots reads one stream: every ``next()`` returns the next
    ``seq_len`` rows of every slot. A slot starts at a uniformly drawn episode start (an
    ``is_first`` row with ``seq_len`` rows after it) and is re-assigned to a new one when its
    stream has fewer than ``seq_len`` rows left (or its rows were evicted). A re-assigned slot's
    window therefore has ``is_first[b, 0] = True``, which tells the model to drop the state it
    carried for that slot; so does a slot that simply reached the next episode.

    ``episode_rows = E`` aligns the windows to episodes of ``E`` rows each (offline datasets of
    fixed-length episodes): a slot is re-assigned to a new episode start as soon as it has read
    its episode, so every window starts at an episode's first row or ``seq_len`` rows after the
    previous window of the same episode. With ``E ≤ seq_len`` every window is one whole episode
    (``E`` rows, not ``seq_len``); with a longer episode ``E`` must be a multiple of ``seq_len``
    (the episode in ``E / seq_len`` consecutive windows).
    """

    def __init__(self, replay: Replay, batch_size: int, seq_len: int, episode_rows: int | None = None) -> None:
        _check_sizes(batch_size, seq_len)
        if episode_rows is not None and (episode_rows < 1 or (episode_rows > seq_len and episode_rows % seq_len)):
            raise WmzooError(
                f"episodes of {episode_rows} rows do not split into windows of {seq_len}: windows aligned "
                "to episodes need seq_len at least the episode's rows, or a divisor of them"
            )
        self.replay = replay
        self.batch_size = batch_size
        self.seq_len = seq_len if episode_rows is None else min(seq_len, episode_rows)
        self.episode_rows = episode_rows
        self._slots: list[tuple[_Chunk, int] | None] = [None] * batch_size
        self._left = [0] * batch_size  # rows of its episode a slot has yet to read (aligned only)

    def __next__(self) -> Batch:
        stale = [b for b, slot in enumerate(self._slots) if not self._has_window(b, slot)]
        if stale:
            rows = self.seq_len if self.episode_rows is None else self.episode_rows
            for b, slot in zip(stale, self.replay._episode_starts(len(stale), rows)):
                self._slots[b], self._left[b] = slot, rows
        out = self.replay._empty(self.batch_size, self.seq_len)
        for b, (chunk, offset) in enumerate(self._slots):
            self._slots[b] = Replay._copy(chunk, offset, self.seq_len, out, b)
            self._left[b] -= self.seq_len
        return _to_batch(out)

    def _has_window(self, b: int, slot: tuple[_Chunk, int] | None) -> bool:
        if slot is None or (self.episode_rows is not None and self._left[b] <= 0):
            return False
        chunk, offset = slot
        return chunk.data is not None and chunk.stream.end - chunk.start - offset >= self.seq_len


def _names(row: dict) -> list[str]:
    return sorted(k[len(OBS_PREFIX):] for k in row if k.startswith(OBS_PREFIX)) or ["image"]


def _infer_spec(row: dict[str, np.ndarray]) -> RowSpec:
    """The row spec the first row sets: obs uint8 ``[C, H, W]`` (or a dict's entries: images uint8
    ``[C, H, W]``, vectors float32 ``[D]``), a discrete or continuous action."""
    obs = {key: value for key, value in row.items() if key == "obs" or key.startswith(OBS_PREFIX)}
    for key, value in obs.items():
        if not ((value.dtype == np.uint8 and value.ndim == 3) or (
                key != "obs" and value.dtype == np.float32 and value.ndim == 1)):
            what = "uint8 [C, H, W]" if key == "obs" else "uint8 [C, H, W] or float32 [D]"
            raise ValueError(
                f"replay row {key}: expected {what}, got {value.dtype} {list(value.shape)}"
            )
    action = row["action"]
    if action.ndim == 0 and action.dtype.kind in "iu":
        action_spec = ((), np.dtype(np.int64))
    elif action.ndim == 1 and action.dtype.kind == "f":
        action_spec = (action.shape, np.dtype(np.float32))
    else:
        raise ValueError(
            "replay row action: expected an integer (discrete) or a float vector [A] "
            f"(continuous), got {action.dtype} {list(action.shape)}"
        )
    return {
        **{key: (value.shape, value.dtype) for key, value in sorted(obs.items())},
        "action": action_spec,
        "reward": ((), np.dtype(np.float32)),
        "terminal": ((), np.dtype(np.bool_)),
        "is_first": ((), np.dtype(np.bool_)),
    }


def _check_sizes(batch_size: int, seq_len: int) -> None:
    if batch_size < 1 or seq_len < 1:
        raise WmzooError(
            f"replay batch_size and seq_len must be at least 1, got {batch_size} and {seq_len}"
        )


def _to_batch(out: dict[str, np.ndarray]) -> Batch:
    return Batch(**split_row({key: torch.from_numpy(value) for key, value in out.items()}))
