"""State-based environments (issue 30): the suites a CPU trains to convergence, observed as
vectors or as small multi-channel images rather than rendered pixels.

Every env here gives its observations under the observation spec (:class:`wmzoo.interfaces.EnvInfo`):
a ``Dict`` of named entries, vectors float32 ``(D,)`` (``gym-*``, ``dmc-proprio-*``), or one
``image`` uint8 ``(C, H, W)`` (``minatar-*``). ``size`` (``train.image_size``) changes nothing.

``gym-<name>`` — Gymnasium's classic control, its own protocol unchanged: ``CartPole-v1`` (500
steps), ``Acrobot-v1`` (500), ``MountainCar-v0`` (200), ``Pendulum-v1`` (200, continuous) and
``MountainCarContinuous-v0`` (999, continuous); no action repeat; the time limits end episodes as
truncation. The state is one entry, ``state`` (cart position/velocity, pole angle/velocity for
CartPole, …). Continuous actions are ``[-1, 1]^A`` rescaled linearly to the env's bounds (as
``dmc-*``: Pendulum's torque is ``[-2, 2]``).

``dmc-proprio-<domain>-<task>`` — the DeepMind Control Suite from states in DreamerV3's "DMC
Proprio" protocol (Hafner et al., 2023; ``embodied/envs/dmc.py`` with ``proprio`` observations):
action repeat 2 with summed rewards, the suite's 1,000 control steps per episode (500 agent steps,
ending in truncation), actions ``[-1, 1]^A`` rescaled to the task's bounds, and every entry of the
task's observation dict as a vector of its own name (scalars as ``(1,)``, e.g. cartpole's
``position`` (3) and ``velocity`` (2)); no rendering. Task names and seeding as ``dmc-*``
(:mod:`wmzoo.envs.dmc`).

``minatar-<game>`` — MinAtar (Young & Tian, 2019; the ``minatar`` package): ``breakout``,
``asterix``, ``freeway``, ``seaquest``, ``space-invaders``, in the paper's protocol: sticky actions
with p = 0.1, difficulty ramping on, all 6 actions, the games' own episode ends (no time limit
added). Observations are the 10×10 binary channels (4 to 10 per game) as one ``image`` entry
uint8 ``(C, 10, 10)`` with values 0 and 255, so a model reads them as 0/1 after its usual
``/ 255``; a CNN on them needs ``model.cnn_stages=1`` (10 is divisible by 2 once).
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from wmzoo.envs.dmc import DMCEnv, suite_task
from wmzoo.envs.plugin import GYM_TASKS as GYM_NAMES
from wmzoo.envs.plugin import MINATAR_GAMES
from wmzoo.envs.wrappers import SeedOnFirstReset, require, unknown_env

GYM_TASKS = dict(zip(GYM_NAMES, ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1",
                                  "MountainCarContinuous-v0")))
STICKY = 0.1  # MinAtar (Young & Tian, 2019), section 3: sticky actions with probability 0.1
DMC_PROPRIO = "dmc-proprio-"
DMC_PROPRIO_REPEAT = 2  # DreamerV3's DMC Proprio: action repeat 2


class StateDict(gym.ObservationWrapper):
    """An observation → ``{key: float32 (D,)}`` by ``gymnasium.spaces.flatten``: a ``Box``
    reshaped, a ``Discrete(n)`` one-hot of length ``n``, a ``MultiDiscrete`` one one-hot per
    element and a ``Tuple`` its parts, concatenated in order."""

    def __init__(self, env: gym.Env, key: str = "state") -> None:
        super().__init__(env)
        self._space, self._key = env.observation_space, key
        dim = spaces.flatdim(env.observation_space)
        self.observation_space = spaces.Dict({key: spaces.Box(-np.inf, np.inf, (dim,), np.float32)})

    def observation(self, observation: Any) -> dict[str, np.ndarray]:
        return {self._key: spaces.flatten(self._space, observation).astype(np.float32)}


def unit_actions(env: gym.Env) -> gym.Env:
    """A ``Box`` action space as ``[-1, 1]^A`` (clipped there), rescaled linearly to its bounds."""
    unit = np.ones(env.action_space.shape, np.float32)
    env = gym.wrappers.RescaleAction(env, -unit, unit)
    return gym.wrappers.TransformAction(env, lambda a: np.clip(a, -1.0, 1.0), env.action_space)


def make_gym(name: str, *, seed: int | None = None, size: int = 64, train: bool = True) -> gym.Env:
    """``gym-<task>``: a Gymnasium classic-control env observed as its state vector."""
    task = name.lower().removeprefix("gym-")
    if task not in GYM_TASKS:
        raise unknown_env(name, tuple(GYM_TASKS), prefix="gym-")
    env: gym.Env = gym.make(GYM_TASKS[task])
    if isinstance(env.action_space, spaces.Box):
        env = unit_actions(env)
    return SeedOnFirstReset(StateDict(env), seed)


class DMCProprio(DMCEnv):
    """A ``dm_control.suite`` task seen as its state (see the module docstring): the task's
    observation entries in place of :class:`~wmzoo.envs.dmc.DMCEnv`'s camera frame."""

    def __init__(self, domain: str, task: str) -> None:
        from dm_control import suite

        super().__init__(domain, task, size=1, repeat=DMC_PROPRIO_REPEAT)
        spec = suite.load(domain, task, task_kwargs={"random": 0}).observation_spec()
        self.observation_space = spaces.Dict({
            key: spaces.Box(-np.inf, np.inf, (max(1, int(np.prod(value.shape))),), np.float32)
            for key, value in spec.items()
        })

    def _observe(self, timestep: Any) -> dict[str, np.ndarray]:
        return {key: np.asarray(v, np.float32).reshape(-1) for key, v in timestep.observation.items()}


def make_dmc_proprio(name: str, *, seed: int | None = None, size: int = 64, train: bool = True) -> gym.Env:
    """``dmc-proprio-<domain>-<task>``: a DMC task from states, DreamerV3's DMC Proprio protocol."""
    from wmzoo.envs.plugin import DMC_VISION_TASKS

    if not name.lower().startswith(DMC_PROPRIO):
        raise unknown_env(name, DMC_VISION_TASKS, prefix=DMC_PROPRIO)
    os.environ.setdefault("MUJOCO_GL", "egl")
    for module in ("mujoco", "dm_control"):
        require(module, name, "dmc")
    try:
        domain, task = suite_task("dmc-" + name.lower().removeprefix(DMC_PROPRIO))
    except Exception as exc:  # the suite's unknown-name line, with this family's prefix
        raise type(exc)(str(exc).replace("'dmc-", f"'{DMC_PROPRIO}").replace(" dmc-", f" {DMC_PROPRIO}")) from None
    return SeedOnFirstReset(DMCProprio(domain, task), seed)


class MinAtarEnv(gym.Env):
    """A MinAtar game (see the module docstring): ``{"image": uint8 (C, 10, 10)}`` in 0/255."""

    def __init__(self, game: str) -> None:
        from minatar import Environment

        self._game = Environment(game.replace("-", "_"), sticky_action_prob=STICKY, difficulty_ramping=True)
        rows, cols, channels = self._game.state_shape()
        self.observation_space = spaces.Box(0, 255, (channels, rows, cols), np.uint8)
        self.action_space = spaces.Discrete(self._game.num_actions())

    def _obs(self) -> np.ndarray:
        return np.ascontiguousarray(self._game.state().transpose(2, 0, 1), dtype=np.uint8) * np.uint8(255)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self._game.seed(seed)
        self._game.reset()
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward, done = self._game.act(int(action))
        return self._obs(), float(reward), bool(done), False, {}


def make_minatar(name: str, *, seed: int | None = None, size: int = 64, train: bool = True) -> gym.Env:
    """``minatar-<game>``: a MinAtar game, its binary channels as one image entry."""
    game = name.lower().removeprefix("minatar-")
    if game not in MINATAR_GAMES:
        raise unknown_env(name, MINATAR_GAMES, prefix="minatar-")
    require("minatar", name, "minatar")
    return SeedOnFirstReset(MinAtarEnv(game), seed)
