"""Verdicts computed from per-seed scores, never written by hand (design property 8).

The one place where wmzoo decides whether a result supports a claim; the study report
(:mod:`wmzoo.study.report`) and the benchmark scripts print what these functions return.

- :func:`beats_baseline`: a backbone beats a baseline (a constant predictor, a random policy, a base
  rate; a number computed on the same data, without seed variance) only when its interval over
  seeds excludes the baseline on the better side;
- :func:`separated`: two backbones are separated only when the interval of their difference
  excludes 0, paired by seed when every seed of both trained on the same data;
- with fewer than :data:`FEW_SEEDS` seeds no interval is trusted: an **exact permutation test**
  decides (:func:`permutation_test`, every sign flip or relabelling enumerated). Its smallest
  two-sided p is ``2 / 2**n`` paired (0.25 at 3 seeds) and ``2 / C(n + m, n)`` unpaired (0.1 at 3
  and 3), so at 3 seeds nothing is declared at ``alpha = 0.05``: the honest answer;
- :func:`normalise` and :func:`pool_envs`: scores of different environments are pooled only after
  each is scaled between its baseline (0) and a reference (1); raw pooling is refused.

Intervals: 95 % Student t over seeds (the mean of one backbone, the mean paired difference) and
Welch's t with its degrees of freedom rounded down (an unpaired difference).

Results of **one training seed** (the benchmark scripts) can only be given intervals over their
evaluation units (episodes): :func:`wilson_interval` (a success rate or an accuracy of one scored
item per episode), :func:`auc_interval` (Hanley-McNeil), :func:`welch_from_moments` (returns
against a random policy's), each decided by :func:`interval_verdict`. Such a verdict is about that
trained model on those episodes, never about the backbone: it says nothing of training-seed variance.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from wmzoo.errors import WmzooError

FEW_SEEDS = 5
"""Below this many seeds verdicts come from the exact permutation test, not from intervals."""
ALPHA = 0.05
"""Two-sided level of every verdict (95 % intervals)."""
MAX_PERMUTATIONS = 2_000_000
"""Enumerations beyond this are refused (use intervals: that many seeds is not few)."""
T_INTERVAL = "95 % Student t over seeds"
WELCH_INTERVAL = "95 % Welch t over seeds"


T_95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)
"""Two-sided 95 % quantiles of Student's t with 1..30 degrees of freedom (1.96 beyond)."""


def mean_ci_over_seeds(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds and its 95 % Student-t interval, per point: ``values`` ``[seeds, points]``
    (NaN where a seed lacks a point, which then counts the seeds it has). One seed: the interval
    is the mean itself."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or 0 in values.shape:
        raise WmzooError(f"learning curves need a non-empty [seeds, points] matrix, got shape {values.shape}")
    n = (~np.isnan(values)).sum(axis=0)
    if (n == 0).any():
        raise WmzooError("every point of a learning curve needs at least one seed's value")
    mean = np.nanmean(values, axis=0)
    sd = np.sqrt(np.nansum((values - mean) ** 2, axis=0) / np.maximum(n - 1, 1))
    t = np.array([T_95[k - 2] if 2 <= k <= len(T_95) + 1 else (1.96 if k > 1 else 0.0) for k in n])
    half = t * sd / np.sqrt(n)
    return mean, mean - half, mean + half



@dataclass(frozen=True)
class Verdict:
    """What the seeds support. ``holds``: the claim (beats the baseline, separated); ``estimate``:
    the mean score or the mean difference ``a - b``; ``low``/``high``: its 95 % interval (``None``
    below :data:`FEW_SEEDS` seeds, where ``p_value``, the exact permutation test's, decides);
    ``method``: how it was decided; ``seeds``: seeds per side; ``text``: the printable verdict."""

    holds: bool
    estimate: float
    low: float | None
    high: float | None
    p_value: float | None
    method: str
    seeds: int
    text: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def evidence(self, digits: int = 3) -> str:
        """``[low, high]`` or ``p = ...``: what the verdict rests on, for a table cell."""
        if self.low is not None and self.high is not None:
            return f"[{self.low:.{digits}f}, {self.high:.{digits}f}]"
        return f"p = {self.p_value:.3g}"


def _values(scores: Sequence[float] | np.ndarray, what: str) -> np.ndarray:
    values = np.asarray(scores, dtype=np.float64).ravel()
    if values.size == 0 or not np.isfinite(values).all():
        raise WmzooError(f"{what} needs at least one finite score per seed, got {list(values)}")
    return values


def t_quantile(df: int) -> float:
    """Two-sided 95 % quantile of Student's t with ``df`` degrees of freedom (1.96 beyond 30)."""
    if df < 1:
        raise WmzooError("a t interval needs at least two seeds")
    return T_95[df - 1] if df <= len(T_95) else 1.96


def t_interval(values: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean over seeds and its 95 % Student-t interval
    (:func:`mean_ci_over_seeds`; one seed: the mean itself)."""
    mean, low, high = mean_ci_over_seeds(_values(values, "a t interval")[:, None])
    return float(mean[0]), float(low[0]), float(high[0])


def welch_interval(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    """``(mean(a) - mean(b), low, high)`` with Welch's 95 % interval (unequal variances; the
    Welch-Satterthwaite degrees of freedom rounded down, which widens the interval)."""
    x, y = _values(a, "a Welch interval"), _values(b, "a Welch interval")
    if x.size < 2 or y.size < 2:
        raise WmzooError("a Welch interval needs at least two seeds on each side")
    return welch_from_moments((x.mean(), x.var(ddof=1), x.size), (y.mean(), y.var(ddof=1), y.size))


def welch_from_moments(a: tuple[float, float, int], b: tuple[float, float, int]) -> tuple[float, float, float]:
    """:func:`welch_interval` from each side's ``(mean, unbiased variance, count)``: for results
    that kept only those (a mean and its standard error)."""
    (ma, va, na), (mb, vb, nb) = a, b
    if na < 2 or nb < 2:
        raise WmzooError("a Welch interval needs at least two values on each side")
    vx, vy = va / na, vb / nb
    diff = float(ma - mb)
    se = math.sqrt(vx + vy)
    if se == 0:
        return diff, diff, diff
    df = (vx + vy) ** 2 / (vx**2 / (na - 1) + vy**2 / (nb - 1))
    half = t_quantile(max(1, math.floor(df))) * se
    return diff, diff - half, diff + half


def wilson_interval(successes: float, n: int, z: float = 1.96) -> tuple[float, float, float]:
    """``(rate, low, high)``: a success rate of ``n`` independent trials (episodes) with its 95 %
    Wilson score interval, which stays inside [0, 1] and is not empty at 0 or ``n`` successes."""
    if n < 1 or not 0 <= successes <= n:
        raise WmzooError(f"a Wilson interval needs 0 <= successes <= n and n >= 1, got {successes} of {n}")
    rate = successes / n
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return rate, max(0.0, centre - half), min(1.0, centre + half)


def auc_interval(auc: float, positives: float, negatives: float, z: float = 1.96) -> tuple[float, float, float]:
    """``(auc, low, high)``: the area under the ROC curve with the Hanley-McNeil (1982) normal
    95 % interval from ``positives`` and ``negatives`` independent scored items (pass effective
    counts where items are clustered, e.g. divided by the cluster size).

    At a perfect (or perfectly inverted) ranking the formula's variance is 0, an empty interval
    that 1 positive and 1 negative would "prove"; the variance is therefore taken at the AUC
    pulled within half an item of the bounds (``1 / (2 min(positives, negatives))``), which
    changes nothing away from them (1.0 over 1 + 1 items: [0.02, 1]; over 10 + 10: [0.90, 1])."""
    if positives < 1 or negatives < 1 or not 0 <= auc <= 1:
        raise WmzooError(f"an AUC interval needs both classes and 0 <= AUC <= 1, got {auc} ({positives}/{negatives})")
    edge = 1 / (2 * min(positives, negatives))
    a = min(max(auc, edge), 1 - edge)
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    var = (a * (1 - a) + (positives - 1) * (q1 - a * a) + (negatives - 1) * (q2 - a * a)) / (
        positives * negatives)
    half = z * math.sqrt(max(var, 0.0))
    return auc, max(0.0, auc - half), min(1.0, auc + half)


def interval_verdict(estimate: float, low: float, high: float, baseline: float, lower_is_better: bool,
                     method: str, count: int) -> Verdict:
    """Whether an interval computed elsewhere (Wilson, Hanley-McNeil, Welch over episodes) lies
    entirely on the better side of ``baseline`` (a difference: ``baseline`` 0). ``count``: the
    independent units it rests on (episodes, seeds), named in ``method``."""
    holds = high < baseline if lower_is_better else low > baseline
    return Verdict(bool(holds), float(estimate), float(low), float(high), None, method, int(count),
                   "beats baseline" if holds else "not above baseline")


def permutation_test(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray | None = None,
                     *, paired: bool = True) -> float:
    """Exact two-sided p of the mean difference, every rearrangement enumerated (no sampling).

    - ``b`` None: ``a`` are differences (e.g. scores minus a baseline); the ``2**n`` sign flips;
    - ``paired``: the sign flips of ``a - b`` (the same seeds, in the same order);
    - unpaired: every split of ``a`` and ``b`` pooled into groups of their sizes.

    p = the fraction of rearrangements whose ``|mean difference|`` is at least the observed one
    (the observed arrangement counts, so p >= 2 / the number of rearrangements when the
    observed difference is not 0 and the groups are of equal size; 1 / that number when they
    differ, since no split mirrors the observed one)."""
    x = _values(a, "a permutation test")
    if b is None or paired:
        d = x if b is None else x - _values(b, "a permutation test")
        if b is not None and d.size != x.size:
            raise WmzooError("a paired permutation test needs the same seeds on both sides")
        if 2 ** d.size > MAX_PERMUTATIONS:
            raise WmzooError(f"{d.size} seeds: too many sign flips to enumerate; use the t interval")
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
        stats = np.abs(signs @ d) / d.size
        observed = abs(d.mean())
    else:
        y = _values(b, "a permutation test")
        pooled, n = np.concatenate([x, y]), x.size
        if math.comb(pooled.size, n) > MAX_PERMUTATIONS:
            raise WmzooError(f"{x.size} and {y.size} seeds: too many relabellings to enumerate; use Welch's interval")
        total = pooled.sum()
        sums = np.array([pooled[list(idx)].sum() for idx in itertools.combinations(range(pooled.size), n)])
        stats = np.abs(sums / n - (total - sums) / y.size)
        observed = abs(x.mean() - y.mean())
    tolerance = 1e-9 * max(1.0, float(np.abs(stats).max()))
    return float((stats >= observed - tolerance).mean())


def beats_baseline(scores: Sequence[float] | np.ndarray, baseline: float, lower_is_better: bool,
                   alpha: float = ALPHA) -> Verdict:
    """Whether ``scores`` (one per seed) beat ``baseline``: with at least :data:`FEW_SEEDS` seeds,
    when the 95 % t interval of their mean lies entirely on the better side of it; with fewer,
    when the exact sign-flip test of ``scores - baseline`` gives p <= ``alpha`` and the mean is on
    the better side. ``text``: ``beats baseline`` or ``not above baseline``."""
    x = _values(scores, "beats_baseline")
    if not math.isfinite(baseline):
        raise WmzooError(f"beats_baseline needs a finite baseline, got {baseline}")
    mean = float(x.mean())
    better_side = mean < baseline if lower_is_better else mean > baseline
    if x.size >= FEW_SEEDS:
        return interval_verdict(mean, *t_interval(x)[1:], baseline, lower_is_better, T_INTERVAL, x.size)
    p = permutation_test(x - baseline)
    holds = better_side and p <= alpha
    return Verdict(holds, mean, None, None, p, f"exact permutation test ({2 ** x.size} sign flips)", int(x.size),
                   "beats baseline" if holds else "not above baseline")


def separated(a_by_seed: Mapping[int, float], b_by_seed: Mapping[int, float], paired: bool,
              alpha: float = ALPHA) -> Verdict:
    """Whether two backbones' scores differ beyond their seed noise. ``paired`` (every seed of
    both trained on the same data, e.g. an offline study): the differences of their common seeds;
    else the two groups. With at least :data:`FEW_SEEDS` seeds on each side, when the 95 % interval
    of the difference (paired t, else Welch) excludes 0; with fewer, when the exact permutation test
    gives p <= ``alpha``. ``estimate``: mean of ``a`` minus mean of ``b``; ``text``: ``separated``
    or ``not separated``."""
    if paired:
        common = sorted(set(a_by_seed) & set(b_by_seed))
        if not common:
            raise WmzooError("a paired comparison needs seeds both sides have")
        a = np.array([a_by_seed[s] for s in common], dtype=np.float64)
        b = np.array([b_by_seed[s] for s in common], dtype=np.float64)
    else:
        a = np.array(list(a_by_seed.values()), dtype=np.float64)
        b = np.array(list(b_by_seed.values()), dtype=np.float64)
    n = min(a.size, b.size)
    estimate = float(a.mean() - b.mean())
    if n >= FEW_SEEDS:
        if paired:
            estimate, low, high = t_interval(a - b)
            method = f"paired {T_INTERVAL}"
        else:
            estimate, low, high = welch_interval(a, b)
            method = WELCH_INTERVAL
        holds, p = bool(low > 0 or high < 0), None
    else:
        low = high = None
        p = permutation_test(a, b, paired=paired)
        count = 2 ** a.size if paired else math.comb(a.size + b.size, a.size)
        method = f"exact permutation test ({count} {'sign flips' if paired else 'relabellings'})"
        holds = p <= alpha
    return Verdict(holds, estimate, low, high, p, method, n, "separated" if holds else "not separated")


def smallest_p(seeds: int, paired: bool) -> float:
    """The smallest two-sided p the exact permutation test can give with ``seeds`` per side."""
    return 2 / (2**seeds if paired else math.comb(2 * seeds, seeds))


def normalise(scores: np.ndarray | Sequence[float] | float, baseline: float, reference: float) -> np.ndarray:
    """Scores scaled so that ``baseline`` is 0 and ``reference`` is 1:
    ``(score - baseline) / (reference - baseline)``. Returns as human-normalised scores do
    (baseline: a random policy, reference: a human or an expert); errors with ``reference = 0``
    (a perfect prediction): ``1 - score / baseline_error``, the fraction of the baseline's
    error removed (below 0: worse than the baseline)."""
    if not (math.isfinite(baseline) and math.isfinite(reference)) or reference == baseline:
        raise WmzooError(f"cannot normalise between baseline {baseline} and reference {reference}: "
                         "they must be finite and differ")
    return (np.asarray(scores, dtype=np.float64) - baseline) / (reference - baseline)


def require_poolable(envs: Sequence[str], normalised: bool) -> None:
    """Refuse (one-line :class:`~wmzoo.errors.WmzooError`) to pool raw scores of more than one env:
    envs differ in scale, so the largest would decide every aggregate; normalise them first
    (:func:`normalise`)."""
    if len(envs) > 1 and not normalised:
        raise WmzooError(f"refusing to pool raw scores of {len(envs)} environments ({', '.join(envs)}): "
                         "their scales differ; normalise each between its baseline and a reference first")


def pool_envs(per_env: Mapping[str, np.ndarray | Sequence[float]], normalised: bool) -> np.ndarray:
    """``{env: scores over seeds}`` -> a ``[seeds, envs]`` matrix for aggregates over envs; raw
    scores of several envs are refused (:func:`require_poolable`)."""
    require_poolable(list(per_env), normalised)
    columns = [np.asarray(v, dtype=np.float64).ravel() for v in per_env.values()]
    if not columns or len({c.size for c in columns}) != 1 or columns[0].size == 0:
        raise WmzooError("pooling needs the same number (>= 1) of seeds for every environment")
    return np.stack(columns, axis=1)


def seeds_warning(seeds: int, paired: bool, rows: Mapping[str, int] | None = None) -> str | None:
    """The line a report starts with when it has fewer than :data:`FEW_SEEDS` seeds; None otherwise.
    ``rows``: each row's seeds (its fewest over envs); when they differ the line names the rows
    below :data:`FEW_SEEDS` and says that pairs of rows at :data:`FEW_SEEDS` or more are decided as usual."""
    if seeds >= FEW_SEEDS:
        return None
    if rows and len(set(rows.values())) > 1:
        few = ", ".join(f"{label} {n}" for label, n in rows.items() if n < FEW_SEEDS)
        most = max(rows.values())
        # unequal groups have no mirror split: only the observed one can be the most extreme
        against = 2 / 2**seeds if paired else (2 if seeds == most else 1) / math.comb(seeds + most, seeds)
        return (f"Rows with fewer than {FEW_SEEDS} seeds per cell: {few} (the most: {most}). Such a row cannot be "
                f"declared above a baseline (exact sign-flip test: smallest two-sided p {2 / 2**seeds:.3g} at "
                f"{seeds} seeds) and is separated from another row only by the exact permutation test (smallest "
                f"p {against:.3g} at {seeds} against {most} seeds, {'paired' if paired else 'unpaired'}); rows "
                f"with {FEW_SEEDS} or more are decided by intervals as usual. No bootstrap intervals are printed.")
    return (f"Only {seeds} seed{'s' if seeds != 1 else ''} per cell (fewer than {FEW_SEEDS}): verdicts use the exact "
            f"permutation test, whose smallest two-sided p at {seeds} seeds is {smallest_p(seeds, paired):.3g} "
            f"({'paired' if paired else 'unpaired'}); at alpha = {ALPHA} "
            + ("nothing can be declared separated or above a baseline." if smallest_p(seeds, paired) > ALPHA
               else "only the clearest differences can be declared.")
            + " No bootstrap intervals are printed.")
