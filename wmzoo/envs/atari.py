"""Atari 2600 games through ALE, preprocessed as in the Atari 100k benchmark of IRIS and REM.

Protocol: ``ALE/<Game>-v5`` with sticky actions off (``repeat_action_probability=0``) and the
minimal action set; frame skip 4 with a max over the last two frames; RGB resized to
``size x size``; up to 30 no-op actions at reset when training, 1 at evaluation; a lost life ends
the training episode but the next ``reset()`` continues the same game (``EpisodicLifeEnv`` of
OpenAI baselines, which IRIS uses); a game lasts at most 108,000 frames = 27,000 agent steps.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym

from wmzoo.envs.wrappers import finish, normalize, require, unknown_env

PREFIX = "atari-"
MAX_FRAMES = 108_000  # 30 minutes at 60 Hz = 27,000 agent steps at frame skip 4


def snake_case(game: str) -> str:
    """``MsPacman`` -> ``ms_pacman`` (the form used in wmzoo names)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", game).lower()


def ale_games() -> list[str]:
    """The games ALE registers as ``ALE/<Game>-v5`` (CamelCase). Needs ``ale_py`` registered."""
    ids = (re.fullmatch(r"ALE/(\w+)-v5", env_id) for env_id in gym.registry)
    return [m[1] for m in ids if m]


def resolve(name: str) -> str:
    """``atari-ms_pacman`` or ``atari-mspacman`` -> ``MsPacman``; else UnknownNameError."""
    games = ale_games()
    by_key = {normalize(game): game for game in games}
    game = by_key.get(normalize(name[len(PREFIX) :])) if name.startswith(PREFIX) else None
    if game is None:
        raise unknown_env(name, [snake_case(g) for g in games], prefix=PREFIX)
    return game


class EpisodicLife(gym.Wrapper):
    """A lost life is terminal, but ``reset()`` resumes the game with a no-op until it is over.

    Gymnasium's ``AtariPreprocessing(terminal_on_life_loss=True)`` restarts the whole game at every
    reset, so an agent would never see its later lives; this is baselines' ``EpisodicLifeEnv``.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._lives = 0
        self._game_over = True

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        return obs, reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self._game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        self._game_over = False
        self._lives = self.env.unwrapped.ale.lives()
        return obs, info


def make(name: str, *, seed: int | None = None, size: int = 64, train: bool = True) -> gym.Env:
    """An Atari game under the Atari 100k protocol (IRIS/REM), observations ``(3, size, size)``."""
    ale_py = require("ale_py", name, "atari")
    require("cv2", name, "atari")  # AtariPreprocessing resizes with OpenCV
    gym.register_envs(ale_py)
    game = resolve(name)
    env = gym.make(
        f"ALE/{game}-v5",
        frameskip=1,
        repeat_action_probability=0.0,
        full_action_space=False,
        max_num_frames_per_episode=MAX_FRAMES,
    )
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=30 if train else 1,
        frame_skip=4,
        screen_size=size,
        terminal_on_life_loss=False,
        grayscale_obs=False,
    )
    if train:
        env = EpisodicLife(env)
    return finish(env, size=size, seed=seed)
