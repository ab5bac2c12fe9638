"""Δ-IRIS actor-critic (wmzoo_plugins.delta_iris.actor_critic): returns and baselines from the EMA
target, the two-hot critic, the target's EMA step, burn-in of both LSTMs."""

from __future__ import annotations

import pytest
import torch

from wmzoo.agents.returns import lambda_returns
from wmzoo.interfaces import BurnIn, EnvInfo, Trajectory
from wmzoo.nn.distributions import TwoHot
from wmzoo_plugins.delta_iris import POLICY_PRESETS, DeltaIrisActorCritic, DeltaIrisActorCriticSpec

ENV = EnvInfo(name="t", obs_shape=(3, 16, 16), num_actions=3)


def _policy(**kw) -> DeltaIrisActorCritic:
    torch.manual_seed(0)
    spec = DeltaIrisActorCriticSpec.model_validate({**POLICY_PRESETS["tiny"].model_dump(), **kw})
    return DeltaIrisActorCritic(spec, ENV.obs_shape, ENV)


def _trajectory(H: int = 4, B: int = 3, seed: int = 0) -> Trajectory:
    g = torch.Generator().manual_seed(seed)
    conts = torch.ones(H, B)
    conts[2, 0] = 0.0
    weights = torch.cat([torch.ones(1, B), conts.cumprod(0)])
    return Trajectory(
        features=torch.rand(H + 1, B, *ENV.obs_shape, generator=g), actions=torch.randint(3, (H, B), generator=g),
        rewards=torch.randn(H, B, generator=g), conts=conts, weights=weights,
    )


def test_critic_starts_at_zero_and_the_target_is_a_frozen_copy() -> None:
    policy = _policy()
    frames = torch.rand(2, *ENV.obs_shape)
    state = policy.initial_state(2)
    _, critic, target, _ = policy._step(frames, state)
    assert torch.equal(critic, torch.zeros(2, 255))  # zero-initialised: uniform over the bins
    torch.testing.assert_close(policy._value(critic), torch.zeros(2), atol=1e-6, rtol=0)
    torch.testing.assert_close(target, torch.zeros(2), atol=1e-6, rtol=0)
    assert not any(p.requires_grad for p in policy.target.parameters())
    assert {id(p) for p in policy.optimizers()["actor_critic"].params} == {id(p) for p in policy.model.parameters()}


@pytest.mark.parametrize("two_hot", [True, False])
def test_losses_by_hand_use_the_target_for_returns_and_baselines(two_hot: bool) -> None:
    # Catches: returns bootstrapped from the online critic instead of the target, a baseline from
    # the wrong network, the critic's two-hot target not the symlog return, steps after an end
    # counted, the entropy bonus with the wrong sign.
    policy = _policy(two_hot=two_hot, entropy=0.01)
    with torch.no_grad():  # make online and target differ
        for p in policy.target.parameters():
            p.add_(0.05 * torch.randn_like(p))
    traj = _trajectory()
    loss, metrics = policy.losses(traj)
    state = policy.initial_state(3)
    logits, critics, targets = [], [], []
    h, c, th, tc = state["h"], state["c"], state["th"], state["tc"]
    for t in range(traj.features.shape[0]):
        lg, cr, h, c = policy.model(traj.features[t], h, c)
        _, tcr, th, tc = policy.target(traj.features[t], th, tc)
        logits.append(lg)
        critics.append(cr)
        targets.append(TwoHot(tcr).mean() if two_hot else tcr.squeeze(-1))
    target = torch.stack(targets).detach()
    returns = lambda_returns(traj.rewards, traj.conts, target, policy.spec.gamma, policy.spec.lam)
    w = traj.weights[:-1]
    dist = torch.distributions.Categorical(logits=torch.stack(logits[:-1]))
    actor = -(w * dist.log_prob(traj.actions) * (returns - target[:-1])).sum() / w.sum()
    critic = torch.stack(critics[:-1])
    err = -TwoHot(critic).log_prob(returns) if two_hot else (critic.squeeze(-1) - returns) ** 2
    expected = actor - 0.01 * (w * dist.entropy()).sum() / w.sum() + (w * err).sum() / w.sum()
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-5)
    assert metrics["return_mean"] == pytest.approx(float(returns.mean()), abs=1e-5)
    # catches: the logged baseline read one step late, the entropy logged with its sign flipped
    assert metrics["value_mean"] == pytest.approx(float(target[:-1].mean()), abs=1e-5)
    assert metrics["entropy"] == pytest.approx(float(dist.entropy().mean().detach()), abs=1e-5)


def test_learn_moves_the_target_one_ema_step_toward_the_online_network() -> None:
    policy = _policy(target_decay=0.9)
    before = [p.clone() for p in policy.target.parameters()]
    policy.learn(_trajectory())
    for old, target, online in zip(before, policy.target.parameters(), policy.model.parameters()):
        torch.testing.assert_close(target, 0.9 * old + 0.1 * online)
    assert any(not torch.equal(o, t) for o, t in zip(before, policy.target.parameters()))


def test_burn_in_runs_both_lstms_and_resets_at_episode_starts() -> None:
    # Catches: a burn-in that ignores is_first (the previous episode leaks into the start state),
    # or a target LSTM left at zero (its values would then read an unburnt state).
    policy = _policy()
    g = torch.Generator().manual_seed(1)
    frames = torch.rand(2, 3, *ENV.obs_shape, generator=g)
    is_first = torch.zeros(2, 4, dtype=torch.bool)
    is_first[0, 2] = True
    state = policy.burn_in(BurnIn(frames, is_first))
    alone = policy.burn_in(BurnIn(frames[:1, 2:], torch.tensor([[True, False]])))
    for key in state:
        torch.testing.assert_close(state[key][:1], alone[key])
    assert state["th"].abs().sum() > 0
    start = is_first.clone()
    start[1, -1] = True
    assert torch.equal(policy.burn_in(BurnIn(frames, start))["h"][1], torch.zeros(policy.spec.lstm))


def test_act_keeps_the_target_state_and_refuses_non_frames() -> None:
    policy = _policy()
    state = policy.initial_state(2)
    action, nxt = policy.act(torch.rand(2, *ENV.obs_shape), state, sample=False)
    assert action.shape == (2,) and set(nxt) == set(state) and torch.equal(nxt["th"], state["th"])
    from wmzoo.errors import SpecError

    with pytest.raises(SpecError, match="reads frames"):
        DeltaIrisActorCritic(policy.spec, (32,), ENV)


def test_presets_are_the_official_configs() -> None:
    crafter, atari = POLICY_PRESETS["paper"], POLICY_PRESETS["paper-atari"]
    assert (crafter.horizon, crafter.gamma, crafter.entropy, crafter.two_hot) == (15, 0.997, 0.001, True)
    assert (crafter.max_starts, crafter.segment, crafter.target_decay) == (86, 6, 0.995)
    assert (atari.horizon, atari.gamma, atari.entropy, atari.two_hot) == (20, 0.995, 0.002, False)
    assert (atari.max_starts, atari.segment) == (64, 6)
    policy = DeltaIrisActorCritic(crafter, (3, 64, 64), EnvInfo(name="c", obs_shape=(3, 64, 64), num_actions=17))
    assert policy.model.lstm.input_size == 1024  # 16 × 8 × 8, the official


def test_act_advances_the_online_lstm_and_temperature_sharpens_towards_greedy() -> None:
    # catches: act returning the state it was given (the LSTM never reads the frames it acts on),
    # the temperature multiplying the logits instead of dividing them
    policy = _policy()
    with torch.no_grad():  # a non-zero actor whose logits differ between frames
        policy.model.actor.weight.normal_(0, 1.0)
    frames = torch.rand(300, *ENV.obs_shape, generator=torch.Generator().manual_seed(2))
    state = policy.initial_state(300)
    greedy, after = policy.act(frames, state, sample=False)
    logits, _, h, c = policy.model(frames, state["h"], state["c"])
    torch.testing.assert_close(after["h"], h)
    torch.testing.assert_close(after["c"], c)
    assert torch.equal(greedy, logits.argmax(-1))
    torch.manual_seed(0)
    cold, _ = policy.act(frames, state, temperature=1e-4)
    warm, _ = policy.act(frames, state)
    assert torch.equal(cold, greedy) and not torch.equal(warm, greedy)
