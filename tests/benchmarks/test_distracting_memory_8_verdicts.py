"""``benchmarks/distracting_memory_8_verdicts.py``: the checked-in verdicts of the Distracting
Memory 8 study are what its readouts give."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from benchmark_scripts import BENCHMARKS, load_script

RESULTS = BENCHMARKS / "results" / "distracting_memory_8"


def _run(out: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setattr(sys, "argv", ["distracting_memory_8_verdicts.py", "--out", str(out)])
    load_script("distracting_memory_8_verdicts").main()
    return json.loads((out / "verdicts.json").read_text())


def test_the_checked_in_verdicts_are_recomputed_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # Catches: verdicts.md left stale after a readout changed, a kept file and recorded.json both
    # counted for one cell, a row or seed dropped on the way to the report's functions.
    out = tmp_path / "dm8"
    shutil.copytree(RESULTS, out)
    report = _run(out, monkeypatch)
    assert (out / "verdicts.md").read_text() == (RESULTS / "verdicts.md").read_text()
    rows = report["reward"]["distracting-memory-8"]["rows"]
    assert list(rows) == ["S4WM", "TSSM-XL", "RSSM-TBTT", "RSSM-BPTT"]
    assert all(set(r["inference_accuracy"]["seeds"]) == {"0", "1", "2"} for r in rows.values())
    assert report["sources"]["S4WM 0"] == "S4WM-seed-0/reward.json"
    assert report["sources"]["RSSM-BPTT 2"] == "recorded.json"
    found = {(e["metric"], e["better"], e["worse"]): e for e in report["expectations"]}
    s4wm = found[("imagination_accuracy", "S4WM", "TSSM-XL")]
    assert (s4wm["models"]["above"], s4wm["text"]) == (3, "not separated")  # 3 seeds: p >= 0.25
    assert s4wm["verdict"]["estimate"] == pytest.approx((0.996 + 0.994 + 0.987 - 0.627 - 0.508 - 0.621) / 3)
    tssm = found[("inference_accuracy", "TSSM-XL", "RSSM-TBTT")]["models"]
    assert tssm["seeds"] == {"0": "above", "1": "overlap", "2": "above"}


def test_a_transcription_that_disagrees_with_a_kept_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # Catches: recorded.json silently overriding (or being overridden by) a kept evaluation file
    # that says something else for the same cell.
    out = tmp_path / "dm8"
    shutil.copytree(RESULTS, out)
    recorded = json.loads((out / "recorded.json").read_text())
    recorded["cells"]["S4WM"]["0"] = {**recorded["cells"]["S4WM"]["1"]}
    recorded["cells"]["S4WM"]["0"]["imagination_accuracy"] = 0.9
    (out / "recorded.json").write_text(json.dumps(recorded))
    with pytest.raises(SystemExit, match="S4WM seed 0"):
        _run(out, monkeypatch)
