"""`wmzoo bench --precision / --compile / --set` and the per-component times of --mode train."""

from __future__ import annotations

import json

import pytest
import torch

from wmzoo import device
from wmzoo.bench import harness
from wmzoo.cli import main

SMALL = ["--batch", "2", "--seq-len", "8", "--horizon", "2", "--iters", "1", "--warmup", "0", "--rounds", "1"]


def _bench(tmp_path, *argv: str) -> list[dict]:
    path = tmp_path / "bench.json"
    assert main(["bench", *argv, *SMALL, "--json", str(path)]) == 0
    return json.loads(path.read_text())


def test_variants_side_by_side_fp32_first(tmp_path, monkeypatch, capsys):
    # Catches: --precision bf16 timed without its fp32 baseline beside it, --compile ignored, and
    # the bench imagining outside the variant's precision.
    monkeypatch.setattr(device.torch, "compile", lambda fn: fn)  # the flag's path, not inductor's minutes
    seen = []
    imagine = harness.imagine

    def recording(*args, **kwargs):
        seen.append(torch.is_autocast_enabled("cpu"))
        return imagine(*args, **kwargs)

    monkeypatch.setattr(harness, "imagine", recording)
    records = _bench(tmp_path, "--backbones", "rssm", "--mode", "imagine", "--precision", "bf16", "--compile")
    assert [(r["precision"], r["compiled"]) for r in records] == [
        ("fp32", False), ("bf16", False), ("fp32", True), ("bf16", True)]
    assert records[0]["vs_first"] == 1.0
    assert records[1]["vs_first"] == pytest.approx(records[1]["throughput"] / records[0]["throughput"])
    # the FLOPs counted once (fp32, untimed); a compiled variant warms up twice (it compiles),
    # after every variant is built; then one timed imagination per variant in the round
    assert seen == [False, False, False, True, True, False, True, False, True]
    out = capsys.readouterr().out
    assert "fp32+compile" in out and "bf16+compile" in out and "vs fp32" in out


def test_set_applies_to_every_backbone(tmp_path):
    # Catches: --set missing from the bench (a backbone cannot be timed at a peer's size) or
    # applied to the first backbone only.
    plain = _bench(tmp_path, "--backbones", "rssm,rssm:small", "--mode", "imagine")
    wide = _bench(tmp_path, "--backbones", "rssm,rssm:small", "--mode", "imagine", "--set", "deter=96",
                  "--set", "policy.horizon=3")
    assert all(w["params"] != p["params"] for w, p in zip(wide, plain))
    assert wide[0]["overrides"] == ["deter=96", "policy.horizon=3"]
    rooted = _bench(tmp_path, "--backbones", "rssm", "--mode", "imagine", "--set", "model.deter=96")
    assert rooted[0]["params"] == wide[0]["params"]


@pytest.mark.parametrize(("setting", "message"), [
    ("nope=1", "model.nope: unknown field"),
    ("policy.nope=1", "policy.nope: unknown field"),
    ("deter=-3", "model.deter"),
    ("train.steps=3", "the bench takes model. and policy. fields"),
    ("deter", "expected KEY=VALUE"),
])
def test_bad_set_is_one_line(capsys, setting, message):
    # Catches: an unknown or out-of-range --set key timed anyway, or ending in a traceback.
    assert main(["bench", "--backbones", "rssm", "--mode", "train", "--set", setting, *SMALL]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_bad_precision_is_one_line(capsys):
    assert main(["bench", "--backbones", "rssm", "--mode", "train", "--precision", "fp16", *SMALL]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--precision 'fp16'" in err[0]


def test_train_mode_times_each_component(tmp_path, capsys):
    # Catches: --mode train timing the whole loss as one figure (the token backbones' tokenizer,
    # world model and start states together), start states built inside the timed update of a
    # backbone that defers them, and no policy figure.
    rssm, rem = _bench(tmp_path, "--backbones", "rssm,rem", "--mode", "train")
    assert {"model.forward", "model.backward", "model.step", "policy", "other"} <= set(rssm["components"])
    assert "start_states" not in rssm["components"]  # built inside its loss (a view of the posterior)
    parts = set(rem["components"])
    assert {"tokenizer.forward", "tokenizer.no_grad", "tokenizer.backward", "tokenizer.step",
            "world_model.forward", "world_model.backward", "world_model.step",
            "start_states", "policy", "other"} <= parts
    assert all(v >= 0 for v in rem["components"].values()) and rem["components"]["start_states"] > 0
    out = capsys.readouterr().out
    assert "start_states" in out and "tokenizer" in out and "world_model" in out


def test_train_mode_builds_no_deferred_start_states_in_the_timed_update(tmp_path, monkeypatch):
    # Catches: the timed world-model update paying for start states no policy reads.
    builds = []
    from wmzoo.interfaces import TrainOutput

    original = TrainOutput.imagination_start

    def counted(self):
        builds.append(self.starts is not None)
        return original(self)

    monkeypatch.setattr(TrainOutput, "imagination_start", counted)
    _bench(tmp_path, "--backbones", "rem", "--mode", "train", "--no-components")
    assert builds == []


@pytest.mark.parametrize("actions", ["random", "policy"])
def test_imagine_acts_with_the_backbones_policy_only_when_asked(tmp_path, monkeypatch, actions):
    # Catches: --actions policy ignored (the rollout still random, the policy's forward untimed),
    # or the policy acting on the start state only instead of on every imagined step.
    from wmzoo.agents.dreamer import DreamerPolicy

    seen = []
    original = DreamerPolicy.act

    def counted(self, features, state, *args, **kwargs):
        seen.append(tuple(features.shape))
        return original(self, features, state, *args, **kwargs)

    monkeypatch.setattr(DreamerPolicy, "act", counted)
    (record,) = _bench(tmp_path, "--backbones", "rssm:tiny", "--mode", "imagine", "--actions", actions)
    assert record["actions"] == actions
    # SMALL: no warm-up, one rollout of H = 2 from B = 2 starts whose FLOPs are counted, one timed
    assert seen == ([(2, 64 + 8 * 8)] * 4 if actions == "policy" else [])


def test_train_records_no_actions(tmp_path):
    (record,) = _bench(tmp_path, "--backbones", "rssm:tiny", "--mode", "train", "--no-components")
    assert record["actions"] == ""


def test_a_comma_list_of_envs_times_every_backbone_on_each_side_by_side(tmp_path, monkeypatch, capsys):
    # Catches: a second env ignored (every unit built with the first env's shapes), the ratio taken
    # against another env's backbone, or the envs timed one after the other instead of alternated.
    built = []
    unit = harness._Unit

    def recording(label, run, mode, batch, seq_len, horizon, info, *rest):
        built.append(info.name)
        return unit(label, run, mode, batch, seq_len, horizon, info, *rest)

    monkeypatch.setattr(harness, "_Unit", recording)
    order = []
    alternate = harness.alternate
    monkeypatch.setattr(harness, "alternate", lambda units, *a, **k: (order.append(len(units)), alternate(units, *a, **k))[1])
    records = _bench(tmp_path, "--backbones", "rssm,s4wm", "--mode", "train", "--env", "gym-cartpole,minatar-breakout",
                     "--no-components", "--set", "cnn_stages=1")  # MinAtar is 10x10
    assert built == ["gym-cartpole", "gym-cartpole", "minatar-breakout", "minatar-breakout"]
    assert [(r["backbone"], r["observations"].split(":")[0]) for r in records] == [
        ("rssm", "gym-cartpole"), ("s4wm", "gym-cartpole"), ("rssm", "minatar-breakout"), ("s4wm", "minatar-breakout")]
    assert order == [4 + 1]  # the four configurations and the matmul peak, in one alternation
    assert records[2]["params"] != records[0]["params"]  # a CNN encoder on MinAtar, an MLP on CartPole
    assert records[0]["ratio"] == 1.0 and records[2]["vs_first"] == 1.0  # each env's first variant its own
    assert "  minatar-breakout: " in capsys.readouterr().out  # the table names each row's env


@pytest.mark.parametrize(("env", "says"), [("gym-cartpole,", "an empty entry"),
                                           ("gym-cartpole,gym-cartpole", "gym-cartpole is given twice")])
def test_a_bad_env_list_is_one_line(capsys, env, says):
    assert main(["bench", "--backbones", "rssm", "--mode", "train", "--env", env, *SMALL]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and says in err
