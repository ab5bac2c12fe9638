"""`wmzoo bench`'s alternated rounds and its FLOP/s against the matmul peak, on a fake clock: the
interleaving, the order reversed every other round, and the arithmetic (no timing asserted)."""

from __future__ import annotations

import contextlib
import json

import pytest
import torch

from wmzoo.bench import harness
from wmzoo.bench.harness import alternate, efficiency, ratio_stats
from wmzoo.cli import main


class FakeMachine:
    """A clock that each unit advances by its cost times the machine's load, which changes
    from round to round (a noisy, shared machine); records the calls in order."""

    def __init__(self, costs: dict[str, float], loads: list[float]) -> None:
        self.now, self.costs, self.loads, self.calls, self.round = 0.0, costs, loads, [], 0

    def clock(self) -> float:
        return self.now

    def unit(self, name: str):
        def call() -> None:
            self.calls.append(name)
            self.now += self.costs[name] * self.loads[self.round]
        return call


def test_rounds_interleave_and_reverse_the_order():
    # Catches: configurations timed one after the other (a change of load between them moves the
    # ratio), the same order every round (the first unit always meets the round's start), or the
    # iterations of one unit split across another's.
    machine = FakeMachine({"a": 1.0, "b": 2.0, "c": 4.0}, loads=[1.0, 3.0, 0.5, 2.0])
    units = [machine.unit(n) for n in "abc"]
    entered = []

    @contextlib.contextmanager
    def around(i):  # three units a round: the machine's load is the round's
        entered.append(i)
        machine.round = (len(entered) - 1) // 3
        yield

    seconds, orders = alternate(units, rounds=4, iters=2, clock=machine.clock, around=around)
    assert orders == [[0, 1, 2], [2, 1, 0], [0, 1, 2], [2, 1, 0]]
    assert machine.calls == list("aabbcc" "ccbbaa" "aabbcc" "ccbbaa")
    assert entered == [0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0]
    # seconds per call of each unit in each round: its cost times that round's load
    assert seconds == [[1.0, 3.0, 0.5, 2.0], [2.0, 6.0, 1.0, 4.0], [4.0, 12.0, 2.0, 8.0]]
    # the load cancels in each round's ratio: b runs at half a's throughput in every round
    assert ratio_stats(seconds[0], seconds[1]) == (0.5, 0.5, 0.5)
    assert ratio_stats(seconds[0], seconds[0]) == (1.0, 1.0, 1.0)


def test_ratio_is_the_median_of_the_rounds_with_its_spread():
    median, low, high = ratio_stats([1.0, 1.0, 1.0, 1.0, 1.0], [0.5, 1.0, 2.0, 0.8, 1.25])
    assert (median, low, high) == (1.0, 0.5, 2.0)
    assert ratio_stats([2.0, 2.0], [1.0, 4.0]) == (pytest.approx(1.25), 0.5, 2.0)


def test_fraction_of_peak_arithmetic():
    # 1e9 FLOPs per iteration in 0.5, 1 and 2 s; the peak matmul 4e9 FLOPs per call in 0.1, 0.2, 0.4 s
    # (the same load on both in each round): 40 GFLOP/s peak at the median, 1 GFLOP/s achieved,
    # a fraction of 1/20 in every round.
    achieved, peak, fraction = efficiency(1e9, [0.5, 2.0, 1.0], 4e9, [0.1, 0.4, 0.2])
    assert achieved == pytest.approx(1e9)
    assert peak == pytest.approx(2e10)
    assert fraction == pytest.approx(0.05)
    # a round where only the matmul was slowed: the median of the rounds' fractions, not a mean
    _, _, fraction = efficiency(1e9, [1.0, 1.0, 1.0], 4e9, [0.2, 0.2, 2.0])
    assert fraction == pytest.approx(0.05)
    assert efficiency(1e9, [], 4e9, []) == (0.0, 0.0, 0.0)


def test_flops_are_counted_once_per_backbone_and_the_json_keeps_every_round(tmp_path, monkeypatch, capsys):
    # Catches: FLOPs counted inside the timed rounds, a bf16 variant credited with other FLOPs
    # than its fp32 twin, rounds missing from the JSON, a ratio that is not the rounds' median.
    counted = []
    count = harness.count_flops

    def counting(step):
        counted.append(step)
        return count(step)

    monkeypatch.setattr(harness, "count_flops", counting)
    path = tmp_path / "bench.json"
    assert main(["bench", "--backbones", "rssm:tiny", "--mode", "imagine", "--batch", "2", "--seq-len", "4",
                 "--horizon", "2", "--iters", "1", "--warmup", "0", "--rounds", "3", "--precision", "fp32,bf16",
                 "--threads", "1", "--json", str(path)]) == 0
    fp32, bf16 = json.loads(path.read_text())
    assert len(counted) == 1
    assert fp32["flops"] == bf16["flops"] > 0
    for r in (fp32, bf16):
        assert r["rounds"] == 3 and len(r["round_seconds"]) == 3 and r["threads"] == 1
        assert 0 < r["fraction_of_peak"] and r["flops_per_s"] > 0 and r["peak_flops_per_s"] > r["flops_per_s"]
    ratios = sorted(a / b for a, b in zip(fp32["round_seconds"], bf16["round_seconds"]))
    assert (bf16["ratio_min"], bf16["ratio"], bf16["ratio_max"]) == pytest.approx(tuple(ratios))
    assert bf16["vs_first"] == pytest.approx(bf16["ratio"])
    out = capsys.readouterr().out
    assert "3 round(s) alternated" in out and "% peak" in out and "GFLOP/s" in out


@pytest.mark.parametrize("value", ["0", "-2"])
def test_bad_rounds_is_one_line(capsys, value):
    assert main(["bench", "--backbones", "rssm", "--mode", "train", "--rounds", value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("wmzoo: error: --rounds"), err


def test_flops_are_counted_where_the_module_tracker_trips():
    # Catches: a step that hands a module a view of a parameter made without gradient (REM's
    # prediction tokens, `pred_tokens.expand(...)` inside the imagination's no_grad) counted as 0
    # FLOPs ("-" in the table): FlopCounterMode's module tracker asserts on an input that requires
    # grad without a grad_fn.
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode

    from wmzoo.bench.harness import count_flops

    linear, tokens = nn.Linear(8, 3), nn.Parameter(torch.randn(5, 8))

    def step() -> torch.Tensor:
        with torch.no_grad():
            return linear(tokens.expand(2, 5, 8))

    with pytest.raises(AssertionError):  # the tracker's own failure, which the fallback covers
        with FlopCounterMode(display=False):
            step()
    assert count_flops(step) == 2 * (2 * 5) * 8 * 3


def test_the_peak_product_stops_growing_where_the_next_would_take_too_long():
    # Catches: an emulated precision (bfloat16 without AVX512-BF16/AMX: ~1 GFLOP/s) timed on a
    # 2048 product, minutes per call; or a given size not kept.
    small = harness.MatmulPeak(torch.device("cpu"), "fp32", budget=1e-9)  # no product is fast enough
    assert small.n == 256 and small.a.shape == (256, 256)
    assert harness.MatmulPeak(torch.device("cpu"), "bf16", size=96).a.dtype == torch.bfloat16
    assert harness.MatmulPeak(torch.device("cpu"), "fp32", size=96).n == 96
    assert harness.MatmulPeak(torch.device("cpu"), "fp32", budget=1e9).n == 2048  # a generous budget: the largest
