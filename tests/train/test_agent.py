"""The agent acting in real environments (Agent.act): what it carries from one env step to the
next, and what an episode start clears."""

from __future__ import annotations

import numpy as np
import torch

from wmzoo.bench.harness import SYNTHETIC_ENV
from wmzoo.config import run_spec
from wmzoo.train.agent import Agent


def test_an_episode_start_clears_the_previous_action_and_the_policy_state_of_its_env_only(monkeypatch):
    """Catches ``is_first`` resetting the policy state of the other envs (a mask inverted) or
    not clearing the previous action a new episode's first filter step sees (the last episode's
    action leaking into the next one's start)."""
    torch.manual_seed(0)
    agent = Agent(run_spec("delta-iris", "minigrid-empty-5x5", "tiny"), SYNTHETIC_ENV)
    assert agent.policy.initial_state(2), "a policy with a recurrent state"
    prev, given = [], []
    observe, act = agent.world_model.observe_step, agent.policy.act
    monkeypatch.setattr(agent.world_model, "observe_step",
                        lambda state, obs, action, first, *a, **k: prev.append(action.tolist()) or observe(
                            state, obs, action, first, *a, **k))
    monkeypatch.setattr(agent.policy, "act", lambda feat, state, **k: given.append(
        {key: value.clone() for key, value in state.items()}) or act(feat, state, **k))
    obs = np.random.default_rng(0).integers(0, 256, (2, *SYNTHETIC_ENV.obs_shape), dtype=np.uint8)
    forced = np.array([2, 1])
    for first in ([True, True], [False, False], [True, False]):
        agent.act(obs, np.array(first), sample=False, actions=forced)
    assert prev[2] == [0, 1]  # env 0 starts over; env 1 keeps the action it took
    initial = agent.policy.initial_state(2)
    for key, value in given[2].items():
        torch.testing.assert_close(value[0], initial[key][0], msg=key)  # env 0 from the start
    assert any(not torch.equal(value[1], initial[key][1]) for key, value in given[2].items())  # env 1 carried
