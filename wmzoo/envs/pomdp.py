"""Memory benchmarks observed as vectors (issue 31): POPGym (``popgym-*``) and BSuite's memory
experiments (``bsuite-memory-len-*``, ``bsuite-discounting-chain-*``). Each wraps its package's own
environment classes, their episode lengths and rewards unchanged; only observations and actions
are mapped to wmzoo's spec: one float32 vector entry, discrete (or ``[-1, 1]``) actions.

``popgym-<task>-<difficulty>`` — POPGym (Morad et al., ICLR 2023; the ``popgym`` package), the
class ``popgym.envs.<Class><Difficulty>`` built with no arguments, for ``<difficulty>`` in
``easy``, ``medium``, ``hard``. Tasks (POPGym's paper names; the class where it differs):
``repeat-previous``, ``repeat-first``, ``autoencode``, ``count-recall``, ``stateless-cartpole``
(``PositionOnlyCartPole``), ``noisy-stateless-cartpole`` (``NoisyPositionOnlyCartPole``),
``stateless-pendulum`` (``PositionOnlyPendulum``), ``noisy-stateless-pendulum``
(``NoisyPositionOnlyPendulum``), ``velocity-only-cartpole``, ``multiarmed-bandit``,
``higher-lower``, ``battleship``, ``concentration``, ``minesweeper``. POPGym's Labyrinth tasks
need ``mazelib`` and are not registered. Protocol (POPGym's own): rewards are scaled so that an
episode's return lies in [-1, 1] (POPGym's normalised return; 1 = every answer right, or the
pole balanced for the whole episode), episodes end at the task's own length (e.g. RepeatPrevious
51 / 103 / 155 steps, RepeatFirst 51 / 415 / 831, Autoencode 103 / 207 / 311, CountRecall 51 /
103 / 207, Stateless CartPole at most 200 / 400 / 600 ending in truncation, Noisy Stateless
CartPole at most 200 with observation noise σ = 0.1 / 0.2 / 0.3). No time limit or
previous-action wrapper is added (a world model reads the action itself).

- Observations: one entry ``observation``, POPGym's space flattened by ``gymnasium.spaces.flatten``
  into float32: a ``Discrete(n)`` part is a one-hot of length ``n``, a ``MultiDiscrete`` is one
  one-hot per element, concatenated, a ``Box`` its values, and a ``Tuple`` its parts in order (so
  RepeatPrevious's card suit is a one-hot of 4; Autoencode's ``(mode, suit)`` is 2 + 4 values).
- Actions: ``Discrete`` as it is; ``MultiDiscrete`` (Battleship's and MineSweeper's
  ``(row, column)``) raveled into one ``Discrete(prod(nvec))`` by POPGym's own ``DiscreteAction``
  wrapper (action ``i`` is ``numpy.unravel_index(i, nvec)``); ``Box`` (the Pendulums' torque in
  ``[-2, 2]``) is ``[-1, 1]`` rescaled to the bounds, as ``gym-pendulum``. Any other space is
  refused in one line.
- ``-full`` (``popgym-stateless-cartpole-easy-full``): the memoryless control, POPGym's own
  fully observable counterpart ``popgym.wrappers.Markovian(env, Observability.FULL)``, which
  observes the task's hidden Markov state (``get_state()``) instead, as one entry ``state``,
  flattened the same way, with the same rewards and episode ends. For the CartPoles it is the
  full CartPole state (position, velocity, angle, angular velocity); for RepeatPrevious the last
  ``k`` suits and the dealt-card counts; for RepeatFirst the first suit. Every task has it.
- Seeds: ``reset(seed=s)`` is POPGym's; ``make``'s seed is used at the first reset.

``bsuite-memory-len-<L>`` — BSuite's Memory Length experiment (Osband et al., ICLR 2020;
``bsuite.experiments.memory_len.load(L, seed)``, the ``MemoryChain`` env with one bit), for the
23 lengths BSuite sweeps, ``L`` in 1–10, 12, 14, 17, 20, 25, 30, 40, …, 100 (BSuite's
``memory_len/<i>`` is the ``i``-th of them). The first observation shows a context bit (±1); the
agent must repeat it with its action after ``L`` more steps: episodes are ``L + 1`` steps, reward 0
until the last step, then +1 if the action equals the context bit (success) and -1 otherwise, so a
random policy averages 0. BSuite's step returns the observation of the time before it counts on,
so the first observation comes twice: the bit is in view in observations 0 and 1, and the answer
follows observation ``L`` (``L - 1`` steps without it; at ``L`` = 1 it is still in view). Observations: BSuite's ``(1, 3)`` float32 array ``[time left, query,
context]`` flattened to one entry ``observation`` (3,); 2 actions. Episodes end in termination
(discount 0). Seeds: BSuite fixes a ``MemoryChain``'s random state when built, so
``reset(seed=s)`` builds it anew with ``s`` and ``reset()`` continues with its next episode.

``bsuite-discounting-chain-<id>`` — BSuite's Discounting Chain experiment (credit assignment over
horizons; ``bsuite.experiments.discounting_chain.load(mapping_seed=id)``), for BSuite's 20 settings
``id`` in 0–19; BSuite takes ``id % 5``, so ``id`` and ``id + 5`` are the same env, as in its
sweep. The first action chooses one of 5 chains, whose reward +1 comes 1, 3, 10, 30 or 100
steps later; chain ``id % 5`` pays 1.1 instead (success: return 1.1, BSuite's optimal return).
Episodes are 100 steps, ending in termination. Observations: ``[chain (-1 before the choice),
t / 100]`` as one entry ``observation`` (2,); 5 actions. The env is deterministic: seeds change
nothing.

``size`` and ``train`` change nothing for these envs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from wmzoo.envs.plugin import BSUITE_DISCOUNTING_CHAIN_IDS, BSUITE_MEMORY_LENGTHS, POPGYM_DIFFICULTIES, POPGYM_TASKS
from wmzoo.envs.state import StateDict, unit_actions
from wmzoo.envs.wrappers import SeededAtBuild, SeedOnFirstReset, require, unknown_env
from wmzoo.errors import WmzooError
from wmzoo.hookspecs import EnvMemory

POPGYM = "popgym-"
FULL = "-full"
MEMORY_LEN = "bsuite-memory-len-"
DISCOUNTING_CHAIN = "bsuite-discounting-chain-"


def popgym_names() -> tuple[str, ...]:
    """Every ``popgym-<task>-<difficulty>`` name (without the ``-full`` controls)."""
    return tuple(f"{POPGYM}{task}-{d}" for task in POPGYM_TASKS for d in POPGYM_DIFFICULTIES)


def popgym_parts(name: str) -> tuple[str, str, bool]:
    """``(task, difficulty, full)`` of a ``popgym-*`` name, or :func:`unknown_env`'s error."""
    base = name.lower()
    full = base.endswith(FULL)
    base = base.removesuffix(FULL) if full else base
    task, _, difficulty = base.removeprefix(POPGYM).rpartition("-")
    if not base.startswith(POPGYM) or task not in POPGYM_TASKS or difficulty not in POPGYM_DIFFICULTIES:
        raise unknown_env(name, [n.removeprefix(POPGYM) for n in popgym_names()], prefix=POPGYM)
    return task, difficulty, full


def popgym_class(name: str) -> tuple[str, bool]:
    """``(class name in popgym.envs, full)`` of a ``popgym-*`` name, or :func:`unknown_env`'s error."""
    task, difficulty, full = popgym_parts(name)
    return POPGYM_TASKS[task] + difficulty.capitalize(), full


# How far back each POPGym task's answer lies at the latest step it is asked, per difficulty:
# RepeatPrevious the suit k cards back (k = 4 / 32 / 64), RepeatFirst the first card, asked at every
# step up to the last of num_cards - 1 (1 / 8 / 16 decks). tests/envs/test_pomdp.py reads both from
# POPGym's classes.
POPGYM_MEMORY_STEPS = {"repeat-previous": (4, 32, 64), "repeat-first": (51, 415, 831)}


def popgym_memory(name: str) -> EnvMemory | None:
    """``popgym-<task>-<difficulty>``: steps of memory of the tasks in :data:`POPGYM_MEMORY_STEPS`
    (0 for their ``-full`` controls, which observe the hidden state); other tasks: ``None``."""
    task, difficulty, full = popgym_parts(name)
    if task not in POPGYM_MEMORY_STEPS:
        return None
    return EnvMemory(f"{POPGYM}{task}", 0 if full else POPGYM_MEMORY_STEPS[task][POPGYM_DIFFICULTIES.index(difficulty)])


def bsuite_memory(name: str) -> EnvMemory | None:
    """``bsuite-memory-len-<L>``: ``L - 1`` steps (the bit is in view in observations 0 and 1, see
    the module docstring). From ``L`` = 2 on any policy without memory averages return 0 (the bit
    is ±1 with equal chance and no observation the answer can see depends on it); at ``L`` = 1 the
    bit is still in view (no memory needed: a control, no bound declared). Discounting Chain is
    not a memory test: ``None``."""
    if not name.lower().startswith(MEMORY_LEN):
        return None
    steps = _setting(name, MEMORY_LEN, BSUITE_MEMORY_LENGTHS) - 1
    return EnvMemory(MEMORY_LEN.removesuffix("-"), steps, {"mean_return": 0.0} if steps > 0 else {})


def popgym_actions(env: gym.Env, name: str) -> gym.Env:
    """POPGym's action space in wmzoo's terms (see the module docstring)."""
    space = env.action_space
    if isinstance(space, spaces.Discrete):
        return env
    if isinstance(space, spaces.MultiDiscrete):
        from popgym.wrappers import DiscreteAction

        return DiscreteAction(env)
    if isinstance(space, spaces.Box):
        return unit_actions(env)
    raise WmzooError(f"environment '{name}': POPGym action space {space} has no discrete or [-1, 1] form")


def make_popgym(name: str, *, seed: int | None = None, size: int = 64, train: bool = True) -> gym.Env:
    """``popgym-<task>-<difficulty>[-full]``: a POPGym task as one vector entry."""
    cls, full = popgym_class(name)
    require("popgym", name, "popgym")
    import popgym.envs

    env: gym.Env = getattr(popgym.envs, cls)()
    if full:
        from popgym.core.observability import Observability
        from popgym.wrappers import Markovian

        env = Markovian(env, Observability.FULL)
    env = popgym_actions(env, name)
    return SeedOnFirstReset(StateDict(env, "state" if full else "observation"), seed)


class BSuiteEnv(SeededAtBuild):
    """Gymnasium view of a BSuite ``dm_env`` environment with a discrete action spec, ``load(seed)``
    building it anew at ``reset(seed=...)``; its float32 array observations as they are."""

    def __init__(self, load: Callable[[int], Any]) -> None:
        probe = load(0)
        super().__init__(1, int(probe.action_spec().num_values))
        self._load = load
        self.observation_space = spaces.Box(-np.inf, np.inf, probe.observation_spec().shape, np.float32)

    def _build(self, seed: int) -> Any:
        return self._load(seed)

    def _first_obs(self) -> np.ndarray:
        return self._env.reset().observation

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        ts = self._env.step(int(action))
        terminated = bool(ts.last() and ts.discount == 0.0)
        truncated = bool(ts.last() and not terminated)
        return ts.observation, float(ts.reward), terminated, truncated, {}


def _setting(name: str, prefix: str, known: tuple[int, ...]) -> int:
    value = name.lower().removeprefix(prefix)
    if not name.lower().startswith(prefix) or not value.isdigit() or int(value) not in known:
        raise unknown_env(name, [str(k) for k in known], prefix=prefix)
    return int(value)


def make_bsuite(name: str, *, seed: int | None = None, size: int = 64, train: bool = True) -> gym.Env:
    """``bsuite-memory-len-<L>`` or ``bsuite-discounting-chain-<id>``: a BSuite memory
    experiment's setting as one vector entry."""
    if name.lower().startswith(MEMORY_LEN):
        length = _setting(name, MEMORY_LEN, BSUITE_MEMORY_LENGTHS)
        require("bsuite", name, "bsuite")
        from bsuite.experiments.memory_len import memory_len

        load: Callable[[int], Any] = lambda s: memory_len.load(length, seed=s)  # noqa: E731
    else:
        mapping = _setting(name, DISCOUNTING_CHAIN, BSUITE_DISCOUNTING_CHAIN_IDS)
        require("bsuite", name, "bsuite")
        from bsuite.experiments.discounting_chain import discounting_chain

        load = lambda s: discounting_chain.load(mapping_seed=mapping)  # noqa: E731
    return SeedOnFirstReset(StateDict(BSuiteEnv(load), "observation"), seed)
