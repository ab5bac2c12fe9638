"""The Distracting Memory 8 study's verdicts, computed from its checked-in per-model readouts.

    python benchmarks/distracting_memory_8_verdicts.py [--out benchmarks/results/distracting_memory_8]

The study's folder (``wmzoo study run --out``) was lost with its workspace before
``wmzoo study report`` could run on it; 4 of its 12 cells had their evaluation files checked in
(``OUT/<row>-seed-<s>/reward.json``), and the other 8 cells' readouts had been written down as
each finished (``OUT/recorded.json``: accuracies over 1,000 episodes to 3 decimals are exact
counts, AUCs rounded to 3 decimals). This script feeds both, training forms only, through the same
functions as ``wmzoo study report``'s reward section and expected directions
(:func:`~wmzoo.study.report.reward_prediction`, :func:`~wmzoo.study.report.expectations` with the
study file's ``expect``), and writes ``OUT/verdicts.md`` and ``OUT/verdicts.json``. A study whose
cells are at hand needs none of this: ``wmzoo study report DIR``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from wmzoo.atomic import write_text_atomic
from wmzoo.specs import load_config
from wmzoo.study.report import expectation_lines, expectations, reward_lines, reward_prediction
from wmzoo.study.spec import study_from_dict

ENV = "distracting-memory-8"
STUDY = Path(__file__).parent / "studies" / "distracting-memory-8.yaml"
READOUTS = ("inference_accuracy", "imagination_accuracy", "inference_auc", "imagination_auc")
"""The training forms (the step forms of the 8 recorded cells were not written down one by one)."""


def records(out: Path) -> tuple[dict[str, dict[int, dict[str, Any]]], dict[str, str]]:
    """``({row: {seed: reward record}}, {"row seed": source})`` from the kept files and ``recorded.json``;
    a cell in both must agree to the 3 decimals written down (checks the transcription)."""
    recorded = json.loads((out / "recorded.json").read_text())
    shared = {k: recorded[k] for k in ("episodes", "scored_transitions", "baselines")}
    rows: dict[str, dict[int, dict[str, Any]]] = {}
    source: dict[str, str] = {}
    for label, seeds in recorded["cells"].items():
        for seed, values in seeds.items():
            rows.setdefault(label, {})[int(seed)] = {**shared, **{k: values[k] for k in READOUTS}}
            source[f"{label} {seed}"] = "recorded.json"
    for file in sorted(out.glob("*-seed-*/reward.json")):
        label, seed = file.parent.name.rsplit("-seed-", 1)
        kept = json.loads(file.read_text())
        if int(seed) in rows.get(label, {}):
            written = rows[label][int(seed)]
            if any(round(kept[k], 3) != written[k] for k in READOUTS):
                raise SystemExit(f"{file}: its readouts differ from recorded.json's for {label} seed {seed}")
        rows.setdefault(label, {})[int(seed)] = {k: kept[k] for k in ("episodes", "scored_transitions",
                                                                       "baselines", *READOUTS)}
        source[f"{label} {seed}"] = str(file.relative_to(out))
    return rows, source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "distracting_memory_8")
    args = parser.parse_args()
    study = study_from_dict(load_config(STUDY))
    rows, source = records(args.out)
    order = [label for label in study.labels() if label in rows]
    reward = reward_prediction({ENV: {"protocol": "reward", "rows": {label: rows[label] for label in order}}})
    report: dict[str, Any] = {"reward": reward, "score": "gen_mse", "paired": True, "sources": source}
    report["expectations"] = expectations(study, report, {})
    lines = [f"# {study.name}: verdicts from the per-model readouts", "",
             "Computed by `python benchmarks/distracting_memory_8_verdicts.py` through `wmzoo study report`'s "
             "functions, from the 4 cells' kept `reward.json` and the 8 cells' figures in `recorded.json` "
             "(the study folder was lost before its report ran; see that script's docstring). Training forms "
             "only; Gen. MSE, curves and wall times are in `../distracting_memory_8.md` where they were kept."]
    lines += reward_lines(report) + expectation_lines(report)
    write_text_atomic(args.out / "verdicts.md", "\n".join(lines) + "\n")
    write_text_atomic(args.out / "verdicts.json", json.dumps(report, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
