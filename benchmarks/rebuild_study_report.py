"""Rebuild a checked-in study report (offline Gen. MSE, or imitation success rate) with baselines and computed verdicts when its cells
(checkpoints, evaluation files) were not checked in, only ``report.json`` with every cell's score.

    python benchmarks/rebuild_study_report.py benchmarks/results/study-memory-and-minigrid-1k --work runs/mm1k

What it does, through the same functions as ``wmzoo study report`` (:mod:`wmzoo.study.report`):

1. regenerates each env's dataset into ``WORK/data/<env>`` exactly as ``wmzoo study run`` does
   (``wmzoo data generate`` with the study's episodes, size and data seed: deterministic; an
   existing dataset made with the same arguments is reused);
2. computes the imagination protocol's baselines (mean context frame, best constant) on the same
   test split and context that the cells were evaluated on
   (:func:`~wmzoo.study.report.imagination_reference`);
3. takes each cell's Gen. MSE from the kept ``report.json`` (``per_env``: every seed's score, as
   the cells' ``eval/imagination.json`` held it) and runs :func:`~wmzoo.study.report.assess`;
   the memory metrics, parameters, learning curves and efficiency are the kept ones;
   an imitation study's baseline is the random policy's success rate kept in
   ``random-baselines.json`` on the same evaluation seeds, and every success rate gets its Wilson
   interval over the evaluation episodes beside the verdicts over seeds;
4. writes ``report.json``, ``report.md`` and the figures (:func:`~wmzoo.study.report.draw_figures`)
   back into the folder, keeping its imagination GIFs.

A study whose cells are at hand needs none of this: ``wmzoo study report DIR``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from wmzoo.atomic import write_text_atomic
from wmzoo.data.generate import generate
from wmzoo.specs import load_config
from wmzoo.study.report import (
    RANDOM_POLICY,
    assess,
    data_dir,
    dependency_spans,
    draw_figures,
    imagination_reference,
    markdown,
    training_windows,
    window_warnings,
)
from wmzoo.study.run import plan_cells
from wmzoo.study.spec import study_from_dict

KEPT = ("study", "mode", "budget", "params_target", "score", "higher_is_better", "cells", "parameters",
        "curves", "memory", "efficiency")


def rebuild(folder: Path, work: Path, reps: int = 10_000) -> dict[str, Any]:
    old = json.loads((folder / "report.json").read_text())
    study = study_from_dict(load_config(folder / "study.yaml", what=""), f"{folder / 'study.yaml'}: ")
    budget = study.budget
    if old["score"] == "gen_mse" and budget.offline:
        for env in study.envs:
            generate(env, budget.episodes, data_dir(work, env), size=budget.size, seed=budget.data_seed,
                     log=lambda _: None)
        reference = {env: imagination_reference(study, [], work, env) for env in study.envs}
        baselines = {env: {name: b["gen_mse"] for name, b in found.items()} for env, found in reference.items()}
        note = "the baselines were computed on the regenerated datasets (deterministic: same env, episodes, size and seed), test split."
    elif old["score"] == "success_rate":
        kept = json.loads((folder / "random-baselines.json").read_text())
        baselines = {env: {RANDOM_POLICY: kept[env]["success_rate"]} for env in study.envs}
        reference = {}
        note = ("the random policy's success rates are those kept in random-baselines.json (the same "
                f"{study.eval.episodes} evaluation seeds as the cells).")
    else:
        raise SystemExit(f"{folder}: only Gen. MSE and success-rate studies can be rebuilt from their report.json")
    table = {label: {env: {int(seed): value for seed, value in rows[label]["seeds"].items()}
                     for env, rows in old["per_env"].items() if label in rows}
             for label in study.labels()}
    report = {key: old[key] for key in KEPT if key in old}
    report.update(assess(study, table, old["score"], baselines, reps))
    if reference:
        report["memory_baselines"] = reference
        report["warnings"] += window_warnings(dependency_spans(study, work),
                                              training_windows(plan_cells(study, lambda _: None)))
    report["notes"] = [
        "Rebuilt by benchmarks/rebuild_study_report.py: the cells' scores, memory metrics, curves and efficiency "
        f"are those of the original report.json (the cells were not checked in); {note}"]
    if old["score"] == "success_rate":
        report["notes"].append(success_rate_note(table, baselines, study.eval.episodes))
    figures = draw_figures(report, folder)
    figures.update({f"imagination {env}": f"imagination-{env}.gif" for env in study.envs
                    if (folder / f"imagination-{env}.gif").is_file()})
    report["figures"] = figures
    write_text_atomic(folder / "report.json", json.dumps(report, indent=2))
    write_text_atomic(folder / "report.md", markdown(report))
    return report


def success_rate_note(table: dict[str, dict[str, dict[int, float]]], baselines: dict[str, dict[str, float]],
                      episodes: int) -> str:
    """Each success rate is an estimate over ``episodes`` evaluation episodes: its 95 % Wilson
    interval (the episode is the unit), the random policy's included, as a Markdown table."""
    from wmzoo.eval.verdicts import wilson_interval

    def cell(rate: float) -> str:
        _, low, high = wilson_interval(round(rate * episodes / 100), episodes)
        return f"{rate:.0f} [{100 * low:.0f}, {100 * high:.0f}]"

    envs = list(baselines)
    lines = [f"Every success rate is an estimate over {episodes} evaluation episodes (95 % Wilson interval over "
             "episodes, in %, below): about +-10 points around 50 %. These intervals are within one trained model; "
             "the verdicts per environment below are over training seeds. The expert's (the BabyAI bot's) success rate on these seeds was not computed (no baseline row for it).", "",
             "| row | " + " | ".join(envs) + " |", "|---|" + "---|" * len(envs)]
    lines.append(f"| baseline: {RANDOM_POLICY} | " + " | ".join(cell(baselines[e][RANDOM_POLICY]) for e in envs) + " |")
    for label, rows in table.items():
        lines.append(f"| {label} | " + " | ".join(", ".join(cell(v) for _, v in sorted(rows[e].items())) for e in envs) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the study's report folder (report.json, study.yaml)")
    parser.add_argument("--work", type=Path, required=True, help="scratch folder for the regenerated datasets")
    parser.add_argument("--reps", type=int, default=10_000, help="bootstrap replicates (5 seeds or more)")
    args = parser.parse_args()
    rebuild(args.folder, args.work, args.reps)
    print(f"wrote {args.folder / 'report.md'}")


if __name__ == "__main__":
    main()
