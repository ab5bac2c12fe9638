"""The study files checked in under ``benchmarks/studies/`` stay runnable as the code changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from wmzoo.config import load_config
from wmzoo.study.run import plan_cells
from wmzoo.study.spec import study_from_dict

STUDIES = sorted((Path(__file__).parents[2] / "benchmarks" / "studies").glob("*.yaml"))


def test_there_are_study_files():
    assert len(STUDIES) >= 7


@pytest.mark.parametrize("path", STUDIES, ids=[p.stem for p in STUDIES])
def test_a_checked_in_study_plans_every_cell(path: Path):
    # Catches: a renamed spec field, env or preset that leaves a published study failing only
    # when someone runs it (hours later, cell by cell); a parameter-matched row that no width
    # brings near its target.
    study = study_from_dict(load_config(str(path), what="study "), f"study {path.name}: ")
    cells = plan_cells(study, log=lambda line: None)
    assert len(cells) == len(study.backbones) * len(study.envs) * len(study.seeds)
    assert len({c.path for c in cells}) == len(cells)
