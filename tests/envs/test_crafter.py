"""Crafter adapter: Gymnasium API over crafter.Env, achievements in info, seeding.

Each Crafter reset generates a world (about 1-2 s), so the tests reset only a few times.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("crafter")

from wmzoo.envs.plugin import wmzoo_envs  # noqa: E402
from wmzoo.errors import UnknownNameError  # noqa: E402


def make(name: str, **kwargs) -> gym.Env:
    (found,) = [e for e in wmzoo_envs() if e.matches(name)]
    return found.make(name, **kwargs)


def test_contract_and_seeding() -> None:
    env = make("crafter", seed=1)
    assert env.observation_space == gym.spaces.Box(0, 255, (3, 64, 64), np.uint8)
    assert env.action_space == gym.spaces.Discrete(17)
    first, info = env.reset()
    assert first.shape == (3, 64, 64) and first.dtype == np.uint8 and info == {}
    for action in (0, 1, 2, 3, 5):
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs.shape == (3, 64, 64) and obs.dtype == np.uint8
        assert type(reward) is float and not terminated and not truncated
    assert len(info["achievements"]) == 22 and "collect_wood" in info["achievements"]
    assert info["discount"] == 1.0
    again, _ = env.reset(seed=1)  # make's seed == reset(seed=)
    assert np.array_equal(first, again)
    other, _ = env.reset(seed=2)
    assert not np.array_equal(first, other)  # a different world
    env.close()


def test_size() -> None:
    env = make("crafter", size=32)
    assert env.observation_space.shape == (3, 32, 32)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (3, 32, 32) and obs.dtype == np.uint8  # rendered at the requested size


def test_unknown_name() -> None:
    from wmzoo.envs.crafter import make as make_crafter

    with pytest.raises(UnknownNameError, match="did you mean: crafter"):
        make_crafter("crafterr")


def test_eval_summary_has_the_22_success_rates() -> None:
    from wmzoo.eval.rollout import EpisodeResult, _jsonable, summarize, unlocked

    env = make("crafter", seed=0)
    env.reset()
    for _ in range(3):
        _, reward, _, _, info = env.step(5)  # "do": interact with what is in front
    info["achievements"]["collect_wood"] = 1  # as if the episode had unlocked it
    result = EpisodeResult(reward, 3, _jsonable(info), unlocked(info))
    out = summarize("crafter", [result, EpisodeResult(0.0, 3, _jsonable(info), [])])
    assert len(out["success_rates"]) == 22 and out["success_rates"]["collect_wood"] == 50.0
    assert out["crafter_score"] == pytest.approx(51 ** (1 / 22) - 1)
