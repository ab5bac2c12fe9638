"""Atari adapter: Atari 100k protocol (IRIS/REM), names, shapes, seeding, life loss."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

ale_py = pytest.importorskip("ale_py")
pytest.importorskip("cv2")

from wmzoo.envs import atari  # noqa: E402
from wmzoo.envs.plugin import ATARI_100K, wmzoo_envs  # noqa: E402
from wmzoo.errors import UnknownNameError  # noqa: E402


def make(name: str, **kwargs) -> gym.Env:
    (found,) = [e for e in wmzoo_envs() if e.matches(name)]
    return found.make(name, **kwargs)


@pytest.fixture(scope="module", autouse=True)
def _registered() -> None:
    gym.register_envs(ale_py)


def test_names_resolve() -> None:
    assert atari.resolve("atari-pong") == "Pong"
    assert atari.resolve("atari-ms_pacman") == atari.resolve("atari-mspacman") == "MsPacman"
    assert atari.resolve("atari-up_n_down") == "UpNDown"
    assert atari.resolve("atari-KungFuMaster") == "KungFuMaster"
    for game in ATARI_100K:
        atari.resolve(f"atari-{game}")


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("atari-pongg", "atari-pong"),
        ("atari-mspacmn", "atari-ms_pacman"),
        ("atari-breakot", "atari-breakout"),
    ],
)
def test_unknown_game(name: str, suggestion: str) -> None:
    with pytest.raises(UnknownNameError) as err:
        make(name)
    message = str(err.value)
    assert message.startswith(f"unknown environment '{name}'; did you mean: ")
    assert suggestion in message and "\n" not in message


def test_pong_contract() -> None:
    env = make("atari-pong", seed=0)
    assert env.observation_space == gym.spaces.Box(0, 255, (3, 64, 64), np.uint8)
    assert env.action_space == gym.spaces.Discrete(6)  # minimal action set
    obs, info = env.reset()
    assert obs.shape == (3, 64, 64) and obs.dtype == np.uint8
    assert info["lives"] == 0  # Pong has no lives
    assert obs.std() > 0  # an actual screen (RGB, not blank)
    assert not np.array_equal(obs[0], obs[1])  # colour, not grey
    for _ in range(5):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert obs.shape == (3, 64, 64) and obs.dtype == np.uint8
        assert type(reward) is float and not terminated and not truncated
    assert info["episode_frame_number"] > 20  # frame skip 4 after at least one no-op
    env.close()


def test_seeding_and_size() -> None:
    a, _ = make("atari-ms_pacman", seed=7).reset()
    b, _ = make("atari-mspacman").reset(seed=7)
    assert np.array_equal(a, b)
    small, _ = make("atari-ms_pacman", size=32).reset(seed=7)
    assert small.shape == (3, 32, 32) and small.dtype == np.uint8


def test_action_spaces_minimal() -> None:
    games = ("breakout", "boxing", "seaquest")
    sizes = {game: make(f"atari-{game}").action_space.n for game in games}
    assert sizes == {"breakout": 4, "boxing": 18, "seaquest": 18}


def test_life_loss_is_terminal_in_training_and_game_continues() -> None:
    env = make("atari-breakout", seed=0)
    _, info = env.reset()
    assert info["lives"] == 5
    for _ in range(2000):
        _, _, terminated, truncated, info = env.step(env.action_space.sample())
        if terminated or truncated:
            break
    assert terminated and not truncated and info["lives"] == 4
    frame = info["episode_frame_number"]
    _, info = env.reset()  # continues the same game
    assert info["lives"] == 4 and info["episode_frame_number"] > frame


def test_evaluation_episode_is_the_whole_game() -> None:
    env = make("atari-breakout", seed=0, train=False)
    env.reset()
    for _ in range(5000):
        _, _, terminated, truncated, info = env.step(env.action_space.sample())
        if terminated or truncated:
            break
    assert terminated and info["lives"] == 0
