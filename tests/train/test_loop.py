"""The training loop's windows on offline datasets of fixed-length episodes (``train.windows``).

Every row of a dataset here records its place in its episode (``reward`` = row index, channel 0
of ``obs`` = episode index), so each training batch shows where its windows start.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from wmzoo.cli import main
from wmzoo.config import run_spec
from wmzoo.data import Replay
from wmzoo.data.dataset import write_env_info
from wmzoo.errors import WmzooError
from wmzoo.interfaces import Batch, EnvInfo
from wmzoo.train import loop
from wmzoo.train.agent import Agent

ENV = "minigrid-empty-5x5"  # the CLI's default env, so runs need no --env


def fixed_length_data(root: Path, lengths: list[int]) -> Path:
    """Episodes of ``lengths[i]`` rows, one chunk file each, in one stream (as `wmzoo data generate`)."""
    replay = Replay(root, capacity=10**6, chunk_size=max(lengths))
    for episode, rows in enumerate(lengths):
        for t in range(rows):
            obs = np.zeros((3, 32, 32), np.uint8)
            obs[0] = episode
            replay.add(0, obs, 0, float(t), t == rows - 2, t == 0)
        replay.flush()
    write_env_info(root, EnvInfo(ENV, (3, 32, 32), 7))
    return root


def train_and_record(monkeypatch, tmp_path: Path, backbone: str, lengths: list[int], updates: int,
                     overrides: tuple[str, ...] = ()) -> list[Batch]:
    seen: list[Batch] = []
    original = Agent.train_world_model

    def record(self, batch, carry=None, update=None, **kwargs):
        seen.append(batch)
        return original(self, batch, carry, update, **kwargs)

    monkeypatch.setattr(Agent, "train_world_model", record)
    data = fixed_length_data(tmp_path / "data", lengths)
    run = run_spec(backbone, ENV, "tiny", overrides=[f"train.steps={updates}", *overrides])
    loop.train_offline(run, data, tmp_path / "run", updates=updates, show_progress=False)
    return seen


def test_whole_episode_windows_on_fixed_length_data_by_default(monkeypatch, tmp_path):
    """Catches: offline windows of ``seq_len`` rows streamed back to back over shorter fixed-length
    episodes (s4wm ``paper-2d``: 256-row windows on 250-row Distracting Memory episodes), which
    drift against the episodes so that most windows cut one and the gradient from its ending's
    reward to its cue; the s4wm paper trains S4WM on whole episodes (table 8)."""
    batches = train_and_record(monkeypatch, tmp_path, "s4wm", [12] * 6, updates=4)  # tiny: seq_len 16
    assert len(batches) == 4
    for batch in batches:
        assert batch.shape == (4, 12)  # one whole episode per row, not 16 rows crossing into the next
        assert batch.is_first[:, 0].all() and not batch.is_first[:, 1:].any()
        assert (batch.reward == np.arange(12)).all()
        assert (batch.obs[:, :, 0] == batch.obs[:, :1, 0]).all()  # one episode per row


def test_longer_episodes_stream_in_aligned_consecutive_segments(monkeypatch, tmp_path):
    """Catches: a stateful model's (TSSM-XL, cache carried) segments that do not start at the
    episode's first row and continue it, e.g. a slot re-assigned mid-episode or one that runs on
    into the next episode (its segment borders then drift against the episodes)."""
    batches = train_and_record(monkeypatch, tmp_path, "tssm-xl", [32] * 5, updates=6)  # seq_len 16
    for k, batch in enumerate(batches):
        assert batch.shape == (4, 16)
        first = k % 2 == 0  # rows 0-15 of an episode, then rows 16-31 of the same one
        assert bool(batch.is_first[:, 0].all()) is first and not batch.is_first[:, 1:].any()
        assert (batch.reward == np.arange(16) + (0 if first else 16)).all()
        if not first:  # the same episodes as the segment before
            assert (batch.obs[:, 0, 0] == batches[k - 1].obs[:, 0, 0]).all()


def test_stream_keeps_the_old_windows(monkeypatch, tmp_path):
    """Catches: ``train.windows=stream`` not honoured (windows aligned anyway)."""
    batches = train_and_record(monkeypatch, tmp_path, "s4wm", [12] * 6, updates=2, overrides=("train.windows=stream",))
    assert all(batch.shape == (4, 16) for batch in batches)


def test_auto_streams_episodes_of_several_lengths(monkeypatch, tmp_path):
    """Catches: ``auto`` refusing (or aligning) data whose episodes differ in length."""
    batches = train_and_record(monkeypatch, tmp_path, "s4wm", [12, 20] * 3, updates=2)
    assert all(batch.shape == (4, 16) for batch in batches)


@pytest.mark.parametrize("lengths, overrides, message", [
    ([20] * 4, [], "the episodes (20 rows) are longer than model.seq_len=16 and not a multiple of it"),
    ([12, 20] * 2, [], "needs episodes of one length; the data has episodes of 12–20 rows"),
])
def test_episode_windows_that_cannot_apply_are_one_line(tmp_path, capsys, lengths, overrides, message):
    """Catches: ``train.windows=episodes`` silently falling back to drifting windows where whole or
    evenly split episodes cannot be had."""
    data = fixed_length_data(tmp_path / "data", lengths)
    code = main(["run", "--backbone", "s4wm", "--preset", "tiny", "--offline", str(data), "--steps", "1",
                 "--logdir", str(tmp_path / "run"), "--no-progress", "--set", "train.windows=episodes", *overrides])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1
    assert not (tmp_path / "run" / "run.yaml").exists()


def test_episode_windows_online_is_an_error(tmp_path):
    """Catches: ``train.windows=episodes`` accepted by an online run, whose replay it cannot align."""
    run = run_spec("rssm", ENV, "tiny", overrides=["train.windows=episodes"])
    with pytest.raises(WmzooError, match="offline dataset"):
        loop.train_online(run, tmp_path / "run", show_progress=False)

