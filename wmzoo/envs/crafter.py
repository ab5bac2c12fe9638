"""Crafter (Hafner, 2021) with its standard settings, adapted to the Gymnasium API.

Protocol: ``crafter.Env(size=(size, size), reward=True)``: 17 actions, episodes of at most 10,000
steps (Crafter's own ``length``, reported as truncation); death is the only termination. Step
``info`` is Crafter's, including ``achievements`` (the 22 counters the Crafter score is built on,
reset with each episode). ``wmzoo eval`` records the achievements each episode unlocked and
reports their success rates and the Crafter score (:func:`wmzoo.eval.metrics.crafter_score`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from wmzoo.envs.wrappers import SeededAtBuild, finish, require, unknown_env

NAME = "crafter"
NUM_ACTIONS = 17


class CrafterEnv(SeededAtBuild):
    """Gymnasium view of ``crafter.Env``, whose seed is fixed at construction.

    ``reset(seed=s)`` therefore builds a new ``crafter.Env(seed=s)``; ``reset()`` starts the next
    world of the current one (Crafter derives each world from its seed and the episode count).
    """

    def __init__(self, size: int) -> None:
        super().__init__(size, NUM_ACTIONS)
        self._size = size

    def _build(self, seed: int) -> Any:
        import crafter

        return crafter.Env(size=(self._size, self._size), reward=True, seed=seed)

    def _first_obs(self) -> np.ndarray:
        return self._env.reset()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, done, info = self._env.step(int(action))
        terminated = bool(done and info["discount"] == 0.0)  # the player died
        truncated = bool(done and not terminated)  # the 10,000-step limit
        return obs, float(reward), terminated, truncated, info


def make(name: str, *, seed: int | None = None, size: int = 64, train: bool = True) -> gym.Env:
    """Crafter, observations ``(3, size, size)`` rendered at that size; ``train`` is unused."""
    if name != NAME:
        raise unknown_env(name, [NAME])
    require("crafter", name, "crafter")
    return finish(CrafterEnv(size), size=size, seed=seed)
