"""The study report's reward-prediction section and expected directions on fake study folders
(no training: hand-written ``eval/reward.json`` and ``eval/imagination.json`` of done cells), and
the cells' commands of the reward protocol."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from wmzoo.study.report import (build_report, expectations, markdown, models_ordered, reward_prediction,
                                 reward_records)
from wmzoo.study.run import CELL_FILE, PLAN_FILE, STUDY_FILE, cell_commands, cell_done, plan_cells
from wmzoo.study.spec import REWARD_METRICS, StudySpec

ENV = "distracting-memory-8"
EPISODES, POSITIVES = 100, 55  # test episodes; rewarded scored transitions (the majority class)
MAJORITY = 0.55
Z, T4 = 1.96, 2.776  # normal and Student t (4 degrees of freedom) 95 % quantiles

# per row, per seed: (inference accuracy, imagination accuracy); every other readout follows
S4WM = [(0.95, 0.80), (0.93, 0.82), (0.96, 0.79), (0.94, 0.81), (0.95, 0.80)]
TSSM = [(0.90, 0.81), (0.91, 0.79), (0.89, 0.80), (0.92, 0.80), (0.90, 0.82)]
RSSM = [(MAJORITY, MAJORITY)] * 5  # at the base rate


def _study(seeds: int = 5, expect: list[dict] | None = None) -> dict[str, Any]:
    return {"name": "fake", "envs": [ENV], "seeds": seeds, "budget": {"updates": 10, "episodes": 10, "size": 16},
            # one cheap backbone under three row names: the report never reads what a row is
            "backbones": [{"name": "rssm", "row": row} for row in ("S4WM", "TSSM-XL", "RSSM-TBTT")],
            "expect": expect or []}


def _reward(inference: float, imagination: float, scored: int = EPISODES) -> dict[str, Any]:
    """A reward.json as `wmzoo evaluate --protocol reward` writes it; the step form is the
    training form less 0.01, each AUC the accuracy plus 0.02."""
    accuracies = {"inference_accuracy": inference, "imagination_accuracy": imagination,
                  "step_inference_accuracy": inference - 0.01, "step_imagination_accuracy": imagination - 0.01}
    aucs = {key.replace("accuracy", "auc"): min(1.0, value + 0.02) for key, value in accuracies.items()}
    return {"protocol": "reward", "env": ENV, **accuracies, **aucs, "scored_transitions": scored,
            "episodes": EPISODES, "baselines": {"majority_class_accuracy": MAJORITY, "chance_auc": 0.5,
                                                "positives": POSITIVES, "negatives": scored - POSITIVES}}


def _folder(tmp_path: Path, study: dict[str, Any], reward: bool = True, scored: int = EPISODES) -> Path:
    """A study folder whose cells are all done, with their evaluation files written by hand."""
    out = tmp_path / "study"
    out.mkdir(parents=True)
    (out / STUDY_FILE).write_text(json.dumps(study))
    cells = plan_cells(StudySpec.model_validate(study), log=lambda _: None)
    (out / PLAN_FILE).write_text(json.dumps([c.__dict__ for c in cells]))
    rows = {"S4WM": S4WM, "TSSM-XL": TSSM, "RSSM-TBTT": RSSM}
    for cell in cells:
        path = out / cell.path
        (path / "eval").mkdir(parents=True)
        (path / CELL_FILE).write_text(json.dumps({"state": "done"}))
        inference, imagination = rows[cell.label][cell.seed]
        (path / "eval" / "imagination.json").write_text(json.dumps({
            "recon_mse": 1.0, "gen_mse": 10.0 - 5 * inference + 0.1 * cell.seed, "gen_mse_per_step": [9.0, 11.0],
            "episodes": EPISODES, "baselines": {"mean_context_frame": {"recon_mse": 12.0, "gen_mse": 12.0},
                                                "best_constant": {"recon_mse": 11.0, "gen_mse": 11.0}}}))
        if reward:
            (path / "eval" / "reward.json").write_text(json.dumps(_reward(inference, imagination, scored)))
    return out


def _section(out: Path) -> dict[str, Any]:
    from wmzoo.study.run import cells_of

    study = StudySpec.model_validate(json.loads((out / STUDY_FILE).read_text()))
    return reward_prediction(reward_records(study, cells_of(out), out))[ENV]


def _wilson(rate: float, n: int) -> tuple[float, float]:
    centre = (rate + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(rate * (1 - rate) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return centre - half, centre + half


def _hanley_mcneil(auc: float, positives: int, negatives: int) -> tuple[float, float]:
    q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
    se = math.sqrt((auc * (1 - auc) + (positives - 1) * (q1 - auc * auc) + (negatives - 1) * (q2 - auc * auc))
                   / (positives * negatives))
    return auc - Z * se, auc + Z * se


def test_the_section_holds_the_hand_computed_intervals_means_and_baselines(tmp_path: Path):
    # Catches: a Wilson interval over the transitions instead of the episodes (the unit), an AUC
    # interval from uncapped class counts, the step form not beside the training form, a mean or
    # t interval over the wrong values, the baseline not printed beside.
    out = _folder(tmp_path, _study(), scored=3 * EPISODES)  # three scored transitions an episode
    section = _section(out)
    assert section["baselines"] == {"majority class": MAJORITY, "chance": 0.5, "positives": POSITIVES,
                                    "negatives": 3 * EPISODES - POSITIVES}
    s4wm = section["rows"]["S4WM"]
    assert set(s4wm) == set(REWARD_METRICS)
    seed0 = s4wm["inference_accuracy"]["seeds"]["0"]
    assert (seed0["low"], seed0["high"]) == pytest.approx(_wilson(0.95, EPISODES))  # n = 100 episodes, not 300
    assert seed0["holds"] and seed0["text"] == "beats baseline"
    step = s4wm["step_imagination_accuracy"]["seeds"]["2"]
    assert (step["estimate"], step["low"], step["high"]) == pytest.approx((0.78, *_wilson(0.78, EPISODES)))
    auc = s4wm["inference_auc"]["seeds"]["1"]
    assert (auc["low"], auc["high"]) == pytest.approx(_hanley_mcneil(0.95, POSITIVES, EPISODES))  # negatives capped
    values = [a for a, _ in S4WM]
    mean = sum(values) / 5
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / 4)
    row = s4wm["inference_accuracy"]
    assert (row["mean"], row["low"], row["high"]) == pytest.approx((mean, mean - T4 * sd / 5**0.5, mean + T4 * sd / 5**0.5))
    assert row["verdict"]["holds"] and row["verdict"]["method"] == "95 % Student t over seeds"
    text = markdown({**build_minimal(), "reward": {ENV: section}})
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| inference accuracy, training form | baseline"))
    assert lines[head].endswith("| 0.550 | |")
    assert lines[head + 1].startswith("| inference accuracy, training form | S4WM | 0: 0.950 [")
    assert any(line.startswith("| inference accuracy, one row at a time | S4WM | 0: 0.940 [") for line in lines)
    assert any(line.startswith("| inference AUC, training form | baseline: chance |") and "| 0.500 |" in line
               for line in lines)



def test_a_readout_no_row_has_prints_no_baseline_line(tmp_path: Path):
    # Catches: a baseline line printed for a readout no cell's file holds (files without the step
    # forms), which reads as a measured row with nothing beside it.
    out = _folder(tmp_path, _study())
    for file in out.glob("cells/**/eval/reward.json"):
        record = json.loads(file.read_text())
        file.write_text(json.dumps({k: v for k, v in record.items() if not k.startswith("step_")}))
    text = markdown({**build_minimal(), "reward": {ENV: _section(out)}})
    assert "one row at a time |" not in text
    assert "| inference accuracy, training form | baseline: majority class |" in text

def build_minimal() -> dict[str, Any]:
    """The fields markdown() reads besides the reward section (an offline study, no cell done)."""
    return {"study": "fake", "mode": "offline", "budget": {"updates": 10, "episodes": 10, "size": 16},
            "params_target": None, "score": "gen_mse", "higher_is_better": False, "cells": {}, "parameters": {},
            "seeds": 5, "paired": True, "baselines": {}, "per_env": {}, "verdicts": {}, "pairs": {},
            "normalised": {"score": "Gen. MSE", "normalised": False, "by": None}, "aggregate": {}}


def test_a_row_at_the_base_rate_is_not_above_baseline(tmp_path: Path):
    # Catches: the verdict's inequality flipped or non-strict (an interval that contains the base
    # rate declared above it), per seed and over seeds; a verdict at 2 seeds the intervals do not support.
    rssm = _section(_folder(tmp_path, _study()))["rows"]["RSSM-TBTT"]
    for metric in ("inference_accuracy", "imagination_accuracy"):
        assert all(not v["holds"] and v["text"] == "not above baseline" for v in rssm[metric]["seeds"].values())
        assert rssm[metric]["verdict"]["text"] == "not above baseline"
    assert rssm["inference_auc"]["verdict"]["holds"]  # 0.57 on every seed: above chance (0.5)
    text = markdown({**build_minimal(), "reward": {ENV: _section(_folder(tmp_path / "b", _study()))}})
    row = next(line for line in text.splitlines() if line.startswith("| inference accuracy, training form | RSSM"))
    assert row.count("not above baseline") == 6 and "beats" not in row
    two = _section(_folder(tmp_path / "two", _study(seeds=2)))["rows"]["S4WM"]["inference_accuracy"]
    assert all(v["holds"] for v in two["seeds"].values())  # each trained model beats the base rate ...
    assert not two["verdict"]["holds"] and two["verdict"]["p_value"] == 0.5  # ... 2 seeds cannot say it of S4WM


def test_expected_pairs_are_supported_contradicted_or_not_separated(tmp_path: Path):
    # Catches: the sign of the expectation ignored (a contradiction printed as support), a pair
    # called supported without being separated, a missing readout given a verdict.
    expect = [{"metric": "inference_accuracy", "order": ["S4WM", "TSSM-XL", "RSSM-TBTT"], "source": "paper"},
              {"metric": "inference_accuracy", "order": ["RSSM-TBTT", "S4WM"]},
              {"metric": "imagination_accuracy", "order": [["S4WM", "RSSM-TBTT"], "TSSM-XL"]},
              {"metric": "gen_mse", "order": ["S4WM", "RSSM-TBTT"]},
              {"metric": "mean_return", "order": ["S4WM", "RSSM-TBTT"]}]
    out = _folder(tmp_path, _study(expect=expect))
    study = StudySpec.model_validate(_study(expect=expect))
    report = {"score": "gen_mse", "paired": True, "reward": {ENV: _section(out)}}
    table = {"S4WM": {ENV: {s: 10.0 - 5 * a for s, (a, _) in enumerate(S4WM)}},
             "RSSM-TBTT": {ENV: {s: 10.0 - 5 * a + 0.1 * s for s, (a, _) in enumerate(RSSM)}}}
    found = {(e["metric"], e["better"], e["worse"]): e for e in expectations(study, report, table)}
    assert found[("inference_accuracy", "S4WM", "TSSM-XL")]["text"] == "supported"
    assert found[("inference_accuracy", "S4WM", "RSSM-TBTT")]["verdict"]["estimate"] == pytest.approx(0.396)
    assert found[("inference_accuracy", "RSSM-TBTT", "S4WM")]["text"] == "contradicted"
    assert found[("imagination_accuracy", "S4WM", "TSSM-XL")]["text"] == "not separated"  # noise only
    assert found[("imagination_accuracy", "RSSM-TBTT", "TSSM-XL")]["text"] == "contradicted"  # tied: each vs later
    assert ("imagination_accuracy", "S4WM", "RSSM-TBTT") not in found
    assert found[("gen_mse", "S4WM", "RSSM-TBTT")]["text"] == "supported"  # lower is better
    assert found[("mean_return", "S4WM", "RSSM-TBTT")]["text"] == "not computed"
    assert len(found) == 3 + 1 + 2 + 1 + 1
    text = markdown({**build_minimal(), **report, "expectations": list(found.values())})
    assert "| inference_accuracy | distracting-memory-8 | RSSM-TBTT better than S4WM | - | -0.396 | **contradicted** (" in text
    assert "| S4WM better than TSSM-XL | paper | +0.042 | **supported** ([" in text


def test_expected_pairs_are_also_compared_model_by_model(tmp_path: Path):
    # Catches: the per-seed comparison reading the wrong row's interval (a reversed pair printed as
    # expected), intervals that overlap counted as ordered, a seed missing on one side counted.
    expect = [{"metric": "inference_accuracy", "order": ["S4WM", "TSSM-XL", "RSSM-TBTT"]},
              {"metric": "inference_accuracy", "order": ["RSSM-TBTT", "S4WM"]},
              {"metric": "gen_mse", "order": ["S4WM", "RSSM-TBTT"]}]
    out = _folder(tmp_path, _study(expect=expect))
    report = {"score": "gen_mse", "paired": True, "reward": {ENV: _section(out)}}
    found = {(e["metric"], e["better"], e["worse"]): e
             for e in expectations(StudySpec.model_validate(_study(expect=expect)), report, {})}
    above = found[("inference_accuracy", "S4WM", "RSSM-TBTT")]["models"]
    assert (above["above"], above["below"], above["overlap"]) == (5, 0, 0)  # 0.93-0.96 vs 0.55 over 100 episodes
    assert found[("inference_accuracy", "RSSM-TBTT", "S4WM")]["models"]["below"] == 5
    close = found[("inference_accuracy", "S4WM", "TSSM-XL")]["models"]  # 0.95 vs 0.90: Wilson intervals overlap
    assert close["overlap"] == 5 and close["above"] == 0
    assert found[("gen_mse", "S4WM", "RSSM-TBTT")]["models"] is None  # no per-model interval there
    rows = report["reward"][ENV]["rows"]
    del rows["RSSM-TBTT"]["inference_accuracy"]["seeds"]["4"]
    assert models_ordered(rows, "S4WM", "RSSM-TBTT", "inference_accuracy")["seeds"] == {
        str(s): "above" for s in range(4)}
    text = markdown({**build_minimal(), **report, "expectations": list(found.values())})
    assert "| 5 of 5 as expected |" in text and "| 5 of 5 reversed |" in text and "| 5 of 5 overlapping |" in text


def test_an_old_folder_without_reward_files_still_reports(tmp_path: Path):
    # Catches: the report failing (KeyError, StopIteration) on cells evaluated before the reward
    # protocol was added, or printing an empty section for them.
    expect = [{"metric": "inference_accuracy", "order": ["S4WM", "RSSM-TBTT"]}]
    out = _folder(tmp_path, _study(seeds=2, expect=expect), reward=False)
    report = build_report(out, reps=10, bench=False)
    assert report["reward"] == {} and report["per_env"][ENV]["S4WM"]["seeds"] == {"0": 10.0 - 5 * 0.95,
                                                                                 "1": 10.0 - 5 * 0.93 + 0.1}
    assert [e["text"] for e in report["expectations"]] == ["not computed"]
    text = markdown(report)
    assert "## Reward prediction" not in text and "| S4WM better than RSSM-TBTT | - | - | not computed |" in text


@pytest.mark.filterwarnings("ignore:.*dataset incomplete")  # its test split alone: all the decision reads
@pytest.mark.parametrize("env, protocol", [("distracting-memory-8", "reward"), ("multi-doors-keys-3", "reasoning"),
                                           ("minigrid-empty-5x5", None)])
def test_offline_cells_run_the_reward_protocol_their_dataset_has(tmp_path: Path, env: str, protocol: str | None):
    # Catches: the reward protocol missing from a memory task's cells (a study that cannot score
    # Table 2), run on a dataset it cannot score (every cell failing), or the attempts' protocol
    # confused with the endings'; a cell counted done without its reward file.
    from wmzoo.data.generate import generate
    from wmzoo.study.run import data_dir

    study = StudySpec.model_validate({**_study(seeds=1), "envs": [env], "backbones": ["rssm"]})
    generate(env, 5, data_dir(tmp_path, env), size=8, log=lambda _: None, only="test")
    (cell,) = plan_cells(study, log=lambda _: None)
    _, _, evaluate = cell_commands(cell, study, tmp_path)
    protocols = [args[args.index("--protocol") + 1] for args in evaluate]
    assert protocols == ["imagination"] + ([protocol] if protocol else [])
    assert all(args[args.index("--out") + 1] == str(tmp_path / cell.path / "eval") for args in evaluate)
    path = tmp_path / cell.path
    (path / "eval").mkdir(parents=True)
    (path / CELL_FILE).write_text(json.dumps({"state": "done"}))
    (path / "eval" / "imagination.json").write_text("{}")
    assert cell_done(cell, study, tmp_path) == (protocol is None)
    if protocol:
        (path / "eval" / f"{protocol}.json").write_text("{}")
        assert cell_done(cell, study, tmp_path)


@pytest.mark.filterwarnings("ignore:.*dataset incomplete")
def test_a_cell_done_before_the_reward_protocol_gets_only_that_evaluation(tmp_path: Path, monkeypatch):
    # Catches: an older study folder's done cells skipped for ever (no reward.json, no section), or
    # trained again / re-evaluated in full to add it.
    from dataclasses import asdict

    from wmzoo.data.generate import generate
    from wmzoo.study import run as study_run

    study = StudySpec.model_validate({**_study(seeds=1), "backbones": ["rssm"]})
    generate(ENV, 5, study_run.data_dir(tmp_path, ENV), size=8, log=lambda _: None, only="test")
    (cell,) = plan_cells(study, log=lambda _: None)
    path = tmp_path / cell.path
    (path / "eval").mkdir(parents=True)
    (path / CELL_FILE).write_text(json.dumps({"state": "done", "attempts": 1}))
    (path / "eval" / "imagination.json").write_text("{}")
    ran: list[list[str]] = []
    monkeypatch.setattr(study_run, "_wmzoo", lambda args, record, *_: ran.append(args))
    record = study_run.run_cell(asdict(cell), study.model_dump(mode="json"), str(tmp_path), 1, study_run.Processes())
    assert record["state"] == "done" and record["attempts"] == 2
    assert [(args[0], args[args.index("--protocol") + 1]) for args in ran] == [("evaluate", "reward")]
