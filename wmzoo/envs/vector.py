"""Several copies of an environment stepped together (Gymnasium's vector API).

``make_vector_env(name, n, ...)`` returns a :class:`gymnasium.vector.VectorEnv` of ``n`` wmzoo
environments: ``"async"`` runs each in its own process (``AsyncVectorEnv``, so environments step
on every core while the agent waits), ``"sync"`` steps them one after another in this process
(``SyncVectorEnv``). Environment ``i`` is made with ``seed + i``, as a list of single
environments would be.

Both reset an environment in the same ``step()`` call that ends its episode (Gymnasium's
``SAME_STEP`` autoreset): the returned observation is the next episode's first one, and
``info["final_obs"][i]`` (where ``info["_final_obs"][i]``) is the episode's last. That is what
wmzoo's replay rows need (:mod:`wmzoo.interfaces`): the final observation closes the episode as
its own row, then the next row is the new episode's first (``is_first``).

Async workers start with ``multiprocessing``'s ``forkserver`` method, so a script that builds an
async vector env (``train_online`` with ``train.envs > 1``) needs the usual
``if __name__ == "__main__":`` guard; the ``wmzoo`` command has it.
"""

from __future__ import annotations

import copy
import functools
from types import SimpleNamespace
from typing import Literal

import gymnasium as gym
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv

from wmzoo.errors import WmzooError
from wmzoo.interfaces import EnvInfo
from wmzoo.registry import env_info, make_env

VectorMode = Literal["sync", "async"]


def make_vector_env(
    name: str,
    n: int,
    *,
    seed: int | None = None,
    size: int = 64,
    train: bool = True,
    mode: VectorMode = "async",
) -> VectorEnv:
    """``n`` copies of the wmzoo environment ``name`` (copy ``i`` seeded ``seed + i``).

    Both kinds make the first copy in this process first (``AsyncVectorEnv`` to read the spaces),
    so a bad name or a missing dependency fails with its one line before any process starts.
    """
    if n < 1:
        raise WmzooError(f"need at least one environment, got {n}")
    if mode not in ("sync", "async"):
        raise WmzooError(f"vector mode {mode!r}: choose sync or async")
    fns = [
        functools.partial(
            make_env, name, seed=None if seed is None else seed + i, size=size, train=train
        )
        for i in range(n)
    ]
    if mode == "async":
        # forkserver, not fork: a forked worker inherits the trainer's threads and OpenGL state;
        # seen here: Memory Maze workers hung at reset when forked from a process that had
        # already made Memory Maze envs. Workers start from a clean interpreter instead.
        return AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP, context="forkserver")
    return SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)


def vector_env_info(envs: VectorEnv, name: str) -> EnvInfo:
    """The :class:`EnvInfo` (shapes) of one environment of ``envs``."""
    single = SimpleNamespace(
        observation_space=envs.single_observation_space, action_space=envs.single_action_space
    )
    return env_info(single, name)


def action_samplers(envs: VectorEnv, seed: int) -> list[gym.Space]:
    """One copy of the single action space per environment, copy ``i`` seeded ``seed + i``:
    random actions drawn here do not depend on where (which process) the environments run."""
    spaces = []
    for i in range(envs.num_envs):
        space = copy.deepcopy(envs.single_action_space)
        space.seed(seed + i)
        spaces.append(space)
    return spaces
