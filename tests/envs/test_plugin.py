"""The environment plugin: its entries, name matching, cheap import, and the shared wrappers."""

from __future__ import annotations

import inspect
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from wmzoo.envs import wrappers
from wmzoo.envs.plugin import ATARI_100K, wmzoo_envs
from wmzoo.errors import MissingDependencyError, UnknownNameError
from wmzoo.hookspecs import EnvEntry
from wmzoo.registry import default_registry


def entry(name: str) -> EnvEntry:
    found = [e for e in wmzoo_envs() if e.matches(name)]
    # the registry's rule: an exact name first, else the longest family prefix
    (best,) = [e for e in found if e.name == name] or [max(found, key=lambda e: len(e.name))]
    assert default_registry().env(name) is best or default_registry().env(name).name == best.name
    return best


def test_entries_and_extras() -> None:
    entries = {e.name: e for e in wmzoo_envs()}
    assert set(entries) == {
        "atari-*", "crafter", "minigrid-*", "babyai-*", "libero-*", "dmc-*",
        "gym-*", "dmc-proprio-*", "minatar-*",  # state-based suites (issue 30)
        "popgym-*", "bsuite-memory-len-*", "bsuite-discounting-chain-*",  # vector memory benchmarks (issue 31)
        "memory-maze-9x9", "memory-maze-11x11", "memory-maze-13x13", "memory-maze-15x15",
        # the s4wm paper's memory tasks (section 5)
        "two-rooms", "four-rooms", "ten-rooms",
        "two-rooms-teleport", "four-rooms-teleport", "ten-rooms-teleport",
        "distracting-memory-8", "distracting-memory-20", "distracting-memory-100", "distracting-memory-200", "distracting-memory-400",
        "multi-doors-keys-3", "multi-doors-keys-5", "multi-doors-keys-7",
    }  # fmt: skip
    assert entries["two-rooms-teleport"].extra == "memory-maze"
    assert entries["distracting-memory-200"].requires == ("minigrid",)
    assert entries["atari-*"].extra == "atari" and "ale_py" in entries["atari-*"].requires
    assert entries["crafter"].requires == ("crafter",)
    assert entries["minigrid-*"].requires == ("minigrid",) == entries["babyai-*"].requires
    assert entries["memory-maze-13x13"].extra == "memory-maze"
    assert entries["libero-*"].requires == ("libero",) and entries["libero-*"].extra == "libero"
    assert entries["dmc-*"].extra == "dmc" and set(entries["dmc-*"].requires) == {"dm_control", "mujoco"}
    assert len(entries["dmc-*"].examples) == 20 and "dmc-walker-walk" in entries["dmc-*"].examples
    assert entries["dmc-proprio-*"].extra == "dmc" and "dmc-proprio-cartpole-swingup" in entries["dmc-proprio-*"].examples
    assert entries["gym-*"].extra == "classic-control" and entries["minatar-*"].extra == "minatar"
    assert entries["minatar-*"].requires == ("minatar",)
    assert entries["popgym-*"].requires == ("popgym",) and entries["popgym-*"].extra == "popgym"
    assert len(entries["popgym-*"].examples) == 14 * 3 + 2 and "popgym-repeat-previous-easy" in entries["popgym-*"].examples
    assert len(entries["bsuite-memory-len-*"].examples) == 23 and len(entries["bsuite-discounting-chain-*"].examples) == 20
    assert entries["bsuite-memory-len-*"].extra == "bsuite" == entries["bsuite-discounting-chain-*"].extra
    assert set(entries["memory-maze-13x13"].requires) == {"memory_maze", "gym", "dm_control"}
    # Catches: a memory task's or a BSuite family's requires or extra wrong (availability misreported)
    for rooms in ("two", "four", "ten"):
        for name in (f"{rooms}-rooms", f"{rooms}-rooms-teleport"):
            assert set(entries[name].requires) == {"memory_maze", "gym", "dm_control"}
            assert entries[name].extra == "memory-maze"
    for name in ("distracting-memory-8", "distracting-memory-20", "distracting-memory-100", "distracting-memory-200",
                 "distracting-memory-400", "multi-doors-keys-3", "multi-doors-keys-5", "multi-doors-keys-7"):
        assert entries[name].requires == ("minigrid",) and entries[name].extra == "minigrid"
    assert entries["bsuite-memory-len-*"].requires == ("bsuite",) == entries["bsuite-discounting-chain-*"].requires
    assert entries["babyai-*"].extra == "minigrid" and "minigrid-memory-s7" in entries["minigrid-*"].examples
    for e in entries.values():
        assert e.description
        params = inspect.signature(e.make).parameters
        assert [p for p in params if params[p].kind is inspect.Parameter.KEYWORD_ONLY] == [
            "seed", "size", "train",
        ]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("atari-pong", "atari-*"),
        ("atari-ms_pacman", "atari-*"),
        ("minigrid-doorkey-5x5", "minigrid-*"),
        ("babyai-goto-local", "babyai-*"),
        ("crafter", "crafter"),
        ("memory-maze", "memory-maze-9x9"),
        ("memory-maze-9x9", "memory-maze-9x9"),
        ("memory-maze-15x15", "memory-maze-15x15"),
        ("dmc-walker-walk", "dmc-*"),
        ("dmc-proprio-walker-walk", "dmc-proprio-*"),
        ("gym-cartpole", "gym-*"),
        ("minatar-breakout", "minatar-*"),
        ("popgym-repeat-previous-easy", "popgym-*"),
        ("popgym-stateless-cartpole-hard-full", "popgym-*"),
        ("bsuite-memory-len-100", "bsuite-memory-len-*"),
        ("bsuite-discounting-chain-0", "bsuite-discounting-chain-*"),
    ],
)
def test_matches_family_and_alias(name: str, expected: str) -> None:
    assert entry(name).name == expected


@pytest.mark.parametrize("name", ["atari-", "minigrid-", "crafter-x", "memory-maze-10x10", "pong", "dmc-", "popgym-",
                                  "bsuite-", "bsuite-memory-len-"])
def test_no_entry_matches(name: str) -> None:
    assert not [e for e in wmzoo_envs() if e.matches(name)]


def test_examples() -> None:
    atari = entry("atari-pong")
    assert len(ATARI_100K) == 26 and len(atari.examples) == 26
    assert {"atari-ms_pacman", "atari-up_n_down", "atari-kung_fu_master"} <= set(atari.examples)
    for e in wmzoo_envs():
        for example in e.examples:
            assert entry(example) is not None and e.matches(example)


def test_plugin_import_is_cheap() -> None:
    heavy = ["ale_py", "crafter", "minigrid", "memory_maze", "cv2", "dm_control", "mujoco", "popgym", "bsuite"]
    code = (
        "import sys, wmzoo.envs.plugin as p; p.wmzoo_envs(); "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("name", "module", "extra"),
    [
        ("atari-pong", "ale_py", "atari"),
        ("crafter", "crafter", "crafter"),
        ("minigrid-empty-5x5", "minigrid", "minigrid"),
        ("memory-maze", "memory_maze", "memory-maze"),
        ("memory-maze-11x11", "gym", "memory-maze"),
        ("libero-spatial", "libero", "libero"),
        ("dmc-walker-walk", "dm_control", "dmc"),
        ("dmc-cartpole-balance", "mujoco", "dmc"),
        ("popgym-repeat-first-easy", "popgym", "popgym"),
        ("bsuite-memory-len-10", "bsuite", "bsuite"),
        ("bsuite-discounting-chain-3", "bsuite", "bsuite"),
    ],
)
def test_missing_dependency(
    monkeypatch: pytest.MonkeyPatch, name: str, module: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(MissingDependencyError) as err:
        entry(name).make(name)
    assert str(err.value) == f"environment '{name}' needs {module}: pip install \"wmzoo[{extra}]\""
    assert isinstance(err.value, ImportError)


def test_unknown_env_message() -> None:
    err = wrappers.unknown_env("atari-mspacmn", ["pong", "ms_pacman"], prefix="atari-")
    assert isinstance(err, UnknownNameError)
    assert str(err) == "unknown environment 'atari-mspacmn'; did you mean: atari-ms_pacman?"
    err = wrappers.unknown_env("atari-zzz", ["pong"], prefix="atari-")
    assert str(err) == "unknown environment 'atari-zzz'; for example: atari-pong"


class _Checker(gym.Env):
    """A 10x20 HWC image env whose first obs depends on the reset seed."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 255, (10, 20, 3), np.uint8)
        self.action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.integers(0, 256, (10, 20, 3), dtype=np.uint8), {}

    def step(self, action):
        return np.full((10, 20, 3), 7, np.uint8), 0.0, False, False, {}


def test_finish_resizes_to_chw_and_applies_seed() -> None:
    env = wrappers.finish(_Checker(), size=8, seed=3)
    assert env.observation_space == gym.spaces.Box(0, 255, (3, 8, 8), np.uint8)
    first, _ = env.reset()
    assert first.shape == (3, 8, 8) and first.dtype == np.uint8 and first.flags.c_contiguous
    assert np.array_equal(first, wrappers.finish(_Checker(), size=8, seed=None).reset(seed=3)[0])
    assert not np.array_equal(first, env.reset()[0])  # the make seed is used once
    obs = env.step(0)[0]
    assert obs.shape == (3, 8, 8) and (obs == 7).all()  # box filter keeps a constant image
    a, b = (wrappers.finish(_Checker(), size=8, seed=3) for _ in range(2))
    assert [a.action_space.sample() for _ in range(9)] == [
        b.action_space.sample() for _ in range(9)
    ]


def test_image_obs_no_resize_is_exact_transpose() -> None:
    img = np.arange(4 * 4 * 3, dtype=np.uint8).reshape(4, 4, 3)
    env = wrappers.ImageObs(_Checker(), size=4)
    assert np.array_equal(env.observation(img), img.transpose(2, 0, 1))
    assert wrappers.resize_rgb(np.zeros((56, 56, 3), np.uint8), 64).shape == (64, 64, 3)
