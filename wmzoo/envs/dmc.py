"""DeepMind Control Suite (Tassa et al., 2018) from pixels, in DreamerV3's protocol.

Sources: DreamerV3 (Hafner et al., 2023, arXiv:2301.04104), its "DMC Vision" benchmark and the
official code (github.com/danijar/dreamerv3): ``embodied/envs/dmc.py`` (cameras, rendering) and the
first release's ``configs.yaml`` (``env.dmc: {size: [64, 64], repeat: 2, camera: -1}``) and
``embodied/core/wrappers.py`` (``NormalizeAction``); the task list is the 20 tasks of its
published DMC Vision scores (``scores/data/dmcvision_dreamerv3.json``).

Choices, each DreamerV3's unless marked:

- names ``dmc-<domain>-<task>`` with hyphens for underscores (``dmc-cartpole-balance-sparse``);
  ``cup`` is ``ball_in_cup`` (``dmc-cup-catch``, DreamerV3's name). The benchmark's 20 tasks are
  :data:`wmzoo.envs.plugin.DMC_VISION_TASKS`; every other task of ``dm_control.suite.ALL_TASKS``
  is accepted too.
- observations: pixels only (no proprioception, as DMC Vision), RGB rendered by MuJoCo at
  ``size x size`` (64 by default) from camera 2 for ``quadruped`` and camera 0 for every other
  domain, uint8 ``(3, size, size)``. Rendering needs OpenGL: ``MUJOCO_GL=egl`` unless set.
- actions: a float vector in ``[-1, 1]^A`` (clipped there), rescaled linearly to the task's action
  spec bounds (``low + (a + 1) / 2 (high - low)``; only ``quadruped`` has bounds other than
  ``[-1, 1]``).
- action repeat 2: each agent step applies the action for two control steps and sums their rewards
  (stopping early if the episode ends in between, which suite tasks never do); one frame is
  rendered after the last. So an episode is the suite's 1000 control steps, 500 agent steps.
- episode end: suite tasks end only at their time limit (discount 1), reported as truncation;
  a step with discount 0 would be a termination.
- seeds: ``dm_control`` fixes a task's random state when the task is built, so ``reset(seed=s)``
  builds the task anew with ``task_kwargs={"random": s}`` (under 0.1 s) and ``reset()`` continues
  with the next episode of the current one (:class:`~wmzoo.envs.wrappers.SeededAtBuild`).
  The same seed gives the same first frame.
- ``train`` changes nothing: training and evaluation episodes are the same.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np

from wmzoo.envs.plugin import DMC_VISION_TASKS
from wmzoo.envs.wrappers import SeededAtBuild, finish, require, unknown_env

PREFIX = "dmc-"
ACTION_REPEAT = 2
# DreamerV3's embodied/envs/dmc.py: DEFAULT_CAMERAS = {quadruped: 2}; 0 for every other domain
CAMERAS = {"quadruped": 2}
# domains whose names DreamerV3 spells otherwise
DOMAIN_ALIASES = {"cup": "ball_in_cup"}

NAMES = tuple(PREFIX + t for t in DMC_VISION_TASKS)


def hyphenate(domain: str, task: str) -> str:
    """``dmc-<domain>-<task>``, with hyphens for underscores."""
    return f"{PREFIX}{domain}-{task}".replace("_", "-").lower()


def suite_task(name: str) -> tuple[str, str]:
    """``(domain, task)`` of ``dm_control.suite`` for a ``dmc-*`` name (imports dm_control)."""
    from dm_control import suite

    alias = {hyphenate(alias, t): (d, t) for alias, d in DOMAIN_ALIASES.items()
             for dd, t in suite.ALL_TASKS if dd == d}
    known = {hyphenate(d, t): (d, t) for d, t in suite.ALL_TASKS} | alias
    if name.lower() not in known:
        raise unknown_env(name, sorted({k.removeprefix(PREFIX) for k in known}), prefix=PREFIX)
    return known[name.lower()]


class DMCEnv(SeededAtBuild):
    """Gymnasium view of a ``dm_control.suite`` task from pixels (see the module docstring)."""

    def __init__(self, domain: str, task: str, size: int, repeat: int = ACTION_REPEAT) -> None:
        from dm_control import suite

        super().__init__(size, 1)
        self._domain, self._task, self._size, self._repeat = domain, task, size, repeat
        self._camera = CAMERAS.get(domain, 0)
        spec = suite.load(domain, task, task_kwargs={"random": 0}).action_spec()
        self._low = spec.minimum.astype(np.float64)
        self._high = spec.maximum.astype(np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, spec.shape, np.float32)

    def _build(self, seed: int) -> Any:
        from dm_control import suite

        return suite.load(self._domain, self._task, task_kwargs={"random": seed})

    def _render(self) -> np.ndarray:
        return self._env.physics.render(self._size, self._size, camera_id=self._camera)

    def _first_obs(self) -> Any:
        return self._observe(self._env.reset())

    def _observe(self, timestep: Any) -> Any:
        """The observation after ``timestep``: the camera's frame (``dmc-proprio-*``: the state)."""
        return self._render()

    def scale_action(self, action: Any) -> np.ndarray:
        """``[-1, 1]^A`` (clipped) to the task's bounds ``[low, high]``."""
        action = np.clip(np.asarray(action, dtype=np.float64).reshape(self._low.shape), -1.0, 1.0)
        return self._low + (action + 1.0) / 2.0 * (self._high - self._low)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        control = self.scale_action(action)
        reward, ts = 0.0, None
        for _ in range(self._repeat):
            ts = self._env.step(control)
            reward += float(ts.reward or 0.0)
            if ts.last():
                break
        assert ts is not None
        terminated = bool(ts.last() and ts.discount == 0.0)
        truncated = bool(ts.last() and not terminated)  # the time limit (discount stays 1)
        return self._observe(ts), reward, terminated, truncated, {}

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


def require_dmc(env_name: str) -> None:
    """Import dm_control (rendering with ``MUJOCO_GL=egl`` unless set) or raise
    :class:`~wmzoo.errors.MissingDependencyError` naming the missing module and the extra."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    for module in ("mujoco", "dm_control"):
        require(module, env_name, "dmc")


def make(name: str, *, seed: int | None = None, size: int = 64, train: bool = True) -> gym.Env:
    """A DMC task from pixels, observations ``(3, size, size)``, actions ``[-1, 1]^A``."""
    if not name.lower().startswith(PREFIX):
        raise unknown_env(name, DMC_VISION_TASKS, prefix=PREFIX)
    require_dmc(name)
    domain, task = suite_task(name)
    return finish(DMCEnv(domain, task, size), size=size, seed=seed)
