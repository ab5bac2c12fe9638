"""``benchmarks/study_keep.py``: a study's done cells kept without checkpoints, and put back so
that ``wmzoo study run`` skips them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmark_scripts import load_script

from wmzoo.study.run import CELL_FILE, PLAN_FILE, STUDY_FILE, cell_done, plan_cells
from wmzoo.study.spec import StudySpec

STUDY = {"name": "fake", "envs": ["popgym-repeat-previous-easy"], "seeds": 2, "budget": {"steps": 100},
         "backbones": [{"name": "rssm", "row": "RSSM"}]}


def _study_folder(root: Path) -> tuple[Path, list]:
    """Seed 0 done (its eval, logs, checkpoint and replay written), seed 1 half-way."""
    out = root / "study"
    out.mkdir()
    study = StudySpec.model_validate(STUDY)
    (out / STUDY_FILE).write_text(json.dumps(STUDY))
    cells = plan_cells(study, log=lambda _: None)
    (out / PLAN_FILE).write_text(json.dumps([c.__dict__ for c in cells]))
    for cell, state in zip(cells, ("done", "running")):
        path = out / cell.path
        (path / "replay").mkdir(parents=True)
        (path / "replay" / "chunk-0.npz").write_bytes(b"replay")
        (path / "checkpoint.safetensors").write_bytes(b"weights")
        (path / "tb").mkdir()
        (path / "tb" / "events.out").write_bytes(b"events")
        (path / CELL_FILE).write_text(json.dumps({"state": state, "commands": [f"wmzoo run --logdir {path.absolute()} --x 1"]}))
        if state == "done":
            (path / "eval.json").write_text(json.dumps({"mean_return": 0.5}))
    return out, cells


def test_keep_takes_done_cells_without_weights_and_restore_makes_them_skipped(tmp_path: Path):
    # Catches: a checkpoint or replay checked in (megabytes each), a cell not done kept (its
    # folder without a checkpoint would not resume), a restored cell that `study run` reruns.
    script = load_script("study_keep")
    out, cells = _study_folder(tmp_path)
    kept = tmp_path / "kept"
    assert script.keep(out, kept) == [cells[0].name]
    files = sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file())
    assert files == sorted([STUDY_FILE, PLAN_FILE, f"{cells[0].path}/{CELL_FILE}", f"{cells[0].path}/eval.json",
                            f"{cells[0].path}/tb/events.out"])
    assert script.keep(out, kept) == [cells[0].name]  # again: identical files are no error
    moved = tmp_path / "moved"
    out.rename(moved)  # the workspace lost; a new one at the same path
    assert script.restore(kept, out) == [cells[0].name]
    study = StudySpec.model_validate(STUDY)
    assert cell_done(cells[0], study, out) and not cell_done(cells[1], study, out)


def test_restore_refuses_another_path_and_a_differing_file(tmp_path: Path):
    # Catches: cells restored where their commands' --logdir does not point (the report and a
    # resumed run would read another folder), or a user's file silently overwritten.
    script = load_script("study_keep")
    out, cells = _study_folder(tmp_path)
    kept = tmp_path / "kept"
    script.keep(out, kept)
    with pytest.raises(SystemExit, match=f"ran in .*restore it to {out.absolute()}"):
        script.restore(kept, tmp_path / "elsewhere")
    (out / cells[0].path / "eval.json").write_text(json.dumps({"mean_return": 0.9}))
    with pytest.raises(SystemExit, match="exists and differs"):
        script.restore(kept, out)
    assert json.loads((out / cells[0].path / "eval.json").read_text()) == {"mean_return": 0.9}


def test_keep_with_checkpoints_keeps_the_trained_model_and_restore_brings_it_back(tmp_path: Path):
    # Catches: --checkpoints ignored (the models a later diagnosis needs lost with the workspace,
    # as the POPGym pair's were), replay kept with them, a kept checkpoint left out on restore.
    script = load_script("study_keep")
    out, cells = _study_folder(tmp_path)
    kept = tmp_path / "kept"
    assert script.main(["keep", str(out), str(kept), "--checkpoints"]) == 0
    cell = kept / cells[0].path
    assert (cell / "checkpoint.safetensors").read_bytes() == b"weights"
    assert not (cell / "replay").exists() and not (kept / cells[1].path).exists()
    out.rename(tmp_path / "moved")
    script.restore(kept, out)
    assert (out / cells[0].path / "checkpoint.safetensors").read_bytes() == b"weights"
