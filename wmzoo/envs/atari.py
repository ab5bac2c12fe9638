"""Atari 2600 games through ALE, preprocessed as in the Atari 100k benchmark of IRIS and REM.

Protocol (REM appendix A.1, Table 2; IRIS's ``make_atari``): ``ALE/<Game>-v5`` with sticky
actions off (``repeat_action_probability=0``) and the minimal action set; frame skip 4 with a max
over the last two frames; RGB resized to ``size x size``; up to 30 no-op actions at reset when
training, 1 at evaluation; a lost life ends the training episode but the next ``reset()``
continues the same game (``EpisodicLifeEnv`` of OpenAI baselines, which IRIS uses); a game is
truncated after 20,000 frames (5,000 agent steps) when training and 108,000 frames (27,000 agent
steps, 30 minutes of play) at evaluation, counted in raw frames, no-ops included, as IRIS's
``TimeLimit`` under its frame skip does. REM's Table 2 prints "Terminate on live loss (train,
test): (No, Yes)"; IRIS's ``config/env/default.yaml`` has ``done_on_life_loss`` True for training
and False for testing, which is what is implemented.

Sticky actions (Machado et al., 2018) are off in the papers; the name suffix ``-sticky`` turns
them on with ALE's default probability 0.25 (``atari-pong-sticky``), ``-sticky<p>`` with ``p``
(``atari-pong-sticky0.1``). The suffix is part of the env name, so training, ``wmzoo eval`` and
``wmzoo imagine`` all use the same setting.

Human-normalised score (Mnih et al., 2015): ``(score - random) / (human - random)`` with the
random and human reference scores of the 26 Atari 100k games in :data:`REFERENCE_SCORES`.

Known difference from IRIS: frames are resized by Gymnasium's ``AtariPreprocessing`` (OpenCV
``INTER_AREA``) where IRIS uses PIL's bilinear filter.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym

from wmzoo.envs.wrappers import finish, normalize, require, unknown_env
from wmzoo.errors import UnknownNameError

PREFIX = "atari-"
MAX_FRAMES_TRAIN = 20_000  # REM Table 2 "Max episode steps (train)": raw frames, as IRIS's TimeLimit
MAX_FRAMES = 108_000  # evaluation: 30 minutes at 60 Hz = 27,000 agent steps at frame skip 4
STICKY = "-sticky"
DEFAULT_STICKY = 0.25  # Machado et al. (2018); ALE v5's default repeat_action_probability

# Random and human scores of the 26 Atari 100k games: REM Table 1, columns "Random" and "Human"
# (the reference scores of Kaiser et al., 2020, used by IRIS, REM and Delta-IRIS).
REFERENCE_SCORES: dict[str, tuple[float, float]] = {
    "alien": (227.8, 7127.7), "amidar": (5.8, 1719.5), "assault": (222.4, 742.0),
    "asterix": (210.0, 8503.3), "bank_heist": (14.2, 753.1), "battle_zone": (2360.0, 37187.5),
    "boxing": (0.1, 12.1), "breakout": (1.7, 30.5), "chopper_command": (811.0, 7387.8),
    "crazy_climber": (10780.5, 35829.4), "demon_attack": (152.1, 1971.0), "freeway": (0.0, 29.6),
    "frostbite": (65.2, 4334.7), "gopher": (257.6, 2412.5), "hero": (1027.0, 30826.4),
    "jamesbond": (29.0, 302.8), "kangaroo": (52.0, 3035.0), "krull": (1598.0, 2665.5),
    "kung_fu_master": (258.5, 22736.3), "ms_pacman": (307.3, 6951.6), "pong": (-20.7, 14.6),
    "private_eye": (24.9, 69571.3), "qbert": (163.9, 13455.0), "road_runner": (11.5, 7845.0),
    "seaquest": (68.4, 42054.7), "up_n_down": (533.4, 11693.2),
}  # fmt: skip


def snake_case(game: str) -> str:
    """``MsPacman`` -> ``ms_pacman`` (the form used in wmzoo names)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", game).lower()


def ale_games() -> list[str]:
    """The games ALE registers as ``ALE/<Game>-v5`` (CamelCase). Needs ``ale_py`` registered."""
    ids = (re.fullmatch(r"ALE/(\w+)-v5", env_id) for env_id in gym.registry)
    return [m[1] for m in ids if m]


def split_name(name: str) -> tuple[str, float]:
    """``atari-pong-sticky0.1`` -> ``("atari-pong", 0.1)``; no suffix: probability 0.

    Raises :class:`UnknownNameError` for a probability outside ``[0, 1]``.
    """
    match = re.fullmatch(rf"(.+){STICKY}(\d*\.?\d*)", name)
    if match is None:
        return name, 0.0
    base, text = match.groups()
    try:
        p = float(text) if text else DEFAULT_STICKY
    except ValueError:
        p = -1.0
    if not 0.0 <= p <= 1.0:
        raise UnknownNameError(
            f"unknown environment '{name}': {STICKY}<p> needs a probability in [0, 1], "
            f"e.g. {base}{STICKY}0.25 (or {base}{STICKY} for 0.25)"
        )
    return base, p


def resolve(name: str) -> str:
    """``atari-ms_pacman`` or ``atari-mspacman`` (any ``-sticky`` suffix ignored) -> ``MsPacman``;
    else UnknownNameError."""
    name = split_name(name)[0]
    games = ale_games()
    by_key = {normalize(game): game for game in games}
    game = by_key.get(normalize(name[len(PREFIX) :])) if name.startswith(PREFIX) else None
    if game is None:
        raise unknown_env(name, [snake_case(g) for g in games], prefix=PREFIX)
    return game


def reference_scores(name: str) -> tuple[float, float] | None:
    """``(random, human)`` scores of an Atari 100k game by wmzoo name, ``None`` for other names.

    Needs no ALE: names are matched after :func:`~wmzoo.envs.wrappers.normalize`.
    """
    base = split_name(name)[0]
    if not base.startswith(PREFIX):
        return None
    by_key = {normalize(game): scores for game, scores in REFERENCE_SCORES.items()}
    return by_key.get(normalize(base[len(PREFIX) :]))


def human_normalized_score(name: str, score: float) -> float | None:
    """``(score - random) / (human - random)`` (Mnih et al., 2015; REM section 3.1) for an Atari
    100k game, ``None`` when ``name`` is not one."""
    ref = reference_scores(name)
    if ref is None:
        return None
    random, human = ref
    return (score - random) / (human - random)


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
    """An Atari game under the Atari 100k protocol (IRIS/REM), observations ``(3, size, size)``;
    ``train`` selects the training or the evaluation protocol (no-ops, life loss, frame cap)."""
    ale_py = require("ale_py", name, "atari")
    require("cv2", name, "atari")  # AtariPreprocessing resizes with OpenCV
    gym.register_envs(ale_py)
    _, sticky = split_name(name)
    game = resolve(name)
    env = gym.make(
        f"ALE/{game}-v5",
        frameskip=1,
        repeat_action_probability=sticky,
        full_action_space=False,
        max_num_frames_per_episode=MAX_FRAMES_TRAIN if train else MAX_FRAMES,
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
