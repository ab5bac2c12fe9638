"""MiniGrid tasks and BabyAI levels with pixel observations of the agent's partial view.

Protocol: the registered ``MiniGrid-<Task>-v<k>`` (``minigrid-<task>``) or ``BabyAI-<Level>-v<k>``
(``babyai-<level>``) env, ``RGBImgPartialObsWrapper(tile_size=8)`` + ``ImgObsWrapper`` (the
7x7-cell egocentric view as a 56x56 RGB image), resized to ``size x size``; MiniGrid's 7 actions
and its own step limit (truncation). The mission string, which the image does not show, is in
``info["mission"]``; whether the episode succeeded in ``info["success"]``. A BabyAI level also has an expert, minigrid's ``BabyAIBot`` (a planner that
reads the full grid): ``expert_action()`` on the env (:func:`wmzoo.envs.scripted.expert_policy`), so
``wmzoo data generate`` records demonstrations of it.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym

from wmzoo.envs.wrappers import finish, normalize, require, unknown_env

PREFIX = "minigrid-"
BABYAI_PREFIX = "babyai-"
TILE_SIZE = 8
_SUITES = {PREFIX: "MiniGrid", BABYAI_PREFIX: "BabyAI"}  # our prefix -> gymnasium id prefix


def minigrid_ids(suite: str = "MiniGrid") -> dict[str, str]:
    """Normalised task -> newest registered id of ``suite`` (``memorys7`` -> ``MiniGrid-MemoryS7-v0``;
    suite ``BabyAI``: ``gotolocal`` -> ``BabyAI-GoToLocal-v0``)."""
    found: dict[str, tuple[int, str]] = {}
    for env_id in gym.registry:
        m = re.fullmatch(rf"{suite}-(.+)-v(\d+)", env_id)
        if m:
            key, version = normalize(m[1]), int(m[2])
            if key not in found or version > found[key][0]:
                found[key] = (version, env_id)
    return {key: env_id for key, (_, env_id) in found.items()}


def resolve(name: str) -> str:
    """``minigrid-memory-s7`` -> ``MiniGrid-MemoryS7-v0``, ``babyai-goto-local`` ->
    ``BabyAI-GoToLocal-v0``; unknown tasks raise with suggestions."""
    prefix = BABYAI_PREFIX if name.startswith(BABYAI_PREFIX) else PREFIX
    ids = minigrid_ids(_SUITES[prefix])
    task = re.sub(r"-v\d+$", "", name[len(prefix) :]) if name.startswith(prefix) else None
    env_id = ids.get(normalize(task)) if task is not None else None
    if env_id is None:
        skip = len(_SUITES[prefix]) + 1
        known = [env_id[skip:].rsplit("-v", 1)[0].lower() for env_id in ids.values()]
        raise unknown_env(name, known, prefix=prefix)
    return env_id


class MissionInfo(gym.Wrapper):
    """Put the mission string in ``info["mission"]`` at every reset and step, and at every step
    ``info["success"]``: the episode ended with the mission done (MiniGrid and BabyAI terminate
    with a positive reward exactly then; a time-out truncates with none)."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, {**info, "mission": self.env.unwrapped.mission}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = {**info, "mission": self.env.unwrapped.mission, "success": bool(terminated and reward > 0)}
        return obs, float(reward), terminated, truncated, info


class BabyAIExpert(gym.Wrapper):
    """BabyAI's bot as the env's expert: ``expert_action()`` is the action minigrid's
    ``BabyAIBot`` takes in the current state (a new bot plans each episode from the full grid)."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        from minigrid.utils.baby_ai_bot import BabyAIBot

        out = self.env.reset(seed=seed, options=options)
        self.bot = BabyAIBot(self.env.unwrapped)
        return out

    def expert_action(self) -> int:
        return int(self.bot.replan())


def make(name: str, *, seed: int | None = None, size: int = 64, train: bool = True) -> gym.Env:
    """A MiniGrid task or BabyAI level seen as pixels, observations ``(3, size, size)``; ``train``
    is unused."""
    require("minigrid", name, "minigrid")
    from minigrid.wrappers import ImgObsWrapper, RGBImgPartialObsWrapper

    env = gym.make(resolve(name))
    env = MissionInfo(ImgObsWrapper(RGBImgPartialObsWrapper(env, tile_size=TILE_SIZE)))
    if name.startswith(BABYAI_PREFIX):
        env = BabyAIExpert(env)
    return finish(env, size=size, seed=seed)
