"""`wmzoo bench`: records with the documented fields, JSON written, ratios printed."""

from __future__ import annotations

import json

import pytest

from wmzoo.bench.harness import parse_backbones
from wmzoo.cli import main


@pytest.mark.parametrize("mode", ["train", "imagine"])
def test_bench_writes_json_records(tmp_path, capsys, mode):
    path = tmp_path / "bench.json"
    code = main(["bench", "--backbones", "rssm:tiny,rssm", "--preset", "tiny", "--mode", mode,
                 "--batch", "2", "--seq-len", "8", "--horizon", "3", "--iters", "2", "--json", str(path)])
    assert code == 0
    records = json.loads(path.read_text())
    assert [r["backbone"] for r in records] == ["rssm:tiny", "rssm"]
    for r in records:
        assert {"backbone", "preset", "mode", "batch_size", "seq_len", "params", "throughput", "peak_rss_mb"} <= set(r)
        assert r["mode"] == mode and r["batch_size"] == 2 and r["seq_len"] == 8
        assert r["params"] > 10_000 and r["throughput"] > 0 and r["peak_rss_mb"] > 50
    assert records[0]["params"] == records[1]["params"]  # same preset, same model
    out = capsys.readouterr().out
    assert "ratio" in out and "1.00" in out


def test_parse_backbones():
    assert parse_backbones("rssm:paper, s4wm", "tiny") == [("rssm:paper", "rssm", "paper"), ("s4wm", "s4wm", "tiny")]


def test_stateful_backbones_train_long_sequences_in_segments():
    """TBTT: a sequence longer than the spec's seq_len goes through in carried segments, one update each."""
    from wmzoo.bench.harness import SYNTHETIC_ENV, train_segments
    from wmzoo.registry import create_world_model

    tbtt = create_world_model("rssm", SYNTHETIC_ENV, "tiny", {"tbtt": True, "seq_len": 16})
    assert train_segments(tbtt, 40) == [(0, 16), (16, 32), (32, 40)]
    assert train_segments(tbtt, 16) == [(0, 16)]
    whole = create_world_model("rssm", SYNTHETIC_ENV, "tiny", {"tbtt": False, "seq_len": 16})
    assert train_segments(whole, 40) == [(0, 40)]


def test_bench_reports_the_segment_length(tmp_path):
    path = tmp_path / "bench.json"
    assert main(["bench", "--backbones", "tssm-xl:tiny", "--mode", "train", "--batch", "1",
                 "--seq-len", "40", "--iters", "1", "--warmup", "0", "--json", str(path)]) == 0
    (record,) = json.loads(path.read_text())
    assert record["segment"] == 16 and record["seq_len"] == 40


@pytest.mark.heavy
def test_bench_env_mode(tmp_path, capsys):
    pytest.importorskip("minigrid")
    path = tmp_path / "env.json"
    code = main(["bench", "--mode", "env", "--env", "minigrid-empty-5x5", "--envs", "2", "--steps", "20",
                 "--json", str(path)])
    assert code == 0
    records = json.loads(path.read_text())
    assert [(r["vector"], r["envs"], r["steps"]) for r in records] == [("single", 1, 20), ("sync", 2, 40), ("async", 2, 40)]
    assert all(r["mode"] == "env" and r["throughput"] > 0 and r["env"] == "minigrid-empty-5x5" for r in records)
    assert "steps/s" in capsys.readouterr().out
    assert main(["bench", "--mode", "env"]) == 2
    assert main(["bench", "--mode", "train"]) == 2  # train and imagine need --backbones
    assert "--backbones" in capsys.readouterr().err
