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
