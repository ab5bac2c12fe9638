"""Aggregate metrics (Agarwal et al., 2021) against hand computations, the REM paper's Table 1,
and a plain re-implementation of the stratified bootstrap; the Crafter score on fixed tables."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wmzoo.cli import main
from wmzoo.envs.atari import human_normalized_score
from wmzoo.errors import WmzooError
from wmzoo.eval import metrics

# runs x games, chosen so every statistic is easy to work out by hand
TABLE = np.array([
    [0.1, 0.5, 1.2, 2.0],
    [0.3, 0.7, 0.8, -0.1],
    [0.2, 0.6, 1.0, 3.0],
])


def test_point_estimates_by_hand():
    # per-game means over runs: 0.2, 0.6, 1.0, 4.9 / 3
    assert metrics.aggregate_mean(TABLE) == pytest.approx((0.2 + 0.6 + 1.0 + 4.9 / 3) / 4)
    assert metrics.aggregate_median(TABLE) == pytest.approx((0.6 + 1.0) / 2)
    # 12 sorted scores: -0.1 0.1 0.2 | 0.3 0.5 0.6 0.7 0.8 1.0 | 1.2 2.0 3.0
    assert metrics.aggregate_iqm(TABLE) == pytest.approx(3.9 / 6)
    # min(score, 1) sums to 7.1 over the 12 scores
    assert metrics.optimality_gap(TABLE) == pytest.approx(1 - 7.1 / 12)


# REM Table 1: mean returns of IRIS and REM (5 runs each), and the paper's mean/median HNS
IRIS = {"alien": 420.0, "amidar": 143.0, "assault": 1524.4, "asterix": 853.6, "bank_heist": 53.1,
        "battle_zone": 13074.0, "boxing": 70.1, "breakout": 83.7, "chopper_command": 1565.0,
        "crazy_climber": 59324.2, "demon_attack": 2034.4, "freeway": 31.1, "frostbite": 259.1,
        "gopher": 2236.1, "hero": 7037.4, "jamesbond": 462.7, "kangaroo": 838.2, "krull": 6616.4,
        "kung_fu_master": 21759.8, "ms_pacman": 999.1, "pong": 14.6, "private_eye": 100.0,
        "qbert": 745.7, "road_runner": 9614.6, "seaquest": 661.3, "up_n_down": 3546.2}
REM = {"alien": 607.2, "amidar": 95.3, "assault": 1764.2, "asterix": 1637.5, "bank_heist": 19.2,
       "battle_zone": 11826.0, "boxing": 87.5, "breakout": 90.7, "chopper_command": 2561.2,
       "crazy_climber": 76547.6, "demon_attack": 5738.6, "freeway": 32.3, "frostbite": 240.5,
       "gopher": 5452.4, "hero": 6484.8, "jamesbond": 391.2, "kangaroo": 467.6, "krull": 4017.7,
       "kung_fu_master": 25172.2, "ms_pacman": 962.5, "pong": 18.0, "private_eye": 99.6,
       "qbert": 743.0, "road_runner": 14060.2, "seaquest": 1036.7, "up_n_down": 3757.6}


@pytest.mark.parametrize(("returns", "mean", "median", "superhuman"),
                         [(IRIS, 1.046, 0.289, 10), (REM, 1.222, 0.280, 12)])
def test_rem_table1_mean_and_median(returns, mean, median, superhuman):
    """Mean and median of per-game means need only Table 1's per-game averages."""
    hns = np.array([[human_normalized_score(f"atari-{g}", s) for g, s in returns.items()]])
    assert metrics.aggregate_mean(hns) == pytest.approx(mean, abs=5e-4)
    assert metrics.aggregate_median(hns) == pytest.approx(median, abs=5e-4)
    assert int((hns >= 1).sum()) == superhuman


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 7), st.integers(0, 2**31 - 1))
def test_iqm_is_scipy_trim_mean(runs, games, seed):
    stats = pytest.importorskip("scipy.stats")
    scores = np.random.default_rng(seed).normal(size=(runs, games))
    assert metrics.aggregate_iqm(scores) == pytest.approx(stats.trim_mean(scores, 0.25, axis=None))


def _plain_bootstrap(scores, statistic, reps, seed, confidence=0.95):
    """Loop by loop: per replicate and game, resample that game's runs with replacement."""
    runs, games = scores.shape
    idx = np.random.default_rng(seed).integers(0, runs, size=(reps, runs, games))
    values = []
    for r in range(reps):
        sample = [[scores[idx[r, i, j], j] for j in range(games)] for i in range(runs)]
        values.append(statistic(sample))
    tail = 100 * (1 - confidence) / 2
    return np.percentile(values, [tail, 100 - tail])


def _plain_mean(sample):
    return statistics.fmean(statistics.fmean(col) for col in zip(*sample))


def _plain_median(sample):
    return statistics.median(statistics.fmean(col) for col in zip(*sample))


def _plain_iqm(sample):
    flat = sorted(x for row in sample for x in row)
    cut = len(flat) // 4
    return statistics.fmean(flat[cut : len(flat) - cut])


def _plain_gap(sample):
    return 1 - statistics.fmean(min(x, 1.0) for row in sample for x in row)


@pytest.mark.parametrize(("name", "plain"), [("mean", _plain_mean), ("median", _plain_median),
                                             ("iqm", _plain_iqm), ("optimality_gap", _plain_gap)])
def test_bootstrap_matches_plain_reimplementation(name, plain):
    scores = np.random.default_rng(1).gamma(1.0, size=(5, 6))
    point, low, high = metrics.bootstrap_ci(scores, metrics.METRICS[name], reps=300, seed=7)
    assert point == pytest.approx(plain(scores.tolist()))
    assert (low, high) == pytest.approx(tuple(_plain_bootstrap(scores, plain, 300, seed=7)))
    assert low <= high


def test_bootstrap_properties():
    one_run = np.array([[0.2, 0.9, 1.5]])  # nothing to resample: the interval is the point
    for statistic in metrics.METRICS.values():
        point, low, high = metrics.bootstrap_ci(one_run, statistic, reps=50)
        assert low == pytest.approx(point) and high == pytest.approx(point)
    same_runs = np.tile([[0.1, 0.4, 2.0]], (4, 1))  # runs agree on every game
    assert metrics.bootstrap_ci(same_runs, metrics.aggregate_mean, reps=50)[1:] == pytest.approx((0.8333333, 0.8333333))
    noisy = np.random.default_rng(0).normal(1.0, 0.5, size=(10, 26))
    a = metrics.aggregate(noisy, reps=2000, seed=3)
    assert all(i.low < i.estimate < i.high for i in a.values())
    assert a["mean"].high - a["mean"].low < 0.2  # ~ 4 standard errors of 0.5 / sqrt(260)
    assert metrics.aggregate(noisy, reps=2000, seed=3) == a  # seeded


def test_aggregate_passes_its_seed_and_confidence_to_the_bootstrap():
    # Catches: aggregate dropping its seed (every seed the seed-0 interval) or its confidence (95 %)
    scores = np.random.default_rng(2).gamma(1.0, size=(4, 5))
    for seed, confidence in ((3, 0.5), (11, 0.8)):
        got = metrics.aggregate(scores, ["iqm"], reps=200, confidence=confidence, seed=seed)["iqm"]
        expected = _plain_bootstrap(scores, _plain_iqm, 200, seed, confidence)
        assert (got.low, got.high) == pytest.approx(tuple(expected))


def test_bad_inputs_are_one_line_errors():
    # Catches: reps = 0 or a confidence of 1 (or 0) accepted by the bootstrap
    for reps, confidence in ((0, 0.95), (10, 1.0), (10, 0.0)):
        with pytest.raises(WmzooError, match="reps >= 1 and 0 < confidence < 1"):
            metrics.bootstrap_ci(TABLE, metrics.aggregate_mean, reps=reps, confidence=confidence)
    # Catches: a non-finite score or an empty matrix reaching the statistics
    for bad in ([[0.1, np.nan]], [[np.inf]], np.zeros((0, 3)), np.zeros((2, 0))):
        with pytest.raises(WmzooError, match="finite|non-empty"):
            metrics.bootstrap_ci(bad, metrics.aggregate_mean, reps=10)
    # Catches: games without a single run accepted as a score matrix
    with pytest.raises(WmzooError, match="same number"):
        metrics.score_matrix({"a": [], "b": []})
    # Catches: a negative rate, or no rates at all, given a Crafter score; no episodes given rates
    for rates in ([-1.0, 50.0], []):
        with pytest.raises(WmzooError, match="percent"):
            metrics.crafter_score(rates)
    with pytest.raises(WmzooError, match="at least one episode"):
        metrics.success_rates([], ["collect_wood"])


def test_score_matrix_and_errors():
    games, matrix = metrics.score_matrix({"b": [1.0, 2.0], "a": [3.0, 4.0]})
    assert games == ["a", "b"] and matrix.tolist() == [[3.0, 1.0], [4.0, 2.0]]
    with pytest.raises(WmzooError, match="same number"):
        metrics.score_matrix({"a": [1.0], "b": [1.0, 2.0]})
    with pytest.raises(WmzooError, match="matrix"):
        metrics.bootstrap_ci(np.zeros(3), metrics.aggregate_mean)
    with pytest.raises(WmzooError, match="unknown metric"):
        metrics.aggregate(TABLE, ["mode"])


def test_crafter_score_on_fixed_tables():
    assert metrics.crafter_score([100.0] * 22) == pytest.approx(100.0)
    assert metrics.crafter_score([0.0] * 22) == 0.0
    # one achievement always unlocked, 21 never: 101 ** (1 / 22) - 1
    assert metrics.crafter_score([100.0] + [0.0] * 21) == pytest.approx(101 ** (1 / 22) - 1)
    rates = [90.0, 50.0, 10.0, 1.0]
    expected = math.exp(sum(math.log(1 + s) for s in rates) / 4) - 1
    assert metrics.crafter_score(dict(zip("abcd", rates))) == pytest.approx(expected)
    assert metrics.crafter_score(rates) < statistics.fmean(rates)  # geometric below arithmetic
    with pytest.raises(WmzooError, match="percent"):
        metrics.crafter_score([0.5, 120.0])


def test_success_rates():
    episodes = [["collect_wood", "wake_up"], ["collect_wood"], [], ["collect_wood", "place_table"]]
    rates = metrics.success_rates(episodes, ["collect_wood", "place_table", "wake_up", "eat_cow"])
    assert rates == {"collect_wood": 75.0, "place_table": 25.0, "wake_up": 25.0, "eat_cow": 0.0}
    # Catches: the count divided by the number of achievements, not of episodes (4 and 4 above)
    assert metrics.success_rates([["eat_cow"], []], ["eat_cow", "wake_up", "place_table"]) == {
        "eat_cow": 50.0, "wake_up": 0.0, "place_table": 0.0}


def _eval_file(tmp_path, name, env, ret, hns=None, backbone="rssm", preset="paper"):
    payload = {"checkpoint": "x", "env": env, "backbone": backbone, "preset": preset, "seed": 0,
               "mean_return": ret, "episodes": []}
    if hns is not None:
        payload["human_normalized_score"] = hns
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(payload))
    return str(path)


def test_aggregate_cli(tmp_path, capsys):
    hns = {("atari-pong", 0): 0.2, ("atari-pong", 1): 0.6, ("atari-boxing", 0): 1.5, ("atari-boxing", 1): 0.9}
    files = [_eval_file(tmp_path, f"{env}-{seed}", env, 0.0, h) for (env, seed), h in hns.items()]
    files.append(_eval_file(tmp_path, "crafter", "crafter", 4.5, backbone="s4wm"))
    out_json = tmp_path / "agg.json"
    assert main(["aggregate", *files, "--reps", "500", "--json", str(out_json)]) == 0
    groups = {g["group"]: g for g in json.loads(out_json.read_text())}
    atari = groups["rssm:paper"]
    assert atari["score"] == "human_normalized_score" and atari["runs"] == 2
    assert atari["games"] == ["atari-boxing", "atari-pong"]
    assert atari["metrics"]["mean"]["estimate"] == pytest.approx((0.4 + 1.2) / 2)
    assert atari["metrics"]["optimality_gap"]["estimate"] == pytest.approx(1 - (0.2 + 0.6 + 1 + 0.9) / 4)
    crafter = groups["s4wm:paper"]
    assert crafter["score"] == "mean_return" and "optimality_gap" not in crafter["metrics"]
    assert crafter["metrics"]["iqm"] == {"estimate": 4.5, "low": 4.5, "high": 4.5}
    out = capsys.readouterr().out
    assert "rssm:paper" in out and "HNS" in out and "bootstrap" in out

    ragged = files[:3]
    assert main(["aggregate", *ragged, "--reps", "10"]) == 2
    assert "same number" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{}")
    assert main(["aggregate", str(tmp_path / "bad.json")]) == 2
    assert "not a wmzoo eval JSON" in capsys.readouterr().err


def test_aggregate_eval_files_by_hand(tmp_path):
    # Catches: per_game_mean over games instead of runs, the seed not reaching the bootstrap
    hns = {("atari-pong", 0): 0.2, ("atari-pong", 1): 0.6, ("atari-pong", 2): 0.1,
           ("atari-boxing", 0): 1.5, ("atari-boxing", 1): 0.9, ("atari-boxing", 2): 1.2}
    files = [_eval_file(tmp_path, f"{env}-{seed}", env, 0.0, h) for (env, seed), h in hns.items()]
    (group,) = metrics.aggregate_eval_files(files, reps=300, seed=5)
    assert group["per_game_mean"] == pytest.approx({"atari-boxing": 1.2, "atari-pong": 0.3})
    scores = np.array([[1.5, 0.2], [0.9, 0.6], [1.2, 0.1]])  # runs x games (sorted), in file order
    mean = group["metrics"]["mean"]
    assert (mean["low"], mean["high"]) == pytest.approx(tuple(_plain_bootstrap(scores, _plain_mean, 300, 5)))
    # Catches: a group where one file lacks a human-normalised score scored by it (a KeyError)
    mixed = [_eval_file(tmp_path, "m0", "atari-pong", 3.0, 0.2, backbone="iris"),
             _eval_file(tmp_path, "m1", "atari-pong", 5.0, backbone="iris")]
    (group,) = metrics.aggregate_eval_files(mixed, reps=10)
    assert group["score"] == "mean_return" and group["per_game_mean"] == {"atari-pong": 4.0}
    # Catches: raw returns of two envs pooled as if normalised
    raw = [_eval_file(tmp_path, "r0", "crafter", 4.0), _eval_file(tmp_path, "r1", "atari-pong", 5.0)]
    with pytest.raises(WmzooError, match="group rssm:paper: refusing to pool raw scores of 2"):
        metrics.aggregate_eval_files(raw, reps=10)


def test_format_aggregate_by_hand():
    # Catches: an interval printed [high, low], a metric in another's column, HNS / return mislabelled
    groups = [
        {"group": "rssm:paper", "score": "human_normalized_score", "runs": 3, "games": ["a", "b"],
         "metrics": {"mean": {"estimate": 0.5, "low": 0.25, "high": 0.75},
                     "optimality_gap": {"estimate": 0.1, "low": 0.0, "high": 0.2}}},
        {"group": "s4wm:tiny", "score": "mean_return", "runs": 1, "games": ["crafter"],
         "metrics": {"iqm": {"estimate": 4.5, "low": 4.5, "high": 4.5}}},
    ]
    head, first, second = metrics.format_aggregate(groups).splitlines()
    assert head.split() == ["group", "score", "runs", "games", "mean", "median", "iqm", "optimality_gap"]
    assert first.split() == ["rssm:paper", "HNS", "3", "2", "0.500", "[0.250,", "0.750]", "-", "-",
                             "0.100", "[0.000,", "0.200]"]
    assert second.split() == ["s4wm:tiny", "return", "1", "1", "-", "-", "4.500", "[4.500,", "4.500]", "-"]
    assert first.index("-") == head.index("median")  # columns line up under their heads


def test_probability_of_improvement_is_the_mann_whitney_fraction_per_game():
    # Catches: ties counted as wins (or losses), averaging over all pairs of all games instead of
    # per game, x and y swapped.
    from wmzoo.eval.metrics import probability_of_improvement

    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    y = np.array([[2.0, 2.0], [0.0, 5.0]])
    # game 0: x in {1, 3} vs y in {2, 0}: 3 of 4 pairs; game 1: {2, 4} vs {2, 5}: a tie and a win
    p = probability_of_improvement(x, y, reps=2000, seed=1)
    assert p.estimate == pytest.approx((3 / 4 + 1.5 / 4) / 2)
    assert probability_of_improvement(y, x, reps=10).estimate == pytest.approx(1 - p.estimate)
    assert 0 <= p.low <= p.estimate <= p.high <= 1
    assert probability_of_improvement(x, y, reps=2000, seed=1) == p  # seeded
    with pytest.raises(WmzooError, match="same games"):
        probability_of_improvement(x, y[:, :1])


def test_performance_profile_counts_scores_strictly_above_tau():
    # Catches: >= instead of > (a run at tau counted as above it), one game's runs only.
    from wmzoo.eval.metrics import performance_profile

    scores = np.array([[0.0, 1.0], [2.0, 3.0]])
    fraction, low, high = performance_profile(scores, [-1.0, 1.0, 3.0], reps=500)
    assert fraction.tolist() == [1.0, 0.5, 0.0]
    assert (low <= fraction).all() and (fraction <= high).all()


def test_probability_of_improvement_resamples_each_sides_own_runs():
    # Catches: Y's runs resampled with X's run count, only one of X's resampled runs used
    from wmzoo.eval.metrics import probability_of_improvement

    # X one run at 1, Y runs at 0 and 2: a replicate's P(X > Y) is 1, 1/2 or 0 (Y drew 0 twice,
    # once, never: each tail a quarter of the replicates)
    p = probability_of_improvement(np.array([[1.0]]), np.array([[0.0], [2.0]]), reps=2000, seed=0)
    assert (p.estimate, p.low, p.high) == (0.5, 0.0, 1.0)
    # X runs 0, 0, 2 against Y at 1: P is the share of 2s among 3 draws, 0 with probability 8/27;
    # 1/3 or less with 20/27 < 0.8, 2/3 or less with 26/27: the 20th and 80th percentiles 0 and 2/3
    q = probability_of_improvement(np.array([[0.0], [0.0], [2.0]]), np.array([[1.0]]), reps=4000,
                                   confidence=0.6, seed=0)
    assert q.estimate == pytest.approx(1 / 3) and (q.low, q.high) == pytest.approx((0.0, 2 / 3))


def test_performance_profile_interval_collapses_when_runs_agree():
    # Catches: replicates counted with >= (a score at tau above it), percentiles over all taus at once
    from wmzoo.eval.metrics import performance_profile

    scores = np.array([[1.0, 0.0, 2.0], [1.0, 0.0, 2.0]])  # each game's runs agree: nothing to resample
    fraction, low, high = performance_profile(scores, [0.0, 1.0, 1.5], reps=100)
    for values in (fraction, low, high):
        assert np.shape(values) == (3,) and values == pytest.approx([2 / 3, 1 / 3, 1 / 3])


def test_mean_ci_over_seeds_is_the_student_t_interval():
    # Catches: the normal quantile (1.96) instead of t with n-1 dof, the population s.d., a NaN
    # seed counted as a value.
    from wmzoo.eval.verdicts import mean_ci_over_seeds

    mean, low, high = mean_ci_over_seeds(np.array([[1.0, 5.0], [3.0, np.nan], [5.0, np.nan]]))
    assert mean.tolist() == [3.0, 5.0]
    half = 4.303 * 2.0 / np.sqrt(3)  # s.d. of 1, 3, 5 is 2; t(2) = 4.303
    assert low[0] == pytest.approx(3 - half) and high[0] == pytest.approx(3 + half)
    assert low[1] == high[1] == 5.0  # one seed: no interval
