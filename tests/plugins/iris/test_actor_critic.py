"""IRIS actor-critic (``iris-ac``): shapes, burn-in resets, the REINFORCE + value loss by hand,
learning from a fixed trajectory, and burn-in wired through the agent."""

from __future__ import annotations

import pytest
import torch

from wmzoo.agents.returns import lambda_returns
from wmzoo.errors import WmzooError
from wmzoo.interfaces import BurnIn, EnvInfo, Trajectory
from wmzoo_plugins.iris import POLICY_PRESETS, IrisActorCritic, IrisActorCriticSpec

ENV = EnvInfo(name="t", obs_shape=(3, 32, 32), num_actions=4)
SPEC = IrisActorCriticSpec(channels=(4, 4, 8, 8), lstm=16, entropy=0.01)


def _trajectory(policy: IrisActorCritic, H: int = 5, B: int = 3, seed: int = 0) -> Trajectory:
    g = torch.Generator().manual_seed(seed)
    return Trajectory(
        features=torch.rand(H + 1, B, *ENV.obs_shape, generator=g),
        actions=torch.randint(4, (H, B), generator=g),
        rewards=torch.randn(H, B, generator=g),
        conts=torch.ones(H, B),
        weights=torch.ones(H + 1, B),
        policy_state=policy.initial_state(B),
    )


def test_act_shapes_and_state() -> None:
    torch.manual_seed(0)
    policy = IrisActorCritic(SPEC, ENV.obs_shape, ENV)
    frames = torch.rand(5, *ENV.obs_shape)
    action, state = policy.act(frames, policy.initial_state(5))
    assert action.shape == (5,) and action.dtype == torch.int64 and 0 <= action.min() and action.max() < 4
    assert state["h"].shape == (5, 16) and state["h"].abs().sum() > 0
    greedy, _ = policy.act(frames, policy.initial_state(5), sample=False)
    logits, _, _ = policy.step(frames, policy.initial_state(5))
    assert torch.equal(greedy, logits.argmax(-1))


def test_burn_in_resets_at_episode_starts() -> None:
    torch.manual_seed(0)
    policy = IrisActorCritic(SPEC, ENV.obs_shape, ENV)
    ctx = torch.rand(2, 3, *ENV.obs_shape)
    first = torch.zeros(2, 4, dtype=torch.bool)
    first[1, 2] = True  # row 1: a new episode starts at the third context frame
    state = policy.burn_in(BurnIn(ctx, first))
    # row 1 equals a burn-in over its last context frame alone
    alone = policy.burn_in(BurnIn(ctx[1:, 2:], torch.zeros(1, 2, dtype=torch.bool)))
    torch.testing.assert_close(state["h"][1:], alone["h"])
    assert not torch.allclose(state["h"][:1], policy.burn_in(BurnIn(ctx[:1, 2:], torch.zeros(1, 2, dtype=torch.bool)))["h"])
    # a start that is itself an episode start gets the initial state
    first[0, -1] = True
    assert policy.burn_in(BurnIn(ctx, first))["h"][0].abs().sum() == 0


def test_losses_match_reinforce_with_baseline_by_hand() -> None:
    torch.manual_seed(0)
    policy = IrisActorCritic(SPEC, ENV.obs_shape, ENV)
    traj = _trajectory(policy)
    loss, metrics = policy.losses(traj)
    with torch.no_grad():
        state, logits, values = traj.policy_state, [], []
        for t in range(6):
            lg, v, state = policy.step(traj.features[t], state)
            logits.append(lg)
            values.append(v)
        values_t = torch.stack(values)
        returns = lambda_returns(traj.rewards, traj.conts, values_t, 0.995, 0.95)
        logp = torch.log_softmax(torch.stack(logits[:-1]), -1)
        chosen = logp.gather(-1, traj.actions[..., None]).squeeze(-1)
        entropy = -(logp.exp() * logp).sum(-1)
        actor = -(chosen * (returns - values_t[:-1])).mean()
        critic = ((values_t[:-1] - returns) ** 2).mean()
        expected = actor - 0.01 * entropy.mean() + critic
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-6)
    assert metrics["critic_loss"] == pytest.approx(critic.item(), rel=1e-5)


def test_learning_fits_the_critic_on_a_fixed_trajectory() -> None:
    torch.manual_seed(0)
    # γ ≈ 0: the returns are the rewards, a fixed regression target
    spec = SPEC.model_copy(update={"gamma": 1e-6, "optim": SPEC.optim.model_copy(update={"lr": 1e-2})})
    policy = IrisActorCritic(spec, ENV.obs_shape, ENV)
    traj = _trajectory(policy)
    traj.rewards = torch.linspace(0.5, 2.0, 5)[:, None].expand(5, 3).clone()
    first = policy.losses(traj)[1]["critic_loss"]
    for _ in range(40):
        metrics = policy.learn(traj)
    assert metrics["critic_loss"] < 0.5 * first
    assert set(policy.optimizers()) == {"actor_critic"}


def test_bad_feature_shapes_and_continuous_actions_are_clear_errors() -> None:
    with pytest.raises(WmzooError, match=r"reads frames \[C, H, W\]"):
        IrisActorCritic(SPEC, (128,), ENV)
    with pytest.raises(WmzooError, match="discrete"):
        IrisActorCritic(SPEC, ENV.obs_shape, EnvInfo(name="c", obs_shape=(3, 32, 32), num_actions=2, discrete=False))
    assert {"tiny", "small", "paper"} <= set(POLICY_PRESETS)


def test_paper_network_size() -> None:
    env = EnvInfo(name="atari", obs_shape=(3, 64, 64), num_actions=6)
    policy = IrisActorCritic(POLICY_PRESETS["paper"], env.obs_shape, env)
    # IRIS's actor-critic: 3.2M parameters (its code, eloialonso/iris), dominated by the LSTMCell(1024, 512)
    assert 3.1e6 < sum(p.numel() for p in policy.parameters()) < 3.3e6


def test_agent_burns_in_the_policy_on_the_world_models_context(monkeypatch) -> None:
    from wmzoo.bench.harness import synthetic_batch
    from wmzoo.config import run_spec
    from wmzoo.train.agent import Agent

    torch.manual_seed(0)
    agent = Agent(run_spec("iris", "atari-pong", "tiny"), ENV)
    assert agent.policy_name == "iris-ac"
    seen = []
    original = agent.policy.burn_in

    def spy(context: BurnIn):
        seen.append((tuple(context.features.shape), tuple(context.is_first.shape)))
        return original(context)

    monkeypatch.setattr(agent.policy, "burn_in", spy)
    out = agent.train_world_model(synthetic_batch(ENV, 2, 8, torch.device("cpu")))
    metrics = agent.train_policy(out)
    assert seen == [((2, 4, *ENV.obs_shape), (2, 5))]  # tiny burn_in = 4 frames
    assert "policy/critic_loss" in metrics


def test_temperature_sharpens_sampling_towards_greedy() -> None:
    torch.manual_seed(0)
    policy = IrisActorCritic(SPEC, ENV.obs_shape, ENV)
    frames = torch.rand(300, *ENV.obs_shape)
    greedy, _ = policy.act(frames, policy.initial_state(300), sample=False)
    cold, _ = policy.act(frames, policy.initial_state(300), temperature=1e-4)
    warm, _ = policy.act(frames, policy.initial_state(300))
    assert torch.equal(cold, greedy) and not torch.equal(warm, greedy)


def test_the_lstm_reads_frames_in_minus_one_one_and_reruns_from_the_burnt_in_state() -> None:
    # catches: frames fed to the CNN in [0, 1] (IRIS scales them to [-1, 1]); the losses' rerun of
    # the LSTM starting from a fresh state instead of the trajectory's burnt-in one
    torch.manual_seed(0)
    policy = IrisActorCritic(SPEC, ENV.obs_shape, ENV)
    frames = torch.rand(3, *ENV.obs_shape)
    state = {"h": torch.randn(3, 16), "c": torch.randn(3, 16)}
    with torch.no_grad():
        logits, _, after = policy.step(frames, state)
        h, c = policy.lstm(policy.cnn(frames * 2 - 1), (state["h"], state["c"]))
        torch.testing.assert_close(after["h"], h)
        torch.testing.assert_close(logits, policy.actor(h))
        traj = _trajectory(policy)
        traj.policy_state = state
        rerun, _ = policy.logits_and_values(traj)
        torch.testing.assert_close(rerun[0], policy.step(traj.features[0], state)[0])
