"""Memory Maze (Pasukonis et al., 2022): ``memory_maze.tasks`` dm_env tasks as Gymnasium envs.

Protocol: ``memory_maze_<n>x<n>()``: 64x64 RGB first-person camera with the target colour drawn
as a border, 6 discrete actions, control at 4 Hz, fixed episode lengths (1000, 2000, 3000, 4000
steps for 9x9 .. 15x15) that end as truncation. Observations other than 64x64 are resized from the
64x64 render. Rendering needs OpenGL: ``MUJOCO_GL=egl`` unless set.

The task is built with ``image_only_obs=False, global_observables=True`` (the images are the same
as with ``image_only_obs=True``): the image is the observation, and the other observations become
the targets of the Memory Maze offline probing benchmark (Pasukonis et al., 2022; the s4wm paper's
appendix C, Table 6; pydreamer's ``probes.py``) in ``info["probe"]`` at every reset and step
(see :func:`probe_targets` and :mod:`wmzoo.eval.probing`).
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
        self._probe: dict[str, np.ndarray] = {}

    def _build(self, seed: int) -> Any:
        return self._task(image_only_obs=False, global_observables=True, seed=seed)

    def _first_obs(self) -> np.ndarray:
        observation = self._env.reset().observation
        self._probe = probe_targets(observation)
        return observation["image"]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        return obs, {**info, "probe": self._probe}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        ts = self._env.step(int(action))
        terminated = bool(ts.last() and ts.discount == 0.0)
        truncated = bool(ts.last() and not terminated)  # the time limit (discount stays 1)
        info = {"probe": probe_targets(ts.observation)}
        return ts.observation["image"], float(ts.reward), terminated, truncated, info

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


def probe_targets(observation: dict[str, Any]) -> dict[str, np.ndarray]:
    """The probing targets in one dm_env observation of a task with ``global_observables=True``.

    - ``walls`` uint8 ``[n, n]``: 1 where the maze cell is a wall (``1 - maze_layout``: the
      layout without its outer walls, row 0 at the bottom); the wall probe's target.
    - ``objects`` float32 ``[k, 2]``: every object's position relative to the agent in the agent's
      own frame, in grid cells (``targets_vec``); the object probe's target.
    - ``agent_pos`` float32 ``[2]`` (grid cells, ``(0, 0)`` the bottom-left corner) and
      ``agent_dir`` float32 ``[2]`` (unit heading): the agent's pose, which the wall probe reads
      beside the features (pydreamer's ``map_coord``), as the layout is in maze coordinates.
    """
    return {
        "walls": (1 - observation["maze_layout"]).astype(np.uint8),
        "objects": observation["targets_vec"].astype(np.float32),
        "agent_pos": observation["agent_pos"].astype(np.float32),
        "agent_dir": observation["agent_dir"].astype(np.float32),
    }


def require_memory_maze(env_name: str) -> None:
    """Import memory_maze (rendering with ``MUJOCO_GL=egl`` unless set) or raise
    :class:`~wmzoo.errors.MissingDependencyError` naming the missing module."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    # memory_maze's __init__ imports gym and dm_control; import them first to name the missing one
    for module in ("gym", "dm_control", "memory_maze"):
        require(module, env_name, "memory-maze")


def make(name: str, *, seed: int | None = None, size: int = 64, train: bool = True) -> gym.Env:
    """A Memory Maze task, observations ``(3, size, size)``; ``train`` changes nothing."""
    name_ = ALIASES.get(name, name)
    if name_ not in NAMES:
        raise unknown_env(name, [n.removeprefix(PREFIX) for n in NAMES], prefix=PREFIX)
    require_memory_maze(name)
    from memory_maze import tasks

    task = getattr(tasks, "memory_maze_" + name_.removeprefix(PREFIX))
    return finish(MemoryMazeEnv(task), size=size, seed=seed)
