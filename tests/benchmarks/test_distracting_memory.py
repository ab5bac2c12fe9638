"""``benchmarks/distracting_memory.py`` gives every backbone the same budget: frames, updates and
learning-rate warm-up (the commands it would run are captured, nothing is trained)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from benchmark_scripts import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("distracting_memory")


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
    assert {r.get("model.optim.lr") for r in runs.values()} == {"0.001"}  # not each preset's own
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


def test_the_memoryless_control_rewards_the_last_move_only(bench, tmp_path):
    """Catches: the relabelled reward put on the final row (which has no action) instead of the
    ending transition, another move than *up* rewarded, the source's memory reward left in place,
    a control dataset whose checksums do not verify."""
    from wmzoo.cli import main as wmzoo_main
    from wmzoo.data.dataset import iter_episodes

    source = tmp_path / "data"
    assert wmzoo_main(["data", "generate", "--env", "distracting-memory-100", "--episodes", "12", "--size", "40",
                       "--out", str(source), "--split", "0.5,0.25,0.25"]) == 0
    control = bench.relabel(source, tmp_path / "control")
    pairs = list(zip(iter_episodes(source, "train"), iter_episodes(control, "train"), strict=True))
    assert len(pairs) == 6
    ups = 0
    for original, episode in pairs:
        np.testing.assert_array_equal(original["obs"], episode["obs"])
        np.testing.assert_array_equal(original["action"], episode["action"])
        ending = len(episode["reward"]) - 2
        assert episode["action"][ending] in (1, bench.UP)  # the last move: down or up onto a square
        expected = np.zeros_like(episode["reward"])
        expected[ending] = float(episode["action"][ending] == bench.UP)
        np.testing.assert_array_equal(episode["reward"], expected)
        ups += int(expected[ending])
    assert 0 < ups < 6
    assert bench.relabel(source, tmp_path / "control") == control  # complete: reused


def test_a_run_below_its_budget_resumes_to_it(bench, monkeypatch, tmp_path):
    """Catches: a finished gate run retrained from scratch (or left at the gate) when the budget grows."""
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(bench, "wmzoo", lambda *args: calls.append(args))
    (tmp_path / "rssm").mkdir()
    (tmp_path / "rssm" / "checkpoint.safetensors").write_bytes(b"")
    monkeypatch.setattr(bench, "updates_done", lambda checkpoint: 1000)
    bench.train(tmp_path, tmp_path / "data", "rssm", 500_000)
    assert calls == []
    bench.train(tmp_path, tmp_path / "data", "rssm", 2_000_000)
    assert calls == [("run", "--resume", "--logdir", str(tmp_path / "rssm"), "--steps", "4000", "--no-progress")]


def test_the_gates_rate_is_the_logged_kl_just_before_the_gate(bench, tmp_path):
    """Catches: the rate read over the whole log (its collapsed start, KL 0, drags a latent that is
    in use under the line) or past the gate (a resumed run's later KL counted at the gate)."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    for step in range(10, 2001, 10):  # collapsed (0 nats) to 800, 3 nats to the gate, 9 after it
        writer.add_scalar("kl", 0.0 if step <= 800 else 3.0 if step <= 1000 else 9.0, step)
    writer.close()
    assert bench.rate(tmp_path / "tb", 1000) == pytest.approx(3.0)
    assert bench.rate(tmp_path / "tb", 500) == 0.0
    assert bench.rate(tmp_path / "none", 1000) == 0.0


def test_each_runs_spec_is_kept_beside_the_report(bench, tmp_path):
    """Catches: the report's run.yaml copies taken from the wrong run (or left stale)."""
    for backbone in bench.BACKBONES:
        (tmp_path / backbone).mkdir()
        (tmp_path / backbone / "run.yaml").write_text(f"backbone: {backbone}\n")
    kept = bench.keep_specs(tmp_path, tmp_path, "dm")
    assert [p.name for p in kept] == [f"dm_{b}.run.yaml" for b in bench.BACKBONES]
    assert all(p.read_text() == f"backbone: {b}\n" for p, b in zip(kept, bench.BACKBONES, strict=True))


def test_a_resumed_run_is_evaluated_anew_and_its_gate_stays_at_the_gate(bench, monkeypatch, tmp_path, capsys):
    """Catches: a run resumed from the gate (1,000 updates) to 4,000 scored from its evaluation
    at 1,000 (cached by file name alone: what the first 2M-frame S4WM readout did), and gate
    readings taken from a checkpoint already past the gate."""
    calls: list[tuple[str, ...]] = []

    def wmzoo(*args):
        calls.append(args)
        out = Path(args[args.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{args[args.index('--protocol') + 1]}.json").write_text('{"inference_accuracy": 0.5}')

    monkeypatch.setattr(bench, "wmzoo", wmzoo)
    checkpoint = tmp_path / "s4wm" / "checkpoint.safetensors"
    done = {"updates": 1000}
    monkeypatch.setattr(bench, "updates_done", lambda _: done["updates"])
    bench.evaluate(checkpoint, tmp_path)
    bench.evaluate(checkpoint, tmp_path)  # cached
    done["updates"] = 4000
    bench.evaluate(checkpoint, tmp_path)
    outs = [c[c.index("--out") + 1] for c in calls]
    assert outs == [str(tmp_path / "s4wm" / "evaluate-1000"), str(tmp_path / "s4wm" / "evaluate-4000")]
    with pytest.raises(SystemExit) as stop:
        bench.gate(checkpoint, tmp_path, 1000)
    assert stop.value.code == 2 and "not the gate's 1000" in capsys.readouterr().err


@pytest.mark.parametrize("env_name", ["distracting-memory-100", "distracting-memory-200"])
def test_the_cue_seen_probe_reads_the_rows_up_to_hallway_cell_0(bench, env_name):
    """Catches: the "seen" probe placed a row early (the cue's room not yet at its closest) or at
    a fixed row that fits one width only."""
    from wmzoo.registry import make_env

    env = make_env(env_name, size=40)
    env.reset(seed=3)
    inner = env.unwrapped
    rows = bench.cue_rows(inner.context_length)
    for _ in range(rows - 2):
        env.step(inner.scripted_action())
    assert inner.agent_pos != (3, 2)
    env.step(inner.scripted_action())  # the last of the rows - 1 moves: row rows - 1 is observed there
    assert inner.agent_pos == (3, 2)


def test_the_cue_probe_curve_runs_from_the_cue_seen_to_the_end_of_the_context(bench):
    """Catches: a probe curve that misses either end (the seen probe or the whole context)."""
    assert bench.probe_rows(199) == [51, 76, 100, 125, 150, 174, 199]
    assert bench.probe_rows(399, points=2) == [101, 399]


def test_the_verdicts_compare_each_readout_with_its_baseline_over_episodes(bench):
    """Catches: an accuracy at the base rate printed as a result (the first report's 53 % against a
    53 % majority class), attempts counted as independent instead of episodes."""
    base = {"majority_class_accuracy": 2 / 3, "positives": 600, "negatives": 1200}
    at_base = {"inference_accuracy": 0.688, "imagination_accuracy": 0.66, "inference_auc": 0.654, "imagination_auc": 0.5}
    v = bench.readout_verdicts(at_base, base, 200)
    assert not v["inference_accuracy"].holds and not v["imagination_auc"].holds and v["inference_auc"].holds
    seventy = {**at_base, "inference_accuracy": 0.70}  # over 1,800 attempts [67.8, 72.1] would clear 66.7
    assert not bench.readout_verdicts(seventy, base, 200)["inference_accuracy"].holds
    lines = bench.verdict_table({"rssm": at_base}, base, 200, {"rssm": "RSSM-TBTT"})
    assert "66.7 %" in lines[2] and "68.8 % [62.1, 74.8]: not above baseline" in lines[3]


@pytest.mark.parametrize(("width", "segments", "cache"), [(20, {"rssm": 10, "tssm-xl": 25, "s4wm": 50}, "32"),
                                                          (8, {"rssm": 4, "tssm-xl": 10, "s4wm": 20}, "16")])
def test_width_scales_the_training_structure_with_the_episode(bench, monkeypatch, tmp_path, width, segments, cache):
    """Catches: --width changing the env but not the segments (width 100's 50/125/250 rows on
    20-row episodes), a cache that does not hold a whole segment, unequal rows per update, and the
    report written under width 100's file names."""
    try:
        bench.configure(width)
        assert (bench.ENV, bench.NAME) == (f"distracting-memory-{width}", f"distracting_memory_{width}")
        runs = run_args(bench, monkeypatch, tmp_path, 120_000)
        assert {b: int(r["model.seq_len"]) for b, r in runs.items()} == segments
        assert {int(r["model.batch_size"]) * int(r["model.seq_len"]) for r in runs.values()} == {500}
        assert runs["tssm-xl"]["model.cache_len"] == cache
    finally:
        bench.configure(100)
    assert {b: v[1] for b, v in bench.BACKBONES.items()} == {"rssm": 50, "tssm-xl": 125, "s4wm": 250}
    assert bench.BACKBONES["tssm-xl"][2] == ["model.cache_len=128"]


def test_an_unregistered_width_is_one_line(bench, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.configure(50)
    assert exit_info.value.code == 2 and "--width 50" in capsys.readouterr().err


def test_the_paper_split_from_ten_thousand_episodes(bench):
    """Catches: the 10,000-episode dataset split 9,600 / 200 / 200 instead of the paper's 8K / 1K / 1K."""
    assert bench.split(10_000) == "0.8000,0.1000,0.1000"
    assert bench.split(2400) == "0.8333,0.0833,0.0833"  # the width-100 run's, unchanged
