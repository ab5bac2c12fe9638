"""``benchmarks/learning_check.py --summarise``: verdicts from the kept results (nothing trained)."""

from __future__ import annotations


import numpy as np
import pytest

from benchmark_scripts import load_script


@pytest.fixture(scope="module")
def check():
    return load_script("learning_check")


def test_a_kept_mean_and_sem_give_the_same_moments_as_the_returns(check):
    """Catches: the kept standard error (np.std, ddof 0) read as if it were ddof 1, or not scaled by n."""
    returns = np.array([0.0, 0.5, 0.9, 0.2, 0.7])
    summary = {"mean": returns.mean(), "sem": returns.std() / np.sqrt(5)}
    kept = {"episodes": 5, "trained_greedy": summary}
    assert check.moments(kept, "trained_greedy") == pytest.approx((returns.mean(), returns.var(ddof=1), 5))
    with_returns = {"episodes": 5, "trained_greedy": {**summary, "returns": returns.tolist()}}
    assert check.moments(with_returns, "trained_greedy") == pytest.approx(check.moments(kept, "trained_greedy"))


def test_a_policy_at_random_plays_level_is_not_above_it(check):
    """Catches: a verdict printed for a difference whose interval holds 0."""
    same = {"mean": 0.3, "sem": 0.05, "success": 0.4}
    rows = check.verdict_rows("x", {"episodes": 50, "trained_greedy": same, "random": same})
    assert "not above baseline" in rows[0] and "**" not in rows[0]
