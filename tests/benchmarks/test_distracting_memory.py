"""``benchmarks/distracting_memory.py`` gives every backbone the same budget: frames, updates and
learning-rate warm-up (the commands it would run are captured, nothing is trained)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "distracting_memory.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("distracting_memory", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_args(bench, monkeypatch, tmp_path, frames: int) -> dict[str, dict[str, str]]:
    """Per backbone: the ``--steps`` and ``--set`` values of the ``wmzoo run`` it would start."""
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(bench, "wmzoo", lambda *args: calls.append(args))
    out = {}
    for backbone in bench.BACKBONES:
        calls.clear()
        bench.train(tmp_path, tmp_path / "data", backbone, frames)
        (args,) = calls
        values = dict(a.split("=", 1) for a in args[args.index("--set") :] if "=" in a)
        out[backbone] = {**values, "steps": args[args.index("--steps") + 1]}
    return out


def test_every_backbone_gets_the_same_frames_updates_and_warmup(bench, monkeypatch, tmp_path):
    """Catches: per-backbone update counts from a fixed batch (the first version: 300 updates of
    8 × 50 for RSSM-TBTT, 120 of 8 × 125 for TSSM-XL, 60 of 8 × 250 for S4WM), and each preset's
    own warm-up (S4WM ``small``: 100 updates, so its 60 updates never left it)."""
    runs = run_args(bench, monkeypatch, tmp_path, 120_000)
    assert {r["steps"] for r in runs.values()} == {"240"}
    assert {int(r["model.batch_size"]) * int(r["model.seq_len"]) for r in runs.values()} == {500}
    assert {r.get("model.optim.warmup") for r in runs.values()} == {str(bench.WARMUP)}
    assert all(r["train.windows"] == "episodes" for r in runs.values())


def test_a_budget_inside_the_warmup_is_refused_in_one_line(bench, monkeypatch, tmp_path, capsys):
    """Catches: a run that ends before (or just after) its learning-rate warm-up, so the backbones
    are compared at rates they never reached."""
    monkeypatch.setattr(sys, "argv", ["distracting_memory.py", "--frames", "40000", "--workdir", str(tmp_path)])
    monkeypatch.setattr(bench, "wmzoo", lambda *args: pytest.fail("no command may run"))
    with pytest.raises(SystemExit) as exit_info:
        bench.main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert "--frames 40000 gives 80 updates of 500 rows, inside twice the 50-update warm-up" in err
