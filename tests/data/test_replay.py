"""Replay: windows are consecutive rows of one stream, sampling is uniform / recency-biased as
documented, the stream iterator carries slots across calls, rows are validated; on disk: chunk
files, reload, resume, eviction, corrupt and temporary files.

Every row's obs encodes its stream tag and its index in that stream (channel 0: index % 256,
channel 1: index // 256, channel 2: tag), reward is the index and action the index % 5, so every
sampled row can be identified and checked against what was added.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from wmzoo.atomic import temporary_path
from wmzoo.data import Replay
from wmzoo.data.store import ChunkName
from wmzoo.errors import WmzooError
from wmzoo.interfaces import Batch, EnvInfo

ENV = EnvInfo("test", (3, 2, 2), 5)


class Feed:
    """Adds identifiable rows; each tag is one stream whose episodes have the given lengths."""

    def __init__(self, episode_lengths: Sequence[int] = (3, 5, 2), rows: int = 5000) -> None:
        is_first, terminal = [], []
        while len(is_first) < rows:
            for n in episode_lengths:  # n steps -> n + 1 rows
                is_first += [True] + [False] * n
                terminal += [False] * (n - 1) + [n % 2 == 1, False]  # odd lengths terminate
        self.is_first = np.array(is_first[:rows])
        self.terminal = np.array(terminal[:rows])
        self.count: dict[int, int] = {}

    def add(self, replay: Replay, worker: int, tag: int, n: int = 1) -> None:
        for _ in range(n):
            i = self.count.get(tag, 0)
            self.count[tag] = i + 1
            obs = np.empty((3, 2, 2), np.uint8)
            obs[0], obs[1], obs[2] = i % 256, i // 256, tag
            replay.add(worker, obs, i % 5, float(i), self.terminal[i], self.is_first[i])

    def check(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """Assert every window is consecutive stored rows of one stream; return tags, first rows."""
        batch.validate(ENV)
        tags, idx = decode(batch)
        assert (tags == tags[:, :1]).all(), "a window joins two streams"
        assert (np.diff(idx, axis=1) == 1).all(), "a window skips or repeats rows"
        for tag in np.unique(tags):
            assert idx[tags[:, 0] == tag].max() < self.count[tag]
        np.testing.assert_array_equal(batch.reward.numpy(), idx.astype(np.float32))
        np.testing.assert_array_equal(batch.action.numpy(), idx % 5)
        np.testing.assert_array_equal(batch.is_first.numpy(), self.is_first[idx])
        np.testing.assert_array_equal(batch.terminal.numpy(), self.terminal[idx])
        return tags[:, 0], idx[:, 0]


def decode(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    obs = batch.obs.numpy().astype(np.int64)
    return obs[:, :, 2, 0, 0], obs[:, :, 0, 0, 0] + 256 * obs[:, :, 1, 0, 0]


@settings(max_examples=50, deadline=None)
@given(
    chunk_size=st.integers(1, 6),
    seq_len=st.integers(1, 8),
    workers=st.integers(1, 3),
    schedule=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 9)), min_size=1, max_size=60),
    lengths=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    sampling=st.sampled_from(["uniform", "recency"]),
)
def test_windows_are_consecutive_rows_of_one_stream_and_every_start_is_drawn(
    chunk_size, seq_len, workers, schedule, lengths, sampling
):
    replay = Replay(None, 10_000, chunk_size, sampling=sampling, halflife=1000.0)
    feed = Feed(lengths)
    for worker, roll in schedule:
        feed.add(replay, worker % workers, tag=worker % workers)
        if roll == 0:
            replay.flush()
    assert len(replay) == len(schedule)
    assert replay.episodes == sum(feed.is_first[:n].sum() for n in feed.count.values())
    starts = {(tag, s) for tag, n in feed.count.items() for s in range(n - seq_len + 1)}
    if not starts:
        with pytest.raises(WmzooError, match="no stream with"):
            replay.sample(4, seq_len)
        return
    tags, first = feed.check(replay.sample(1500, seq_len))
    assert set(zip(tags.tolist(), first.tolist())) == starts


def test_each_valid_window_is_equally_likely():
    replay = Replay(None, 1000, chunk_size=4)
    feed = Feed()
    feed.add(replay, 0, tag=0, n=10)  # 6 windows of 5 rows
    feed.add(replay, 1, tag=1, n=30)  # 26 windows
    tags, first = feed.check(replay.sample(32_000, 5))
    assert abs((tags == 0).mean() - 6 / 32) < 0.01
    counts = np.bincount(first[tags == 1], minlength=26)
    assert counts.min() > 0.85 * 1000 and counts.max() < 1.15 * 1000


def test_same_seed_same_batches_and_different_seed_differs():
    def sample(seed: int) -> Batch:
        replay = Replay(None, 1000, chunk_size=4, seed=seed)
        feed = Feed()
        for i in range(60):
            feed.add(replay, i % 3, tag=i % 3)
        return replay.sample(8, 6)

    a, b, c = sample(1), sample(1), sample(2)
    for key in ("obs", "action", "reward", "terminal", "is_first"):
        assert torch.equal(getattr(a, key), getattr(b, key))
    assert not torch.equal(a.obs, c.obs)


def test_windows_keep_the_stored_is_first_flags():
    replay = Replay(None, 1000, chunk_size=8)
    feed = Feed([3])  # episode starts every 4 rows
    feed.add(replay, 0, tag=0, n=40)
    batch = replay.sample(500, 6)
    feed.check(batch)
    assert not batch.is_first[:, 0].all()  # not forced on the first row
    assert batch.is_first.any(dim=1).all()  # every 6-row window crosses an episode start


@pytest.mark.parametrize("seq_len", [1, 10])
def test_recency_weights_rows_by_age_with_the_halflife(seq_len):
    replay = Replay(None, 10_000, chunk_size=64, sampling="recency", halflife=100.0)
    feed = Feed()
    feed.add(replay, 0, tag=0, n=1000)  # the last 40 rows stay pending
    _, first = feed.check(replay.sample(40_000, seq_len))
    starts = np.arange(1000 - seq_len + 1)
    expected = 0.5 ** ((999 - starts) / 100.0)
    expected /= expected.sum()
    observed = np.bincount(first, minlength=len(starts)) / len(first)
    bins = np.linspace(0, len(starts), 21).astype(int)  # compare in 20 bins of start positions
    for lo, hi in zip(bins[:-1], bins[1:]):
        assert abs(observed[lo:hi].sum() - expected[lo:hi].sum()) < 0.01
    assert (first >= len(starts) - 100).mean() > 0.45  # uniform would give 0.1


def test_recency_default_halflife_is_a_quarter_of_the_rows():
    uniform = Replay(None, 10_000, chunk_size=50, seed=3)
    recent = Replay(None, 10_000, chunk_size=50, seed=3, sampling="recency")
    for replay in (uniform, recent):
        feed = Feed()
        for i in range(800):
            feed.add(replay, i % 2, tag=i % 2)
    newest = lambda replay: (decode(replay.sample(20_000, 1))[1] >= 300).mean()  # noqa: E731
    assert abs(newest(uniform) - 0.25) < 0.02
    assert abs(newest(recent) - 0.5 / (1 - 0.5**4)) < 0.03  # weights 0.5 ** (age / 200)


def test_stream_slots_read_consecutive_windows_and_restart_at_episode_starts():
    replay = Replay(None, 10_000, chunk_size=3, seed=5)
    feed = Feed([2, 6, 4, 9])
    feed.add(replay, 0, tag=0, n=50)
    feed.add(replay, 1, tag=1, n=23)
    seq_len, it = 4, replay.stream(6, 4)
    prev = None
    continued = restarted = 0
    for step in range(40):
        if step == 20:  # rows added while streaming extend the live streams
            feed.add(replay, 0, tag=0, n=12)
        batch = next(it)
        tags, first = feed.check(batch)
        for b in range(6):
            if prev is not None:
                ptag, pfirst = prev[0][b], prev[1][b]
                fits = pfirst + 2 * seq_len <= feed.count[ptag]
                if fits:
                    assert (tags[b], first[b]) == (ptag, pfirst + seq_len)
                    continued += 1
                    continue
            assert batch.is_first[b, 0], "a re-assigned slot must start an episode"
            restarted += 1
        prev = tags, first
    assert continued > 100 and restarted > 20


def test_stream_raises_without_a_long_enough_episode():
    replay = Replay(None, 100, chunk_size=4)
    Feed([9]).add(replay, 0, tag=0, n=8)
    with pytest.raises(WmzooError, match="no episode start"):
        next(replay.stream(2, 9))


def test_stream_starts_at_an_episode_with_exactly_seq_len_rows_left():
    """Its last 9 rows are one episode: a stream of 9-row windows reads it. Catches: an episode
    start exactly ``seq_len`` rows before the stream's end not counted (searchsorted side "left"),
    so the last episode of every stream, and a stream of one episode, is never read."""
    replay = Replay(None, 100, chunk_size=4)
    feed = Feed([8])
    feed.add(replay, 0, tag=0, n=9)
    tags, first = feed.check(next(replay.stream(2, 9)))
    assert tags.tolist() == [0, 0] and first.tolist() == [0, 0]


def test_stream_aligned_to_episodes_reads_each_episode_whole():
    """``episode_rows = E``: with E <= seq_len every window is one whole episode of E rows; with
    E = 2 seq_len an episode is two consecutive windows, then the slot moves to another episode.
    Catches: windows of seq_len rows (not E) running into the next episode, a slot reading on past its
    episode instead of moving to a drawn one."""
    replay = Replay(None, 10_000, chunk_size=5, seed=1)
    feed = Feed([3])  # 3 steps: episodes of 4 rows
    feed.add(replay, 0, tag=0, n=60)
    batch = next(replay.stream(3, 8, episode_rows=4))
    _, first = feed.check(batch)
    assert batch.shape == (3, 4) and (first % 4 == 0).all()
    assert batch.is_first[:, 0].all() and not batch.is_first[:, 1:].any()
    replay = Replay(None, 10_000, chunk_size=5, seed=1)
    feed = Feed([7])  # episodes of 8 rows
    feed.add(replay, 0, tag=0, n=80)
    it = replay.stream(3, 4, episode_rows=8)
    firsts = [feed.check(next(it))[1] for _ in range(3)]
    assert (firsts[0] % 8 == 0).all() and (firsts[1] == firsts[0] + 4).all() and (firsts[2] % 8 == 0).all()
    # re-drawn among 10 episodes, not read on into the next one (all three by chance: p = 1e-3; seeded)
    assert (firsts[2] != firsts[0] + 8).any()


def test_continuous_actions():
    replay = Replay(None, 100, chunk_size=4)
    for i in range(10):
        replay.add(0, np.full((1, 3, 3), i, np.uint8), np.full(2, i, np.float64), i, False, i == 0)
    batch = replay.sample(5, 4)
    batch.validate(EnvInfo("c", (1, 3, 3), 2, discrete=False))
    assert torch.equal(batch.action[..., 0], batch.obs[:, :, 0, 0, 0].float())


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("obs", np.zeros((3, 2, 3), np.uint8), "obs"),
        ("obs", np.zeros((3, 2, 2), np.float32), "obs"),
        ("action", 0.5, "action"),
        ("action", np.zeros(2, np.int64), "action"),
        ("reward", np.zeros(2), "reward"),
        ("terminal", np.zeros(2, bool), "terminal"),
    ],
)
def test_add_rejects_rows_unlike_the_first(field, value, match):
    replay = Replay(None, 100)
    row = {"obs": np.zeros((3, 2, 2), np.uint8), "action": 1, "reward": 0.0, "terminal": False}
    replay.add(0, **row, is_first=True)
    with pytest.raises(ValueError, match=match):
        replay.add(0, **{**row, field: value}, is_first=False)
    assert len(replay) == 1


def test_first_row_must_be_an_image_and_an_action():
    with pytest.raises(ValueError, match="obs"):
        Replay(None, 10).add(0, np.zeros((3, 2, 2), np.float32), 0, 0.0, False, True)
    with pytest.raises(ValueError, match="action"):
        Replay(None, 10).add(0, np.zeros((3, 2, 2), np.uint8), "left", 0.0, False, True)


def test_bad_settings_raise_wmzoo_errors():
    with pytest.raises(WmzooError, match="sampling"):
        Replay(None, 10, sampling="newest")
    with pytest.raises(WmzooError, match="capacity"):
        Replay(None, 0)
    with pytest.raises(WmzooError, match="no stream with"):
        Replay(None, 10).sample(1, 1)


# ------------------------------------------------------------------------------ on disk


def chunk_names(directory: Path) -> list[ChunkName]:
    names = [ChunkName.parse(p.name) for p in sorted(directory.iterdir())]
    assert None not in names, sorted(directory.iterdir())
    return names


def assert_same(a: Batch, b: Batch) -> None:
    for key in ("obs", "action", "reward", "terminal", "is_first"):
        assert torch.equal(getattr(a, key), getattr(b, key)), key


@settings(max_examples=20, deadline=None)
@given(
    chunk_size=st.integers(1, 5),
    schedule=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 9)), min_size=1, max_size=40),
    seq_len=st.integers(1, 6),
)
def test_flush_and_reload_give_the_same_rows_and_samples(chunk_size, schedule, seq_len):
    with tempfile.TemporaryDirectory() as tmp:
        replay = Replay(tmp, 1000, chunk_size, seed=7)
        feed = Feed()
        for worker, roll in schedule:
            feed.add(replay, worker, tag=worker)
            if roll == 0:
                replay.flush()
        replay.flush()
        assert sum(name.rows for name in chunk_names(Path(tmp))) == len(schedule)
        for reloaded in (Replay(tmp, 1000, chunk_size, seed=7), Replay.load(tmp, seed=7)):
            assert (len(reloaded), reloaded.episodes) == (len(replay), replay.episodes)
        if max(feed.count.values()) < seq_len:
            return
        expected = replay.sample(64, seq_len)
        feed.check(expected)
        assert_same(Replay.load(tmp, seed=7).sample(64, seq_len), expected)


def test_chunks_are_written_when_full_and_named_by_stream_and_index(tmp_path):
    replay = Replay(tmp_path, 1000, chunk_size=4)
    feed = Feed()
    feed.add(replay, 0, tag=0, n=10)
    feed.add(replay, 1, tag=1, n=5)
    names = chunk_names(tmp_path)
    assert [(n.index, n.rows) for n in names] == [(0, 4), (1, 4), (0, 4)]
    assert [n.order for n in names] == [0, 1, 2]
    assert names[0].stream == names[1].stream != names[2].stream
    assert len(Replay.load(tmp_path)) == 12  # pending rows are not on disk yet
    replay.flush()
    feed.add(replay, 0, tag=0, n=3)  # continues stream 0 in a new chunk
    replay.flush()
    names = chunk_names(tmp_path)
    assert [(n.index, n.rows) for n in names[3:]] == [(2, 2), (1, 1), (3, 3)]
    assert {n.stream for n in names} == {names[0].stream, names[2].stream}
    reloaded = Replay.load(tmp_path)
    assert len(reloaded) == 18
    tags, first = feed.check(reloaded.sample(20, 13))  # only the whole of stream 0 fits
    assert (tags == 0).all() and (first == 0).all()


def test_resume_keeps_old_streams_and_starts_new_ones(tmp_path):
    feed = Feed()
    first = Replay(tmp_path, 1000, chunk_size=4)
    feed.add(first, 0, tag=0, n=9)
    first.flush()
    resumed = Replay(tmp_path, 1000, chunk_size=4)
    assert len(resumed) == 9
    feed.add(resumed, 0, tag=1, n=9)  # same worker id, new stream
    resumed.flush()
    names = chunk_names(tmp_path)
    assert len({n.stream for n in names}) == 2
    assert min(n.order for n in names if n.stream != names[0].stream) > max(
        n.order for n in names if n.stream == names[0].stream
    )
    tags, start = feed.check(Replay.load(tmp_path).sample(2000, 3))
    assert set(zip(tags.tolist(), start.tolist())) == {(t, s) for t in (0, 1) for s in range(7)}


def test_capacity_evicts_the_oldest_chunks_and_deletes_their_files(tmp_path):
    replay = Replay(tmp_path, capacity=25, chunk_size=5)
    feed = Feed()
    for _ in range(40):
        feed.add(replay, 0, tag=0)
        assert len(replay) <= 25
    assert len(replay) > 20
    names = chunk_names(tmp_path)
    assert sum(n.rows for n in names) == len(replay)
    assert [n.index for n in names] == list(range(8 - len(names), 8))
    _, first = feed.check(replay.sample(1, len(replay)))  # the one window: all stored rows
    assert first[0] == 40 - len(replay)
    assert len(Replay.load(tmp_path)) == len(replay)


def test_loading_keeps_the_newest_chunks_that_fit(tmp_path):
    feed = Feed()
    replay = Replay(tmp_path, 1000, chunk_size=5)
    feed.add(replay, 0, tag=0, n=20)
    feed.add(replay, 1, tag=1, n=20)  # written after all of stream 0
    offline = Replay.load(tmp_path, capacity=17)
    assert len(offline) == 15 and len(chunk_names(tmp_path)) == 8  # read-only: nothing deleted
    tags, first = feed.check(offline.sample(200, 15))
    assert (tags == 1).all() and (first == 5).all()
    assert len(Replay(tmp_path, capacity=17, chunk_size=5)) == 15
    assert len(chunk_names(tmp_path)) == 3  # a writable replay evicts the rest


def corrupt(path: Path, how: str) -> None:
    data = dict(np.load(path))
    if how == "truncated":
        raw = path.read_bytes()
        path.write_bytes(raw[: len(raw) // 2])
    elif how == "missing key":
        np.savez(path, **{k: v for k, v in data.items() if k != "terminal"})
    elif how == "short field":
        np.savez(path, **{**data, "reward": data["reward"][:-1]})
    elif how == "wrong dtype":
        np.savez(path, **{**data, "obs": data["obs"].astype(np.float32)})


@pytest.mark.parametrize("how", ["truncated", "missing key", "short field", "wrong dtype"])
def test_a_corrupt_chunk_is_skipped_and_splits_its_stream(tmp_path, how):
    replay = Replay(tmp_path, 1000, chunk_size=4)
    feed = Feed()
    feed.add(replay, 0, tag=0, n=20)  # chunks of rows 0-3, 4-7, 8-11, 12-15, 16-19
    bad = tmp_path / chunk_names(tmp_path)[2].filename
    corrupt(bad, how)
    with pytest.warns(UserWarning, match=bad.name):
        reloaded = Replay.load(tmp_path)
    assert len(reloaded) == 16
    tags, first = feed.check(reloaded.sample(500, 5))  # windows never bridge rows 7 -> 12
    assert set(first.tolist()) == {0, 1, 2, 3, 12, 13, 14, 15}
    with pytest.raises(WmzooError, match="no stream with 9"):
        reloaded.sample(1, 9)
    assert bad.exists()  # left for inspection


def test_leftover_temporary_files_are_ignored_and_removed(tmp_path):
    replay = Replay(tmp_path, 1000, chunk_size=4)
    Feed().add(replay, 0, tag=0, n=8)
    leftover = tmp_path / (
        chunk_names(tmp_path)[0].filename.replace("-000000-", "-000002-") + ".tmp"
    )
    leftover.write_bytes(b"PK\x03\x04 interrupted")
    (tmp_path / "README.txt").write_text("not a chunk")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(Replay.load(tmp_path)) == 8
        assert leftover.exists()  # read-only leaves the directory alone
        assert len(Replay(tmp_path, 1000, chunk_size=4)) == 8
    assert not leftover.exists()


def test_an_interrupted_atomic_write_is_a_leftover_too(tmp_path):
    replay = Replay(tmp_path, 1000, chunk_size=4)
    Feed().add(replay, 0, tag=0, n=8)
    leftover = temporary_path(tmp_path / chunk_names(tmp_path)[0].filename)
    leftover.write_bytes(b"PK\x03\x04 interrupted")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(Replay(tmp_path, 1000, chunk_size=4)) == 8
    assert not leftover.exists()


def test_read_only_replays_do_not_write(tmp_path):
    with pytest.raises(WmzooError, match="does not exist"):
        Replay.load(tmp_path / "missing")
    offline = Replay.load(tmp_path)
    with pytest.raises(WmzooError, match="read-only"):
        offline.add(0, np.zeros((3, 2, 2), np.uint8), 0, 0.0, False, True)


def test_shape_mismatch_with_loaded_rows_is_a_value_error(tmp_path):
    replay = Replay(tmp_path, 1000, chunk_size=2)
    Feed().add(replay, 0, tag=0, n=4)
    resumed = Replay(tmp_path, 1000, chunk_size=2)
    with pytest.raises(ValueError, match="obs"):
        resumed.add(0, np.zeros((1, 2, 2), np.uint8), 0, 0.0, False, True)


def test_decode_round_trips_obs_above_255():
    replay = Replay(None, 1000, chunk_size=64)
    feed = Feed()
    feed.add(replay, 0, tag=3, n=600)
    tags, idx = decode(replay.sample(1, 600))
    assert (tags == 3).all() and (idx[0] == np.arange(600)).all()


def _stray_files(directory: Path, valid: ChunkName) -> dict[str, str]:
    """Every kind of stray or malformed file a replay folder may meet, named as the newest chunks
    (orders far above the real ones, row counts far above the capacity); returns name -> kind."""
    stream = "f" * 32
    made: dict[str, str] = {}

    def name(order: int, rows: int) -> str:
        return ChunkName(order, stream, 0, rows).filename

    good = dict(np.load(directory / valid.filename))
    (directory / name(900_000_001, 10**6)).write_bytes(b"")
    made[name(900_000_001, 10**6)] = "empty"
    raw = (directory / valid.filename).read_bytes()
    (directory / name(900_000_002, valid.rows)).write_bytes(raw[: len(raw) // 2])
    made[name(900_000_002, valid.rows)] = "truncated"
    np.savez(directory / name(900_000_003, 10**6), **good)
    made[name(900_000_003, 10**6)] = "claims more rows"
    (directory / name(900_000_004, 4)).write_text("not a chunk\n")
    made[name(900_000_004, 4)] = "text"
    (directory / name(900_000_005, 4)).mkdir()
    made[name(900_000_005, 4)] = "directory"
    pickled = {**good, "obs": np.array([object()] * valid.rows, dtype=object)}
    np.savez(directory / name(900_000_006, valid.rows), **pickled)
    made[name(900_000_006, valid.rows)] = "pickled"
    other = {**good, "obs": np.zeros((valid.rows, 3, 8, 8), np.uint8)}
    np.savez(directory / name(900_000_007, valid.rows), **other)
    made[name(900_000_007, valid.rows)] = "another image shape"
    return made


@pytest.mark.parametrize("readonly", [False, True])
def test_stray_files_lose_nothing_and_are_never_deleted(tmp_path, readonly):
    # Catches the defect where one stray file named like a newer chunk, claiming more rows than
    # the capacity, made --resume delete every chunk (eviction trusted the name before reading),
    # and where a newest chunk of another image shape hid all the others (--offline: "no
    # episodes found"); also that no stray file is ever deleted or unpickled.
    replay = Replay(tmp_path, capacity=64, chunk_size=8)
    feed = Feed()
    feed.add(replay, 0, tag=1, n=40)
    replay.flush()
    chunks = sorted(tmp_path.glob("*.npz"))
    made = _stray_files(tmp_path, chunk_names(tmp_path)[-1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = Replay.load(tmp_path, capacity=64) if readonly else Replay(tmp_path, capacity=64, chunk_size=8)
    assert len(again) == 40
    assert all(path.exists() for path in chunks)
    assert all((tmp_path / stray).exists() for stray in made)
    skipped = "\n".join(str(w.message) for w in caught)
    for stray in made:
        assert stray in skipped, f"no warning names {stray} ({made[stray]})"
    assert "Python objects" in skipped and "the file name says" in skipped
    tags, _ = feed.check(again.sample(8, 4))
    assert (tags == 1).all()


def test_a_chunk_write_cut_short_is_written_by_the_next_flush(tmp_path, monkeypatch):
    # Catches: SIGTERM or Ctrl-C arriving while a chunk file is written (the handler raises
    # KeyboardInterrupt inside the write) leaving the chunk marked written, so the flush before
    # "checkpoint saved" skipped it and its rows were lost from disk.
    import wmzoo.data.replay as replay_module

    replay = Replay(tmp_path, capacity=100, chunk_size=8)
    feed = Feed()
    feed.add(replay, 0, tag=1, n=5)
    real_write = replay_module.write_chunk

    def interrupted(path, data):
        monkeypatch.setattr(replay_module, "write_chunk", real_write)
        raise KeyboardInterrupt  # the signal lands mid-write

    monkeypatch.setattr(replay_module, "write_chunk", interrupted)
    with pytest.raises(KeyboardInterrupt):
        replay.flush()
    assert not list(tmp_path.glob("*.npz"))
    replay.flush()  # what the interrupt guard does before saying "checkpoint saved"
    assert len(Replay.load(tmp_path)) == 5
    feed.add(replay, 0, tag=1, n=3)  # and the stream goes on in a new chunk
    replay.flush()
    assert len(Replay.load(tmp_path)) == 8


def test_episode_lengths_follow_is_first_across_chunks():
    """Catches: episode lengths read per chunk file instead of per stream (an episode split over
    two chunks counted as two)."""
    replay = Replay(None, capacity=1000, chunk_size=5)
    for rows in (7, 3, 9):
        for t in range(rows):
            replay.add(0, np.zeros((3, 2, 2), np.uint8), 0, 0.0, False, t == 0)
    assert replay.episode_lengths().tolist() == [7, 3, 9]
