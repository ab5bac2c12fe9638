"""Small datasets of the s4wm paper's memory tasks, generated with their scripted policies in CI
time: every 2D task, and ``two-rooms`` (3D, Memory Maze's engine)."""

from __future__ import annotations

import pytest

from wmzoo.data import Replay
from wmzoo.data.dataset import Manifest, iter_episodes
from wmzoo.data.generate import generate

PHASES = {  # env -> (context, query) observations, s4wm section 5
    "distracting-memory-100": (199, 51),
    "distracting-memory-200": (399, 101),
    "distracting-memory-400": (799, 201),
    "multi-doors-keys-3": (76, 174),
    "multi-doors-keys-5": (170, 380),
    "multi-doors-keys-7": (296, 654),
    "two-rooms": (301, 200),
}


def quiet(*_: object) -> None:
    pass


@pytest.mark.parametrize("env", list(PHASES))
def test_a_small_dataset_of_each_memory_task(tmp_path, env):
    size, episodes = (64, 1) if env == "two-rooms" else (40, 3)
    split = (1.0, 0.0, 0.0) if episodes == 1 else (1.0, 1.0, 1.0)
    root = tmp_path / env
    generate(env, episodes, root, size=size, seed=7, split=split, log=quiet)
    manifest = Manifest.read(root)
    context, query = PHASES[env]
    assert manifest.complete and len(manifest.files) == episodes
    assert (manifest.context_length, manifest.query_length) == (context, query)
    for split_name in {e.split for e in manifest.files.values()}:
        for episode in iter_episodes(root, split_name):
            assert episode["obs"].shape == (context + query, 3, size, size)
            assert episode["phase"].tolist() == [0] * context + [1] * query
            assert episode["is_first"][0] and not episode["is_first"][1:].any()
        assert len(Replay.load(root / split_name)) >= context + query
