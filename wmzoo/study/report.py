"""``wmzoo study report DIR``: ``report.md``, PNG figures and ``report.json`` of a study.

Every number comes from the cells' own files, so it can be recomputed by hand, and every verdict
is computed (:mod:`wmzoo.eval.verdicts`), never written:

- **score** of a cell: online, its ``eval.json`` (``wmzoo eval --json``): the human-normalised
  score where the env has one (Atari), else the mean return; offline, its
  ``eval/imagination.json`` (``wmzoo evaluate --protocol imagination``): the Gen. MSE of the
  s4wm paper (section 5.3; lower is better);
- **baselines** per env, on the same data and seeds, read from the same files (computed when an
  older file lacks them): offline, the mean context frame and the best constant image
  (:class:`~wmzoo.eval.memory.ImaginationBaselines`); online, a uniformly random policy on the same
  evaluation seeds (``wmzoo eval --random``) and, where the env's entry declares it
  (:class:`~wmzoo.hookspecs.EnvMemory`), the best expected score of any policy without memory;
- **per env**: each backbone's mean over seeds with a 95 % Student-t interval, whether it beats
  each baseline (:func:`~wmzoo.eval.verdicts.beats_baseline`) and whether each pair of backbones is
  separated (:func:`~wmzoo.eval.verdicts.separated`, paired by seed offline, where every seed
  trains on the same dataset); below 5 seeds the exact permutation test decides, and the report
  says so in its first lines;
- **aggregate** over envs × seeds (Agarwal et al. 2021, :mod:`wmzoo.eval.metrics`) of normalised
  scores only (:func:`~wmzoo.eval.verdicts.normalise`; errors: the fraction of the best constant's
  error removed; Atari: human-normalised): IQM, mean, median (and the optimality gap for
  human-normalised scores), with stratified bootstrap CIs from 5 seeds on; raw scores of several
  envs are not pooled;
- **probability of improvement** of every backbone over every other (5 seeds on), and
  **performance profiles** (the fraction of runs scoring better than τ) of the normalised scores;
- **learning curves**: online, the training-episode return against env steps; offline, each
  backbone's own training loss against updates (objectives differ: compare shapes, not levels);
- **memory metrics** (offline): Recon. and Gen. MSE and the Gen. MSE per imagination step, with
  the baselines', and a warning where an env's dependency spans more rows than a backbone's
  training window;
- **reward prediction** (offline, envs whose cells have ``eval/reward.json`` or
  ``eval/reasoning.json``): per row and readout each seed's value with its Wilson or
  Hanley-McNeil interval over the test episodes and its verdict, the mean over seeds with its t
  interval and the verdict over seeds against the majority class / chance, and every pair of rows
  (:func:`reward_prediction`);
- **expected directions** (the study's ``expect``): each expected pair supported, contradicted or
  not separated (:func:`expectations`);
- **score against memory length**: for a memory task swept over two lengths or more
  (:class:`~wmzoo.hookspecs.EnvMemory`: BSuite Memory Length, POPGym RepeatPrevious and RepeatFirst
  with their fully observable controls at length 0), every row's score per length, the lengths it
  solves (beats every baseline with its interval) and the longest, as a table and a figure, and
  (online) each row's learning curve at the longest length it solves;
- **wall time** of every done cell (its ``cell.json``), median and range over seeds per row and env;
- **efficiency**: ``wmzoo bench`` of every backbone at the study's sizes (parameters, training
  and imagination frames/s, peak memory), all in this process one after the other;
- **imagination video**: every backbone imagining from the same real context under the same
  recorded actions, the real frames in the first row.

Baselines are drawn as dashed lines in every figure whose axis is in their units.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from wmzoo.atomic import write_text_atomic
from wmzoo.errors import WmzooError
from wmzoo.hookspecs import EnvMemory
from wmzoo.study.run import LOG_FILE, STUDY_FILE, Cell, cell_record, cells_of, data_dir
from wmzoo.study.spec import METRICS, REWARD_METRICS, StudySpec, study_from_dict

REPORT = "report"
VIDEO_CONTEXT, VIDEO_HORIZON = 8, 24


def cell_score(cell: Cell, out: Path, mode: str) -> tuple[str, float] | None:
    """``(score name, value)`` of a done cell from its own evaluation file; None when not done.
    ``mode`` (:attr:`~wmzoo.study.spec.Budget.mode`): ``offline`` cells are scored on the dataset
    (Gen. MSE), the others by their ``wmzoo eval`` episodes; ``imitation`` cells by the success rate
    where the env reports one (the TokenWM paper's score)."""
    path = out / cell.path
    if cell_record(path).get("state") != "done":
        return None
    offline = mode == "offline"
    file = path / "eval" / "imagination.json" if offline else path / "eval.json"
    try:
        record = json.loads(file.read_text())
        if offline:
            return "gen_mse", float(record["gen_mse"])
        if mode == "imitation" and "success_rate" in record:
            return "success_rate", float(record["success_rate"])
        if "human_normalized_score" in record:
            return "human_normalized_score", float(record["human_normalized_score"])
        return "mean_return", float(record["mean_return"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise WmzooError(f"{file}: unreadable evaluation of a done cell ({exc}); delete its cell.json "
                         "and re-run `wmzoo study run` to evaluate it again") from None


def collect(study: StudySpec, cells: Sequence[Cell], out: Path) -> tuple[str, dict[str, dict[str, dict[int, float]]]]:
    """``(score name, {label: {env: {seed: score}}})`` over the done cells."""
    table: dict[str, dict[str, dict[int, float]]] = {label: {} for label in study.labels()}
    names = set()
    for cell in cells:
        scored = cell_score(cell, out, study.budget.mode)
        if scored is not None:
            names.add(scored[0])
            table[cell.label].setdefault(cell.env, {})[cell.seed] = scored[1]
    if len(names) > 1:  # some envs human-normalised, some not: the common denominator
        names = {"mean_return"}
        for cell in cells:
            record = cell_score(cell, out, "online") and json.loads((out / cell.path / "eval.json").read_text())
            if record:
                table[cell.label][cell.env][cell.seed] = float(record["mean_return"])
    return (names.pop() if names else ("mean_return" if study.budget.in_env else "gen_mse")), table


# --------------------------------------------------------------------------- baselines

IMAGINATION_BASELINES = {"mean_context_frame": "mean context frame", "best_constant": "best constant"}
"""``wmzoo evaluate``'s baseline keys -> their names in the report."""
RANDOM_POLICY = "random policy"
NORMALISE_BY = {"gen_mse": "best constant"}
"""Score -> the baseline that is 0 in its normalised score (errors: the reference, 1, is no error)."""


def imagination_reference(study: StudySpec, cells: Sequence[Cell], out: Path, env: str) -> dict[str, dict[str, float]]:
    """``{baseline: {recon_mse, gen_mse}}`` of ``env``'s constant predictors: from the first done
    cell whose ``eval/imagination.json`` carries them, else computed from the study's dataset
    (the test split and context ``wmzoo evaluate`` used; older files lack them); ``{}`` where
    neither is here."""
    from wmzoo.data.dataset import MANIFEST
    from wmzoo.eval.memory import imagination_baselines

    for cell in cells:
        file = out / cell.path / "eval" / "imagination.json"
        if cell.env == env and cell_record(out / cell.path).get("state") == "done" and file.is_file():
            found = json.loads(file.read_text()).get("baselines")
            if found:
                return {name: dict(found[key]) for key, name in IMAGINATION_BASELINES.items() if key in found}
    data = data_dir(out, env)
    if not (data / MANIFEST).is_file():
        return {}
    E = study.eval
    found = imagination_baselines(data, "test", E.test_episodes, E.context)["baselines"]
    return {name: dict(found[key]) for key, name in IMAGINATION_BASELINES.items()}


def random_policy(study: StudySpec, cells: Sequence[Cell], out: Path, env: str, score: str) -> dict[str, float]:
    """``{"random policy": score}`` on ``env``'s evaluation seeds: from the first done cell whose
    ``eval.json`` carries it (``wmzoo eval --random``), else played now with a done cell's env
    protocol; ``{}`` without a done cell."""
    done = [c for c in cells if c.env == env and cell_record(out / c.path).get("state") == "done"]
    for cell in done:
        random = json.loads((out / cell.path / "eval.json").read_text()).get("random") or {}
        if score in random:
            return {RANDOM_POLICY: float(random[score])}
    if not done:
        return {}
    from wmzoo.eval.rollout import evaluate, load_agent, summarize

    E = study.eval
    agent = load_agent(out / done[0].path / "checkpoint.safetensors")
    summary = summarize(agent.run.env, evaluate(agent, E.episodes, E.max_steps, seed=E.seed, uniform=True))
    return {RANDOM_POLICY: float(summary[score])} if score in summary else {}


MEMORYLESS = "memoryless bound"
"""The baseline an env's :class:`~wmzoo.hookspecs.EnvMemory` declares: the best expected score of
any policy without memory."""


def env_memory(envs: Sequence[str]) -> dict[str, EnvMemory]:
    """``{env: EnvMemory}`` of the envs whose entry declares how much memory they demand."""
    from wmzoo.registry import default_registry

    registry = default_registry()
    found = {}
    for env in envs:
        entry = registry.env(env)
        memory = entry.memory(env) if entry.memory is not None else None
        if memory is not None:
            found[env] = memory
    return found


def with_memoryless(baselines: Mapping[str, Mapping[str, float]], memory: Mapping[str, EnvMemory], score: str
                    ) -> dict[str, dict[str, float]]:
    """``baselines`` with :data:`MEMORYLESS` added on every env whose memory declares it for ``score``."""
    out = {env: dict(b) for env, b in baselines.items()}
    for env, m in memory.items():
        if score in m.memoryless:
            out.setdefault(env, {})[MEMORYLESS] = float(m.memoryless[score])
    return out


def memory_scaling(report: Mapping[str, Any], memory: Mapping[str, EnvMemory]) -> dict[str, dict[str, Any]]:
    """Per memory task of the study with at least two lengths (:func:`env_memory`): its lengths
    in order, each row's mean [t interval] at every length, whether it *solves* each length (beats
    every baseline of that env, by the report's own verdicts; ``None`` where the env has no
    baseline or the row no score) and the longest length it solves; the baselines at every length."""
    tasks: dict[str, list[tuple[int, str]]] = {}
    for env, m in memory.items():
        tasks.setdefault(m.task, []).append((m.steps, env))
    out: dict[str, dict[str, Any]] = {}
    for task, settings in sorted(tasks.items()):
        settings.sort()
        if len({steps for steps, _ in settings}) < 2:
            continue
        envs = [env for _, env in settings]
        names = sorted({name for env in envs for name in report["baselines"].get(env, {})})
        rows: dict[str, Any] = {}
        for label in {label: None for env in envs for label in report["per_env"].get(env, {})}:
            found = [report["per_env"].get(env, {}).get(label) for env in envs]
            verdicts = [report["verdicts"].get(env, {}).get(label, {}) for env in envs]
            solved = [None if r is None or not v else all(x["holds"] for x in v.values())
                      for r, v in zip(found, verdicts)]
            rows[label] = {key: [None if r is None else r[key] for r in found] for key in ("mean", "low", "high")}
            rows[label]["solved"] = solved
            rows[label]["longest_solved"] = max((s for (s, _), ok in zip(settings, solved) if ok), default=None)
        out[task] = {"steps": [steps for steps, _ in settings], "envs": envs, "rows": rows,
                     "baselines": {name: [report["baselines"].get(env, {}).get(name) for env in envs]
                                   for name in names}}
    return out


def wall_times(cells: Sequence[Cell], out: Path) -> dict[str, dict[str, dict[str, float]]]:
    """``{label: {env: {cells, median, min, max}}}``: the wall seconds of each done cell (its
    ``cell.json``: training, evaluation and probes, summed over resumptions)."""
    seconds: dict[str, dict[str, list[float]]] = {}
    for cell in cells:
        record = cell_record(out / cell.path)
        if record.get("state") == "done" and "seconds" in record:
            seconds.setdefault(cell.label, {}).setdefault(cell.env, []).append(float(record["seconds"]))
    return {label: {env: {"cells": len(v), "median": float(np.median(v)), "min": min(v), "max": max(v)}
                    for env, v in envs.items()} for label, envs in seconds.items()}


REWARD_ERROR = "reward_mae"
"""The scalar of a world model's reward error (the mean absolute error of its predicted reward,
logged by the backbones with the shared reward head, ``wmzoo.nn.heads``)."""


def reward_learning(cells: Sequence[Cell], logged: Mapping[str, Mapping[str, list[tuple[int, float]]]]
                    ) -> dict[str, dict[str, dict[int, dict[str, Any]]]]:
    """Online: ``{env: {label: {seed: {learnt_at, first, last}}}}`` from each done cell's logged
    reward error (:data:`REWARD_ERROR`; ``logged``: :func:`done_scalars`): its first and last logged
    values, and the first logged env step at which it fell below half the first (``None``: not by
    the end). The first is logged soon after the random prefill, at the level of a predictor that
    knows the reward's mean only, so ``learnt_at`` says when the world model learnt what the reward
    depends on (in a memory task, the remembered information). Cells that do not log the scalar,
    and cells not done, are left out."""
    result: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    for cell in cells:
        series = logged.get(cell.path, {}).get(REWARD_ERROR)
        if not series:
            continue
        first, last = series[0][1], series[-1][1]
        learnt = next((step for step, value in series if value < first / 2), None)
        result.setdefault(cell.env, {}).setdefault(cell.label, {})[cell.seed] = {
            "learnt_at": learnt, "first": first, "last": last}
    return result


# --------------------------------------------------------------------------- verdicts


def per_env(table: Mapping[str, Mapping[str, Mapping[int, float]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{env: {label: {seeds, mean, low, high}}}``: mean over seeds with a 95 % t-interval."""
    from wmzoo.eval.verdicts import t_interval

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for label, envs in table.items():
        for env, seeds in envs.items():
            mean, low, high = t_interval([seeds[s] for s in sorted(seeds)])
            out.setdefault(env, {})[label] = {"seeds": {str(s): seeds[s] for s in sorted(seeds)},
                                              "mean": mean, "low": low, "high": high}
    return out


def verdicts(table: Mapping[str, Mapping[str, Mapping[int, float]]], baselines: Mapping[str, Mapping[str, float]],
             higher_is_better: bool, paired: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(against baselines, between backbones)``: ``{env: {label: {baseline: verdict}}}`` and
    ``{env: {"A vs B": verdict}}`` (:mod:`wmzoo.eval.verdicts`)."""
    from wmzoo.eval.verdicts import beats_baseline, separated

    against: dict[str, Any] = {}
    between: dict[str, Any] = {}
    for label, envs in table.items():
        for env, seeds in envs.items():
            against.setdefault(env, {})[label] = {
                name: beats_baseline(list(seeds.values()), value, not higher_is_better).as_dict()
                for name, value in baselines.get(env, {}).items()}
    for env in against:
        labels = [label for label in table if table[label].get(env)]
        for i, a in enumerate(labels):
            for b in labels[i + 1:]:
                between.setdefault(env, {})[f"{a} vs {b}"] = separated(
                    table[a][env], table[b][env], paired).as_dict()
    return against, between


def normalised_table(study: StudySpec, table: Mapping[str, Mapping[str, Mapping[int, float]]], score: str,
                     baselines: Mapping[str, Mapping[str, float]]) -> tuple[dict[str, dict[str, dict[int, float]]], str, bool]:
    """``(table, what it holds, normalised)`` for aggregates over envs: errors as the fraction of
    the best constant's error removed (:func:`~wmzoo.eval.verdicts.normalise`, reference 0),
    human-normalised scores as they are; other scores raw (poolable only for one env)."""
    from wmzoo.eval.verdicts import normalise

    if score == "human_normalized_score":
        return {k: dict(v) for k, v in table.items()}, "human-normalised score (0: random, 1: human)", True
    by = NORMALISE_BY.get(score)
    if by is not None and all(by in baselines.get(env, {}) for env in study.envs):
        scaled = {label: {env: {seed: float(normalise(v, baselines[env][by], 0.0)) for seed, v in seeds.items()}
                          for env, seeds in envs.items()} for label, envs in table.items()}
        return scaled, f"fraction of the {by}'s {SCORE_LABELS[score]} removed (0: the {by}, 1: no error)", True
    return {k: dict(v) for k, v in table.items()}, SCORE_LABELS[score], False


def score_matrices(study: StudySpec, table: Mapping[str, Mapping[str, Mapping[int, float]]], normalised: bool = True
                   ) -> tuple[dict[str, np.ndarray], list[str]]:
    """``{label: [seeds, envs]}`` for the backbones done on every env and seed, and the labels
    left out (a failed or unfinished cell); raw scores of several envs are refused
    (:func:`~wmzoo.eval.verdicts.pool_envs`)."""
    from wmzoo.eval.verdicts import pool_envs

    matrices, incomplete = {}, []
    for label in study.labels():
        envs = table.get(label, {})
        if all(len(envs.get(env, {})) == len(study.seeds) for env in study.envs):
            matrices[label] = pool_envs({env: [envs[env][s] for s in study.seeds] for env in study.envs}, normalised)
        else:
            incomplete.append(label)
    return matrices, incomplete


def statistics(matrices: Mapping[str, np.ndarray], score: str, higher_is_better: bool, reps: int
               ) -> dict[str, Any]:
    """Aggregates, probabilities of improvement and performance profiles of the full matrices;
    with fewer than :data:`~wmzoo.eval.verdicts.FEW_SEEDS` seeds only the point estimates (a
    bootstrap over 3 seeds collapses to a point) and no probability of improvement."""
    from wmzoo.eval.metrics import (
        METRICS,
        Interval,
        aggregate,
        intervals_dict,
        performance_profile,
        probability_of_improvement,
    )
    from wmzoo.eval.verdicts import FEW_SEEDS

    games = next(iter(matrices.values())).shape[1] if matrices else 0
    names = [m for m in METRICS if (m != "optimality_gap" or score == "human_normalized_score")
             and (m != "median" or games > 2)]  # over one or two envs the median is the mean
    result: dict[str, Any] = {"aggregate": {}, "probability_of_improvement": {}, "profiles": {}}
    few = any(m.shape[0] < FEW_SEEDS for m in matrices.values())
    for label, scores in matrices.items():
        if few:
            result["aggregate"][label] = intervals_dict(
                {m: Interval(float(METRICS[m](scores)), None, None) for m in names})  # type: ignore[arg-type]
        else:
            result["aggregate"][label] = intervals_dict(aggregate(scores, names, reps=reps))
    sign = 1.0 if higher_is_better else -1.0  # "better" is larger after the sign
    for a in matrices:
        for b in matrices:
            if a != b and not few:
                interval = probability_of_improvement(sign * matrices[a], sign * matrices[b], reps=reps)
                result["probability_of_improvement"][f"{a} > {b}"] = {
                    "estimate": interval.estimate, "low": interval.low, "high": interval.high}
    if matrices:
        every = np.concatenate([m.ravel() for m in matrices.values()])
        taus = np.linspace(min(every.min(), 0.0), every.max(), 41)
        for label, scores in matrices.items():
            fraction, low, high = performance_profile(sign * scores, sign * taus, reps=reps)
            result["profiles"][label] = {"taus": taus.tolist(), "fraction": np.asarray(fraction).tolist(),
                                         "low": None if few else np.asarray(low).tolist(),
                                         "high": None if few else np.asarray(high).tolist()}
    return result


def assess(study: StudySpec, table: Mapping[str, Mapping[str, Mapping[int, float]]], score: str,
           baselines: Mapping[str, Mapping[str, float]], reps: int) -> dict[str, Any]:
    """Everything the report concludes from per-seed scores and baselines: per-env rows and
    verdicts, normalised aggregates (or the one line refusing them), probabilities of
    improvement, profiles and the warning about few seeds."""
    from wmzoo.eval.verdicts import seeds_warning

    higher = score != "gen_mse"
    paired = study.budget.offline  # every seed of every backbone trains on the same dataset
    against, between = verdicts(table, baselines, higher, paired)
    rows = {label: min(len(seeds) for seeds in envs.values()) for label, envs in table.items() if envs}
    seeds = min(rows.values()) if rows else 0
    scaled, what, normalised = normalised_table(study, table, score, baselines)
    result: dict[str, Any] = {
        "seeds": seeds, "paired": paired, "baselines": {env: dict(b) for env, b in baselines.items()},
        "per_env": per_env(table), "verdicts": against, "pairs": between,
        "normalised": {"score": what, "normalised": normalised, "by": NORMALISE_BY.get(score), "table": {
            label: {env: {str(s): v for s, v in seeds_.items()} for env, seeds_ in envs.items()}
            for label, envs in scaled.items()}},
        "seeds_range": [seeds, max(rows.values()) if rows else 0],
        "warnings": [line for line in [seeds_warning(seeds, paired, rows)] if line],
    }
    try:
        matrices, incomplete = score_matrices(study, scaled, normalised)
    except WmzooError as exc:
        result.update(aggregate={}, probability_of_improvement={}, profiles={}, incomplete=[],
                      aggregate_refused=str(exc))
        return result
    result["incomplete"] = incomplete
    result.update(statistics(matrices, score, higher or normalised, reps))
    return result


def training_windows(cells: Sequence[Cell]) -> dict[str, int]:
    """Rows per training window (``model.seq_len``: no gradient spans more) of each backbone row."""
    from wmzoo.config import run_spec
    from wmzoo.study.run import without_policy

    windows: dict[str, int] = {}
    for cell in cells:
        if cell.label not in windows:
            run = run_spec(cell.backbone, cell.env, cell.preset, None, 0, None, without_policy(cell.overrides))
            windows[cell.label] = run.model.seq_len
    return windows


def dependency_spans(study: StudySpec, out: Path) -> dict[str, int]:
    """Offline memory tasks: ``{env: rows of its context phase}`` from each dataset's manifest (the
    query depends on what the context showed up to that many rows earlier); envs without phases
    are left out."""
    from wmzoo.data.dataset import MANIFEST, Manifest

    spans = {}
    for env in study.envs if study.budget.offline else []:
        if (data_dir(out, env) / MANIFEST).is_file():
            context = Manifest.read(data_dir(out, env)).context_length
            if context is not None:
                spans[env] = context
    return spans


def window_warnings(spans: Mapping[str, int], windows: Mapping[str, int]) -> list[str]:
    """One line per memory env whose dependency spans more rows than some backbone's training
    window: such a study does not train on what it tests."""
    lines = []
    for env, span in spans.items():
        short = {label: w for label, w in windows.items() if w < span}
        if short:
            listed = ", ".join(f"{label} {w}" for label, w in short.items())
            lines.append(f"Memory not tested on {env}: its query depends on frames up to {span} rows back (the "
                         f"context phase) but {len(short)} of {len(windows)} backbones trained on windows of "
                         f"{min(short.values())}-{max(short.values())} rows (model.seq_len: {listed}); no "
                         "gradient spans that dependency, so their Gen. MSE there does not measure memory.")
    return lines


# --------------------------------------------------------------------------- curves


def scalars(tb: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar a run logged to TensorBoard: ``{tag: [(step, value), ...]}``."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    if not tb.is_dir():
        return {}
    acc = EventAccumulator(str(tb), size_guidance={SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def done_scalars(cells: Sequence[Cell], out: Path) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """``{cell.path: scalars}`` of every done cell's TensorBoard log, read once for everything the
    report draws from it (:func:`curves`, :func:`reward_learning`)."""
    return {cell.path: scalars(out / cell.path / "tb") for cell in cells
            if cell_record(out / cell.path).get("state") == "done"}


def cell_curve(logged: Mapping[str, list[tuple[int, float]]], offline: bool) -> dict[int, float]:
    """From a cell's logged scalars: online, the training-episode return per logged env step;
    offline, the sum of the components' ``*/loss`` scalars per logged update."""
    if not offline:
        return dict(logged.get("episode/return", []))
    curve: dict[int, float] = {}
    for tag, points in logged.items():
        if tag.endswith("/loss"):
            for step, value in points:
                curve[step] = curve.get(step, 0.0) + value
    return curve


def on_steps(curve: Mapping[int, float], steps: Sequence[int]) -> np.ndarray:
    """One seed's curve read at ``steps``: linear between its logged points, its own value at a
    logged step, NaN before its first and after its last (no seed extrapolated)."""
    logged = sorted(curve)
    at = np.asarray(steps, dtype=np.float64)
    if not logged:
        return np.full(at.shape, np.nan)
    xs = np.array(logged, dtype=np.float64)
    values = np.interp(at, xs, [curve[step] for step in logged])
    values[(at < xs[0]) | (at > xs[-1])] = np.nan
    return values


def curves(study: StudySpec, cells: Sequence[Cell], logged: Mapping[str, Mapping[str, list[tuple[int, float]]]]
           ) -> dict[str, dict[str, dict[str, list[float]]]]:
    """``{env: {label: {x, mean, low, high, seeds}}}`` over the done cells' seeds (``logged``:
    :func:`done_scalars`), at every step any seed logged: each seed is read there linearly between
    its own logged points (:func:`on_steps`), so seeds that logged at different steps (a run
    resumed from a checkpoint logs off the others' grid) are averaged together, not each alone at
    its own steps (which drew a line zigzagging between the seeds)."""
    from wmzoo.eval.verdicts import mean_ci_over_seeds

    grouped: dict[tuple[str, str], list[dict[int, float]]] = {}
    for cell in cells:
        if cell.path in logged:
            grouped.setdefault((cell.env, cell.label), []).append(cell_curve(logged[cell.path], study.budget.offline))
    result: dict[str, dict[str, dict[str, list[float]]]] = {}
    for (env, label), per_seed in grouped.items():
        steps = sorted({s for c in per_seed for s in c})
        if not steps:
            continue
        values = np.array([on_steps(c, steps) for c in per_seed], dtype=np.float64)
        mean, low, high = mean_ci_over_seeds(values)
        result.setdefault(env, {})[label] = {"x": [float(s) for s in steps], "mean": list(map(float, mean)),
                                             "low": list(map(float, low)), "high": list(map(float, high)),
                                             "seeds": len(per_seed)}
    return result


def memory_metrics(cells: Sequence[Cell], out: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """Offline: ``{env: {label: recon_mse, gen_mse (means over seeds), gen_mse_per_step}}``."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for cell in cells:
        file = out / cell.path / "eval" / "imagination.json"
        if cell_record(out / cell.path).get("state") == "done" and file.is_file():
            grouped.setdefault((cell.env, cell.label), []).append(json.loads(file.read_text()))
    result: dict[str, dict[str, dict[str, Any]]] = {}
    for (env, label), records in grouped.items():
        steps = min(len(r["gen_mse_per_step"]) for r in records)
        result.setdefault(env, {})[label] = {
            "recon_mse": float(np.mean([r["recon_mse"] for r in records])),
            "gen_mse": float(np.mean([r["gen_mse"] for r in records])),
            "gen_mse_per_step": np.mean([r["gen_mse_per_step"][:steps] for r in records], axis=0).tolist(),
            "seeds": len(records),
            # test episodes scored, and those too short for the fixed context (wmzoo evaluate --context)
            "episodes": int(records[0]["episodes"]),
            "skipped_episodes": int(records[0].get("skipped_episodes", 0)),
        }
    return result


# --------------------------------------------------------------------------- reward prediction, expectations


def reward_records(study: StudySpec, cells: Sequence[Cell], out: Path) -> dict[str, dict[str, Any]]:
    """``{env: {"protocol": name, "rows": {label: {seed: record}}}}``: each done cell's file of a
    reward-based protocol (``eval/reward.json``, ``eval/reasoning.json``:
    :data:`~wmzoo.eval.memory.REWARD_PROTOCOLS`); envs without one (older study folders, datasets
    without a reward protocol) are left out. A file without ``baselines`` (written before it
    carried them) gets them computed from the study's dataset, on the episodes it scored."""
    from wmzoo.eval.memory import REWARD_PROTOCOLS, reward_baselines

    found: dict[str, dict[str, Any]] = {}
    for cell in cells:
        if cell_record(out / cell.path).get("state") != "done":
            continue
        for protocol in REWARD_PROTOCOLS:
            file = out / cell.path / "eval" / f"{protocol}.json"
            if file.is_file():
                try:
                    record = json.loads(file.read_text())
                except ValueError as exc:
                    raise WmzooError(f"{file}: unreadable evaluation of a done cell ({exc}); delete it and re-run "
                                     "`wmzoo study run` to evaluate it again") from None
                env = found.setdefault(cell.env, {"protocol": protocol, "rows": {}})
                if "baselines" not in record:
                    if "baselines" not in env:
                        env["baselines"] = reward_baselines(data_dir(out, cell.env), REWARD_PROTOCOLS[protocol],
                                                            "test", study.eval.test_episodes)
                    record = {**record, "baselines": env["baselines"]}
                env["rows"].setdefault(cell.label, {})[cell.seed] = record
    return found


def seed_readout(record: Mapping[str, Any], metric: str, baseline: float) -> dict[str, Any] | None:
    """One seed's readout ``metric`` of its reward-protocol file against ``baseline`` on the same
    episodes (:func:`~wmzoo.eval.verdicts.interval_verdict`): an accuracy with its 95 % Wilson
    interval, an AUC with its Hanley-McNeil interval. The unit is the test episode: where an
    episode scores several transitions, at most one success, one positive and one negative each is
    counted, which bounds their correlation within the episode. ``None`` for an AUC the file
    could not compute (one class only)."""
    from wmzoo.eval.verdicts import auc_interval, interval_verdict, wilson_interval

    value, episodes = record.get(metric), int(record["episodes"])
    if value is None:
        return None
    if metric.endswith("_accuracy"):
        n = min(int(record["scored_transitions"]), episodes)
        interval, method = wilson_interval(float(value) * n, n), f"95 % Wilson over {n} episodes"
    else:
        base = record["baselines"]
        counts = (min(int(base["positives"]), episodes), min(int(base["negatives"]), episodes))
        interval = auc_interval(float(value), *counts)
        method = f"95 % Hanley-McNeil, {counts[0]} + {counts[1]} counted"
    return interval_verdict(*interval, baseline, False, method, episodes).as_dict()


def reward_prediction(records: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per env: the protocol, its ``baselines`` (majority-class accuracy, chance AUC, from the
    first file: every cell scores the same test episodes), and per row and readout
    (:data:`~wmzoo.study.spec.REWARD_METRICS`) each seed's value, interval and verdict
    (:func:`seed_readout`), the mean over seeds with its 95 % t interval and the verdict over
    seeds against the baseline (:func:`~wmzoo.eval.verdicts.beats_baseline`); and every pair of
    rows per readout (:func:`~wmzoo.eval.verdicts.separated`, paired by seed: one dataset)."""
    from wmzoo.eval.verdicts import beats_baseline, separated, t_interval

    result: dict[str, dict[str, Any]] = {}
    for env, found in records.items():
        first = next(r for seeds in found["rows"].values() for r in seeds.values())
        base = first["baselines"]
        baseline = {m: float(base["majority_class_accuracy"] if m.endswith("_accuracy") else base["chance_auc"])
                    for m in REWARD_METRICS}
        rows: dict[str, dict[str, Any]] = {}
        for label, seeds in found["rows"].items():
            for metric in REWARD_METRICS:
                per_seed = {str(s): seed_readout(seeds[s], metric, baseline[metric]) for s in sorted(seeds)}
                values = [v["estimate"] for v in per_seed.values() if v is not None]
                if not values:
                    continue
                mean, low, high = t_interval(values)
                rows.setdefault(label, {})[metric] = {
                    "seeds": per_seed, "mean": mean, "low": low, "high": high,
                    "verdict": beats_baseline(values, baseline[metric], False).as_dict()}
        pairs: dict[str, dict[str, Any]] = {}
        labels = list(rows)
        for metric in REWARD_METRICS:
            for i, a in enumerate(labels):
                for b in labels[i + 1:]:
                    x, y = readout_by_seed(rows, a, metric), readout_by_seed(rows, b, metric)
                    if set(x) & set(y):
                        pairs.setdefault(metric, {})[f"{a} vs {b}"] = separated(x, y, paired=True).as_dict()
        result[env] = {"protocol": found["protocol"], "episodes": int(first["episodes"]),
                       "scored_transitions": int(first["scored_transitions"]),
                       "baselines": {"majority class": float(base["majority_class_accuracy"]),
                                     "chance": float(base["chance_auc"]),
                                     "positives": int(base["positives"]), "negatives": int(base["negatives"])},
                       "rows": rows, "pairs": pairs}
    return result


def seed_readouts(rows: Mapping[str, Mapping[str, Any]], label: str, metric: str) -> dict[str, Any]:
    """``{seed: readout or None}`` of a row in :func:`reward_prediction` (``{}`` where it has none)."""
    return rows.get(label, {}).get(metric, {}).get("seeds", {})


def readout_by_seed(rows: Mapping[str, Mapping[str, Any]], label: str, metric: str) -> dict[int, float]:
    """``{seed: value}`` of a row's readout in :func:`reward_prediction` (``{}`` where it has none)."""
    return {int(s): v["estimate"] for s, v in seed_readouts(rows, label, metric).items() if v is not None}


def expectations(study: StudySpec, report: Mapping[str, Any], table: Mapping[str, Mapping[str, Mapping[int, float]]]
                 ) -> list[dict[str, Any]]:
    """Each expected pair of the study's ``expect`` on each of its envs, with the verdict the seeds
    give: ``supported`` (separated, on the expected side), ``contradicted`` (separated, on the
    other side), ``not separated`` (:func:`~wmzoo.eval.verdicts.separated`, paired by seed offline)
    or ``not computed`` (a row without that readout there: a cell not done, a file without it)."""
    from wmzoo.eval.verdicts import separated

    checked = []
    for expectation in study.expect:
        higher = METRICS[expectation.metric]
        for env in expectation.envs or study.envs:
            for better, worse in expectation.pairs():
                models = None
                if expectation.metric in REWARD_METRICS:
                    rows = report.get("reward", {}).get(env, {}).get("rows", {})
                    a, b = (readout_by_seed(rows, label, expectation.metric) for label in (better, worse))
                    models = models_ordered(rows, better, worse, expectation.metric)
                elif expectation.metric == report["score"]:
                    a, b = (dict(table.get(label, {}).get(env, {})) for label in (better, worse))
                else:
                    a = b = {}
                entry: dict[str, Any] = {"metric": expectation.metric, "env": env, "better": better, "worse": worse,
                                         "source": expectation.source, "verdict": None, "models": models}
                if a and b and (not report["paired"] or set(a) & set(b)):
                    v = separated(a, b, report["paired"])
                    entry["verdict"] = v.as_dict()
                    entry["text"] = (("supported" if (v.estimate > 0) == higher else "contradicted")
                                     if v.holds else "not separated")
                else:
                    entry["text"] = "not computed"
                checked.append(entry)
    return checked


def models_ordered(rows: Mapping[str, Mapping[str, Any]], better: str, worse: str, metric: str) -> dict[str, Any] | None:
    """The expected pair compared model by model: for each seed both rows trained, whether the
    ``better`` row's 95 % interval over the test episodes lies above (``above``), below
    (``below``) or overlaps (``overlap``) the ``worse`` row's. This compares the trained models of
    each seed; it says nothing of the spread over training seeds, which the seed-level verdict
    tests (and cannot separate below 4 seeds a side). ``None`` where no seed has both."""
    a, b = seed_readouts(rows, better, metric), seed_readouts(rows, worse, metric)
    seeds = sorted((s for s in set(a) & set(b) if a[s] is not None and b[s] is not None), key=int)
    if not seeds:
        return None
    side = {s: "above" if a[s]["low"] > b[s]["high"] else "below" if a[s]["high"] < b[s]["low"] else "overlap"
            for s in seeds}
    counts = {k: sum(v == k for v in side.values()) for k in ("above", "below", "overlap")}
    return {"seeds": side, **counts}


def models_text(models: Mapping[str, Any] | None) -> str:
    """A table cell of :func:`models_ordered`: how many seeds' models are ordered as expected."""
    if not models:
        return "-"
    n = len(models["seeds"])
    parts = [f"{models[k]} of {n} {label}" for k, label in
             (("above", "as expected"), ("below", "reversed"), ("overlap", "overlapping")) if models[k]]
    return "; ".join(parts)


# --------------------------------------------------------------------------- efficiency, video


def efficiency(study: StudySpec, cells: Sequence[Cell], iters: int = 2) -> list[dict[str, Any]]:
    """``wmzoo bench`` (train and imagine) of each backbone at its first env's study sizes, on one
    torch thread (restored after): with torch's default of one thread per core, a machine still
    busy with other jobs slows the many small parallel regions of some backbones by tens of times
    (S4WM `tiny`'s imagination, B 8, H 15, on this 2-core machine beside two single-thread jobs:
    25 frames/s on two threads, 1,801 on one: ``wmzoo bench --threads 2`` against ``--threads 1``)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _efficiency(study, cells, iters)
    finally:
        torch.set_num_threads(threads)


def _efficiency(study: StudySpec, cells: Sequence[Cell], iters: int) -> list[dict[str, Any]]:
    from wmzoo.bench.harness import bench_specs
    from wmzoo.config import made_env_info, run_spec
    from wmzoo.study.run import without_policy

    rows = []
    for label in study.labels():
        cell = next(c for c in cells if c.label == label)
        run = run_spec(cell.backbone, cell.env, cell.preset, None, 0, None, without_policy(cell.overrides))
        info = made_env_info(cell.env, run.train.image_size)
        item = [(label, cell.backbone, cell.preset, run.model)]
        M = run.model
        train = bench_specs(item, "train", M.batch_size, M.seq_len, 0, iters, 1, info)[0]
        imagine = bench_specs(item, "imagine", 8, min(M.seq_len, 16), 15, iters, 1, info)[0]
        rows.append({"backbone": label, "env": cell.env, "params": train.params,
                     "train_frames_per_s": train.throughput, "imagine_frames_per_s": imagine.throughput,
                     "peak_rss_mb": max(train.peak_rss_mb, imagine.peak_rss_mb),
                     "train_batch": f"{M.batch_size}x{M.seq_len}", "imagine_batch": "8x15"})
    return rows


def imagination_video(study: StudySpec, cells: Sequence[Cell], out: Path, env: str, path: Path) -> Path | None:
    """Every backbone (its first done seed) imagining from the same real context under the same
    actions: an offline study's first test episode, or an episode the first backbone played."""
    import torch

    from wmzoo.data.store import row_fields, split_row
    from wmzoo.eval.plots import grid_animation
    from wmzoo.eval.rollout import load_agent, play_episode
    from wmzoo.interfaces import Batch
    from wmzoo.train.rundir import imagine_open_loop

    done = {}
    for cell in cells:
        if cell.env == env and cell.label not in done and cell_record(out / cell.path).get("state") == "done":
            done[cell.label] = out / cell.path / "checkpoint.safetensors"
    if not done:
        return None
    context = VIDEO_CONTEXT
    if study.budget.offline:
        from wmzoo.data.dataset import iter_episodes

        episode = next(iter_episodes(data_dir(out, env), "test", 1))
        length = min(len(episode["reward"]), context + VIDEO_HORIZON)
        batch = Batch(**split_row({k: torch.from_numpy(episode[k][None, :length]) for k in row_fields(episode)}))
    else:
        batch = play_episode(load_agent(next(iter(done.values()))), context + VIDEO_HORIZON, seed=study.eval.seed)
        length = batch.shape[1]
    context = min(context, length - 1)
    rows: list[tuple[str, np.ndarray]] = []
    for label, checkpoint in done.items():
        real, model = imagine_open_loop(load_agent(checkpoint), batch, context)
        if not rows:
            rows.append(("real", _hwc(real)))
        rows.append((label, _hwc(model)))
    return grid_animation(path, rows)


def _hwc(frames: np.ndarray) -> np.ndarray:
    frames = np.transpose(frames, (0, 2, 3, 1))
    return np.repeat(frames, 3, axis=3) if frames.shape[3] == 1 else frames[..., :3]


# --------------------------------------------------------------------------- the report


def load_saved_study(out: Path) -> StudySpec:
    from wmzoo.specs import load_config

    if not (out / STUDY_FILE).is_file():
        raise WmzooError(f"{out}: no {STUDY_FILE}; is it a `wmzoo study run` --out folder?")
    return study_from_dict(load_config(out / STUDY_FILE, what=""), f"{out / STUDY_FILE}: ")


def build_report(out: str | Path, reps: int = 10_000, bench: bool = True) -> dict[str, Any]:
    """Everything the report shows, as JSON-able data (without the figures)."""
    out = Path(out)
    study = load_saved_study(out)
    cells = cells_of(out)
    score, table = collect(study, cells, out)
    states: dict[str, list[str]] = {}
    for cell in cells:
        record = cell_record(out / cell.path)
        state = record.get("state", "not started")
        states.setdefault(state, []).append(cell.name + (f": {record['error']}" if "error" in record else ""))
    from wmzoo.registry import default_registry

    registry = default_registry()
    params: dict[str, dict[str, Any]] = {}
    from wmzoo.study.run import world_model_parameters

    for cell in cells:
        if cell.env not in params.get(cell.label, {}):
            params.setdefault(cell.label, {})[cell.env] = {
                "world_model": world_model_parameters(cell.backbone, cell.preset, cell.env, cell.overrides),
                "width": cell.width, "knob": registry.backbone(cell.backbone).width is not None,
            }
    report: dict[str, Any] = {
        "study": study.name, "mode": study.budget.mode,
        "budget": study.budget.model_dump(), "params_target": study.params,
        "score": score, "higher_is_better": score != "gen_mse", "cells": {k: v for k, v in sorted(states.items())},
        "parameters": params,
        "failed": failed_cells(cells, out),
    }
    if score == "gen_mse":
        reference = {env: imagination_reference(study, cells, out, env) for env in study.envs}
        baselines = {env: {name: b["gen_mse"] for name, b in found.items()} for env, found in reference.items()}
    else:
        baselines = {env: random_policy(study, cells, out, env, score) for env in study.envs}
    memory = env_memory(study.envs)
    baselines = with_memoryless(baselines, memory, score)
    report.update(assess(study, table, score, baselines, reps))
    report["memory_scaling"] = memory_scaling(report, memory)
    report["wall_time"] = wall_times(cells, out)
    logged = done_scalars(cells, out)
    report["reward_learning"] = reward_learning(cells, logged) if study.budget.mode == "online" else {}
    report["curves"] = curves(study, cells, logged)
    report["reward"] = reward_prediction(reward_records(study, cells, out)) if study.budget.mode == "offline" else {}
    report["expectations"] = expectations(study, report, table)
    if study.budget.mode == "offline":
        report["memory"] = memory_metrics(cells, out)
        report["memory_baselines"] = reference
        report["warnings"] += window_warnings(dependency_spans(study, out), training_windows(cells))
    if bench:
        report["efficiency"] = efficiency(study, cells)
    return report


def draw_figures(report: Mapping[str, Any], folder: Path) -> dict[str, str]:
    """The report's PNG figures in ``folder`` (baselines as dashed lines wherever the axis is in
    their units); returns ``{title: file name}``."""
    from wmzoo.eval.plots import curves_plot, interval_plot, profile_plot

    figures: dict[str, str] = {}
    score_label = SCORE_LABELS[report["score"]]
    for env, rows in report["per_env"].items():
        name = f"scores-{env}.png"
        interval_plot(folder / name, [(label, r["mean"], r["low"], r["high"]) for label, r in rows.items()],
                      f"{score_label} on {env}, mean [95 % t]", baselines=report["baselines"].get(env))
        figures[f"scores {env}"] = name
    for env, series in report["curves"].items():
        online = report["mode"] == "online"
        name = f"curves-{env}.png"
        curves_plot(folder / name, {label: (s["x"], s["mean"], s["low"], s["high"]) for label, s in series.items()},
                    "env steps" if online else "updates",
                    "training-episode return" if online else "training loss (own objective; no baseline)", title=env,
                    hlines=report["baselines"].get(env) if online and report["score"] == "mean_return" else None,
                    clip_bands=True)
        figures[f"curves {env}"] = name
    normalised = report["normalised"]["score"]
    if report["aggregate"]:
        zero = {f"0: {report['normalised']['by']}": 0.0} if report["normalised"]["by"] else None
        for metric in next(iter(report["aggregate"].values())):
            rows = [(label, m[metric]["estimate"], *(m[metric][k] if m[metric][k] is not None else m[metric]["estimate"]
                                                   for k in ("low", "high")))
                    for label, m in report["aggregate"].items()]
            name = f"aggregate-{metric}.png"
            interval_plot(folder / name, rows, f"{metric} of {normalised}", baselines=zero)
            figures[f"aggregate {metric}"] = name
        profiles = {label: (p["fraction"], p["low"], p["high"]) for label, p in report["profiles"].items()}
        taus = next(iter(report["profiles"].values()))["taus"]
        compare = ">" if report["higher_is_better"] or report["normalised"]["normalised"] else "<"
        profile_plot(folder / "profiles.png", taus, profiles, xlabel=f"{normalised} τ",
                     ylabel=f"fraction of runs with score {compare} τ", baselines=zero)
        figures["performance profiles"] = "profiles.png"
    for task, sweep in report.get("memory_scaling", {}).items():
        name = f"memory-{task}.png"
        series = {label: (sweep["steps"], *(_nan_for_none(r[k]) for k in ("mean", "low", "high")))
                  for label, r in sweep["rows"].items()}
        series.update({b: (sweep["steps"], _nan_for_none(values), None, None) for b, values in sweep["baselines"].items()})
        curves_plot(folder / name, series, "memory length (steps back to the information)",
                    f"{score_label}, mean [95 % t]", title=task, clip_bands=True)
        figures[f"score against memory length {task}"] = name
        if report["mode"] != "online":  # offline curves are training losses, not returns
            continue
        hardest = {}
        for label, r in sweep["rows"].items():
            env = None if r["longest_solved"] is None else sweep["envs"][sweep["steps"].index(r["longest_solved"])]
            c = report["curves"].get(env, {}).get(label)
            if c is not None:
                hardest[f"{label} (memory {r['longest_solved']})"] = (c["x"], c["mean"], c["low"], c["high"])
        if hardest:
            name = f"memory-{task}-hardest-solved-curves.png"
            curves_plot(folder / name, hardest, "env steps", "training-episode return, mean [95 % t]",
                        title=f"{task}: each row at the longest length it solves", clip_bands=True)
            figures[f"learning curves at the longest length solved {task}"] = name
    for env, series in report.get("memory", {}).items():
        name = f"gen-mse-per-step-{env}.png"
        curves_plot(folder / name, {label: (list(range(1, len(m["gen_mse_per_step"]) + 1)), m["gen_mse_per_step"],
                                            None, None) for label, m in series.items()},
                    "imagination step", "Gen. MSE", title=env, hlines=report["baselines"].get(env))
        figures[f"Gen. MSE per step {env}"] = name
    return figures


def _nan_for_none(values: Sequence[float | None]) -> np.ndarray:
    """``values`` as floats, ``None`` (no score) as NaN: a gap in a plotted line."""
    return np.array([np.nan if v is None else v for v in values], float)


def write_report(out: str | Path, reps: int = 10_000, bench: bool = True, video: bool = True) -> Path:
    """Write ``DIR/report/{report.md, report.json, *.png, imagination-<env>.gif}``; returns the
    path of ``report.md``."""
    out = Path(out)
    report = build_report(out, reps=reps, bench=bench)
    folder = out / REPORT
    folder.mkdir(exist_ok=True)
    figures = draw_figures(report, folder)
    study = load_saved_study(out)
    if video:
        for env in study.envs:
            written = imagination_video(study, cells_of(out), out, env, folder / f"imagination-{env}.gif")
            if written is not None:
                figures[f"imagination {env}"] = written.name
    report["figures"] = figures
    write_text_atomic(folder / "report.json", json.dumps(report, indent=2))
    return write_text_atomic(folder / "report.md", markdown(report))


SCORE_LABELS = {"mean_return": "mean return", "human_normalized_score": "human-normalised score",
                "gen_mse": "Gen. MSE", "success_rate": "success rate (%)"}


def _ci(d: Mapping[str, Any], key: str = "mean") -> str:
    if d.get("low") is None or d.get("high") is None:
        return f"{d[key]:.3f}"
    return f"{d[key]:.3f} [{d['low']:.3f}, {d['high']:.3f}]"


def _evidence(v: Mapping[str, Any]) -> str:
    """``p = ...`` or ``[low, high]`` of a verdict (:meth:`~wmzoo.eval.verdicts.Verdict.evidence`)."""
    return f"p = {v['p_value']:.3g}" if v["p_value"] is not None else f"[{v['low']:.3f}, {v['high']:.3f}]"


def _verdict_cell(v: Mapping[str, Any]) -> str:
    return f"{'**' + v['text'] + '**' if v['holds'] else v['text']} ({_evidence(v)})"


def _verdict_lines(report: Mapping[str, Any], score: str, better: str) -> list[str]:
    """Per env: baselines as rows, each backbone's mean [t interval] and its verdict against each
    baseline, then every pair of backbones."""
    lines: list[str] = []
    methods = {v["method"] for env in report["verdicts"].values() for row in env.values() for v in row.values()}
    pair_methods = {v["method"] for env in report["pairs"].values() for v in env.values()}
    for env, rows in report["per_env"].items():
        baselines = report["baselines"].get(env, {})
        lines += [f"### {env}", ""]
        head = ["row", f"{score}: mean [95 % Student t]", "per seed"] + [f"vs {name}" for name in baselines]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        table = [[f"baseline: {name}", f"{value:.3f}", "no training: one value", *[""] * len(baselines)]
                 for name, value in baselines.items()]
        for label, r in rows.items():
            seeds = ", ".join(f"{s}: {v:.3f}" for s, v in r["seeds"].items())
            table.append([label, _ci(r), seeds,
                          *[_verdict_cell(report["verdicts"][env][label][name]) for name in baselines]])
        lines += ["| " + " | ".join(row) + " |" for row in table]
        if not baselines:
            lines += ["", "No baseline could be computed for this env (neither carried by a cell's file nor "
                      "computable here): no verdict against one is printed."]
        lines.append("")
        pairs = report["pairs"].get(env, {})
        if pairs:
            apart = [pair for pair, v in pairs.items() if v["holds"]]
            lines += [f"Pairs of backbones separated ({'paired by seed' if report['paired'] else 'unpaired'}; "
                      f"{', '.join(sorted(pair_methods))}; difference = first minus second, {better} is better): "
                      + (", ".join(apart) if apart else f"none of {len(pairs)}") + ".", "",
                      "| pair | difference of means | verdict |", "|---|---|---|"]
            lines += [f"| {pair} | {v['estimate']:+.3f} | {_verdict_cell(v)} |" for pair, v in pairs.items()]
            lines.append("")
    lines.insert(0, f"Against baselines: {', '.join(sorted(methods)) or '-'}; a verdict holds at alpha = 0.05 "
                    "(bold). The interval column is Student t for every seed count.")
    lines.insert(1, "")
    return lines


READOUTS = {"accuracy": "accuracy", "auc": "AUC"}
FORM_NAMES = {"": "training form", "step_": "one row at a time"}


def _readout_name(metric: str) -> str:
    """``step_inference_accuracy`` -> ``inference accuracy, one row at a time``."""
    form = "step_" if metric.startswith("step_") else ""
    name, kind = metric.removeprefix(form).rsplit("_", 1)
    return f"{name} {READOUTS[kind]}, {FORM_NAMES[form]}"


def _seed_cell(seeds: Mapping[str, Any]) -> str:
    parts = []
    for seed, v in seeds.items():
        if v is None:
            parts.append(f"{seed}: -")
        else:
            text = f"**{v['text']}**" if v["holds"] else v["text"]
            parts.append(f"{seed}: {v['estimate']:.3f} [{v['low']:.3f}, {v['high']:.3f}] {text}")
    return "; ".join(parts)


def reward_lines(report: Mapping[str, Any]) -> list[str]:
    """The reward-prediction section: per env the baselines as rows, then per readout each row's
    seeds (interval, verdict), mean [t] and verdict over seeds; the pairs of rows; nothing where
    no cell has a reward-protocol file."""
    if not report.get("reward"):
        return []
    lines = ["", "## Reward prediction (s4wm paper, sections 5.5-5.6; test split)", "",
             "Per seed: the readout of that trained model on the test episodes with its 95 % interval over them "
             "(accuracy: Wilson; AUC: Hanley-McNeil; the episode is the unit) and its verdict against the baseline "
             "on the same episodes; it says nothing of training-seed variance. Over seeds: the mean [95 % Student "
             "t] and the verdict of the seeds, decided as every verdict of this report (below 5 seeds the exact "
             "permutation test). Training form: the context filtered as the backbone trains; one row at a time: "
             "its step form."]
    ordered = [f"{form}{name}_{kind}" for kind in READOUTS for name in ("inference", "imagination")
               for form in FORM_NAMES]  # REWARD_METRICS, each step form below its training form
    for env, section in report["reward"].items():
        base = section["baselines"]
        lines += ["", f"### {env} (protocol `{section['protocol']}`: {section['episodes']} test episodes, "
                  f"{section['scored_transitions']} scored transitions, {base['positives']} rewarded)", "",
                  "| readout | row | per seed: value [95 % interval] verdict | mean [95 % Student t] | over seeds |",
                  "|---|---|---|---|---|"]
        for metric in [m for m in ordered if any(m in readouts for readouts in section["rows"].values())]:
            accuracy = metric.endswith("_accuracy")
            name = "majority class" if accuracy else "chance"
            lines.append(f"| {_readout_name(metric)} | baseline: {name} | no training: one value | "
                         f"{base[name]:.3f} | |")
            for label, readouts in section["rows"].items():
                r = readouts.get(metric)
                if r is not None:
                    lines.append(f"| {_readout_name(metric)} | {label} | {_seed_cell(r['seeds'])} | {_ci(r)} "
                                 f"| {_verdict_cell(r['verdict'])} |")
        pairs = [(metric, pair, v) for metric, found in section["pairs"].items() for pair, v in found.items()]
        if pairs:
            apart = [f"{pair} ({_readout_name(metric)})" for metric, pair, v in pairs if v["holds"]]
            methods = sorted({v["method"] for _, _, v in pairs})
            lines += ["", f"Pairs of rows separated (paired by seed: one dataset; {', '.join(methods)}; difference "
                      "= first minus second, higher is better): " + (", ".join(apart) if apart else
                                                                   f"none of {len(pairs)}") + ".", "",
                      "| readout | pair | difference of means | verdict |", "|---|---|---|---|"]
            lines += [f"| {_readout_name(metric)} | {pair} | {v['estimate']:+.3f} | {_verdict_cell(v)} |"
                      for metric, pair, v in pairs]
    return lines


def expectation_lines(report: Mapping[str, Any]) -> list[str]:
    """The study's expected directions, each pair with its computed verdict."""
    if not report.get("expectations"):
        return []
    lines = ["", "## Expected directions (the study's `expect`)", "",
             "Each pair is *supported* only when the two rows are separated on the expected side, *contradicted* "
             "when separated on the other, else *not separated*; decided as the pairs above, over training seeds. "
             "For a reward readout, *models* compares the two rows seed by seed: the seeds where the first row's 95 % "
             "interval over the test episodes lies entirely above the second's (as expected), entirely below "
             "(reversed), or overlaps it; it is a statement about the trained models, not about training-seed "
             "variance.", "",
             "| metric | env | expected | source | difference of means (first - second) | verdict | models (per seed) |",
             "|---|---|---|---|---|---|---|"]
    for e in report["expectations"]:
        v = e["verdict"]
        text = f"**{e['text']}**" if e["text"] in ("supported", "contradicted") else e["text"]
        difference, evidence = (f"{v['estimate']:+.3f}", f" ({_evidence(v)})") if v else ("-", "")
        lines.append(f"| {e['metric']} | {e['env']} | {e['better']} better than {e['worse']} | {e['source'] or '-'} "
                     f"| {difference} | {text}{evidence} | {models_text(e.get('models'))} |")
    return lines


def memory_scaling_lines(report: Mapping[str, Any]) -> list[str]:
    """Per memory task: each row's score at every memory length, solved lengths marked, and the
    longest it solves; nothing for a study without a task at two lengths or more."""
    lines: list[str] = []
    for task, sweep in report.get("memory_scaling", {}).items():
        lines += ["", f"## Score against memory length: {task}", "",
                  "A length is **solved** when the row beats every baseline of that env with its interval (the "
                  "verdicts above); `-`: no score. Memory length: how many steps back the information lies when "
                  "the task last asks for it.", "",
                  "| row | " + " | ".join(f"{s} ({env})" for s, env in zip(sweep["steps"], sweep["envs"]))
                  + " | longest solved |", "|---|" + "---|" * (len(sweep["steps"]) + 1)]
        for name, values in sweep["baselines"].items():
            lines.append(f"| baseline: {name} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in values)
                         + " | |")
        for label, r in sweep["rows"].items():
            cells = ["-" if m is None else f"**{_ci({'mean': m, 'low': lo, 'high': hi})}**" if ok
                     else _ci({"mean": m, "low": lo, "high": hi})
                     for m, lo, hi, ok in zip(r["mean"], r["low"], r["high"], r["solved"])]
            longest = "none" if r["longest_solved"] is None else str(r["longest_solved"])
            lines.append(f"| {label} | " + " | ".join(cells) + f" | {longest} |")
    return lines


def reward_learning_lines(report: Mapping[str, Any]) -> list[str]:
    """Online: per row and env, which seeds' world models learnt the reward, when, and how far
    their reward error fell (:func:`reward_learning`)."""
    if not report.get("reward_learning"):
        return []
    lines = ["", "## When each world model learnt the reward (online)", "",
             f"The world model's reward error (`{REWARD_ERROR}`) is first logged soon after the random prefill, at "
             "the level of a predictor that knows the reward's mean only; a seed *learnt* the reward at the first "
             "logged env step where the error fell below half that level (`-`: not by the end of its budget). In a "
             "memory task the reward depends on the remembered information: a world model that never learnt it "
             "gave its policy nothing to learn from, so a low score there says the budget was too small for that "
             "row, not how long it can remember.", "",
             "| row | env | seeds learnt | env step learnt, per seed | error at the end / first, per seed |",
             "|---|---|---|---|---|"]
    for env, rows in report["reward_learning"].items():
        for label, seeds in rows.items():
            ordered = sorted(seeds.items(), key=lambda item: int(item[0]))
            learnt = sum(r["learnt_at"] is not None for _, r in ordered)
            steps = ", ".join(f"{s}: {'-' if r['learnt_at'] is None else int(r['learnt_at'])}" for s, r in ordered)
            ratios = ", ".join(f"{s}: {r['last'] / r['first']:.2f}" if r["first"] else f"{s}: -" for s, r in ordered)
            lines.append(f"| {label} | {env} | {learnt} of {len(ordered)} | {steps} | {ratios} |")
    return lines


def wall_time_lines(report: Mapping[str, Any]) -> list[str]:
    """Wall seconds per done cell, per row and env: median [min, max] over its seeds."""
    if not report.get("wall_time"):
        return []
    lines = ["", "## Wall time per cell (seconds: training, evaluation and probes; median [min, max] over seeds)",
             "", "| row | env | cells | seconds |", "|---|---|---|---|"]
    for label, envs in report["wall_time"].items():
        for env, t in envs.items():
            lines.append(f"| {label} | {env} | {t['cells']} | {t['median']:.0f} [{t['min']:.0f}, {t['max']:.0f}] |")
    return lines


def failed_cells(cells: Sequence[Cell], out: Path) -> list[dict[str, str]]:
    """Each failed or interrupted cell: its name, error and log (relative to the report folder)."""
    failed = []
    for cell in cells:
        record = cell_record(out / cell.path)
        if record.get("state") in ("failed", "interrupted"):
            failed.append({"cell": cell.name, "state": record["state"], "error": record.get("error", "?"),
                           "log": (Path("..") / cell.path / LOG_FILE).as_posix()})
    return failed


def failed_section(failed: Sequence[Mapping[str, str]]) -> list[str]:
    """Markdown lines of the failed cells, each linked to its log; none when none failed."""
    if not failed:
        return []
    return ["", "## Failed cells", ""] + [f"- [{f['cell']}]({f['log']}) ({f['state']}): {f['error']}" for f in failed]


def markdown(report: Mapping[str, Any]) -> str:
    """The report as Markdown: warnings first, baselines as rows, computed verdicts, tables of
    every number, links to every figure."""
    score = SCORE_LABELS[report["score"]]
    better = "higher" if report["higher_is_better"] else "lower"
    lines = [f"# Study: {report['study']}", ""]
    for warning in report.get("warnings", []):
        lines += [f"> **{warning}**", ""]
    lines += [line for note in report.get("notes", []) for line in (note, "")]
    budget = report["budget"]
    trained = {"offline": "world-model updates", "imitation": "updates of world model and imitation policy "
               "together (wmzoo run --imitation)"}.get(report["mode"])
    what = (f"{budget['updates']:,} {trained} per cell on one dataset per env "
            f"({budget['episodes']} episodes, {budget['size']}x{budget['size']})" if trained
            else f"{budget['steps']:,} env steps per cell")
    fewest, most = report.get("seeds_range", [report["seeds"]] * 2)
    seeds = f"{fewest}" if fewest == most else f"{fewest} to {most}"
    lines += [f"Mode: {report['mode']}, {what}, {seeds} training seeds per cell. Score: {score} "
              f"({better} is better). Baselines are computed on the same data and seeds as the backbones.", ""]
    lines += ["## Cells", ""]
    for state, names in report["cells"].items():  # each state's cells under its own count
        lines += [f"- {state}: {len(names)}"] + ([f"  - {n}" for n in names] if state != "done" else [])
    lines += ["", "## Parameters (world model)", ""]
    target = report["params_target"]
    lines += [f"Parameter budget: {target:,}." if target else "Not parameter-matched (each backbone at its preset)."]
    lines += ["", "| backbone | env | parameters | width fields |", "|---|---|---|---|"]
    for label, envs in report["parameters"].items():
        for env, p in envs.items():
            width = ", ".join(f"{k}={v}" for k, v in p["width"].items()) or (
                "no width knob: preset size" if target and not p["knob"] else "-")
            lines.append(f"| {label} | {env} | {p['world_model']:,} | {width} |")
    lines += ["", f"## Final {score} per environment: baselines and verdicts", ""]
    lines += _verdict_lines(report, score, better)
    lines += memory_scaling_lines(report)
    lines += reward_learning_lines(report)
    normalised = report["normalised"]["score"]
    if report.get("aggregate_refused"):
        lines += ["## Aggregate over environments", "", f"Not computed: {report['aggregate_refused']}."]
    elif report["aggregate"]:
        metrics = list(next(iter(report["aggregate"].values())))
        interval = ("no interval: fewer than 5 seeds" if report["seeds"] < 5
                    else "95 % stratified bootstrap")
        lines += [f"## Aggregate over environments and seeds ({normalised}; {interval})", "",
                  "| backbone | " + " | ".join(metrics) + " |", "|---|" + "---|" * len(metrics)]
        for label, m in report["aggregate"].items():
            lines.append(f"| {label} | " + " | ".join(_ci(m[k], "estimate") for k in metrics) + " |")
        if report["incomplete"]:
            lines += ["", f"Left out of the aggregates (a cell not done): {', '.join(report['incomplete'])}."]
        if report["probability_of_improvement"]:
            lines += ["", "## Probability of improvement", "",
                      f"P(X better than Y): the chance a run of X scores {better} than a run of Y on the same env, "
                      "averaged over envs (Agarwal et al. 2021).", "", "| X > Y | P [95 % stratified bootstrap] |",
                      "|---|---|"]
            for pair, p in report["probability_of_improvement"].items():
                lines.append(f"| {pair} | {_ci(p, 'estimate')} |")
    if report.get("memory"):
        lines += ["", "## Memory metrics (s4wm paper, section 5.3; test split; means over seeds)", "",
                  "| env | row | Recon. MSE | Gen. MSE | test episodes (too short for the context) |",
                  "|---|---|---|---|---|"]
        for env, rows in report["memory"].items():
            for name, b in report.get("memory_baselines", {}).get(env, {}).items():
                lines.append(f"| {env} | baseline: {name} | {b['recon_mse']:.3f} | {b['gen_mse']:.3f} | same |")
            for label, m in rows.items():
                lines.append(f"| {env} | {label} | {m['recon_mse']:.3f} | {m['gen_mse']:.3f} "
                             f"| {m['episodes']} ({m['skipped_episodes']}) |")
    lines += reward_lines(report)
    lines += expectation_lines(report)
    if report.get("efficiency"):
        lines += ["", "## Efficiency (`wmzoo bench`, this machine, one process, one thread)", "",
                  "| backbone | params | train frames/s | imagine frames/s | peak RSS (MB) |", "|---|---|---|---|---|"]
        for r in report["efficiency"]:
            lines.append(f"| {r['backbone']} | {r['params']:,} | {r['train_frames_per_s']:.1f} "
                         f"({r['train_batch']}) | {r['imagine_frames_per_s']:.1f} ({r['imagine_batch']}) "
                         f"| {r['peak_rss_mb']:.0f} |")
    lines += wall_time_lines(report)
    lines += failed_section(report.get("failed", []))
    if report.get("figures"):
        lines += ["", "## Figures", ""]
        for title, name in report["figures"].items():
            lines.append(f"![{title}]({name})" if name.endswith((".png", ".gif")) else f"- {title}: {name}")
    return "\n".join(lines) + "\n"
