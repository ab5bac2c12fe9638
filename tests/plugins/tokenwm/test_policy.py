"""tokenwm-ac (wmzoo_plugins.tokenwm.policy): section 3.6's perceiver read-out under DreamerV3's
actor-critic rules: shapes, a zero critic at the start, learning that reaches the read-out, and
one-line errors for features it cannot read."""

from __future__ import annotations

import pytest
import torch

from wmzoo.agents.dreamer import PRESETS as DREAMER_PRESETS
from wmzoo.agents.dreamer import DreamerPolicy
from wmzoo.errors import SpecError, WmzooError
from wmzoo.interfaces import EnvInfo, Trajectory
from wmzoo_plugins.tokenwm import POLICY_PRESETS, TokenWMPolicy, TokenWMPolicySpec

ENV = EnvInfo(name="t", obs_shape=(3, 16, 16), num_actions=3)
TOKENS = (6, 16)


def _policy(**kw) -> TokenWMPolicy:
    torch.manual_seed(0)
    return TokenWMPolicy(TokenWMPolicySpec.model_validate({**POLICY_PRESETS["tiny"].model_dump(), **kw}), TOKENS, ENV)


def test_actor_and_critic_read_the_token_set_and_the_critic_starts_at_zero():
    # catches: the read-out dropped (an MLP on one token), the critic's output not zero-initialised
    policy = _policy()
    features = torch.randn(5, *TOKENS)
    action, state = policy.act(features, {})
    assert action.shape == (5,) and action.dtype == torch.int64 and state == {}
    torch.testing.assert_close(policy.value(features), torch.zeros(5), atol=1e-6, rtol=0)
    logits = policy.actor(features)
    changed = features.clone()
    changed[:, 3] += 1.0  # one token of six
    assert logits.shape == (5, 3) and not torch.allclose(policy.actor(changed), logits)
    assert policy.actor(torch.randn(4, 5, *TOKENS)).shape == (4, 5, 3)  # time-first trajectories


def test_learning_favours_the_rewarded_action_and_trains_the_read_out():
    # catches: an optimizer that misses the read-out's parameters, advantages of the wrong sign
    policy = _policy(actor_optim={"lr": 1e-3, "eps": 1e-5, "clip": 100.0})
    queries = policy.actor[0].queries.detach().clone()
    H, B = 4, 32
    torch.manual_seed(1)
    features = torch.randn(H + 1, B, *TOKENS)
    probe = features[0]
    before = torch.softmax(policy.actor(probe), -1)[:, 0].mean().item()
    for _ in range(30):
        actions = torch.randint(3, (H, B))
        rewards = (actions == 0).float()
        policy.learn(Trajectory(features, actions, rewards, torch.ones(H, B), torch.ones(H + 1, B)))
    after = torch.softmax(policy.actor(probe), -1)[:, 0].mean().item()
    assert after > before + 0.05, (before, after)
    assert not torch.equal(policy.actor[0].queries, queries)


def test_features_it_cannot_read_are_one_line_errors():
    with pytest.raises(WmzooError, match=r"reads a token set \[N, D\].*shape \(32,\)"):
        TokenWMPolicy(POLICY_PRESETS["tiny"], (32,), ENV)
    with pytest.raises(SpecError, match="policy.heads=3 must divide the width of the state tokens, 16"):
        _policy(heads=3)
    with pytest.raises(WmzooError, match=r"policy 'dreamer' reads 1-D features.*\(6, 16\)"):
        DreamerPolicy(DREAMER_PRESETS["tiny"], TOKENS, ENV)


def test_grouped_actions_read_one_query_each_and_bin_their_own_dimensions():
    # catches: a group's MLP fed another group's query token, group sizes not summing to the
    # action's dimensions accepted, the logits of a group put at another group's dimensions
    from wmzoo.registry import create_policy

    env = EnvInfo(name="arm", obs_shape=(3, 16, 16), num_actions=3, discrete=False)
    fields = {"groups": [2, 1], "queries": 2, "bins": 5, "action_low": [-1.0] * 3, "action_high": [1.0] * 3}
    torch.manual_seed(0)
    policy = create_policy("tokenwm-bc", TOKENS, env, overrides=fields)
    features, condition = torch.randn(4, *TOKENS), torch.zeros(4, policy.spec.max_words, dtype=torch.long)
    logits = policy.logits(features, condition)
    assert logits.shape == (4, 3, 5)
    with torch.no_grad():
        policy.head[1].out.bias += 1.0  # the gripper group's head only
    changed = policy.logits(features, condition)
    torch.testing.assert_close(changed[:, :2], logits[:, :2])
    assert not torch.allclose(changed[:, 2], logits[:, 2])
    tokens, c = policy.read(features), policy.text(condition)
    torch.testing.assert_close(changed[:, :2], policy.head[0](torch.cat([tokens[:, 0], c], -1)).unflatten(-1, (2, 5)))
    torch.testing.assert_close(changed[:, 2:], policy.head[1](torch.cat([tokens[:, 1], c], -1)).unflatten(-1, (1, 5)))
    action, _ = policy.act(features, {}, sample=False)
    assert action.shape == (4, 3) and action.abs().max() <= 1.0
    for bad, match in (({"groups": [2, 2]}, "3 action dimensions"), ({"groups": [2, 1], "queries": 3}, "policy.queries=2")):
        with pytest.raises(SpecError, match=match):
            create_policy("tokenwm-bc", TOKENS, env, overrides={**fields, **bad})
    with pytest.raises(SpecError, match="discrete actions"):
        create_policy("tokenwm-bc", TOKENS, ENV, overrides={"groups": [1], "queries": 1})
