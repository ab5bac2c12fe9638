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


def _frames(name: str, steps: int = 60) -> list[np.ndarray]:
    """Observations under a fixed action sequence that alternates often (so repeats show)."""
    env = make(name, seed=3)
    obs, _ = env.reset()
    frames = [obs]
    for t in range(steps):
        obs, _, terminated, truncated, _ = env.step((t // 3) % env.action_space.n)
        frames.append(obs)
        if terminated or truncated:
            break
    env.close()
    return frames


def test_sticky_actions_only_when_enabled() -> None:
    ale = lambda name: make(name).unwrapped.ale  # noqa: E731
    assert ale("atari-pong").getFloat("repeat_action_probability") == 0.0
    assert ale("atari-pong-sticky").getFloat("repeat_action_probability") == 0.25
    assert ale("atari-pong-sticky0.1").getFloat("repeat_action_probability") == pytest.approx(0.1)
    plain, off, on = (_frames(n) for n in ("atari-pong", "atari-pong-sticky0", "atari-pong-sticky"))
    assert len(plain) == len(off) and all(np.array_equal(a, b) for a, b in zip(plain, off))
    assert any(not np.array_equal(a, b) for a, b in zip(plain, on))
    with pytest.raises(UnknownNameError, match=r"probability in \[0, 1\]"):
        make("atari-pong-sticky1.5")
    assert atari.resolve("atari-ms_pacman-sticky0.3") == "MsPacman"


def test_episode_caps_follow_the_official_codes() -> None:
    """REM Table 2 / IRIS: 20K raw frames when training, 108K at evaluation."""
    train = make("atari-pong").unwrapped.ale.getInt("max_num_frames_per_episode")
    test = make("atari-pong", train=False).unwrapped.ale.getInt("max_num_frames_per_episode")
    assert (train, test) == (20_000, 108_000)


def test_human_normalized_scores() -> None:
    assert set(atari.REFERENCE_SCORES) == set(ATARI_100K)
    assert atari.human_normalized_score("atari-pong", -20.7) == 0.0
    assert atari.human_normalized_score("atari-pong", 14.6) == pytest.approx(1.0)
    # (16.1 - 1.7) / (30.5 - 1.7) = 0.5
    assert atari.human_normalized_score("atari-breakout", 16.1) == pytest.approx(0.5)
    # any spelling and the sticky suffix; not an Atari 100k game: None
    assert atari.human_normalized_score("atari-MsPacman-sticky", 307.3) == 0.0
    assert atari.human_normalized_score("atari-tennis", 1.0) is None
    assert atari.human_normalized_score("crafter", 1.0) is None
