"""Offline training from recorded episodes, and an interrupted run that resumes losslessly."""

from __future__ import annotations

import pytest
import torch

from wmzoo.cli import main
from wmzoo.config import run_spec
from wmzoo.data import Replay
from wmzoo.eval.rollout import load_agent
from wmzoo.train import loop
from wmzoo.train.checkpoint import load_checkpoint
from wmzoo.train.collector import Collector


def test_interrupt_writes_checkpoint_and_replay_then_resume(capsys, tmp_path, monkeypatch):
    logdir = tmp_path / "run"
    calls = {"n": 0}
    original = Collector.step

    def step_then_interrupt(self, random):
        calls["n"] += 1
        if calls["n"] == 230:
            raise KeyboardInterrupt
        return original(self, random)

    monkeypatch.setattr(Collector, "step", step_then_interrupt)
    code = main(["run", "--env", "minigrid-empty-5x5", "--steps", "400", "--logdir", str(logdir), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "interrupted at env step 229" in err and "--resume" in err and err.count("\n") == 1
    tree = load_checkpoint(logdir / "checkpoint.safetensors")
    assert tree["progress"]["env_steps"] == 229
    # every step taken is on disk: one row per step plus the final row of each ended episode
    assert len(Replay.load(logdir / "replay")) == 229 + tree["progress"]["episodes"]

    monkeypatch.setattr(Collector, "step", original)
    assert main(["run", "--logdir", str(logdir), "--resume", "--steps", "260", "--no-progress"]) == 0
    tree = load_checkpoint(logdir / "checkpoint.safetensors")
    assert tree["progress"]["env_steps"] == 260
    assert tree["progress"]["updates"] > 0


def test_offline_training_from_a_runs_replay(tmp_path):
    logdir = tmp_path / "online"
    run = run_spec("rssm", "minigrid-empty-5x5", "tiny", overrides=["train.steps=210"])
    loop.train_online(run, logdir, show_progress=False)
    offline = tmp_path / "offline"
    run = run_spec("rssm", "minigrid-empty-5x5", "tiny", overrides=["train.steps=12"])
    path = loop.train_offline(run, logdir / "replay", offline, updates=12, show_progress=False)
    tree = load_checkpoint(path)
    assert tree["progress"]["updates"] == 12 and tree["progress"]["env_steps"] == 0
    assert tree["env"]["num_actions"] == 7 and tuple(tree["env"]["obs_shape"]) == (3, 64, 64)
    assert (offline / "imagination.gif").is_file()


def test_offline_without_data_is_an_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code = main(["run", "--offline", str(tmp_path / "empty"), "--logdir", str(tmp_path / "o"), "--steps", "5"])
    assert code == 2
    assert "no episodes found" in capsys.readouterr().err


def test_interrupted_offline_run_saves_the_world_model_so_far(capsys, tmp_path, monkeypatch):
    data = tmp_path / "data"
    assert main(["data", "generate", "--env", "minigrid-empty-5x5", "--episodes", "2", "--split", "1,0,0",
                 "--out", str(data)]) == 0
    capsys.readouterr()
    logdir = tmp_path / "offline"
    checkpoint = logdir / "checkpoint.safetensors"
    original = loop.WorldModelBatches.update
    seen: dict = {"calls": 0, "on_disk": []}

    def update_then_interrupt(self, update=None):
        seen["calls"] += 1
        seen["agent"] = self.agent
        if checkpoint.exists():  # written by the periodic checkpoint after the previous update
            seen["on_disk"].append(load_checkpoint(checkpoint)["progress"]["updates"])
        if seen["calls"] == 3:
            raise KeyboardInterrupt
        return original(self, update)

    monkeypatch.setattr(loop.WorldModelBatches, "update", update_then_interrupt)
    code = main(["run", "--offline", str(data), "--logdir", str(logdir), "--steps", "10",
                 "--set", "train.checkpoint_every=1", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("wmzoo: error: interrupted at update 2;")
    assert err.rstrip().endswith("; continue with --resume")  # offline runs resume too
    assert str(checkpoint) in err
    assert seen["on_disk"] == [1, 2]  # checkpoint_every=1: one after each finished update
    assert load_checkpoint(checkpoint)["progress"]["updates"] == 2
    restored = load_agent(checkpoint).world_model.state_dict()
    trained = seen["agent"].world_model.state_dict()
    assert restored.keys() == trained.keys()
    assert all(torch.equal(restored[k], trained[k]) for k in trained)


@pytest.mark.parametrize("env_json", [True, False])
def test_an_offline_run_takes_the_recorded_env(capsys, tmp_path, env_json):
    """Without --env, the run's spec names the env the dataset was recorded in, so `wmzoo eval`
    and `wmzoo imagine` on its checkpoint use that env, not the CLI's default. Catches (without
    ``env.json``, e.g. a dataset written by a script): the manifest's env ignored and the model
    silently built for the CLI's default env (a relabelled Distracting Memory dataset trained a
    7-action MiniGrid model)."""
    import yaml

    data = tmp_path / "data"
    assert main(["data", "generate", "--env", "minigrid-empty-6x6", "--episodes", "2", "--split", "1,0,0",
                 "--out", str(data)]) == 0
    if not env_json:
        (data / "train" / "env.json").unlink()
    logdir = tmp_path / "offline"
    assert main(["run", "--offline", str(data), "--logdir", str(logdir), "--steps", "1", "--no-progress"]) == 0
    assert yaml.safe_load((logdir / "run.yaml").read_text())["env"] == "minigrid-empty-6x6"
    capsys.readouterr()


def test_an_offline_run_records_the_recorded_frame_size(capsys, tmp_path):
    """Catches: an offline run's ``run.yaml`` (and checkpoint) naming the dataset's env at the
    default ``train.image_size`` (64) while the data and the model are 16×16, so `wmzoo eval`
    makes the env at 64×64 and fails inside the encoder (the Distracting Memory runs at 40×40)."""
    import yaml

    data = tmp_path / "data"
    assert main(["data", "generate", "--env", "minigrid-empty-6x6", "--episodes", "2", "--split", "1,0,0",
                 "--size", "16", "--out", str(data)]) == 0
    logdir = tmp_path / "offline"
    assert main(["run", "--offline", str(data), "--logdir", str(logdir), "--steps", "1", "--no-progress"]) == 0
    saved = yaml.safe_load((logdir / "run.yaml").read_text())
    assert (saved["env"], saved["train"]["image_size"]) == ("minigrid-empty-6x6", 16)
    assert load_checkpoint(logdir / "checkpoint.safetensors")["run"]["train"]["image_size"] == 16
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(logdir / "checkpoint.safetensors"), "--episodes", "1",
                 "--max-steps", "3"]) == 0
