"""MiniGrid tasks with pixel observations of the agent's partial view.

Protocol: the registered ``MiniGrid-<Task>-v<k>`` env, ``RGBImgPartialObsWrapper(tile_size=8)`` +
``ImgObsWrapper`` (the 7x7-cell egocentric view as a 56x56 RGB image), resized to
``size x size``; MiniGrid's 7 actions and its own step limit (truncation). The mission string,
which the image does not show, is in ``info["mission"]``.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym

from wmzoo.envs.wrappers import finish, normalize, require, unknown_env

PREFIX = "minigrid-"
TILE_SIZE = 8


def minigrid_ids() -> dict[str, str]:
    """Normalised task -> newest registered id (``memorys7`` -> ``MiniGrid-MemoryS7-v0``)."""
    found: dict[str, tuple[int, str]] = {}
    for env_id in gym.registry:
        m = re.fullmatch(r"MiniGrid-(.+)-v(\d+)", env_id)
        if m:
            key, version = normalize(m[1]), int(m[2])
            if key not in found or version > found[key][0]:
                found[key] = (version, env_id)
    return {key: env_id for key, (_, env_id) in found.items()}


def resolve(name: str) -> str:
    """``minigrid-memory-s7`` -> ``MiniGrid-MemoryS7-v0``; unknown tasks raise with suggestions."""
    ids = minigrid_ids()
    task = re.sub(r"-v\d+$", "", name[len(PREFIX) :]) if name.startswith(PREFIX) else None
    env_id = ids.get(normalize(task)) if task is not None else None
    if env_id is None:
        known = [env_id[len("MiniGrid-") :].rsplit("-v", 1)[0].lower() for env_id in ids.values()]
        raise unknown_env(name, known, prefix=PREFIX)
    return env_id


class MissionInfo(gym.Wrapper):
    """Put the mission string in ``info["mission"]`` at every reset and step."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, {**info, "mission": self.env.unwrapped.mission}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = {**info, "mission": self.env.unwrapped.mission}
        return obs, float(reward), terminated, truncated, info


def make(name: str, *, seed: int | None = None, size: int = 64, train: bool = True) -> gym.Env:
    """A MiniGrid task seen as pixels, observations ``(3, size, size)``; ``train`` is unused."""
    require("minigrid", name, "minigrid")
    from minigrid.wrappers import ImgObsWrapper, RGBImgPartialObsWrapper

    env = gym.make(resolve(name))
    env = ImgObsWrapper(RGBImgPartialObsWrapper(env, tile_size=TILE_SIZE))
    return finish(MissionInfo(env), size=size, seed=seed)
