"""The result files checked in under ``benchmarks/results`` read back unambiguously."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

RESULTS = Path(__file__).parents[2] / "benchmarks" / "results"


def no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    keys = [key for key, _ in pairs]
    duplicated = sorted({key for key in keys if keys.count(key) > 1})
    assert not duplicated, f"duplicate keys {duplicated}"
    return dict(pairs)


@pytest.mark.parametrize("path", sorted(RESULTS.rglob("*.json")), ids=lambda p: str(p.relative_to(RESULTS)))
def test_result_json_has_no_duplicate_keys(path: Path):
    """Catches: two runs written under the same key (``distracting_memory_100_mean_predicted_reward
    .json`` held the 120k- and 300k-frame runs of tssm-xl and s4wm under one key each, so a JSON
    parser silently kept only the second)."""
    json.loads(path.read_text(), object_pairs_hook=no_duplicates)


SPECS = {"distracting_memory_100": "distracting-memory-100", "multi_doors_keys_3": "multi-doors-keys-3"}


@pytest.mark.parametrize("path", sorted(p for name in SPECS for p in RESULTS.glob(f"{name}_*.run.yaml")),
                         ids=lambda p: p.name)
def test_memory_run_specs_name_their_env(path: Path):
    """Catches: offline runs recording the CLI's default env (``minigrid-empty-5x5``) instead of
    the dataset's, which ``wmzoo eval`` / ``imagine`` would then make."""
    env = next(env for name, env in SPECS.items() if path.name.startswith(name))
    assert yaml.safe_load(path.read_text())["env"] == env
