"""wmzoo's built-in environments, registered through the ``wmzoo_envs`` hook.

Importing this module is cheap: each suite module (and its package) is imported only when one of
its environments is made.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from wmzoo.hookspecs import EnvEntry, EnvMemory, hookimpl

if TYPE_CHECKING:
    import gymnasium

# The 26 games of the Atari 100k benchmark (Kaiser et al., 2020), as used by IRIS and REM.
ATARI_100K = (
    "alien", "amidar", "assault", "asterix", "bank_heist", "battle_zone", "boxing", "breakout",
    "chopper_command", "crazy_climber", "demon_attack", "freeway", "frostbite", "gopher", "hero",
    "jamesbond", "kangaroo", "krull", "kung_fu_master", "ms_pacman", "pong", "private_eye",
    "qbert", "road_runner", "seaquest", "up_n_down",
)  # fmt: skip

MINIGRID_EXAMPLES = (
    "minigrid-empty-5x5",
    "minigrid-empty-8x8",
    "minigrid-doorkey-5x5",
    "minigrid-memory-s7",
    "minigrid-fourrooms",
)

LIBERO_SUITES = ("libero-spatial", "libero-object", "libero-goal", "libero-10", "libero-90")

# The 20 tasks of DreamerV3's DMC Vision benchmark (its published scores,
# scores/data/dmcvision_dreamerv3.json in github.com/danijar/dreamerv3), as dmc-<these>.
DMC_VISION_TASKS = (
    "acrobot-swingup", "cartpole-balance", "cartpole-balance-sparse", "cartpole-swingup",
    "cartpole-swingup-sparse", "cheetah-run", "cup-catch", "finger-spin", "finger-turn-easy",
    "finger-turn-hard", "hopper-hop", "hopper-stand", "pendulum-swingup", "quadruped-run",
    "quadruped-walk", "reacher-easy", "reacher-hard", "walker-run", "walker-stand", "walker-walk",
)  # fmt: skip

# Gymnasium classic control (gym-<these>) and MinAtar's five games (minatar-<these>): wmzoo/envs/state.py
GYM_TASKS = ("cartpole", "acrobot", "mountaincar", "pendulum", "mountaincar-continuous")
MINATAR_GAMES = ("asterix", "breakout", "freeway", "seaquest", "space-invaders")

# POPGym's tasks (popgym-<task>-<difficulty>[-full]: wmzoo/envs/pomdp.py): the paper's names, each
# to its class prefix in popgym.envs (the class is <prefix><Difficulty>). Labyrinths need mazelib: left out.
POPGYM_TASKS = {
    "repeat-previous": "RepeatPrevious", "repeat-first": "RepeatFirst", "autoencode": "Autoencode",
    "count-recall": "CountRecall", "stateless-cartpole": "PositionOnlyCartPole",
    "noisy-stateless-cartpole": "NoisyPositionOnlyCartPole", "stateless-pendulum": "PositionOnlyPendulum",
    "noisy-stateless-pendulum": "NoisyPositionOnlyPendulum", "velocity-only-cartpole": "VelocityOnlyCartPole",
    "multiarmed-bandit": "MultiarmedBandit", "higher-lower": "HigherLower", "battleship": "Battleship",
    "concentration": "Concentration", "minesweeper": "MineSweeper",
}  # fmt: skip
POPGYM_DIFFICULTIES = ("easy", "medium", "hard")
# BSuite's sweeps (bsuite/experiments/<name>/sweep.py): memory_len's 23 lengths, discounting_chain's 20 seeds
BSUITE_MEMORY_LENGTHS = (*range(1, 11), 12, 14, 17, 20, 25, *range(30, 101, 10))
BSUITE_DISCOUNTING_CHAIN_IDS = tuple(range(20))

BABYAI_EXAMPLES = (
    "babyai-goto-red-ball-grey",
    "babyai-goto-local",
    "babyai-pickup-loc",
    "babyai-open-door",
)


def _lazy_make(module: str, function: str = "make") -> Callable[..., gymnasium.Env]:
    """``function`` (default ``make``) of ``wmzoo.envs.<module>``, imported at the first call."""

    def make(
        name: str, *, seed: int | None = None, size: int = 64, train: bool = True
    ) -> gymnasium.Env:
        suite = importlib.import_module(f"wmzoo.envs.{module}")
        return getattr(suite, function)(name, seed=seed, size=size, train=train)

    make.__qualname__ = make.__name__ = f"make_{module}"
    make.__doc__ = f"Make an environment of :mod:`wmzoo.envs.{module}`."
    return make


def _lazy_memory(module: str, function: str) -> Callable[[str], EnvMemory | None]:
    """``function(name)`` of ``wmzoo.envs.<module>`` (an :class:`EnvMemory` or ``None``), imported at
    the first call; the module's env package is not imported."""

    def memory(name: str) -> EnvMemory | None:
        return getattr(importlib.import_module(f"wmzoo.envs.{module}"), function)(name)

    memory.__qualname__ = memory.__name__ = function
    return memory


@hookimpl
def wmzoo_envs() -> list[EnvEntry]:
    """Atari (family ``atari-*``), Crafter, MiniGrid (families ``minigrid-*``, ``babyai-*``),
    the DeepMind Control Suite (``dmc-*``), LIBERO (``libero-*``), Memory Maze, the state-based
    suites (``gym-*``, ``dmc-proprio-*``, ``minatar-*``) and the vector memory benchmarks
    (``popgym-*``, ``bsuite-memory-len-*``, ``bsuite-discounting-chain-*``)."""
    memory_maze = _lazy_make("memory_maze")
    return [
        EnvEntry(
            name="atari-*",
            make=_lazy_make("atari"),
            requires=("ale_py", "cv2"),
            extra="atari",
            description="Atari 2600 (ALE), Atari 100k protocol of IRIS/REM: frame skip 4, "
            "30 no-op starts, life loss ends training episodes; no sticky actions "
            "(name suffix -sticky for p = 0.25, -sticky<p> for another p)",
            examples=tuple(f"atari-{game}" for game in ATARI_100K),
        ),
        EnvEntry(
            name="crafter",
            make=_lazy_make("crafter"),
            requires=("crafter",),
            extra="crafter",
            description="Crafter: open-world survival, 22 achievements, 17 actions",
        ),
        EnvEntry(
            name="minigrid-*",
            make=_lazy_make("minigrid"),
            requires=("minigrid",),
            extra="minigrid",
            description="MiniGrid tasks, 7x7 partial view rendered as RGB (tile size 8), 7 actions",
            examples=MINIGRID_EXAMPLES,
        ),
        EnvEntry(
            name="babyai-*",
            make=_lazy_make("minigrid"),
            requires=("minigrid",),
            extra="minigrid",
            description="BabyAI levels: language missions (info['mission']), the 7x7 partial view as RGB, "
            "7 actions; an expert (BabyAIBot) that wmzoo data generate records",
            examples=BABYAI_EXAMPLES,
        ),
        EnvEntry(
            name="gym-*",
            make=_lazy_make("state", "make_gym"),
            requires=("gymnasium",),
            extra="classic-control",
            description="Gymnasium classic control from states (Gymnasium's own protocol and time limits): "
            "one vector entry 'state'; continuous actions in [-1, 1] rescaled to the env's bounds",
            examples=tuple(f"gym-{task}" for task in GYM_TASKS),
        ),
        EnvEntry(
            name="dmc-proprio-*",
            make=_lazy_make("state", "make_dmc_proprio"),
            requires=("mujoco", "dm_control"),
            extra="dmc",
            description="DeepMind Control Suite from states, DreamerV3's DMC Proprio protocol: every "
            "observation of the task a vector entry, action repeat 2, 1000 control steps (500 agent steps)",
            examples=tuple(f"dmc-proprio-{task}" for task in DMC_VISION_TASKS),
        ),
        EnvEntry(
            name="minatar-*",
            make=_lazy_make("state", "make_minatar"),
            requires=("minatar",),
            extra="minatar",
            description="MinAtar (Young & Tian, 2019): 10x10 binary channels as one image entry (0/255), "
            "sticky actions p = 0.1, difficulty ramping, 6 actions",
            examples=tuple(f"minatar-{game}" for game in MINATAR_GAMES),
        ),
        EnvEntry(
            name="popgym-*",
            make=_lazy_make("pomdp", "make_popgym"),
            requires=("popgym",),
            extra="popgym",
            description="POPGym (Morad et al., 2023) memory tasks, popgym-<task>-<easy|medium|hard>: POPGym's "
            "classes, episode lengths and rewards (return in [-1, 1]); one vector entry 'observation' "
            "(discrete parts one-hot); suffix -full: POPGym's fully observable control (entry 'state')",
            examples=(*(f"popgym-{task}-{d}" for task in POPGYM_TASKS for d in POPGYM_DIFFICULTIES),
                      "popgym-stateless-cartpole-easy-full", "popgym-repeat-previous-easy-full"),
            memory=_lazy_memory("pomdp", "popgym_memory"),
        ),
        *(
            EnvEntry(
                name=f"bsuite-{experiment}-*",
                make=_lazy_make("pomdp", "make_bsuite"),
                requires=("bsuite",),
                extra="bsuite",
                description=description,
                examples=tuple(f"bsuite-{experiment}-{n}" for n in settings),
                memory=_lazy_memory("pomdp", "bsuite_memory") if experiment == "memory-len" else None,
            )
            for experiment, settings, description in (
                ("memory-len", BSUITE_MEMORY_LENGTHS, "BSuite Memory Length (memory_len), bsuite-memory-len-<L> at "
                 "BSuite's 23 lengths: repeat the first step's context bit after L steps (reward +1 right, -1 "
                 "wrong, at the end); one vector entry 'observation' (3), 2 actions"),
                ("discounting-chain", BSUITE_DISCOUNTING_CHAIN_IDS, "BSuite Discounting Chain, "
                 "bsuite-discounting-chain-<0..19> (BSuite's mapping seeds): 5 chains paying +1 after 1, 3, 10, "
                 "30 or 100 steps, chain id % 5 pays 1.1; 100-step episodes; one vector entry 'observation' (2), "
                 "5 actions"),
            )
        ),
        EnvEntry(
            name="dmc-*",
            make=_lazy_make("dmc"),
            requires=("mujoco", "dm_control"),
            extra="dmc",
            description="DeepMind Control Suite from 64x64 pixels, DreamerV3's protocol: action repeat 2, "
            "continuous actions in [-1, 1] rescaled to the task's bounds, 500-step episodes "
            "(MuJoCo, needs OpenGL: MUJOCO_GL=egl)",
            examples=tuple(f"dmc-{task}" for task in DMC_VISION_TASKS),
        ),
        EnvEntry(
            name="libero-*",
            make=_lazy_make("libero"),
            requires=("libero",),
            extra="libero",
            description="LIBERO suites (robosuite/MuJoCo): 10 language-conditioned manipulation tasks each, "
            "7-D continuous actions; demonstrations: wmzoo data import-libero (no simulator needed)",
            examples=LIBERO_SUITES,
        ),
        *(
            EnvEntry(
                name=f"memory-maze-{size}",
                make=memory_maze,
                requires=("memory_maze", "gym", "dm_control"),
                extra="memory-maze",
                description=f"Memory Maze {size}: 3D maze, find targets of a given colour, "
                "6 actions (MuJoCo, needs OpenGL: MUJOCO_GL=egl)",
                aliases=("memory-maze",) if size == "9x9" else (),
            )
            for size in ("9x9", "11x11", "13x13", "15x15")
        ),
        *(
            EnvEntry(
                name=name,
                make=_lazy_make("memory_tasks_3d"),
                requires=("memory_maze", "gym", "dm_control"),
                extra="memory-maze",
                description=f"s4wm memory task {name} (3D, Memory Maze engine, scripted policy)",
            )
            for rooms in ("two", "four", "ten")
            for name in (f"{rooms}-rooms", f"{rooms}-rooms-teleport")
        ),
        *(
            EnvEntry(
                name=name,
                make=_lazy_make("memory_tasks_2d"),
                requires=("minigrid",),
                extra="minigrid",
                description=f"s4wm memory task {name} (2D MiniGrid, scripted policy)",
            )
            for name in (
                *(f"distracting-memory-{w}" for w in (8, 20, 100, 200, 400)),
                *(f"multi-doors-keys-{k}" for k in (3, 5, 7)),
            )
        ),
    ]
