"""State-based environments (issue 30): Gymnasium classic control (``gym-*``), DMC from states
(``dmc-proprio-*``, DreamerV3's DMC Proprio protocol) and MinAtar (``minatar-*``), each checked
against the package it wraps stepped directly."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from wmzoo.errors import UnknownNameError
from wmzoo.interfaces import ObsEntry
from wmzoo.registry import env_info, make_env


@pytest.mark.parametrize("name, gym_id, state, actions, discrete", [
    ("gym-cartpole", "CartPole-v1", 4, 2, True), ("gym-acrobot", "Acrobot-v1", 6, 3, True),
    ("gym-mountaincar", "MountainCar-v0", 2, 3, True), ("gym-pendulum", "Pendulum-v1", 3, 1, False),
    ("gym-mountaincar-continuous", "MountainCarContinuous-v0", 2, 1, False)])
def test_classic_control_is_gymnasiums_env_seen_as_a_state_vector(name, gym_id, state, actions, discrete):
    env, raw = make_env(name, seed=3), gym.make(gym_id)
    info = env_info(env, name)
    assert info.obs_space == (("state", ObsEntry((state,), "float32")),) and not info.pixel
    assert (info.num_actions, info.discrete) == (actions, discrete)
    obs, _ = env.reset()  # make's seed: the same episode as the raw env reset with it
    expected, _ = raw.reset(seed=3)
    np.testing.assert_array_equal(obs["state"], expected.astype(np.float32))
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = int(rng.integers(actions)) if discrete else rng.uniform(-1, 1, (1,)).astype(np.float32)
        raw_a = a if discrete else raw.action_space.low + (a + 1) / 2 * (raw.action_space.high - raw.action_space.low)
        obs, reward, terminated, truncated, _ = env.step(a)
        expected, raw_reward, raw_terminated, raw_truncated, _ = raw.step(raw_a)
        np.testing.assert_allclose(obs["state"], expected, rtol=1e-5, atol=1e-5)
        assert (reward, terminated, truncated) == pytest.approx((raw_reward, raw_terminated, raw_truncated), abs=1e-5)
        if terminated or truncated:
            break
    env.close()


def test_pendulum_actions_beyond_one_are_clipped_to_the_bounds():
    a, b = make_env("gym-pendulum", seed=0), make_env("gym-pendulum", seed=0)
    a.reset(), b.reset()
    assert a.step(np.array([7.0], np.float32))[1] == b.step(np.array([1.0], np.float32))[1]


def test_cartpole_episodes_end_at_gymnasiums_limit():
    env = make_env("gym-cartpole", seed=0)
    env.reset()
    steps, done = 0, False
    while not done:  # always pushing right: the pole falls long before 500 steps
        _, _, terminated, truncated, _ = env.step(1)
        steps, done = steps + 1, terminated or truncated
    assert terminated and 5 < steps < 100


def test_dmc_proprio_is_dreamerv3s_protocol():
    pytest.importorskip("dm_control")
    from dm_control import suite

    env = make_env("dmc-proprio-cartpole-swingup", seed=5)
    info = env_info(env, "dmc-proprio-cartpole-swingup")
    assert info.obs_space == (("position", ObsEntry((3,), "float32")), ("velocity", ObsEntry((2,), "float32")))
    assert (info.num_actions, info.discrete) == (1, False)
    raw = suite.load("cartpole", "swingup", task_kwargs={"random": 5})
    obs, _ = env.reset()
    ts = raw.reset()
    np.testing.assert_allclose(obs["position"], ts.observation["position"], rtol=1e-6)
    steps, total, raw_total = 0, 0.0, 0.0
    rng = np.random.default_rng(1)
    while True:
        a = rng.uniform(-1, 1, (1,)).astype(np.float32)
        obs, reward, terminated, truncated, _ = env.step(a)
        for _ in range(2):  # action repeat 2, rewards summed
            ts = raw.step(a.astype(np.float64))
            raw_total += ts.reward
        total += reward
        steps += 1
        if steps == 3:
            np.testing.assert_allclose(obs["velocity"], ts.observation["velocity"], rtol=1e-5, atol=1e-6)
        if terminated or truncated:
            break
    assert steps == 500 and truncated and not terminated  # 1,000 control steps
    assert total == pytest.approx(raw_total, rel=1e-6)


def test_dmc_proprio_names_its_family_in_an_unknown_name():
    pytest.importorskip("dm_control")
    with pytest.raises(UnknownNameError, match="dmc-proprio-cartpole-swingup"):
        make_env("dmc-proprio-cartpole-swingupp")


@pytest.mark.parametrize("game, channels", [("breakout", 4), ("asterix", 4), ("freeway", 7), ("seaquest", 10),
                                            ("space-invaders", 6)])
def test_minatar_is_its_binary_channels_as_one_image(game, channels):
    minatar = pytest.importorskip("minatar")
    env = make_env(f"minatar-{game}", seed=2)
    info = env_info(env, f"minatar-{game}")
    assert info.pixel and info.obs_shape == (channels, 10, 10) and info.num_actions == 6 and info.discrete
    raw = minatar.Environment(game.replace("-", "_"), sticky_action_prob=0.1)
    raw.seed(2)
    raw.reset()
    obs, _ = env.reset()
    assert set(np.unique(obs)) <= {0, 255}
    np.testing.assert_array_equal(obs, raw.state().transpose(2, 0, 1).astype(np.uint8) * 255)
    rng = np.random.default_rng(0)
    for _ in range(30):
        a = int(rng.integers(6))
        obs, reward, terminated, _, _ = env.step(a)
        raw_reward, raw_done = raw.act(a)
        np.testing.assert_array_equal(obs, raw.state().transpose(2, 0, 1).astype(np.uint8) * 255)
        assert (reward, terminated) == (raw_reward, raw_done)
        if terminated:
            break


def test_unknown_names_suggest_the_familys():
    with pytest.raises(UnknownNameError, match="gym-cartpole"):
        make_env("gym-cartpol")
    with pytest.raises(UnknownNameError, match="minatar-breakout"):
        make_env("minatar-breakot")
