"""The study report's baselines, verdicts and aggregates on synthetic studies with known answers
(no training: per-seed scores and baselines given, through the report's own functions)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from wmzoo.study.report import assess, markdown, window_warnings
from wmzoo.study.spec import study_from_dict

ENVS = ["distracting-memory-100", "minigrid-memory-s7"]
BASELINES = {ENVS[0]: {"mean context frame": 23.0, "best constant": 22.0},
             ENVS[1]: {"mean context frame": 125.0, "best constant": 100.0}}


def _study(seeds: int, offline: bool = True) -> Any:
    budget = {"updates": 10, "episodes": 10, "size": 16} if offline else {"steps": 100}
    return study_from_dict({"name": "synthetic", "backbones": ["rssm", "s4wm", "rem"], "envs": ENVS,
                            "seeds": seeds, "budget": budget})


def _table(seeds: int) -> dict[str, dict[str, dict[int, float]]]:
    """rssm clearly below both constants; s4wm = rssm plus noise on distracting memory; rem worse
    than the constants everywhere (Gen. MSE: lower is better)."""
    rng = np.random.default_rng(0)
    good = {ENVS[0]: 12.0 + rng.normal(0, 0.2, seeds), ENVS[1]: 60.0 + rng.normal(0, 1.0, seeds)}
    noisy = {ENVS[0]: good[ENVS[0]] + rng.normal(0, 0.05, seeds), ENVS[1]: 61.0 + rng.normal(0, 3.0, seeds)}
    bad = {ENVS[0]: 30.0 + rng.normal(0, 0.5, seeds), ENVS[1]: 150.0 + rng.normal(0, 2.0, seeds)}
    return {label: {env: {s: float(v) for s, v in enumerate(values[env])} for env in ENVS}
            for label, values in (("rssm:tiny", good), ("s4wm:tiny", noisy), ("rem:tiny", bad))}


def _report(seeds: int, score: str = "gen_mse", baselines: Any = None, offline: bool = True) -> dict[str, Any]:
    study = _study(seeds, offline)
    table = _table(seeds)
    report: dict[str, Any] = {"study": "synthetic", "mode": study.budget.mode, "budget": study.budget.model_dump(),
                              "params_target": None, "score": score, "higher_is_better": score != "gen_mse",
                              "cells": {"done": ["..."]}, "parameters": {}, "curves": {}}
    report.update(assess(study, table, score, BASELINES if baselines is None else baselines, reps=200))
    return report


def test_five_seeds_separate_the_clear_pair_and_mark_the_backbone_worse_than_the_constant():
    # Catches: verdict inequalities flipped, baselines missing from the table, a pair separated
    # by noise alone
    report = _report(5)
    text = markdown(report)
    assert "fewer than 5" not in text
    assert "| baseline: best constant | 22.000 |" in text and "| baseline: mean context frame | 125.000 |" in text
    for env in ENVS:
        assert report["verdicts"][env]["rssm:tiny"]["best constant"]["holds"]
        assert not report["verdicts"][env]["rem:tiny"]["best constant"]["holds"]
        assert report["pairs"][env]["rssm:tiny vs rem:tiny"]["holds"]
    rem_row = next(line for line in text.splitlines() if line.startswith("| rem:tiny | 30."))
    assert rem_row.count("not above baseline") == 2
    assert not report["pairs"][ENVS[0]]["rssm:tiny vs s4wm:tiny"]["holds"]  # noise only
    assert "rssm:tiny vs s4wm:tiny | " in text and "95 % Student t" in text
    # aggregates: the fraction of the best constant's error removed, bootstrap intervals at 5 seeds
    table = _table(5)
    expected = np.mean([1 - np.mean(list(table["rem:tiny"][env].values())) / BASELINES[env]["best constant"]
                        for env in ENVS])
    assert report["aggregate"]["rem:tiny"]["mean"]["estimate"] == pytest.approx(expected)
    assert report["aggregate"]["rem:tiny"]["mean"]["estimate"] < 0 < report["aggregate"]["rssm:tiny"]["mean"]["estimate"]
    assert report["aggregate"]["rssm:tiny"]["iqm"]["low"] is not None and report["probability_of_improvement"]
    assert "fraction of the best constant's Gen. MSE removed" in text


def test_three_seeds_say_so_first_and_use_the_permutation_test():
    # Catches: the few-seeds warning missing or late, bootstrap intervals printed at 3 seeds,
    # anything declared separated or above a baseline at 3 seeds
    report = _report(3)
    text = markdown(report)
    first = "\n".join(text.splitlines()[:4])
    assert "Only 3 seeds per cell (fewer than 5)" in first and "exact permutation test" in first
    assert not any(v["holds"] for env in report["verdicts"].values() for row in env.values() for v in row.values())
    assert not any(v["holds"] for env in report["pairs"].values() for v in env.values())
    assert all(v["p_value"] >= 0.25 for env in report["pairs"].values() for v in env.values())
    assert "): none of 3." in text and "no interval: fewer than 5 seeds" in text
    assert "Probability of improvement" not in text and report["aggregate"]["rssm:tiny"]["mean"]["low"] is None


def test_rows_run_to_different_seed_counts_are_named_and_the_full_rows_still_decided():
    # Catches: the report's warning computed from the fewest seeds alone (every row called short
    # of seeds, as a study run row by row with --rows reads part-way) and the mode line claiming
    # one seed count for every cell
    study = _study(5)
    table = _table(5)
    table["rem:tiny"] = {env: {s: v for s, v in seeds.items() if s < 2} for env, seeds in table["rem:tiny"].items()}
    report: dict[str, Any] = {"study": "synthetic", "mode": "offline", "budget": study.budget.model_dump(),
                              "params_target": None, "score": "gen_mse", "higher_is_better": False,
                              "cells": {"done": ["..."]}, "parameters": {}, "curves": {}}
    report.update(assess(study, table, "gen_mse", BASELINES, reps=200))
    text = markdown(report)
    assert text.splitlines()[2].startswith("> **Rows with fewer than 5 seeds per cell: rem:tiny 2 (the most: 5).")
    assert "2 to 5 training seeds per cell" in text
    assert report["pairs"][ENVS[0]]["rssm:tiny vs s4wm:tiny"]["method"] == "paired 95 % Student t over seeds"
    assert report["verdicts"][ENVS[0]]["rssm:tiny"]["best constant"]["holds"]


def test_each_cell_state_lists_its_own_cells():
    # Catches: the cells of every unfinished state listed together after the last count, so an
    # interrupted cell reads as one not started
    report = _report(5)
    report["cells"] = {"done": ["a"], "interrupted": ["b / env / seed 1: stopped"], "not started": ["c / env / seed 2"]}
    text = markdown(report)
    assert ("- done: 1\n- interrupted: 1\n  - b / env / seed 1: stopped\n- not started: 1\n  - c / env / seed 2\n"
            in text)


def test_raw_scores_of_two_envs_are_not_pooled():
    # Catches: aggregates of mean returns of envs of different scale
    baselines = {env: {"random policy": 0.1} for env in ENVS}
    report = _report(5, score="mean_return", baselines=baselines, offline=False)
    assert report["aggregate"] == {} and "refusing to pool raw scores of 2 environments" in report["aggregate_refused"]
    assert "Not computed: refusing to pool raw scores" in markdown(report)
    assert not report["pairs"][ENVS[0]]["rssm:tiny vs s4wm:tiny"]["method"].startswith("paired")  # online: unpaired


def test_a_memory_env_longer_than_the_training_window_is_named():
    # Catches: the comparison of span and window flipped, the warning not naming env, span, window
    lines = window_warnings({ENVS[0]: 199}, {"rssm:tiny": 16, "rem:tiny": 8, "long:tiny": 256})
    assert len(lines) == 1 and ENVS[0] in lines[0] and "199 rows" in lines[0] and "8-16 rows" in lines[0]
    assert "2 of 3 backbones" in lines[0] and "long:tiny" not in lines[0]
    assert window_warnings({ENVS[0]: 199}, {"long:tiny": 256}) == []
    report = _report(3)
    report["warnings"] += lines
    assert "Memory not tested on distracting-memory-100" in "\n".join(markdown(report).splitlines()[:8])


def test_learning_curves_average_seeds_that_logged_at_different_steps():
    """Catches: each seed read only at the steps it logged itself, so where a resumed run logs off
    the others' grid (500, 1000, … against 576, 1076, …) the mean alternates between the seeds
    that logged there (a solved seed at 1.0, then the failed one at 0.0: a zigzag, as the POPGym
    pair's first report drew); also catches a seed extrapolated before its first or after its
    last logged step."""
    from types import SimpleNamespace

    from wmzoo.study.report import curves

    study = _study(2, offline=False)
    cells = [SimpleNamespace(env=ENVS[0], label="rssm:tiny", path=f"seed-{s}") for s in (0, 1)]
    solved = {"episode/return": [(500, 1.0), (1000, 1.0), (1500, 1.0), (2000, 1.0)]}
    failed = {"episode/return": [(576, 0.0), (1076, 0.2), (1576, 0.2), (1900, 0.2)]}
    curve = curves(study, cells, {"seed-0": solved, "seed-1": failed})[ENVS[0]]["rssm:tiny"]
    assert curve["seeds"] == 2
    assert curve["x"] == [500, 576, 1000, 1076, 1500, 1576, 1900, 2000]
    # 500 and 2000: the failed seed has not started / has ended, the solved one alone
    assert curve["mean"][0] == 1.0 and curve["mean"][-1] == 1.0
    # 576: both (the failed seed's own 0.0); 1000: the failed seed between 0.0 at 576 and 0.2 at 1076
    assert curve["mean"][1] == pytest.approx(0.5) and curve["mean"][2] == pytest.approx((1.0 + 0.2 * 424 / 500) / 2)
    assert all(m == pytest.approx(0.6) for m in curve["mean"][3:-1])
