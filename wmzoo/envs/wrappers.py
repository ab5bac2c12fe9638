"""Pieces shared by the environment adapters.

Every adapter ends with :func:`finish`, so all environments agree on the contract of
:class:`~wmzoo.hookspecs.EnvEntry`: uint8 RGB observations ``(3, size, size)``, discrete actions,
the Gymnasium API, and ``make(name, seed=s).reset()`` equal to ``make(name).reset(seed=s)``.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import io
import logging
import re
import warnings
from collections.abc import Iterable
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box

from wmzoo.errors import MissingDependencyError, UnknownNameError


def require(module: str, env_name: str, extra: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependencyError` with the pip command. What the
    import prints to stderr (legacy gym's "unmaintained since 2022" banner, which Memory Maze and
    Crafter trigger) and its warnings are kept from the user, and so are absl's warnings (dm_control's
    physics: "Cannot set velocity on Entity with no free joint"); errors still raise."""
    try:
        with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            imported = importlib.import_module(module)
        logging.getLogger("absl").setLevel(logging.ERROR)
        return imported
    except ImportError as err:
        missing = err.name or module  # the module that is really missing, e.g. gym for memory_maze
        raise MissingDependencyError(
            f"environment '{env_name}' needs {missing}: pip install \"wmzoo[{extra}]\""
        ) from err


def normalize(name: str) -> str:
    """The key names are matched by: lowercase alphanumerics (``Ms_Pacman`` -> ``mspacman``)."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def unknown_env(name: str, known: Iterable[str], *, prefix: str = "") -> UnknownNameError:
    """An :class:`UnknownNameError` for ``name`` suggesting the closest ``prefix + k`` of ``known``.

    Names are compared without the family ``prefix`` and after :func:`normalize`, so
    ``atari-mspacmn`` finds ``atari-ms_pacman`` and the shared ``atari-`` adds no likeness.
    """
    by_key = {normalize(k): prefix + k for k in known}
    close = difflib.get_close_matches(normalize(name.removeprefix(prefix)), list(by_key), n=3)
    if close:
        hint = "did you mean: " + ", ".join(by_key[k] for k in close) + "?"
    else:
        hint = "for example: " + ", ".join(sorted(by_key.values())[:5])
    return UnknownNameError(f"unknown environment '{name}'; {hint}")


def resize_rgb(image: np.ndarray, size: int) -> np.ndarray:
    """Resize an ``(H, W, 3)`` uint8 image to ``(size, size, 3)`` with PIL's box filter.

    The box filter averages areas when shrinking (like OpenCV's ``INTER_AREA``) and repeats pixels
    when enlarging, which keeps grid-world tiles sharp.
    """
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((size, size), Image.Resampling.BOX))


class SeededAtBuild(gym.Env):
    """Base of a Gymnasium view of an env whose seed is fixed when it is built (Crafter, Memory
    Maze): ``reset(seed=s)`` builds it anew with ``s``; ``reset()`` continues with the next
    episode of the current one. Subclasses give ``_build(seed)`` and ``_first_obs()``."""

    def __init__(self, obs_size: int, num_actions: int) -> None:
        self._env: Any = None
        self.observation_space = Box(0, 255, (obs_size, obs_size, 3), np.uint8)
        self.action_space = gym.spaces.Discrete(num_actions)

    def _build(self, seed: int) -> Any:
        raise NotImplementedError

    def _first_obs(self) -> np.ndarray:
        raise NotImplementedError

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None or self._env is None:
            self.close()
            if seed is None:
                seed = int(self.np_random.integers(2**31 - 1))
            self._env = self._build(seed)
        return self._first_obs(), {}

    def close(self) -> None:
        self._env = None


class ImageObs(gym.ObservationWrapper):
    """``(H, W, 3)`` uint8 RGB -> ``(3, size, size)`` uint8, resizing only when the size differs."""

    def __init__(self, env: gym.Env, size: int) -> None:
        super().__init__(env)
        if size < 1:
            raise ValueError(f"image size must be positive, got {size}")
        self.size = size
        self.observation_space = Box(0, 255, (3, size, size), np.uint8)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        if observation.shape[:2] != (self.size, self.size):
            observation = resize_rgb(observation, self.size)
        return np.ascontiguousarray(observation.transpose(2, 0, 1), dtype=np.uint8)


class SeedOnFirstReset(gym.Wrapper):
    """Use ``make``'s seed at the first ``reset()`` that passes none; also seed the action space."""

    def __init__(self, env: gym.Env, seed: int | None) -> None:
        super().__init__(env)
        self._pending_seed = seed
        if seed is not None:
            self.action_space.seed(seed)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is None:
            seed = self._pending_seed
        self._pending_seed = None
        return self.env.reset(seed=seed, options=options)


def finish(env: gym.Env, *, size: int, seed: int | None) -> gym.Env:
    """Apply the contract common to all adapters to an env with ``(H, W, 3)`` RGB observations."""
    return SeedOnFirstReset(ImageObs(env, size), seed)
