"""Files written before the observation spec (issue 30) still load: a pixel run's checkpoint,
run.yaml and replay chunk, and a generated dataset, all kept under ``tests/fixtures/pre_obs_spec``
as the code of main before the change wrote them (rssm, tiny-sized, minigrid-empty-5x5 at 16x16).
``reference.json`` holds what that code computed from them (``filter_rows`` over a sampled
window, then ``features`` and ``decode``), so the weights must land where they were."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from wmzoo.config import load_run
from wmzoo.data import Replay
from wmzoo.data.dataset import Manifest, iter_episodes, recorded_env_info, sha256
from wmzoo.eval.rollout import load_agent
from wmzoo.interfaces import filter_rows

FIXTURES = Path(__file__).parent.parent / "fixtures" / "pre_obs_spec"


def test_old_checkpoint_and_replay_load_and_compute_what_they_computed():
    reference = json.loads((FIXTURES / "reference.json").read_text())
    agent = load_agent(FIXTURES / "run" / "checkpoint.safetensors")
    assert agent.env.obs_shape == (3, 16, 16)
    batch = Replay.load(FIXTURES / "run" / "replay").sample(2, 5)
    assert int(batch.obs.sum()) == reference["obs_sum"]
    torch.manual_seed(0)
    wm = agent.world_model.eval()
    with torch.no_grad():
        for state in filter_rows(wm, batch, None):
            pass
        image = wm.decode(state)
        feat = wm.features(state)
    assert float(feat.sum()) == pytest.approx(reference["feat_sum"], rel=1e-4, abs=1e-4)
    assert list(image.shape) == reference["decode_shape"]
    assert int(image.long().sum()) == pytest.approx(reference["decode_sum"], abs=8)


def test_old_run_yaml_and_env_json_load():
    run = load_run(yaml.safe_load((FIXTURES / "run" / "run.yaml").read_text()))
    assert (run.backbone, run.env, run.model.cnn_stages) == ("rssm", "minigrid-empty-5x5", 2)
    info = recorded_env_info(FIXTURES / "run" / "replay")
    assert info is not None and info.obs_shape == (3, 16, 16) and info.num_actions == 7


def test_old_dataset_reads_with_its_checksums(tmp_path):
    root = tmp_path / "dataset"
    shutil.copytree(FIXTURES / "dataset", root)
    manifest = Manifest.read(root)
    assert manifest.complete and manifest.env_info.obs_shape == (3, 16, 16)
    for entry in manifest.files.values():
        assert sha256(root / entry.file) == entry.sha256
    episodes = list(iter_episodes(root, "train"))
    assert len(episodes) == 3
    obs = episodes[0]["obs"]
    assert obs.dtype == np.uint8 and obs.shape == (101, 3, 16, 16)
    batch = Replay.load(root / "train").sample(2, 8)
    assert batch.obs.dtype == torch.uint8 and tuple(batch.obs.shape) == (2, 8, 3, 16, 16)


def test_a_pixel_dataset_is_written_byte_for_byte_as_before(tmp_path):
    """The chunk format of a pixel env did not change: generating the fixture's dataset again
    gives the same checksums and env_info, and a re-run on the old folder finds it complete."""
    pytest.importorskip("minigrid")
    from wmzoo.data.generate import generate

    old = Manifest.read(FIXTURES / "dataset")
    generate("minigrid-empty-5x5", 3, tmp_path / "new", size=16, seed=1, log=lambda *_: None)
    new = Manifest.read(tmp_path / "new")
    assert [e.sha256 for _, e in sorted(new.files.items())] == [e.sha256 for _, e in sorted(old.files.items())]
    assert new.to_json() == old.to_json()
    shutil.copytree(FIXTURES / "dataset", tmp_path / "old")
    lines: list[str] = []
    generate("minigrid-empty-5x5", 3, tmp_path / "old", size=16, seed=1, log=lines.append)
    assert any("already complete" in line for line in lines)
