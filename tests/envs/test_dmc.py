"""DeepMind Control Suite adapter (``dmc-*``), checked against dm_control stepped directly.

Rendering runs at about 40 frames/s at 64x64 on a CPU, so the long checks render at 8x8.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from mujoco_rendering import require_rendering

require_rendering("dm_control.suite")

from dm_control import suite  # noqa: E402

from wmzoo.envs import dmc  # noqa: E402
from wmzoo.errors import UnknownNameError  # noqa: E402
from wmzoo.registry import env_info, make_env  # noqa: E402


def physics(env: gym.Env):
    return env.unwrapped._env.physics


def test_contract() -> None:
    env = make_env("dmc-walker-walk", seed=0)
    assert env.observation_space == gym.spaces.Box(0, 255, (3, 64, 64), np.uint8)
    assert env.action_space == gym.spaces.Box(-1.0, 1.0, (6,), np.float32)
    info = env_info(env, "dmc-walker-walk")
    assert not info.discrete and info.num_actions == 6
    obs, _ = env.reset()
    assert obs.shape == (3, 64, 64) and obs.dtype == np.uint8 and obs.std() > 0
    obs, reward, terminated, truncated, _ = env.step(np.zeros(6, np.float32))
    assert obs.shape == (3, 64, 64) and isinstance(reward, float) and not terminated and not truncated
    env.close()


def test_frame_is_the_tasks_camera_render() -> None:
    """Quadruped renders from camera 2 (DreamerV3's DEFAULT_CAMERAS), others from camera 0."""
    for name, camera in (("dmc-quadruped-walk", 2), ("dmc-cartpole-balance", 0)):
        env = make_env(name, seed=1, size=32)
        obs, _ = env.reset()
        frames = {c: physics(env).render(32, 32, camera_id=c).transpose(2, 0, 1) for c in (0, 1, camera)}
        assert np.array_equal(obs, frames[camera])
        assert any(not np.array_equal(obs, f) for c, f in frames.items() if c != camera)
        env.close()


def test_reward_is_summed_over_two_control_steps_as_dm_control_gives_them() -> None:
    """Against the same task built by dm_control with the same seed, stepped twice per action."""
    env = make_env("dmc-cartpole-swingup", seed=3, size=16)
    env.reset()
    raw = suite.load("cartpole", "swingup", task_kwargs={"random": 3})
    raw.reset()
    rng = np.random.default_rng(0)
    for _ in range(20):
        action = rng.uniform(-1, 1, 1).astype(np.float32)
        obs, reward, *_ = env.step(action)
        first, second = raw.step(action), raw.step(action)
        assert reward == pytest.approx(first.reward + second.reward, abs=1e-12)
        assert first.reward != pytest.approx(second.reward, abs=1e-9)  # each step counts
        assert np.array_equal(obs, raw.physics.render(16, 16, camera_id=0).transpose(2, 0, 1))
    env.close()


def test_actions_are_rescaled_to_the_tasks_bounds() -> None:
    """Quadruped's bounds are not [-1, 1] ([-1, -1, -0.8] to [1, 1.1, 0.8] per leg): -1, 0 and +1
    reach the physics as low, the midpoint and high; beyond [-1, 1] is clipped."""
    env = make_env("dmc-quadruped-walk", seed=0, size=8)
    env.reset()
    spec = env.unwrapped._env.action_spec()
    low, high = spec.minimum, spec.maximum
    assert not np.allclose(low, -1) and not np.allclose(high, 1)  # the case that shows the scaling
    for action, expected in ((-1.0, low), (0.0, (low + high) / 2), (1.0, high), (3.0, high), (-3.0, low)):
        env.step(np.full(12, action, np.float32))
        np.testing.assert_allclose(physics(env).data.ctrl, expected, rtol=1e-6)
    mixed = np.linspace(-1, 1, 12).astype(np.float32)
    env.step(mixed)
    np.testing.assert_allclose(physics(env).data.ctrl, low + (mixed + 1) / 2 * (high - low), rtol=1e-6)
    env.close()


def test_episode_is_500_agent_steps_ending_in_truncation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dmc.DMCEnv, "_render", lambda self: np.zeros((8, 8, 3), np.uint8))  # physics only
    env = make_env("dmc-cartpole-balance", seed=0, size=8)
    env.reset()
    for step in range(1, 501):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        assert not terminated
        assert truncated == (step == 500), step
    assert physics(env).time() == pytest.approx(1000 * env.unwrapped._env.control_timestep())
    env.reset()  # the next episode starts
    assert not any(env.step(env.action_space.sample())[2:4])
    env.close()


def test_seeds_are_reproducible() -> None:
    """make(seed=s).reset() == make().reset(seed=s); another seed, or the next episode, differs."""
    first = make_env("dmc-walker-walk", seed=5, size=32).reset()[0]
    env = make_env("dmc-walker-walk", size=32)
    assert np.array_equal(env.reset(seed=5)[0], first)
    action = np.full(6, 0.5, np.float32)
    stepped = env.step(action)[0]
    assert np.array_equal(env.reset(seed=5)[0], first) and np.array_equal(env.step(action)[0], stepped)
    assert not np.array_equal(env.reset()[0], first)  # the next episode of the same task
    assert not np.array_equal(env.reset(seed=6)[0], first)
    env.close()


def test_names() -> None:
    assert len(dmc.NAMES) == 20 and "dmc-walker-walk" in dmc.NAMES
    assert dmc.suite_task("dmc-cup-catch") == ("ball_in_cup", "catch")  # DreamerV3's name
    assert dmc.suite_task("dmc-ball-in-cup-catch") == ("ball_in_cup", "catch")
    assert dmc.suite_task("dmc-cartpole-balance-sparse") == ("cartpole", "balance_sparse")
    assert dmc.suite_task("dmc-point-mass-easy") == ("point_mass", "easy")  # beyond the 20
    for name in dmc.NAMES:
        dmc.suite_task(name)
    with pytest.raises(UnknownNameError, match="did you mean: dmc-walker-walk"):
        make_env("dmc-walker-wlak")
