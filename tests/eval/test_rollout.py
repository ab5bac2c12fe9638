"""Evaluation summaries: human-normalised score for Atari 100k games, achievements and the
Crafter score where episodes count achievements."""

from __future__ import annotations

import pytest

from wmzoo.eval.rollout import EpisodeResult, summarize, unlocked


def _crafter_episode(ret: float, counts: dict[str, int]) -> EpisodeResult:
    info = {"discount": 0.0, "achievements": {k: float(v) for k, v in counts.items()}}
    return EpisodeResult(ret, 100, info, unlocked(info))


def test_unlocked_achievements():
    assert unlocked({"achievements": {"collect_wood": 3, "wake_up": 0, "eat_cow": 1}}) == ["collect_wood", "eat_cow"]
    assert unlocked({"lives": 3}) is None


def test_crafter_summary():
    names = ("collect_wood", "place_table", "wake_up", "eat_cow")
    episodes = [
        _crafter_episode(2.0, dict.fromkeys(names, 0) | {"collect_wood": 2, "wake_up": 1}),
        _crafter_episode(1.0, dict.fromkeys(names, 0) | {"collect_wood": 1}),
    ]
    assert episodes[0].achievements == ["collect_wood", "wake_up"]
    out = summarize("crafter", episodes)
    assert out["mean_return"] == 1.5 and "human_normalized_score" not in out
    assert out["success_rates"] == {"collect_wood": 100.0, "eat_cow": 0.0, "place_table": 0.0, "wake_up": 50.0}
    assert out["crafter_score"] == pytest.approx((101 * 51) ** (1 / 4) - 1)


def test_atari_and_plain_summaries():
    episodes = [EpisodeResult(10.0, 50, {"lives": 0}), EpisodeResult(22.2, 70, {"lives": 0})]
    out = summarize("atari-breakout", episodes)  # (16.1 - 1.7) / (30.5 - 1.7)
    assert out == {"mean_return": pytest.approx(16.1), "human_normalized_score": pytest.approx(0.5)}
    assert summarize("minigrid-empty-5x5", episodes) == {"mean_return": pytest.approx(16.1)}


def test_each_episode_is_reported_as_it_ends(tmp_path, capsys):
    # Catches: `wmzoo eval` silent until every episode has run (minutes on a long evaluation),
    # or the per-episode callback given another episode's result.
    from wmzoo.cli import main
    from wmzoo.config import run_spec
    from wmzoo.eval.rollout import evaluate
    from wmzoo.registry import env_info, make_env
    from wmzoo.train.agent import Agent

    run = run_spec("rssm", "minigrid-empty-5x5", "tiny", None, None, None, [])
    env = make_env(run.env, size=run.train.image_size)
    agent = Agent(run, env_info(env, run.env))
    env.close()
    seen: list[tuple[int, float, int]] = []
    results = evaluate(agent, 3, 5, uniform=True, on_episode=lambda i, r: seen.append((i, r.ret, r.length)))
    assert seen == [(i, r.ret, r.length) for i, r in enumerate(results)] and len(seen) == 3
    logdir = tmp_path / "run"
    assert main(["run", "--backbone", "rssm", "--env", "minigrid-empty-5x5", "--preset", "tiny", "--steps", "5",
                 "--logdir", str(logdir), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(logdir / "checkpoint.safetensors"), "--episodes", "2", "--max-steps", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["episode 1 of 2", "episode 2 of 2"]


class _RecordingEnv:
    """An env that ends every episode after ``length`` steps and records how it was reset and seeded."""

    def __init__(self, length: int = 3) -> None:
        import numpy as np

        self.length, self.t, self.resets, self.action_seeds, self.closed = length, 0, [], [], False
        env = self

        class Space:
            def seed(self, seed):
                env.action_seeds.append(seed)

            def sample(self):
                return np.int64(0)

        self.action_space = Space()

    def reset(self, seed=None):
        import numpy as np

        self.resets.append(seed)
        self.t = 0
        return np.zeros((3, 8, 8), np.uint8), {}

    def step(self, action):
        import numpy as np

        self.t += 1
        return np.full((3, 8, 8), self.t, np.uint8), 1.0, self.t >= self.length, False, {}

    def close(self):
        self.closed = True


class _RecordingAgent:
    """What evaluate/play_episode read of an Agent; records the ``is_first`` flag of every act."""

    def __init__(self) -> None:
        import types

        import torch

        self.run = types.SimpleNamespace(env="fake", train=types.SimpleNamespace(image_size=8))
        self.env = types.SimpleNamespace(action_dtype=torch.long)
        self.policy = types.SimpleNamespace(condition=lambda info: None)
        self.firsts: list[bool] = []
        self.resets = 0

    def reset_acting(self) -> None:
        self.resets += 1

    def act(self, obs, is_first, **kwargs):
        import numpy as np

        self.firsts.append(bool(is_first[0]))
        return np.array([1])


def test_evaluation_episodes_and_the_random_baseline_are_seeded_episode_by_episode(monkeypatch):
    """Catches: every episode reset with the same seed (one episode scored N times), the uniform
    baseline's actions seeded once or with another seed than its episode's (not the agent's
    episodes), the first step of an episode not flagged to the agent, the acting state not reset."""
    import wmzoo.eval.rollout as rollout

    envs: list[_RecordingEnv] = []
    monkeypatch.setattr(rollout, "make_env", lambda *a, **k: envs.append(_RecordingEnv()) or envs[-1])
    agent = _RecordingAgent()
    results = rollout.evaluate(agent, episodes=3, max_steps=10, seed=100)  # type: ignore[arg-type]
    assert envs[0].resets == [100, 101, 102] and envs[0].action_seeds == [] and envs[0].closed
    assert agent.firsts == [True, False, False] * 3 and agent.resets == 3
    assert [(r.ret, r.length) for r in results] == [(3.0, 3)] * 3
    rollout.evaluate(agent, episodes=2, max_steps=2, seed=7, uniform=True)  # type: ignore[arg-type]
    assert envs[1].resets == [7, 8] and envs[1].action_seeds == [7, 8] and len(agent.firsts) == 9  # agent unused


def test_a_played_episode_flags_the_first_row_after_every_reset(monkeypatch):
    """Catches: play_episode not marking the row after an in-episode reset as a new episode (the
    world model would filter across the boundary), the agent not told of it."""
    import wmzoo.eval.rollout as rollout

    monkeypatch.setattr(rollout, "make_env", lambda *a, **k: _RecordingEnv(length=3))
    agent = _RecordingAgent()
    batch = rollout.play_episode(agent, steps=7, seed=5)  # type: ignore[arg-type]
    assert batch.is_first[0].tolist() == [True, False, False, True, False, False, True]
    assert batch.terminal[0].tolist() == [False, False, True, False, False, True, False]
    assert agent.firsts == batch.is_first[0].tolist()
    assert batch.obs[0, :, 0, 0, 0].tolist() == [0, 1, 2, 0, 1, 2, 0]  # each row's observation before its step
