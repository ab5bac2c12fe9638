"""The commands on state-based envs (issue 30, item 4): ``wmzoo data generate``, ``wmzoo bench
--mode env`` and ``wmzoo run`` / ``eval`` / ``imagine`` end to end on a vector env."""

from __future__ import annotations

import json

import numpy as np
import pytest

from wmzoo.cli import main
from wmzoo.data import Replay
from wmzoo.data.dataset import Manifest, iter_episodes


def test_data_generate_records_vector_entries(tmp_path, capsys):
    root = tmp_path / "ds"
    assert main(["data", "generate", "--env", "gym-cartpole", "--episodes", "3", "--out", str(root), "--seed", "4"]) == 0
    manifest = Manifest.read(root)
    assert manifest.env_info.describe_obs() == "state float32 [4]" and manifest.complete
    (episode, *_) = iter_episodes(root, "train")
    assert episode["obs.state"].dtype == np.float32 and episode["obs.state"].shape[1] == 4
    assert "obs" not in episode and np.abs(episode["obs.state"][0]).max() <= 0.05  # CartPole starts near 0
    batch = Replay.load(root / "train").sample(2, 5)
    assert tuple(batch.obs["state"].shape) == (2, 5, 4)


def test_bench_env_mode_times_a_state_env(tmp_path, capsys):
    out = tmp_path / "env.json"
    assert main(["bench", "--mode", "env", "--env", "gym-cartpole", "--envs", "1", "--steps", "50",
                 "--json", str(out)]) == 0
    records = json.loads(out.read_text())
    records = records if isinstance(records, list) else records.get("records", records)
    assert any("gym-cartpole" in json.dumps(r) for r in records)
    assert "gym-cartpole" in capsys.readouterr().out


@pytest.mark.heavy
def test_rssm_runs_end_to_end_on_gym_cartpole(tmp_path, capsys):
    logdir = tmp_path / "run"
    assert main(["run", "--backbone", "rssm", "--env", "gym-cartpole", "--preset", "tiny", "--steps", "300",
                 "--logdir", str(logdir), "--no-progress"]) == 0
    assert (logdir / "imagination.gif").is_file()
    env = json.loads((logdir / "replay" / "env.json").read_text())
    assert env["obs_space"] == {"state": {"shape": [4], "dtype": "float32"}}
    assert main(["eval", "--checkpoint", str(logdir), "--episodes", "2", "--random"]) == 0
    assert "random policy, same seeds" in capsys.readouterr().out
    assert main(["imagine", "--checkpoint", str(logdir), "--out", str(tmp_path / "i.png")]) == 0
    assert main(["run", "--resume", "--logdir", str(logdir), "--steps", "320", "--no-progress"]) == 0
    assert len(Replay.load(logdir / "replay")) >= 320


def test_bench_train_records_the_observation_spec_it_timed(tmp_path, capsys):
    out = tmp_path / "train.json"
    assert main(["bench", "--mode", "train", "--backbones", "rssm:tiny", "--env", "gym-cartpole", "--batch", "2",
                 "--seq-len", "4", "--iters", "1", "--warmup", "0", "--no-components", "--json", str(out)]) == 0
    (record,) = json.loads(out.read_text())
    assert record["observations"] == "gym-cartpole: state float32 [4]" and record["throughput"] > 0
