"""The study report's memory sweep (score against memory length, the longest length each row
solves, the memoryless bound as a baseline) and its wall time per cell, on synthetic studies with
known answers: per-seed scores given, through the report's own functions."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from wmzoo.hookspecs import EnvMemory
from wmzoo.study.report import (
    MEMORYLESS,
    assess,
    draw_figures,
    env_memory,
    markdown,
    memory_scaling,
    reward_learning,
    wall_times,
    with_memoryless,
)
from wmzoo.study.run import Cell, cell_dir
from wmzoo.study.spec import study_from_dict

# given out of order: the sweep must order them by memory length
ENVS = ["bsuite-memory-len-10", "bsuite-memory-len-2", "bsuite-memory-len-5"]
SEEDS = 5
needs_bsuite = pytest.mark.skipif(
    importlib.util.find_spec("bsuite") is None,
    reason="a study naming bsuite-memory-len-* envs is checked against the installed envs: pip install 'wmzoo[bsuite]'")


def _table() -> dict[str, dict[str, dict[int, float]]]:
    """``long`` remembers at every length; ``short`` at 1 and 5 but is at chance at 10;
    ``guess`` beats the random policy everywhere (-0.3) but never the memoryless bound (0)."""
    rng = np.random.default_rng(1)
    means = {"long": {2: 0.95, 5: 0.9, 10: 0.85}, "short": {2: 0.9, 5: 0.7, 10: 0.0}, "guess": {2: 0.0, 5: 0.0, 10: 0.0}}
    return {label: {f"bsuite-memory-len-{n}": {s: float(m + rng.normal(0, 0.03)) for s in range(SEEDS)}
                    for n, m in by_length.items()} for label, by_length in means.items()}


def _report() -> tuple[dict[str, Any], dict[str, Any]]:
    study = study_from_dict({"name": "memory sweep", "backbones": [{"name": "rssm", "row": r} for r in ("long", "short", "guess")],
                             "envs": ENVS, "seeds": SEEDS, "budget": {"steps": 100}})
    memory = env_memory(study.envs)
    baselines = with_memoryless({env: {"random policy": -0.3} for env in ENVS}, memory, "mean_return")
    report: dict[str, Any] = {"study": study.name, "mode": "online", "budget": study.budget.model_dump(),
                              "params_target": None, "score": "mean_return", "higher_is_better": True,
                              "cells": {"done": ["..."]}, "parameters": {}, "curves": {}}
    report.update(assess(study, _table(), "mean_return", baselines, reps=200))
    report["memory_scaling"] = memory_scaling(report, memory)
    return report, memory


@needs_bsuite
def test_the_memoryless_bound_joins_the_random_policy_as_a_baseline():
    """Catches: the env's declared bound not reaching the baselines (or under another score's name),
    the random policy's value dropped when the bound is added."""
    _, memory = _report()
    assert {env: memory[env].steps for env in ENVS} == {ENVS[0]: 9, ENVS[1]: 1, ENVS[2]: 4}
    both = with_memoryless({ENVS[0]: {"random policy": -0.3}}, memory, "mean_return")
    assert both[ENVS[0]] == {"random policy": -0.3, MEMORYLESS: 0.0} and both[ENVS[1]] == {MEMORYLESS: 0.0}
    assert with_memoryless({ENVS[0]: {"random policy": 1.0}}, memory, "success_rate") == {ENVS[0]: {"random policy": 1.0}}
    # length 1: the bit is still in view when the answer is given: no memory, no bound
    assert with_memoryless({}, env_memory(["bsuite-memory-len-1"]), "mean_return") == {}


@needs_bsuite
def test_each_row_solves_the_lengths_where_it_beats_every_baseline_and_the_longest_is_named():
    """Catches: lengths not ordered by memory length, a length called solved on beating the random
    policy alone (``guess``), the longest solved taken as the last length or the first."""
    report, _ = _report()
    sweep = report["memory_scaling"]["bsuite-memory-len"]
    assert sweep["steps"] == [1, 4, 9] and sweep["envs"] == ["bsuite-memory-len-2", "bsuite-memory-len-5", ENVS[0]]
    rows = sweep["rows"]
    assert rows["long"]["solved"] == [True, True, True] and rows["long"]["longest_solved"] == 9
    assert rows["short"]["solved"] == [True, True, False] and rows["short"]["longest_solved"] == 4
    assert rows["guess"]["solved"] == [False, False, False] and rows["guess"]["longest_solved"] is None
    assert all(report["verdicts"][env]["guess"]["random policy"]["holds"] for env in ENVS)
    assert rows["short"]["mean"][2] == pytest.approx(np.mean(list(_table()["short"][ENVS[0]].values())))
    assert sweep["baselines"] == {MEMORYLESS: [0.0, 0.0, 0.0], "random policy": [-0.3, -0.3, -0.3]}


def test_a_length_without_a_baseline_or_a_score_is_not_solved():
    """memory_scaling on a hand-built report (no study, so no bsuite needed): length 9 has no
    baseline, ``b`` no score at length 4. Catches: a length with no baseline called solved (every
    one of its zero verdicts holds) and made the longest solved, lengths taken in the given order."""
    memory = {"len-10": EnvMemory("len", 9), "len-2": EnvMemory("len", 1), "len-5": EnvMemory("len", 4)}
    scores = {"a": {"len-2": 1.0, "len-5": 0.9, "len-10": 0.8}, "b": {"len-2": 0.7, "len-10": 0.6}}
    baselines = {"len-2": {"random policy": 0.0}, "len-5": {"random policy": 0.1}}
    report = {
        "baselines": baselines,
        "per_env": {env: {label: {"mean": by_env[env], "low": by_env[env] - 0.1, "high": by_env[env] + 0.1}
                          for label, by_env in scores.items() if env in by_env} for env in memory},
        "verdicts": {env: {label: {name: {"holds": True} for name in baselines.get(env, {})}
                           for label, by_env in scores.items() if env in by_env} for env in memory},
    }
    sweep = memory_scaling(report, memory)["len"]
    assert sweep["steps"] == [1, 4, 9] and sweep["envs"] == ["len-2", "len-5", "len-10"]
    assert sweep["rows"]["a"]["solved"] == [True, True, None] and sweep["rows"]["a"]["longest_solved"] == 4
    assert sweep["rows"]["b"]["solved"] == [True, None, None] and sweep["rows"]["b"]["longest_solved"] == 1
    assert sweep["rows"]["b"]["mean"] == [0.7, None, 0.6]
    assert sweep["baselines"] == {"random policy": [0.0, 0.1, None]}


@needs_bsuite
def test_the_sweep_is_a_table_and_a_figure(tmp_path):
    """Catches: the section or figure missing, the solved marks or longest column wrong in the text."""
    report, _ = _report()
    text = markdown(report)
    assert "## Score against memory length: bsuite-memory-len" in text
    assert f"| baseline: {MEMORYLESS} | 0.000 | 0.000 | 0.000 | |" in text
    section = text.split("## Score against memory length")[1].split("\n## ")[0].splitlines()
    short = next(line for line in section if line.startswith("| short |"))
    assert short.endswith("| 4 |") and short.count("**") == 4  # two lengths solved, bold
    assert next(line for line in section if line.startswith("| guess |")).endswith("| none |")
    figures = draw_figures(report, tmp_path)
    assert figures["score against memory length bsuite-memory-len"] == "memory-bsuite-memory-len.png"
    assert (tmp_path / "memory-bsuite-memory-len.png").stat().st_size > 1000
    assert "learning curves at the longest length solved bsuite-memory-len" not in figures  # no curves given


@needs_bsuite
def test_the_learning_curve_of_each_row_is_drawn_at_the_longest_length_it_solves(tmp_path, monkeypatch):
    """Catches: the curve taken at the first or last length instead of the longest solved one, a
    row that solves nothing drawn."""
    import wmzoo.eval.plots as plots

    report, _ = _report()
    curve = {"x": [0.0, 100.0], "mean": [0.0, 1.0], "low": [0.0, 0.9], "high": [0.0, 1.0]}
    report["curves"] = {env: {label: {**curve, "mean": [0.0, float(i)]} for i, label in enumerate(("long", "short", "guess"))}
                        for env in ENVS}
    report["curves"]["bsuite-memory-len-5"]["short"] = {**curve, "mean": [0.0, 0.5]}  # short's longest: 5 (memory 4)
    drawn = {}
    monkeypatch.setattr(plots, "curves_plot", lambda path, series, *a, **k: drawn.update({Path(path).name: series}))
    figures = draw_figures(report, tmp_path)
    name = figures["learning curves at the longest length solved bsuite-memory-len"]
    assert set(drawn[name]) == {"long (memory 9)", "short (memory 4)"}
    assert drawn[name]["short (memory 4)"][1] == [0.0, 0.5] and drawn[name]["long (memory 9)"][1] == [0.0, 0.0]


@needs_bsuite
def test_no_sweep_for_envs_without_memory_or_one_length():
    """Catches: a sweep drawn over one length, or over envs that declare no memory."""
    report, memory = _report()
    assert memory_scaling(report, {ENVS[0]: memory[ENVS[0]]}) == {}
    assert env_memory(["minigrid-empty-5x5", "bsuite-discounting-chain-0"]) == {}


@needs_bsuite
def test_wall_time_per_cell_counts_done_cells_only(tmp_path):
    """Catches: a running or failed cell's seconds in the median, cells of two envs pooled."""
    cells = []
    for env, seed, state, seconds in [("a", 0, "done", 100.0), ("a", 1, "done", 300.0), ("a", 2, "done", 200.0),
                                      ("a", 3, "running", 5.0), ("b", 0, "failed", 9.0), ("b", 1, "done", 50.0)]:
        path = cell_dir("rssm:tiny", env, seed)
        (tmp_path / path).mkdir(parents=True)
        (tmp_path / path / "cell.json").write_text(json.dumps({"state": state, "seconds": seconds}))
        cells.append(Cell("rssm:tiny", "rssm", "tiny", env, seed, {}, str(path), False))
    times = wall_times(cells, Path(tmp_path))
    assert times == {"rssm:tiny": {"a": {"cells": 3, "median": 200.0, "min": 100.0, "max": 300.0},
                                   "b": {"cells": 1, "median": 50.0, "min": 50.0, "max": 50.0}}}
    report, _ = _report()
    report["wall_time"] = times
    assert "| rssm:tiny | a | 3 | 200 [100, 300] |" in markdown(report)


def test_the_efficiency_table_is_measured_on_one_thread_and_the_setting_restored(monkeypatch):
    """Catches: the report's bench left at torch's default threads (on a busy machine S4WM's
    imagination measured 70x slower on two threads than on one), the caller's threads not restored."""
    import torch

    import wmzoo.study.report as report_module

    seen = []
    monkeypatch.setattr(report_module, "_efficiency", lambda *a: seen.append(torch.get_num_threads()) or [])
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert report_module.efficiency(None, []) == [] and seen == [1]  # type: ignore[arg-type]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@needs_bsuite
def test_reward_learning_is_the_first_logged_step_below_half_the_first_reward_error(tmp_path, monkeypatch):
    """Catches: the threshold taken against the last or the smallest value instead of the first, the
    step of the first value below it off by one log, a running cell or a cell without the scalar
    counted, another scalar read, seeds of two envs pooled."""
    import wmzoo.study.report as report_module

    series = {  # (env, seed) -> logged reward_mae; the first is the predict-the-mean level
        ("a", 0): [(750, 0.33), (1000, 0.30), (1250, 0.17), (1500, 0.16), (1750, 0.01)],  # 0.17 is not < 0.165
        ("a", 1): [(750, 0.34), (1000, 0.33), (1250, 0.33)],  # never learnt
        ("a", 2): [(750, 0.30), (1000, 0.10)],  # running: left out
        ("b", 0): [(750, 0.20), (1000, 0.10), (1250, 0.05)],  # exactly half is not below it
    }
    cells = []
    for (env, seed), values in [*series.items(), (("b", 1), None)]:
        path = cell_dir("rssm:tiny", env, seed)
        (tmp_path / path).mkdir(parents=True)
        state = "running" if (env, seed) == ("a", 2) else "done"
        (tmp_path / path / "cell.json").write_text(json.dumps({"state": state}))
        cells.append(Cell("rssm:tiny", "rssm", "tiny", env, seed, {}, str(path), False))
    logged = {str(tmp_path / cell_dir("rssm:tiny", e, s) / "tb"): {"reward_mae": v, "reward": [(750, 9.0), (1000, 0.0)]}
              for (e, s), v in series.items()}
    monkeypatch.setattr(report_module, "scalars", lambda tb: logged.get(str(tb), {}))
    found = reward_learning(cells, report_module.done_scalars(cells, Path(tmp_path)))
    assert found == {"a": {"rssm:tiny": {0: {"learnt_at": 1500, "first": 0.33, "last": 0.01},
                                        1: {"learnt_at": None, "first": 0.34, "last": 0.33}}},
                     "b": {"rssm:tiny": {0: {"learnt_at": 1250, "first": 0.20, "last": 0.05}}}}
    report, _ = _report()
    report["reward_learning"] = json.loads(json.dumps(found))  # as report.json gives it back: seeds as strings
    text = markdown(report)
    assert "| rssm:tiny | a | 1 of 2 | 0: 1500, 1: - | 0: 0.03, 1: 0.97 |" in text
    assert "| rssm:tiny | b | 1 of 1 | 0: 1250 | 0: 0.25 |" in text
