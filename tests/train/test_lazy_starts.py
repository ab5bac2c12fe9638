"""Start states only when a policy imagines from them (TrainOutput.starts, Agent.train_world_model).

REM and IRIS build an imagination start per batch step (REM ``paper``: about 210 MB) on every
update; the trainer now builds them only on updates where the policy trains from the batch."""

from __future__ import annotations

import copy

import pytest
import torch

from wmzoo.config import run_spec
from wmzoo.bench.harness import SYNTHETIC_ENV, synthetic_batch
from wmzoo.train.agent import Agent
from wmzoo.train.checkpoint import load_checkpoint
from wmzoo.train.loop import train_online

BASE = ["train.steps=80", "train.prefill=40", "train.log_every=1000", "train.checkpoint_every=1000",
        "train.gif_horizon=2", "model.batch_size=2", "model.seq_len=8", "train.train_ratio=4",
        "policy.start=3", "train.policy_every=2"]
BUILDERS = {"rem": "_start_states", "iris": "_starts"}  # each backbone's own start-state builder


def _train(tmp_path, backbone: str, monkeypatch, force: bool = False) -> tuple[int, int, dict]:
    """(start-state builds, policy updates, final weights) of a short online run; ``force``: the
    trainer asks for the start states on every update, as it did before."""
    builds, policy_updates = [], []
    run = run_spec(backbone, "minigrid-empty-5x5", "tiny", overrides=BASE)
    original_train, original_policy = Agent.train_world_model, Agent.train_policy

    def train_world_model(self, batch, carry=None, update=None, starts=True):
        model_cls = type(self.world_model)
        if not hasattr(model_cls, "_counted"):
            builder = getattr(model_cls, BUILDERS[backbone])

            def counted(wm, *args, **kwargs):
                builds.append(1)
                return builder(wm, *args, **kwargs)

            monkeypatch.setattr(model_cls, BUILDERS[backbone], counted)
            monkeypatch.setattr(model_cls, "_counted", True, raising=False)
        return original_train(self, batch, carry, update, starts=True if force else starts)

    def train_policy(self, *args, **kwargs):
        policy_updates.append(1)
        return original_policy(self, *args, **kwargs)

    monkeypatch.setattr(Agent, "train_world_model", train_world_model)
    monkeypatch.setattr(Agent, "train_policy", train_policy)
    tree = load_checkpoint(train_online(run, tmp_path, show_progress=False))
    monkeypatch.undo()
    return len(builds), len(policy_updates), tree


@pytest.mark.parametrize("backbone", ["rem", "iris"])
def test_start_states_are_built_only_for_the_updates_the_policy_trains_on(tmp_path, monkeypatch, backbone):
    # Catches: start states built on every world-model update again (the 10 updates here build
    # 10 instead of 4: the policy starts after update 3 and trains on every second update), and a
    # policy update that finds no start states (deferred ones never built).
    builds, policy, _ = _train(tmp_path / "lazy", backbone, monkeypatch)
    assert policy == 4
    assert builds == policy


@pytest.mark.parametrize("backbone", ["rem", "iris"])
def test_skipping_the_unused_start_states_changes_no_weight(tmp_path, monkeypatch, backbone):
    # Catches: skipping the unused builds changing training (a builder that draws random numbers
    # the batch sampling or the policy then lack): a run that builds them on every update, as
    # before, must end with the same weights.
    lazy_builds, _, lazy = _train(tmp_path / "lazy", backbone, monkeypatch)
    eager_builds, _, eager = _train(tmp_path / "eager", backbone, monkeypatch, force=True)
    assert eager_builds > lazy_builds
    for part in ("world_model", "policy"):
        assert lazy[part].keys() == eager[part].keys()
        for key, value in lazy[part].items():
            assert torch.equal(value, eager[part][key]), (part, key)


@pytest.mark.parametrize("backbone", ["rem", "iris", "delta-iris", "s4wm"])
def test_deferred_start_states_come_from_the_weights_of_the_loss(backbone):
    # Catches: deferred start states built after the optimizer step (from other weights than the
    # loss's, which is where they were built before they were deferred).
    run = run_spec(backbone, "minigrid-empty-5x5", "tiny")
    torch.manual_seed(0)
    agent = Agent(run, SYNTHETIC_ENV)
    batch = synthetic_batch(SYNTHETIC_ENV, 2, 8, agent.device)
    twin = copy.deepcopy(agent.world_model).train()  # a loss may update buffers (dead VQ codes)
    initial = [p.detach().clone() for p in agent.world_model.parameters()]
    torch.manual_seed(1)
    before = twin.loss(batch)
    assert before.starts is not None and before.start is None  # deferred
    expected, expected_cont, _ = before.imagination_start()
    torch.manual_seed(1)
    out = agent.train_world_model(batch)
    assert out.starts is None and out.start is not None
    assert any(not torch.equal(a, b) for a, b in zip(agent.world_model.parameters(), initial))  # it stepped
    torch.testing.assert_close(out.start_cont, expected_cont)
    length = int(expected["length"].max()) if "length" in expected else None
    for key, value in expected.items():
        got = out.start[key]
        if value.dim() == 5 and length is not None:  # a preallocated key/value cache: its filled part
            got, value = got[..., :length, :], value[..., :length, :]
        torch.testing.assert_close(got, value, msg=key)
