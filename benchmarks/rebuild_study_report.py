"""Rebuild a checked-in offline study report with baselines and computed verdicts when its cells
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
    if not study.budget.offline or old["score"] != "gen_mse":
        raise SystemExit(f"{folder}: only offline (Gen. MSE) studies can be rebuilt from their report.json")
    budget = study.budget
    for env in study.envs:
        generate(env, budget.episodes, data_dir(work, env), size=budget.size, seed=budget.data_seed, log=lambda _: None)
    reference = {env: imagination_reference(study, [], work, env) for env in study.envs}
    baselines = {env: {name: b["gen_mse"] for name, b in found.items()} for env, found in reference.items()}
    table = {label: {env: {int(seed): value for seed, value in rows[label]["seeds"].items()}
                     for env, rows in old["per_env"].items() if label in rows}
             for label in study.labels()}
    report = {key: old[key] for key in KEPT if key in old}
    report.update(assess(study, table, "gen_mse", baselines, reps))
    report["memory_baselines"] = reference
    report["warnings"] += window_warnings(dependency_spans(study, work), training_windows(plan_cells(study, lambda _: None)))
    report["notes"] = [
        "Rebuilt by benchmarks/rebuild_study_report.py: the cells' scores, memory metrics, curves and efficiency "
        "are those of the original report.json (the cells were not checked in); the baselines were computed on "
        "the regenerated datasets (deterministic: same env, episodes, size and seed), test split."]
    figures = draw_figures(report, folder)
    figures.update({f"imagination {env}": f"imagination-{env}.gif" for env in study.envs
                    if (folder / f"imagination-{env}.gif").is_file()})
    report["figures"] = figures
    write_text_atomic(folder / "report.json", json.dumps(report, indent=2))
    write_text_atomic(folder / "report.md", markdown(report))
    return report


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
