"""REM's actor-critic (rem-ac): table 6's sizes, action conditioning, learning from imagination,
λ-return losses against a hand computation, and its registration as rem's default policy."""

from __future__ import annotations

import pytest
import torch

from wmzoo.agents.returns import lambda_returns
from wmzoo.errors import WmzooError
from wmzoo.interfaces import BurnIn, EnvInfo, Trajectory
from wmzoo.registry import default_registry
from wmzoo_plugins.rem import POLICY_PRESETS, REMActorCritic

ENV = EnvInfo(name="check", obs_shape=(3, 16, 16), num_actions=4)
FEATURES = (8, 4, 4)


def _policy(seed: int = 0) -> REMActorCritic:
    torch.manual_seed(seed)
    return REMActorCritic(POLICY_PRESETS["tiny"], FEATURES, ENV)


def _trajectory(H: int = 5, B: int = 6) -> Trajectory:
    g = torch.Generator().manual_seed(1)
    conts = (torch.rand(H, B, generator=g) > 0.1).float()
    weights = torch.cat([torch.ones(1, B), conts.cumprod(0)])
    return Trajectory(
        features=torch.randn(H + 1, B, *FEATURES, generator=g),
        actions=torch.randint(4, (H, B), generator=g),
        rewards=torch.randn(H, B, generator=g),
        conts=conts,
        weights=weights,
    )


def test_registered_as_rems_default_policy():
    registry = default_registry()
    assert registry.backbone("rem").default_policy == "rem-ac"
    assert set(registry.policy("rem-ac").presets) >= {"tiny", "small", "paper"}


def test_paper_size_is_table_6():
    spec = POLICY_PRESETS["paper"]
    assert (spec.gamma, spec.lam, spec.entropy, spec.horizon) == (0.995, 0.95, 0.001, 10)
    policy = REMActorCritic(spec, (256, 8, 8), EnvInfo("atari", (3, 64, 64), 6))
    conv = (256 * 9 + 1) * 128 + (128 * 9 + 1) * 64
    linear = 4096 * 512 + 512
    lstm = 4 * 512 * (512 + 512) + 2 * 4 * 512
    heads = 512 * 6 + 6 + 512 + 1
    assert sum(p.numel() for p in policy.parameters()) == conv + linear + lstm + 6 * 512 + heads
    assert conv + linear + lstm + 6 * 512 + heads == 4_574_407  # the official ActorCriticLS, 6 actions


def test_act_feeds_the_sampled_action_back():
    policy = _policy()
    features = torch.randn(2, *FEATURES)
    state = policy.initial_state(2)
    action, after = policy.act(features, state)
    assert action.shape == (2,) and action.dtype == torch.int64
    observed = policy._observe(policy.encoder(features), state)
    expected = policy._after_action(action, observed)
    torch.testing.assert_close(after["h"], expected["h"])
    other = policy._after_action((action + 1) % 4, observed)
    assert not torch.allclose(after["h"], other["h"])


def test_losses_match_hand_computation():
    policy = _policy()
    traj = _trajectory()
    loss, metrics = policy.losses(traj)
    H, B = traj.rewards.shape
    state, logits, values = policy.initial_state(B), [], []
    with torch.no_grad():
        for t in range(H + 1):
            state = policy._observe(policy.encoder(traj.features[t]), state)
            logits.append(policy.actor(state["h"]))
            values.append(policy.critic(state["h"])[:, 0])
            if t < H:
                state = policy._after_action(traj.actions[t], state)
        v = torch.stack(values)
        G = lambda_returns(traj.rewards, traj.conts, v, 0.995, 0.95)
        dist = torch.distributions.Categorical(logits=torch.stack(logits[:-1]))
        w = traj.weights[:-1]
        norm = w.sum().clamp(min=1.0)  # a mean over live steps
        actor = -(w * (dist.log_prob(traj.actions) * (G - v[:-1]) + 0.001 * dist.entropy())).sum() / norm
        critic = (w * (v[:-1] - G) ** 2).sum() / norm
    torch.testing.assert_close(loss.detach(), actor + critic, rtol=1e-5, atol=1e-6)
    assert metrics["critic_loss"] == pytest.approx(float(critic), rel=1e-5)


def test_learning_reduces_the_loss_on_one_trajectory():
    policy = _policy()
    traj = _trajectory()
    first = float(policy.losses(traj)[0].detach())
    for _ in range(10):
        metrics = policy.learn(traj)
    assert float(policy.losses(traj)[0].detach()) < first and metrics["grad_norm"] >= 0
    assert policy.optimizers()["agent"].updates == 10


def test_rejects_flat_features():
    with pytest.raises(WmzooError, match="rem-ac"):
        REMActorCritic(POLICY_PRESETS["tiny"], (32,), ENV)


def test_temperature_sharpens_sampling_towards_greedy():
    torch.manual_seed(0)
    policy = _policy()
    features = torch.randn(300, *FEATURES)
    state = policy.initial_state(300)
    greedy, _ = policy.act(features, state, sample=False)
    cold, _ = policy.act(features, state, temperature=1e-4)
    warm, _ = policy.act(features, state)
    assert torch.equal(cold, greedy) and not torch.equal(warm, greedy)


def test_burn_in_reads_the_context_frame_and_its_action_then_resets_as_told():
    policy = _policy()
    features = torch.randn(3, 1, *FEATURES)
    actions = torch.tensor([[0], [1], [1]])
    first = torch.tensor([[True, False], [True, False], [False, True]])
    with torch.no_grad():
        state = policy.burn_in(BurnIn(features, first, actions))
        expected = policy._after_action(actions[:, 0], policy._observe(policy.encoder(features[:, 0]), policy.initial_state(3)))
        without = policy.burn_in(BurnIn(features, first))
    torch.testing.assert_close(state["h"][:2], expected["h"][:2])
    assert state["h"][2].abs().sum() == 0  # the start is reset: its context lies in another episode
    assert not torch.allclose(state["h"][0], state["h"][1])  # the action is read
    assert not torch.allclose(without["h"][:2], state["h"][:2])


def test_burn_in_reads_each_context_frame_with_its_own_action():
    # catches: every context frame paired with the first frame's action (or the actions shifted)
    policy = _policy()
    features = torch.randn(2, 2, *FEATURES)
    actions = torch.tensor([[0, 3], [2, 1]])
    first = torch.tensor([[True, False, False], [True, False, False]])
    with torch.no_grad():
        state = policy.burn_in(BurnIn(features, first, actions))
        expected = policy.initial_state(2)
        for t in range(2):
            expected = policy._after_action(actions[:, t], policy._observe(policy.encoder(features[:, t]), expected))
    torch.testing.assert_close(state["h"], expected["h"])
    torch.testing.assert_close(state["c"], expected["c"])
