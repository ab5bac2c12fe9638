"""``benchmarks/multi_doors_keys.py`` runs Distracting Memory's protocol on Multi Doors Keys 3 with
the task's own readouts (the commands it would run are captured, nothing is trained)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmark_scripts import load_script

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


@pytest.fixture
def mdk(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports distracting_memory beside it
    return load_script("multi_doors_keys")


def fake_run(mdk, monkeypatch, tmp_path, gate_passes: bool) -> list[tuple]:
    """Replace training and evaluation by records of what was asked; returns the records."""
    calls: list[tuple] = []
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "manifest.json").write_text("{}")

    def train(workdir, data, backbone, frames, warmup=mdk.dm.WARMUP, name=None):
        calls.append(("train", backbone, frames))
        return tmp_path / backbone / "checkpoint.safetensors"

    def gate(checkpoint, data, updates, protocol="reward"):
        calls.append(("gate", checkpoint.parent.name, updates, protocol))
        return {"updates": 1000, "recon_mse": 4.0, "gen_mse": 5.0, "mean_frame_mse": 30.0, "latent_perplexity": 3.0,
                "latent_classes": 16, "kl_rate": 3.0, "sees": True, "uses_latent": gate_passes}

    def evaluate(checkpoint, data, protocol="reward", out=None, episodes=None):
        calls.append(("evaluate", checkpoint.parent.name, protocol))
        if protocol == "imagination":
            return {"recon_mse": 1.0, "gen_mse": 2.5, "mean_frame_mse": 30.0, "gen_mse_per_step": [1.0, 2.0, 4.5]}
        return {"inference_accuracy": 0.9, "imagination_accuracy": 0.6, "inference_auc": 0.95,
                "imagination_auc": 0.7, "scored_transitions": 1200}

    monkeypatch.setattr(mdk.dm, "train", train)
    monkeypatch.setattr(mdk.dm, "gate", gate)
    monkeypatch.setattr(mdk.dm, "evaluate", evaluate)
    monkeypatch.setattr(mdk.dm, "curves", lambda *a, **k: [])
    images = {"baselines": {"best_constant": {"recon_mse": 30.0, "gen_mse": 40.0}}}
    monkeypatch.setattr(mdk, "baselines", lambda data: {"images": images, "gate_images": images, "reward": {
        "majority_class_accuracy": 2 / 3, "chance_auc": 0.5, "positives": 400, "negatives": 800, "episodes": 200}})
    monkeypatch.setattr(sys, "argv", ["multi_doors_keys.py", "--workdir", str(tmp_path), "--frames", "1000000",
                                      "--out", str(tmp_path / "out")])
    return calls


def test_the_gate_and_the_readouts_score_unlock_attempts_not_episode_endings(mdk, monkeypatch, tmp_path):
    """Catches: the gate or the final readout scoring Distracting Memory's ``reward`` protocol
    (episode endings, which Multi Doors Keys, truncated, never has), the runs not resumed past the
    gate to ``--frames``, and a report without the paper's table 3 numbers beside wmzoo's."""
    calls = fake_run(mdk, monkeypatch, tmp_path, gate_passes=True)
    mdk.main()
    assert [c for c in calls if c[0] == "gate"] == [("gate", b, 1000, "reasoning") for b in mdk.dm.BACKBONES]
    assert [c[2] for c in calls if c[0] == "train"] == [500_000] * 3 + [1_000_000] * 3
    assert {c[2] for c in calls if c[0] == "evaluate"} == {"imagination", "reasoning"}
    report = (tmp_path / "out" / "multi_doors_keys_3.md").read_text()
    assert "| S4WM | 1,000,000 | 2000 × 2 × 250 | 1.00 | 2.50 | 30.00 | 90.0 % (0.950) / 60.0 % (0.700) | 1200 | 0.01 / 0.04 |" in report
    assert "| RSSM-TBTT |" in report and "5.16" in report
    assert "| baseline: majority class (400 rewarded of 1200 scored) | 66.7 % |" in report
    assert "| S4WM | 90.0 % [85.1, 93.4]: **beats baseline** | 60.0 % [53.1, 66.5]: not above baseline" in report
    assert "| baseline: best constant | 30.00 | 40.00 |" in report and "One training seed" in report
    assert (tmp_path / "out" / "multi_doors_keys_3_gen_mse.png").stat().st_size > 0
    saved = json.loads((tmp_path / "out" / "multi_doors_keys_3.json").read_text())
    assert saved["tssm-xl"]["gen_mse_per_step"] == [1.0, 2.0, 4.5]


def test_a_failed_gate_stops_before_the_budget_is_spent(mdk, monkeypatch, tmp_path, capsys):
    """Catches: a run that fails the gate trained on to ``--frames`` anyway."""
    calls = fake_run(mdk, monkeypatch, tmp_path, gate_passes=False)
    with pytest.raises(SystemExit) as stop:
        mdk.main()
    assert stop.value.code == 1
    assert all(c[2] == 500_000 for c in calls if c[0] == "train")
    assert "failed the gate at 500,000 frames" in capsys.readouterr().err
