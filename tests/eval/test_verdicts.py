"""The verdict functions on synthetic scores with known answers (wmzoo.eval.verdicts)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from wmzoo.cli import main
from wmzoo.errors import WmzooError
from wmzoo.eval.verdicts import (
    auc_interval,
    beats_baseline,
    interval_verdict,
    normalise,
    permutation_test,
    pool_envs,
    separated,
    seeds_warning,
    smallest_p,
    t_interval,
    t_quantile,
    welch_from_moments,
    welch_interval,
    wilson_interval,
)

BASE = np.array([10.0, 10.4, 9.7, 10.2, 9.9])


def test_two_backbones_differing_by_noise_only_are_not_separated():
    # Catches: the "interval excludes 0" test inverted (separated when 0 is inside)
    noise = np.array([0.15, -0.2, 0.1, -0.05, 0.02])
    a, b = dict(enumerate(BASE)), dict(enumerate(BASE + noise))
    for paired in (True, False):
        verdict = separated(a, b, paired)
        assert not verdict.holds and verdict.text == "not separated"
        assert verdict.low < 0 < verdict.high and verdict.p_value is None


def test_a_clearly_better_backbone_at_5_seeds_is_separated():
    # Catches: the interval side swapped (low < 0 taken for "excludes 0"), a Welch or paired
    # interval that does not shrink with the seeds
    a, b = dict(enumerate(BASE)), dict(enumerate(BASE + 3.0 + np.array([0.1, -0.1, 0.2, 0.0, -0.2])))
    for paired in (True, False):
        verdict = separated(a, b, paired)
        assert verdict.holds and verdict.text == "separated" and verdict.high < 0
        assert verdict.estimate == pytest.approx(-3.0)


def test_worse_than_the_constant_is_not_above_baseline():
    # Catches: lower-is-better read as higher-is-better, the wrong end of the interval compared
    constant = 22.08
    worse = [22.35, 21.89, 22.09, 23.1, 22.6]  # mean above the constant, interval straddling it
    assert beats_baseline(worse, constant, lower_is_better=True).text == "not above baseline"
    clearly_worse = [30.0, 29.0, 31.0, 30.5, 29.5]
    assert not beats_baseline(clearly_worse, constant, lower_is_better=True).holds
    better = [12.0, 12.5, 11.8, 12.2, 12.1]
    verdict = beats_baseline(better, constant, lower_is_better=True)
    assert verdict.holds and verdict.text == "beats baseline" and verdict.high < constant
    # returns: higher is better
    assert beats_baseline([5.0, 5.2, 4.9, 5.1, 5.0], 1.0, lower_is_better=False).holds
    assert not beats_baseline([5.0, 5.2, 4.9, 5.1, 5.0], 9.0, lower_is_better=False).holds


def test_three_seeds_use_the_exact_permutation_test_and_separate_nothing():
    # Catches: a p-value that excludes the observed arrangement (p = 0 at 3 seeds), a bootstrap or
    # t interval used below 5 seeds
    assert permutation_test([1.0, 2.0, 3.0]) == 0.25 == smallest_p(3, paired=True)
    assert permutation_test([1.0, 2.0, 3.0], [10.0, 11.0, 12.0], paired=False) == pytest.approx(0.1)
    assert smallest_p(3, paired=False) == pytest.approx(0.1)
    huge = separated({0: 1.0, 1: 1.1, 2: 0.9}, {0: 100.0, 1: 101.0, 2: 99.0}, paired=True)
    assert not huge.holds and huge.p_value == 0.25 and huge.low is None and "permutation" in huge.method
    assert not beats_baseline([1.0, 1.1, 0.9], 100.0, lower_is_better=True).holds
    # a difference of exactly 0 is never significant; every flip ties
    assert permutation_test([0.0, 0.0, 0.0]) == 1.0
    # 4 seeds unpaired: 70 relabellings, smallest p 2/70 < 0.05, so a clear difference separates
    clear = separated({i: float(i) for i in range(4)}, {i: 50.0 + i for i in range(4)}, paired=False)
    assert clear.holds and clear.p_value == pytest.approx(2 / 70)
    line = seeds_warning(3, paired=True)
    assert line is not None and "fewer than 5" in line and "0.25" in line and seeds_warning(5, True) is None
    # rows at different seed counts (a study part-way, some rows run first): the line names the
    # rows below 5 and their counts instead of calling every cell short of seeds
    mixed = seeds_warning(2, paired=False, rows={"S4WM": 5, "RSSM-BPTT": 2, "TokenWM": 3})
    assert mixed is not None and mixed.startswith("Rows with fewer than 5 seeds per cell: RSSM-BPTT 2, TokenWM 3 (the most: 5)")
    assert "smallest two-sided p 0.5 at 2 seeds" in mixed and "p 0.0476 at 2 against 5 seeds, unpaired" in mixed
    # that smallest p is what the test gives the most extreme data (unequal groups: 1 of 21 splits)
    assert permutation_test([0.0, 0.0], [1.0] * 5, paired=False) == pytest.approx(1 / 21)
    assert "S4WM" not in mixed
    assert seeds_warning(2, paired=False, rows={"a": 2, "b": 2}) == seeds_warning(2, paired=False)


def test_envs_of_different_scale_are_pooled_normalised_and_raw_pooling_is_refused(tmp_path, capsys):
    # Catches: raw scores of two envs pooled (the larger env decides every aggregate)
    small, large = np.array([1.0, 1.2, 0.8]), np.array([150.0, 140.0, 160.0])
    with pytest.raises(WmzooError, match="refusing to pool raw scores of 2 environments"):
        pool_envs({"a": small, "b": large}, normalised=False)
    assert pool_envs({"a": small}, normalised=False).shape == (3, 1)  # one env pools nothing
    scaled = pool_envs({"a": normalise(small, 2.0, 0.0), "b": normalise(large, 100.0, 0.0)}, normalised=True)
    np.testing.assert_allclose(scaled[:, 0], 1 - small / 2.0)
    np.testing.assert_allclose(scaled[:, 1], 1 - large / 100.0)  # worse than its constant: below 0
    np.testing.assert_allclose(normalise([3.0], 1.0, 5.0), [0.5])  # returns: (score - random) / (reference - random)
    with pytest.raises(WmzooError):
        normalise([1.0], 2.0, 2.0)
    # `wmzoo aggregate`: mean returns of two envs are refused with exit code 2
    files = []
    for env, ret in (("minigrid-empty-5x5", 0.9), ("crafter", 4.5)):
        path = tmp_path / f"{env}.json"
        path.write_text(json.dumps({"checkpoint": "x", "env": env, "backbone": "rssm", "preset": "tiny", "seed": 0,
                                    "mean_return": ret, "episodes": []}))
        files.append(str(path))
    assert main(["aggregate", *files, "--reps", "10"]) == 2
    assert "refusing to pool raw scores" in capsys.readouterr().err


def test_wilson_interval_matches_the_textbook_values():
    # Catches: the z**2 / (4 n**2) term or the 1 + z**2 / n denominator dropped (towards the Wald
    # interval, which is [0, 0] at 0 successes)
    assert wilson_interval(5, 10) == pytest.approx((0.5, 0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.0, 0.2775), abs=1e-4)
    assert wilson_interval(10, 10) == pytest.approx((1.0, 0.7225, 1.0), abs=1e-4)
    with pytest.raises(WmzooError):
        wilson_interval(11, 10)


def test_auc_interval_is_hanley_mcneil():
    # Catches: Q1/Q2 swapped or the (n - 1) weights dropped. Hand value: AUC 0.8 over 100 + 100,
    # Q1 = 0.8/1.2, Q2 = 1.28/1.8, var = (0.16 + 99 (Q1 - 0.64) + 99 (Q2 - 0.64)) / 1e4 = 9.84e-4
    assert auc_interval(0.8, 100, 100) == pytest.approx((0.8, 0.8 - 1.96 * 9.84e-4**0.5, 0.8 + 1.96 * 9.84e-4**0.5),
                                                        abs=1e-4)
    # unequal classes (50 + 200): Q1 and Q2 swapped gives 8.95e-4, not 1.5618e-3
    var = (0.16 + 49 * (0.8 / 1.2 - 0.64) + 199 * (1.28 / 1.8 - 0.64)) / (50 * 200)
    assert auc_interval(0.8, 50, 200)[1] == pytest.approx(0.8 - 1.96 * var**0.5, abs=1e-6)
    _, low, high = auc_interval(0.5, 20, 40)
    assert low < 0.5 < high


def test_auc_interval_is_not_empty_at_a_perfect_ranking():
    # Catches: a perfect ranking of 1 positive and 1 negative "beating" chance with the empty
    # interval [1, 1] (the formula's variance is 0 at AUC 0 and 1).
    _, low, high = auc_interval(1.0, 1, 1)
    assert low < 0.5 and high == 1.0
    _, low, high = auc_interval(0.0, 1, 1)
    assert low == 0.0 and high > 0.5
    _, low, high = auc_interval(1.0, 10, 10)  # the variance at 0.95: still clear of chance
    assert 0.8 < low < 0.95 and high == 1.0


def test_welch_from_moments_agrees_with_welch_over_values():
    # Catches: the variances not divided by their counts, the degrees of freedom not rounded down
    rng = np.random.default_rng(0)
    a, b = rng.normal(1.0, 1.0, 10), rng.normal(0.0, 2.0, 7)
    moments = [(x.mean(), x.var(ddof=1), x.size) for x in (a, b)]
    assert welch_from_moments(*moments) == pytest.approx(welch_interval(a, b))
    # by hand: means 1 and 0, variances 1, 10 values each: se = sqrt(0.2), df = 18, t = 2.101
    assert welch_from_moments((1.0, 1.0, 10), (0.0, 1.0, 10)) == pytest.approx(
        (1.0, 1.0 - 2.101 * 0.2**0.5, 1.0 + 2.101 * 0.2**0.5), abs=1e-6)
    # variances 1 over 10 and 4 over 5: se**2 = 0.9, df = 0.81 / (0.01 / 9 + 0.64 / 4) = 5.03 -> 5, t = 2.571
    assert welch_from_moments((1.0, 1.0, 10), (0.0, 4.0, 5))[2] == pytest.approx(1.0 + 2.571 * 0.9**0.5, abs=1e-6)


def test_interval_verdict_holds_only_when_the_interval_clears_the_baseline():
    # Catches: the better side swapped (high > baseline for "higher is better"), a verdict that
    # holds when the baseline is inside the interval
    rate, low, high = wilson_interval(106, 200)  # 53 % of 200 episodes against a 53 % base rate
    assert not interval_verdict(rate, low, high, 0.53, False, "Wilson", 200).holds
    assert interval_verdict(*wilson_interval(150, 200), 0.53, False, "Wilson", 200).holds
    assert not interval_verdict(*wilson_interval(150, 200), 0.53, True, "Wilson", 200).holds
    assert interval_verdict(*wilson_interval(50, 200), 0.53, True, "Wilson", 200).holds


def test_few_seeds_beat_a_baseline_only_on_its_better_side():
    """At alpha 0.2, 4 seeds' smallest sign-flip p (0.125) can decide. Catches: the two-sided p
    deciding alone, so scores far on the worse side of the baseline "beat" it."""
    low, high = [1.0, 1.1, 0.9, 1.05], [9.0, 9.1, 8.9, 9.05]
    cases = ((low, False, False), (high, False, True), (low, True, True), (high, True, False))
    for scores, lower_is_better, holds in cases:
        verdict = beats_baseline(scores, 5.0, lower_is_better, alpha=0.2)
        assert verdict.p_value == pytest.approx(2 / 16) and verdict.holds is holds


def test_unpaired_permutation_test_with_unequal_group_sizes():
    """[0, 1] against [2, 3, 100], 10 relabellings: |mean difference| >= 34.5 (the observed one) for
    the observed split and the 4 that put 100 in the pair (48 to 50.5), not for the other 5 (31.2
    to 33.7): p = 0.5. Catches: both means divided by the first group's size (p = 1)."""
    assert permutation_test([0.0, 1.0], [2.0, 3.0, 100.0], paired=False) == pytest.approx(0.5)
    assert permutation_test([2.0, 3.0, 100.0], [0.0, 1.0], paired=False) == pytest.approx(0.5)


def test_t_interval_by_hand():
    """[1, 2, 3, 4, 5]: mean 3, sd sqrt(2.5) (n − 1), t(4 df) = 2.776. Catches: the population sd
    (n), the t quantile of n (not n − 1) degrees of freedom."""
    half = 2.776 * 2.5**0.5 / 5**0.5
    assert t_interval([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx((3.0, 3.0 - half, 3.0 + half), abs=1e-9)
    # two seeds: t(1 df) = 12.706, sd = |a − b| / sqrt(2)
    assert t_interval([1.0, 3.0]) == pytest.approx((2.0, 2.0 - 12.706, 2.0 + 12.706), abs=1e-9)


def test_the_t_table_reaches_30_degrees_of_freedom():
    """31 seeds: t(30 df) = 2.042; the normal 1.96 only beyond. Catches: the table's last row
    (30 df) skipped by an off-by-one bound, in the interval over seeds or in ``t_quantile``."""
    assert t_quantile(30) == 2.042 and t_quantile(31) == 1.96
    values = np.arange(31.0)
    half = 2.042 * values.std(ddof=1) / 31**0.5
    assert t_interval(values) == pytest.approx((15.0, 15.0 - half, 15.0 + half), abs=1e-9)


def test_unpaired_seeds_below_five_on_one_side_use_the_permutation_test():
    """5 seeds against 3: the smaller side decides, so the exact test over C(8, 3) = 56 relabellings,
    of which only the observed one is as extreme (p = 1 / 56). Catches: the larger side's count
    deciding (a Welch interval over 3 seeds)."""
    verdict = separated({i: float(i) for i in range(5)}, {i: 50.0 + i for i in range(3)}, paired=False)
    assert verdict.low is None and verdict.seeds == 3 and "56 relabellings" in verdict.method
    assert verdict.p_value == pytest.approx(1 / 56) and verdict.holds
