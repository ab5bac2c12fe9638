"""The online trainer with several environments in their own processes (train.envs > 1)."""

from __future__ import annotations

import pytest

from wmzoo.config import run_spec
from wmzoo.data import Replay
from wmzoo.train.checkpoint import load_checkpoint
from wmzoo.train.loop import train_online

pytest.importorskip("minigrid")


def test_train_online_with_two_env_processes(tmp_path):
    run = run_spec("rssm", "minigrid-empty-5x5", "tiny", overrides=[
        "train.envs=2", "train.vector=async", "train.steps=120", "train.prefill=60",
        "train.log_every=60", "train.checkpoint_every=1000", "train.gif_horizon=4",
    ])
    path = train_online(run, tmp_path, show_progress=False)
    assert load_checkpoint(path)["progress"]["env_steps"] == 120  # 60 steps of 2 envs
    replay = Replay.load(tmp_path / "replay")
    assert len(replay) >= 120 and replay.episodes >= 2  # one stream per env, each starts an episode
