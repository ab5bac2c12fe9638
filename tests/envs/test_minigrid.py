"""MiniGrid adapter: name resolution, pixel partial view, mission in info, seeding."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("minigrid")

from wmzoo.envs import minigrid as adapter  # noqa: E402
from wmzoo.envs.plugin import MINIGRID_EXAMPLES, wmzoo_envs  # noqa: E402
from wmzoo.errors import UnknownNameError  # noqa: E402


def make(name: str, **kwargs) -> gym.Env:
    (found,) = [e for e in wmzoo_envs() if e.matches(name)]
    return found.make(name, **kwargs)


@pytest.mark.parametrize(
    ("name", "env_id"),
    [
        ("minigrid-memory-s7", "MiniGrid-MemoryS7-v0"),
        ("minigrid-memorys7", "MiniGrid-MemoryS7-v0"),
        ("minigrid-empty-5x5", "MiniGrid-Empty-5x5-v0"),
        ("minigrid-doorkey-5x5", "MiniGrid-DoorKey-5x5-v0"),
        ("minigrid-DoorKey-5x5-v0", "MiniGrid-DoorKey-5x5-v0"),
        ("minigrid-fourrooms", "MiniGrid-FourRooms-v0"),
        ("minigrid-multiroom-n4-s5", "MiniGrid-MultiRoom-N4-S5-v1"),  # newest version
    ],
)
def test_resolve(name: str, env_id: str) -> None:
    import minigrid  # noqa: F401  (registers the ids)

    assert adapter.resolve(name) == env_id


def test_examples_make() -> None:
    for name in MINIGRID_EXAMPLES:
        assert make(name).action_space == gym.spaces.Discrete(7)


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [("minigrid-emptyy-5x5", "minigrid-empty-5x5"), ("minigrid-fourroom", "minigrid-fourrooms")],
)
def test_unknown_task(name: str, suggestion: str) -> None:
    with pytest.raises(UnknownNameError) as err:
        make(name)
    assert str(err.value).startswith(f"unknown environment '{name}'; did you mean: {suggestion}")


def test_contract_and_mission() -> None:
    env = make("minigrid-memory-s7", seed=0)
    assert env.observation_space == gym.spaces.Box(0, 255, (3, 64, 64), np.uint8)
    assert env.action_space == gym.spaces.Discrete(7)
    obs, info = env.reset()
    assert obs.shape == (3, 64, 64) and obs.dtype == np.uint8 and obs.max() > 0
    assert info["mission"] == "go to the matching object at the end of the hallway"
    for action in (2, 2, 0, 1, 2):
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs.shape == (3, 64, 64) and obs.dtype == np.uint8
        assert type(reward) is float and info["mission"].startswith("go to")
    env.close()


def test_pixels_are_the_rgb_partial_view() -> None:
    from minigrid.wrappers import ImgObsWrapper, RGBImgPartialObsWrapper

    obs, _ = make("minigrid-doorkey-5x5", size=56).reset(seed=4)  # 7 cells x 8 px: no resize
    raw_env = ImgObsWrapper(RGBImgPartialObsWrapper(gym.make("MiniGrid-DoorKey-5x5-v0"), 8))
    raw, _ = raw_env.reset(seed=4)
    assert raw.shape == (56, 56, 3)
    assert np.array_equal(obs, raw.transpose(2, 0, 1))


def test_seeding() -> None:
    a, _ = make("minigrid-fourrooms", seed=5).reset()
    b, _ = make("minigrid-fourrooms").reset(seed=5)
    assert np.array_equal(a, b)
    others = [make("minigrid-fourrooms").reset(seed=s)[0] for s in range(6, 10)]
    assert any(not np.array_equal(a, o) for o in others)  # random rooms and start


# --------------------------------------------------------------------------- BabyAI


@pytest.mark.parametrize(
    ("name", "env_id"),
    [
        ("babyai-goto-local", "BabyAI-GoToLocal-v0"),
        ("babyai-goto-red-ball-grey", "BabyAI-GoToRedBallGrey-v0"),
        ("babyai-pickup-loc", "BabyAI-PickupLoc-v0"),
        ("babyai-GoToObjS6", "BabyAI-GoToObjS6-v1"),  # newest version
    ],
)
def test_babyai_resolve(name: str, env_id: str) -> None:
    assert adapter.resolve(name) == env_id


def test_babyai_unknown_level_suggests_babyai_names() -> None:
    # catches: a BabyAI name looked up among MiniGrid's tasks (suggestions from the wrong suite)
    with pytest.raises(UnknownNameError) as err:
        make("babyai-goto-lokal")
    assert str(err.value).startswith("unknown environment 'babyai-goto-lokal'; did you mean: babyai-gotolocal")


@pytest.mark.parametrize(("name", "missions"), [
    ("babyai-goto-red-ball-grey", 1), ("babyai-goto-local", 2), ("babyai-pickup-loc", 2), ("babyai-open-door", 2)])
def test_babyai_expert_solves_every_episode_with_its_mission_recorded(name: str, missions: int) -> None:
    # catches: an expert planning on a stale grid (a bot not re-made at reset fails the next
    # episodes), actions recorded one step off, the mission not recorded or the same for all
    from wmzoo.data.record import record_episode
    from wmzoo.envs.scripted import expert_policy

    env = make(name, seed=0, size=32)
    assert expert_policy(env) is not None and expert_policy(make("minigrid-empty-5x5")) is None
    seen = set()
    for seed in range(8):
        data, scripted = record_episode(env, seed)
        assert not scripted and data["reward"][-2] > 0 and data["terminal"][-2]  # the last step succeeds
        assert data["mission"].shape == data["reward"].shape and len(set(data["mission"])) == 1
        seen.add(str(data["mission"][0]))
    assert len(seen) >= missions  # GoToRedBallGrey has one mission; the others vary
    # replaying the recorded actions in the same env reproduces the episode's success
    env.reset(seed=3)
    data, _ = record_episode(env, 3)
    env.reset(seed=3)
    rewards = [env.step(int(a))[1] for a in data["action"][:-1]]
    assert rewards[-1] == data["reward"][-2] > 0


def test_success_is_the_mission_done_not_the_episode_over() -> None:
    # catches: success read from the episode ending (a time-out truncates with no reward) or set
    # before the step that does the mission
    from wmzoo.envs.scripted import expert_policy

    env = make("babyai-goto-local", seed=0, size=16)
    env.reset(seed=4)
    expert = expert_policy(env)
    flags = []
    done = False
    while not done:
        _, _, terminated, truncated, info = env.step(expert())
        flags.append(info["success"])
        done = terminated or truncated
    assert flags == [False] * (len(flags) - 1) + [True]
    env.reset(seed=4)
    done, steps = False, 0
    while not done:  # turning on the spot never reaches the object: the step limit truncates
        _, reward, terminated, truncated, info = env.step(0)
        done, steps = terminated or truncated, steps + 1
    assert truncated and not terminated and info["success"] is False and reward == 0
