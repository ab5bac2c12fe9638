"""LIBERO's simulator: registered (``libero-*``), no adapter yet.

LIBERO's demonstrations import without it (``wmzoo data import-libero``, :mod:`wmzoo.data.libero`).
An adapter (64x64 agentview pixels flipped upright, 7-D continuous actions, the task's instruction
in ``info["mission"]``, ``info["success"]`` from the env's success check) was not built: the
``libero`` package (0.1.1, with robosuite 1.4.0) installs, but building any of its envs needs scene
assets that the package does not ship and fetches from the Hugging Face Hub at run time, which
the machine it was written on cannot reach, so no adapter could be run or tested (docs/datasets.md,
"LIBERO").
"""

from __future__ import annotations

import gymnasium as gym

from wmzoo.envs.wrappers import require
from wmzoo.errors import WmzooError


def make(name: str, *, seed: int | None = None, size: int = 64, train: bool = True) -> gym.Env:
    """Refuse in one line: LIBERO when it is missing, else the missing adapter."""
    require("libero", name, "libero")
    raise WmzooError(f"environment '{name}': wmzoo has no LIBERO simulator adapter yet (see docs/datasets.md, "
                     "LIBERO); its demonstrations import with: wmzoo data import-libero")
