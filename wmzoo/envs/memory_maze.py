"""Memory Maze (Pasukonis et al., 2022): ``memory_maze.tasks`` dm_env tasks as Gymnasium envs.

Protocol: ``memory_maze_<n>x<n>(image_only_obs=True)``: 64x64 RGB first-person camera with the
target colour drawn as a border, 6 discrete actions, control at 4 Hz, fixed episode lengths
(1000, 2000, 3000, 4000 steps for 9x9 .. 15x15) that end as truncation. Observations other than
64x64 are resized from the 64x64 render. Rendering needs OpenGL: ``MUJOCO_GL=egl`` unless set.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from wmzoo.envs.wrappers import SeededAtBuild, finish, require, unknown_env

PREFIX = "memory-maze-"
SIZES = ("9x9", "11x11", "13x13", "15x15")
ALIASES = {"memory-maze": "memory-maze-9x9"}
NAMES = tuple(PREFIX + s for s in SIZES)
RESOLUTION = 64
NUM_ACTIONS = 6


class MemoryMazeEnv(SeededAtBuild):
    """Gymnasium view of a Memory Maze dm_env task, whose seed is fixed at construction.

    ``reset(seed=s)`` therefore builds the task anew with seed ``s`` (about 2 s);
    ``reset()`` starts the next maze of the current task.
    """

    def __init__(self, task: Callable[..., Any]) -> None:
        super().__init__(RESOLUTION, NUM_ACTIONS)
        self._task = task

    def _build(self, seed: int) -> Any:
        return self._task(image_only_obs=True, seed=seed)

    def _first_obs(self) -> np.ndarray:
        return self._env.reset().observation

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        ts = self._env.step(int(action))
        terminated = bool(ts.last() and ts.discount == 0.0)
        truncated = bool(ts.last() and not terminated)  # the time limit (discount stays 1)
        return ts.observation, float(ts.reward), terminated, truncated, {}

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


def make(name: str, *, seed: int | None = None, size: int = 64, train: bool = True) -> gym.Env:
    """A Memory Maze task, observations ``(3, size, size)``; ``train`` changes nothing."""
    name_ = ALIASES.get(name, name)
    if name_ not in NAMES:
        raise unknown_env(name, [n.removeprefix(PREFIX) for n in NAMES], prefix=PREFIX)
    os.environ.setdefault("MUJOCO_GL", "egl")
    # memory_maze's __init__ imports gym and dm_control; import them first to name the missing one
    for module in ("gym", "dm_control", "memory_maze"):
        require(module, name, "memory-maze")
    from memory_maze import tasks

    task = getattr(tasks, "memory_maze_" + name_.removeprefix(PREFIX))
    return finish(MemoryMazeEnv(task), size=size, seed=seed)
