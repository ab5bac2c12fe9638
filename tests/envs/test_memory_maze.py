"""Memory Maze adapter: dm_env task as a Gymnasium env (about 20-40 steps/s on CPU: few steps)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from mujoco_rendering import require_rendering

require_rendering("memory_maze")  # its __init__ also needs the legacy gym package

from wmzoo.envs.plugin import wmzoo_envs  # noqa: E402
from wmzoo.errors import UnknownNameError  # noqa: E402


def make(name: str, **kwargs) -> gym.Env:
    (found,) = [e for e in wmzoo_envs() if e.matches(name)]
    return found.make(name, **kwargs)


@pytest.fixture(scope="module")
def env():
    env = make("memory-maze", seed=0)  # the alias of memory-maze-9x9
    yield env
    env.close()


@pytest.fixture(scope="module")
def first_obs(env: gym.Env) -> np.ndarray:
    return env.reset()[0]  # builds the maze with make's seed (about 2 s)


def test_contract(env: gym.Env, first_obs: np.ndarray) -> None:
    assert env.observation_space == gym.spaces.Box(0, 255, (3, 64, 64), np.uint8)
    assert env.action_space == gym.spaces.Discrete(6)
    obs = first_obs
    assert obs.shape == (3, 64, 64) and obs.dtype == np.uint8 and obs.std() > 0
    # the target colour is drawn as a uniform 2-pixel border
    border = obs[:, 0, :]
    assert (border == border[:, :1]).all() and np.array_equal(obs[:, 1, 5], border[:, 0])
    for action in (1, 1, 2, 3, 4, 5, 1, 0, 1, 1):
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs.shape == (3, 64, 64) and obs.dtype == np.uint8
        assert type(reward) is float and not terminated and not truncated


def test_seeding(env: gym.Env, first_obs: np.ndarray) -> None:
    again, _ = env.reset(seed=0)  # rebuilds the task with this seed
    assert np.array_equal(first_obs, again)
    other, _ = env.reset(seed=1)
    assert not np.array_equal(first_obs, other)


def test_unknown_size() -> None:
    from wmzoo.envs.memory_maze import make as make_maze

    with pytest.raises(UnknownNameError, match="did you mean: memory-maze-9x9"):
        make_maze("memory-maze-99")
