"""Aggregate scores over runs and games, with the statistics of Agarwal et al. (2021).

The Atari 100k papers (REM section 3.1 and Figure 7, Delta-IRIS appendix C) report, over the
26 games and several runs each, the mean, median, interquartile mean (IQM) and optimality gap of
human-normalised scores with 95% stratified bootstrap confidence intervals, computed with the
authors' ``rliable`` toolkit. This module implements the same definitions with numpy:

- scores form a matrix ``[runs, games]`` (one run's score per game: its mean over evaluation
  episodes);
- **mean**: mean over games of the per-game mean over runs; **median**: median over games of the
  per-game mean over runs (``rliable.metrics.aggregate_mean`` / ``aggregate_median``);
- **IQM**: the mean of the middle 50% of all ``runs x games`` scores, cutting ``floor(n / 4)``
  from each end (``scipy.stats.trim_mean(x, 0.25)`` over the flattened matrix, as rliable);
- **optimality gap**: ``gamma - mean(min(score, gamma))`` with ``gamma = 1`` (human level);
- **stratified bootstrap**: each replicate resamples, independently for every game, ``runs``
  runs of that game with replacement; the 95% interval is the 2.5 and 97.5 percentiles of the
  replicates' statistic (rliable's default ``percentile`` method, 50,000 replicates).

The Crafter score (Hafner, 2021, section 3; Delta-IRIS appendix D) is also here:
``exp(mean_i ln(1 + s_i)) - 1`` over the success rates ``s_i`` in percent of the 22 achievements.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wmzoo.errors import WmzooError
from wmzoo.eval.verdicts import require_poolable

Statistic = Callable[[np.ndarray], np.ndarray]  # [..., runs, games] -> [...]


def aggregate_mean(scores: np.ndarray) -> np.ndarray:
    """Mean over games of the per-game mean over runs; ``scores`` ``[..., runs, games]``."""
    return scores.mean(axis=-2).mean(axis=-1)


def aggregate_median(scores: np.ndarray) -> np.ndarray:
    """Median over games of the per-game mean over runs."""
    return np.median(scores.mean(axis=-2), axis=-1)


def aggregate_iqm(scores: np.ndarray) -> np.ndarray:
    """Interquartile mean of all ``runs x games`` scores: drop ``floor(n / 4)`` at each end."""
    flat = scores.reshape(*scores.shape[:-2], -1)
    n = flat.shape[-1]
    cut = n // 4
    ordered = np.sort(flat, axis=-1)
    return ordered[..., cut : n - cut].mean(axis=-1)


def optimality_gap(scores: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """How far below ``gamma`` the scores fall on average: ``gamma - mean(min(score, gamma))``."""
    flat = scores.reshape(*scores.shape[:-2], -1)
    return gamma - np.minimum(flat, gamma).mean(axis=-1)


METRICS: dict[str, Statistic] = {
    "mean": aggregate_mean,
    "median": aggregate_median,
    "iqm": aggregate_iqm,
    "optimality_gap": optimality_gap,
}


def stratified_bootstrap_indices(
    runs: int, games: int, reps: int, rng: np.random.Generator
) -> np.ndarray:
    """Run indices ``[reps, runs, games]``: per replicate and game, ``runs`` draws with
    replacement among that game's runs."""
    return rng.integers(0, runs, size=(reps, runs, games))


def bootstrap_ci(
    scores: np.ndarray,
    statistic: Statistic,
    reps: int = 50_000,
    confidence: float = 0.95,
    seed: int = 0,
    block: int = 5_000,
) -> tuple[float, float, float]:
    """``(point estimate, low, high)`` of ``statistic`` with a stratified bootstrap percentile
    interval. Replicates are drawn in blocks of ``block`` to bound memory (the same ``seed``,
    ``reps`` and ``block`` give the same interval)."""
    scores = _matrix(scores)
    if reps < 1 or not 0 < confidence < 1:
        raise WmzooError(f"bootstrap needs reps >= 1 and 0 < confidence < 1, got {reps}, {confidence}")
    runs, games = scores.shape
    rng = np.random.default_rng(seed)
    stats = []
    for start in range(0, reps, block):
        idx = stratified_bootstrap_indices(runs, games, min(block, reps - start), rng)
        resampled = np.take_along_axis(scores[None], idx, axis=1)
        stats.append(statistic(resampled))
    values = np.concatenate(stats)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(statistic(scores)), float(low), float(high)


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float


def aggregate(
    scores: np.ndarray,
    metrics: Iterable[str] = tuple(METRICS),
    reps: int = 50_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Interval]:
    """Every metric of ``metrics`` with its stratified bootstrap interval, on ``[runs, games]``."""
    out = {}
    for name in metrics:
        if name not in METRICS:
            raise WmzooError(f"unknown metric '{name}'; known: {', '.join(METRICS)}")
        out[name] = Interval(*bootstrap_ci(scores, METRICS[name], reps, confidence, seed))
    return out


def score_matrix(table: Mapping[str, Sequence[float]]) -> tuple[list[str], np.ndarray]:
    """``{game: [score of run 1, run 2, ...]}`` -> ``(games, [runs, games])``; every game must
    have the same number of runs (the stratified bootstrap resamples runs within a game)."""
    games = sorted(table)
    counts = {game: len(table[game]) for game in games}
    if not games or len(set(counts.values())) != 1 or 0 in counts.values():
        detail = ", ".join(f"{g}: {n}" for g, n in counts.items()) or "none"
        raise WmzooError(f"aggregate needs the same number (>= 1) of runs for every game; got {detail}")
    return games, np.array([table[g] for g in games], dtype=np.float64).T


def intervals_dict(intervals: Mapping[str, Interval]) -> dict[str, dict[str, float]]:
    return {name: asdict(interval) for name, interval in intervals.items()}


# --------------------------------------------------------------------------- achievements


def success_rates(unlocked: Sequence[Iterable[str]], achievements: Sequence[str]) -> dict[str, float]:
    """Per achievement, the percentage of episodes that unlocked it (``unlocked``: one set of
    achievement names per episode)."""
    if not unlocked:
        raise WmzooError("success rates need at least one episode")
    sets = [set(u) for u in unlocked]
    return {a: 100.0 * sum(a in s for s in sets) / len(sets) for a in achievements}


def crafter_score(rates: Mapping[str, float] | Sequence[float]) -> float:
    """The Crafter score (Hafner, 2021): ``exp(mean_i ln(1 + s_i)) - 1`` over success rates
    ``s_i`` in percent (0 to 100); a geometric mean that rewards rare achievements."""
    s = np.asarray(list(rates.values()) if isinstance(rates, Mapping) else rates, dtype=np.float64)
    if s.size == 0 or (s < 0).any() or (s > 100).any():
        raise WmzooError("the Crafter score needs success rates in percent, between 0 and 100")
    return float(np.exp(np.log1p(s).mean()) - 1)


def _matrix(scores: np.ndarray) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2 or 0 in scores.shape:
        raise WmzooError(f"scores must be a non-empty [runs, games] matrix, got shape {scores.shape}")
    if not np.isfinite(scores).all():
        raise WmzooError("scores must be finite numbers")
    return scores


# --------------------------------------------------------------------------- eval files


def aggregate_eval_files(
    paths: Sequence[str | Path], reps: int = 50_000, confidence: float = 0.95, seed: int = 0
) -> list[dict[str, Any]]:
    """Aggregate ``wmzoo eval --json`` files: one group per ``backbone:preset``, each file one run
    on its env (game). A group is scored by human-normalised score when every file has one
    (Atari 100k games; optimality gap included), else by mean return (no optimality gap), which is
    refused over more than one env (raw returns of different envs are not pooled)."""

    if not paths:
        raise WmzooError("aggregate needs at least one eval JSON file")
    groups: dict[str, list[dict[str, Any]]] = {}
    for path in paths:
        try:
            record = json.loads(Path(path).read_text())
            record["mean_return"] = float(record["mean_return"])
            str(record["env"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise WmzooError(f"{path}: not a wmzoo eval JSON file ({exc})") from None
        label = f"{record.get('backbone', '?')}:{record.get('preset', '?')}"
        groups.setdefault(label, []).append(record)
    out = []
    for label, records in groups.items():
        kind = "human_normalized_score" if all("human_normalized_score" in r for r in records) else "mean_return"
        table: dict[str, list[float]] = {}
        for r in records:
            table.setdefault(r["env"], []).append(float(r[kind]))
        try:
            require_poolable(sorted(table), normalised=kind == "human_normalized_score")
            games, scores = score_matrix(table)
        except WmzooError as exc:
            raise WmzooError(f"group {label}: {exc}") from None
        names = [m for m in METRICS if kind == "human_normalized_score" or m != "optimality_gap"]
        out.append({
            "group": label, "score": kind, "runs": scores.shape[0], "games": games,
            "per_game_mean": dict(zip(games, scores.mean(axis=0).tolist())),
            "metrics": intervals_dict(aggregate(scores, names, reps, confidence, seed)),
        })
    return out


def format_aggregate(groups: list[dict[str, Any]]) -> str:
    """One row per group: each metric as ``estimate [low, high]``."""
    head = f"{'group':<24}{'score':<8}{'runs':>5}{'games':>6}  " + "".join(f"{m:<24}" for m in METRICS)
    rows = [head.rstrip()]
    for g in groups:
        cells = []
        for m in METRICS:
            i = g["metrics"].get(m)
            cells.append(f"{i['estimate']:.3f} [{i['low']:.3f}, {i['high']:.3f}]" if i else "-")
        score = "HNS" if g["score"] == "human_normalized_score" else "return"
        rows.append(f"{g['group']:<24}{score:<8}{g['runs']:>5}{len(g['games']):>6}  "
                    + "".join(f"{c:<24}" for c in cells).rstrip())
    return "\n".join(rows)


# --------------------------------------------------------------------------- comparisons

def _improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) per replicate: ``x`` ``[..., runs_x, games]``, ``y`` ``[..., runs_y, games]``."""
    greater = (x[..., :, None, :] > y[..., None, :, :]).mean(axis=(-3, -2))
    ties = (x[..., :, None, :] == y[..., None, :, :]).mean(axis=(-3, -2))
    return (greater + 0.5 * ties).mean(axis=-1)


def probability_of_improvement(
    x: np.ndarray, y: np.ndarray, reps: int = 50_000, confidence: float = 0.95, seed: int = 0, block: int = 2_000
) -> Interval:
    """P(X > Y) of Agarwal et al. (2021, section 4.3; rliable's ``probability_of_improvement``):
    per game, the normalised Mann-Whitney U statistic (the fraction of run pairs where X's score
    is above Y's, ties counting 1/2), averaged over games; ``x`` ``[runs_x, games]`` and ``y``
    ``[runs_y, games]`` on the same games. The interval resamples, per game, X's and Y's runs
    independently with replacement (stratified bootstrap, percentile interval)."""
    x, y = _matrix(x), _matrix(y)
    if x.shape[1] != y.shape[1]:
        raise WmzooError(f"probability of improvement needs the same games: {x.shape[1]} vs {y.shape[1]}")
    rng = np.random.default_rng(seed)
    stats = []
    for start in range(0, reps, block):
        n = min(block, reps - start)
        xs = np.take_along_axis(x[None], stratified_bootstrap_indices(x.shape[0], x.shape[1], n, rng), axis=1)
        ys = np.take_along_axis(y[None], stratified_bootstrap_indices(y.shape[0], y.shape[1], n, rng), axis=1)
        stats.append(_improvement(xs, ys))
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(np.concatenate(stats), [tail, 100 - tail])
    return Interval(float(_improvement(x, y)), float(low), float(high))


def performance_profile(
    scores: np.ndarray, taus: Sequence[float], reps: int = 50_000, confidence: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Score distribution of Agarwal et al. (2021, section 4.2; rliable's run-score
    distribution): per ``tau``, the fraction of all ``runs x games`` scores above ``tau``, with a
    stratified bootstrap percentile interval; returns ``(fraction, low, high)`` over ``taus``."""
    scores = _matrix(scores)
    taus = np.asarray(taus, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = stratified_bootstrap_indices(scores.shape[0], scores.shape[1], reps, rng)
    resampled = np.take_along_axis(scores[None], idx, axis=1).reshape(reps, -1)  # [reps, runs*games]
    replicates = (resampled[:, :, None] > taus).mean(axis=1)  # [reps, taus]
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(replicates, [tail, 100 - tail], axis=0)
    return (scores.ravel()[:, None] > taus).mean(axis=0), low, high
