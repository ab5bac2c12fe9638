"""A policy that samples its own segments (policy.segment): the agent imagines from the world
model's imagination_starts, and refuses a backbone that has none."""

from __future__ import annotations

import pytest
import torch

from wmzoo.bench.harness import synthetic_batch
from wmzoo.config import run_spec
from wmzoo.errors import SpecError, WmzooError
from wmzoo.interfaces import EnvInfo
from wmzoo.train.agent import Agent

ENV = EnvInfo(name="t", obs_shape=(3, 16, 16), num_actions=3)


def test_the_policy_burns_in_on_its_own_segments(monkeypatch):
    # Catches: the trainer ignoring policy.segment (imagining from the world-model batch, whose
    # burn-in is 1 frame for REM) or passing the segments' BurnIn on to another row.
    run = run_spec("rem", "minigrid-empty-5x5", "tiny", None, None, None,
                   ["policy.segment=6", "policy.max_starts=3"])
    agent = Agent(run, ENV)
    seen = []
    original = agent.policy.burn_in
    monkeypatch.setattr(agent.policy, "burn_in", lambda context: seen.append(context) or original(context))
    out = agent.train_world_model(synthetic_batch(ENV, 2, 8, torch.device("cpu")))
    metrics = agent.train_policy(out, segments=synthetic_batch(ENV, 3, 6, torch.device("cpu"), seed=1))
    [context] = seen
    assert context.features.shape[:2] == (3, 5) and context.actions.shape == (3, 5)
    assert "policy/imagined_reward" in metrics


def test_a_backbone_without_imagination_starts_is_refused_in_one_line():
    run = run_spec("rssm", "minigrid-empty-5x5", "tiny", None, None, None,
                   ["policy.segment=6", "policy.max_starts=3"])
    with pytest.raises(SpecError, match=r"policy.segment=6: backbone 'rssm' cannot start imagination"):
        Agent(run, ENV)


@pytest.mark.parametrize(("sets", "message"), [
    (["policy.segment=1"], "segment 1 leaves no step to burn in"),
    (["policy.segment=6", "policy.max_starts=0"], "segment 6 samples max_starts segments"),
])
def test_segment_values(sets, message):
    with pytest.raises(WmzooError, match=message):
        run_spec("rem", "minigrid-empty-5x5", "tiny", None, None, None, sets)


def test_max_starts_keeps_the_burn_in_context_of_the_starts_it_keeps(monkeypatch):
    # Catches the agent subsampling the start states to policy.max_starts but passing the
    # burn-in context of every start on (the policy state then belongs to other rows).
    run = run_spec("rem", "minigrid-empty-5x5", "tiny", None, None, None, ["policy.max_starts=3"])
    agent = Agent(run, ENV)
    seen = []
    original = agent.policy.burn_in
    monkeypatch.setattr(agent.policy, "burn_in", lambda context: seen.append(context) or original(context))
    out = agent.train_world_model(synthetic_batch(ENV, 2, 8, torch.device("cpu")))
    assert out.imagination_start()[1].shape[0] > 3
    agent.train_policy(out, generator=torch.Generator().manual_seed(0))
    [context] = seen
    assert context.features.shape[0] == context.actions.shape[0] == 3
