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
