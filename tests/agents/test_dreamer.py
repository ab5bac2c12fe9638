"""The DreamerV3 actor-critic: spec, acting, the loss terms, learning, checkpoints, the plugin hook."""

from __future__ import annotations

import copy
import io
import math

import pluggy
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import wmzoo.agents.dreamer as dreamer
from wmzoo.agents.dreamer import PRESETS, DreamerPolicy, DreamerSpec
from wmzoo.agents.returns import lambda_returns
from wmzoo.errors import WmzooError
from wmzoo.hookspecs import PROJECT, WmzooSpecs
from wmzoo.interfaces import EnvInfo, Trajectory
from wmzoo.nn import TwoHot
from wmzoo.specs import OptimSpec, validate

DISCRETE = EnvInfo("test-discrete", (3, 8, 8), 3)
CONTINUOUS = EnvInfo("test-continuous", (3, 8, 8), 2, discrete=False)
FEATURES = 8


def tiny(**update: object) -> DreamerSpec:
    """The tiny preset; REINFORCE for continuous actions too unless ``actor_grad`` is given (these
    tests build trajectories by hand, without a world model to backpropagate through)."""
    return PRESETS["tiny"].model_copy(update={"actor_grad": "reinforce", **update})


def trajectory(policy: DreamerPolicy, H: int = 4, B: int = 16, seed: int = 0) -> Trajectory:
    """Random features, the policy's own actions, rewards ~ N(0, 1), no termination."""
    gen = torch.Generator().manual_seed(seed)
    features = torch.randn(H + 1, B, FEATURES, generator=gen)
    actions, _ = policy.act(features[:-1], {})
    rewards = torch.randn(H, B, generator=gen)
    return Trajectory(features, actions, rewards, torch.ones(H, B), torch.ones(H + 1, B))


# --------------------------------------------------------------------------- spec and plugin


def test_paper_preset_is_dreamerv3() -> None:
    paper = PRESETS["paper"]
    assert (paper.horizon, paper.gamma, paper.lam, paper.entropy) == (15, 0.997, 0.95, 3e-4)
    assert abs(paper.gamma - (1 - 1 / 333)) < 1e-5
    assert (paper.units, paper.layers, paper.unimix, paper.critic_bins) == (512, 2, 0.01, 255)
    assert (paper.slow_critic_decay, paper.slow_reg) == (0.98, 1.0)
    assert (paper.return_norm_decay, paper.return_norm_percentiles) == (0.99, (5.0, 95.0))
    assert (paper.min_std, paper.max_std) == (0.1, 1.0)
    for optim in (paper.actor_optim, paper.critic_optim):
        assert (optim.lr, optim.eps, optim.clip) == (3e-5, 1e-5, 100.0)
    assert set(PRESETS) == {"tiny", "small", "paper"}
    assert all(isinstance(spec, DreamerSpec) for spec in PRESETS.values())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"gamma": 1.5}, "gamma: Input should be less than or equal to 1"),
        ({"return_norm_percentiles": [95, 5]}, "return_norm_percentiles: .*95.0 must be below .* 5.0"),
        ({"return_norm_percentiles": [5, 101]}, "return_norm_percentiles.1"),
        ({"min_std": 2.0}, "max_std: .*must not be below min_std 2.0"),
        ({"actor_optim": {"lr": 0}}, "actor_optim.lr"),
        ({"temperature": 1}, "temperature: unknown field"),
    ],
)
def test_spec_rejects_bad_values(data: dict, message: str) -> None:
    with pytest.raises(WmzooError, match=message):
        validate(DreamerSpec, data)


def test_every_field_is_described() -> None:
    assert all(info.description for info in DreamerSpec.model_fields.values())


def test_hook_registers_the_policy() -> None:
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(WmzooSpecs)
    pm.register(dreamer)
    [[entry]] = pm.hook.wmzoo_policies()
    assert (entry.name, entry.spec, entry.build) == ("dreamer", DreamerSpec, DreamerPolicy)
    assert entry.presets is PRESETS
    policy = entry.build(entry.presets["tiny"], (FEATURES,), DISCRETE)
    assert set(policy.optimizers()) == {"actor", "critic"}


def test_rejects_features_that_are_not_one_dimensional() -> None:
    with pytest.raises(WmzooError, match=r"1-D features.*\(4, 8, 8\)"):
        DreamerPolicy(tiny(), (4, 8, 8), DISCRETE)


# --------------------------------------------------------------------------- acting


def test_greedy_discrete_action_is_the_argmax() -> None:
    policy = DreamerPolicy(tiny(), (FEATURES,), DISCRETE)
    features = torch.randn(256, FEATURES)
    action, state = policy.act(features, {}, sample=False)
    assert state == {} and action.dtype == torch.int64 and action.shape == (256,)
    assert torch.equal(action, policy.actor(features).argmax(-1))
    assert len(action.unique()) > 1  # the random actor's argmax varies with the features


def test_sampled_discrete_actions_follow_the_unimix_probabilities() -> None:
    torch.manual_seed(0)
    policy = DreamerPolicy(tiny(), (FEATURES,), DISCRETE)
    with torch.no_grad():
        policy.actor.out.weight.zero_()
        policy.actor.out.bias.copy_(torch.tensor([0.0, 0.0, 20.0]))  # softmax ≈ [0, 0, 1]
    features = torch.randn(20_000, FEATURES)
    mixed = torch.tensor([0.01 / 3, 0.01 / 3, 0.99 + 0.01 / 3])
    assert torch.allclose(policy.dist(features[:1]).probs[0], mixed, atol=1e-6)
    action, _ = policy.act(features, {})
    assert action.dtype == torch.int64 and action.shape == (20_000,)
    assert action.min() >= 0 and action.max() < DISCRETE.num_actions
    frequency = torch.bincount(action, minlength=3) / len(action)
    assert torch.allclose(frequency, mixed, atol=0.004)


def test_continuous_actions_are_clipped_and_std_is_bounded() -> None:
    torch.manual_seed(0)
    policy = DreamerPolicy(tiny(), (FEATURES,), CONTINUOUS)
    features = torch.randn(4000, FEATURES)
    with torch.no_grad():
        policy.actor.out.weight.zero_()
        policy.actor.out.bias.copy_(torch.tensor([5.0, -5.0, 30.0, 30.0]))  # mean ±tanh(5), std max
    assert torch.allclose(policy.dist(features).stddev, torch.tensor(1.0), atol=1e-6)
    action, _ = policy.act(features, {})
    assert action.dtype == torch.float32 and action.shape == (4000, 2)
    assert action.min() == -1.0 and action.max() == 1.0  # half the samples fall outside: clipped
    greedy, _ = policy.act(features, {}, sample=False)
    assert torch.allclose(greedy, torch.tensor([math.tanh(5.0), -math.tanh(5.0)]).expand(4000, 2))
    with torch.no_grad():
        policy.actor.out.bias[2:] = -30.0
    assert torch.allclose(policy.dist(features).stddev, torch.tensor(0.1), atol=1e-6)


def test_an_actor_output_of_zero_gives_dreamerv3s_initial_std() -> None:
    """σ = (max − min) · sigmoid(0 + 2) + min (DreamerV3's offset). Catches: the + 2 dropped (σ 0.55, not 0.89)."""
    policy = DreamerPolicy(tiny(), (FEATURES,), CONTINUOUS)
    with torch.no_grad():
        policy.actor.out.weight.zero_()
        policy.actor.out.bias.zero_()
    expected = 0.1 + 0.9 / (1 + math.exp(-2.0))
    torch.testing.assert_close(policy.dist(torch.randn(3, FEATURES)).stddev, torch.full((3, 2), expected))


def test_a_clipped_sample_passes_its_gradient_scaled_by_one_over_its_size() -> None:
    """d a / d μ = 1 / max(1, |a_raw|) (the clip's divisor detached). Catches: the divisor not
    detached, so a clipped action (±1) passes no gradient to the actor."""
    policy = DreamerPolicy(tiny(actor_grad="backprop"), (FEATURES,), CONTINUOUS)
    with torch.no_grad():
        policy.actor.out.weight.zero_()
        policy.actor.out.bias.copy_(torch.tensor([0.0, 0.0, 30.0, 30.0]))  # μ = tanh(0) = 0, σ = 1
    torch.manual_seed(3)
    action, _ = policy.act(torch.zeros(64, FEATURES), {}, temperature=4.0)
    torch.manual_seed(3)  # the same draw, independently: N(0, σ · temperature)
    raw = torch.distributions.Normal(torch.zeros(64, 2), torch.full((64, 2), 4.0)).rsample()
    assert (raw.abs() > 1).float().mean() > 0.5  # most samples are clipped
    torch.testing.assert_close(action, raw.clamp(-1, 1))
    (grad,) = torch.autograd.grad(action.sum(), policy.actor.out.bias)
    torch.testing.assert_close(grad[:2], (1 / raw.abs().clamp(min=1)).sum(0))  # tanh'(0) = 1


def test_backprop_advantages_differentiate_returns_and_baseline_but_not_continues() -> None:
    """The gradient of Σ_t (R_t − v_t) / S (H = 2) by hand: through every value, the baseline's
    included, and the rewards; none into the continues. Catches: the baseline v(s_t) detached, a
    gradient through the continues (which DreamerV3 takes as constants)."""
    gamma, lam, scale = 0.9, 0.5, 2.0
    policy = DreamerPolicy(tiny(actor_grad="backprop", gamma=gamma, lam=lam), (FEATURES,), CONTINUOUS).double()
    with torch.no_grad():  # the critic starts at 0 everywhere: make its values depend on the features
        for p in policy.critic.parameters():
            p.add_(0.1 * torch.randn_like(p))
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(3, 2, FEATURES, generator=gen, dtype=torch.float64, requires_grad=True)
    rewards = torch.randn(2, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    conts = torch.tensor([[0.9, 0.5], [1.0, 0.8]], dtype=torch.float64, requires_grad=True)
    traj = Trajectory(features, torch.zeros(2, 2, 2), rewards, conts, torch.ones(3, 2))
    policy.backprop_advantages(traj, torch.tensor(scale, dtype=torch.float64)).sum().backward()
    c = conts.detach()
    # Σ adv = R_0 − v_0 + R_1 − v_1 with R_1 = r_1 + γ c_1 v_2, R_0 = r_0 + γ c_0 ((1 − λ) v_1 + λ R_1)
    d_value = torch.stack([-torch.ones(2), gamma * c[0] * (1 - lam) - 1, gamma * c[1] * (1 + gamma * c[0] * lam)])
    d_reward = torch.stack([torch.ones(2), 1 + gamma * c[0] * lam])
    leaf = features.detach().requires_grad_(True)
    (value_grad,) = torch.autograd.grad(policy.value(leaf).sum(), leaf)  # d v(s_t) / d s_t
    torch.testing.assert_close(features.grad, d_value[..., None] * value_grad / scale)
    torch.testing.assert_close(rewards.grad, d_reward / scale)
    assert conts.grad is None


# --------------------------------------------------------------------------- loss terms


def test_critic_starts_at_zero() -> None:
    policy = DreamerPolicy(tiny(), (FEATURES,), DISCRETE)
    assert policy.value(torch.randn(64, FEATURES)).abs().max() < 1e-5


def test_rewards_after_termination_do_not_change_the_gradients() -> None:
    """weights = [1, 1, 0, 0, 0]: the episode ends after the action at t = 1."""
    policy = DreamerPolicy(tiny(), (FEATURES,), DISCRETE)
    base = trajectory(policy, H=4, B=16)
    conts = torch.ones(4, 16)
    conts[1] = 0.0
    weights = torch.cat([torch.ones(1, 16), conts.cumprod(0)])

    def grads(rewards: torch.Tensor) -> list[torch.Tensor]:
        model = copy.deepcopy(policy)
        traj = Trajectory(base.features, base.actions, rewards, conts, weights)
        actor_loss, critic_loss, _ = model.losses(traj)
        (actor_loss + critic_loss).backward()
        return [p.grad.clone() for p in [*model.actor.parameters(), *model.critic.parameters()]]

    reference = grads(base.rewards)
    after = base.rewards.clone()
    after[2:] = 5 * torch.randn(2, 16)  # spread stays far below 100: the return scale stays 1
    for a, b in zip(reference, grads(after), strict=True):
        torch.testing.assert_close(a, b)
    before = base.rewards.clone()
    before[1] += 1.0  # the terminal step's own reward counts
    assert any(not torch.allclose(a, b) for a, b in zip(reference, grads(before), strict=True))


def test_learn_updates_the_slow_critic_by_ema_and_the_return_normaliser() -> None:
    spec = tiny(slow_critic_decay=0.9, return_norm_decay=0.8)
    policy = DreamerPolicy(spec, (FEATURES,), DISCRETE)
    with torch.no_grad():
        for p in policy.slow_critic.parameters():
            p.add_(torch.randn_like(p))  # distinguish the slow critic from the critic
    slow_before = [p.clone() for p in policy.slow_critic.parameters()]
    critic_before = [p.clone() for p in policy.critic.parameters()]
    traj = trajectory(policy)
    traj.rewards.mul_(100)  # a spread well above 1, so the scale is not clamped
    metrics = policy.learn(traj)

    assert not torch.equal(policy.critic.out.weight, critic_before[-2])  # the critic did move
    slow_after, critic_after = policy.slow_critic.parameters(), policy.critic.parameters()
    for slow, old, fast in zip(slow_after, slow_before, critic_after, strict=True):
        torch.testing.assert_close(slow, 0.9 * old + 0.1 * fast)
    assert not any(p.requires_grad for p in policy.slow_critic.parameters())

    values = torch.zeros(traj.horizon + 1, 16)  # the critic's first values are 0
    returns = lambda_returns(traj.rewards, traj.conts, values, spec.gamma, spec.lam)
    low, high = torch.quantile(returns.flatten(), torch.tensor([0.05, 0.95]))
    torch.testing.assert_close(policy.return_norm.low, 0.2 * low, atol=1e-3, rtol=1e-5)
    torch.testing.assert_close(policy.return_norm.high, 0.2 * high, atol=1e-3, rtol=1e-5)
    assert metrics["return_scale"] == pytest.approx(0.2 * (high - low).item(), abs=1e-3)
    assert metrics["return_scale"] > 1
    assert set(metrics) == {
        "actor_loss", "critic_loss", "entropy", "return_mean", "value_mean", "return_scale",
        "advantage_std", "actor_grad_norm", "critic_grad_norm",
    }
    assert all(math.isfinite(v) for v in metrics.values())


def test_learning_rate_warms_up_linearly() -> None:
    warm = OptimSpec(lr=1e-3, eps=1e-5, clip=100.0, warmup=4)
    policy = DreamerPolicy(tiny(actor_optim=warm), (FEATURES,), DISCRETE)
    rates = []
    for _ in range(6):
        policy.learn(trajectory(policy))
        rates.append(policy.optimizers()["actor"].opt.param_groups[0]["lr"])
    assert rates == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])
    assert policy.optimizers()["critic"].opt.param_groups[0]["lr"] == PRESETS["tiny"].critic_optim.lr


def test_rejects_one_hot_actions() -> None:
    policy = DreamerPolicy(tiny(), (FEATURES,), DISCRETE)
    traj = trajectory(policy)
    one_hot = torch.nn.functional.one_hot(traj.actions, 3).float()
    with pytest.raises(ValueError, match=r"trajectory.actions: expected shape \[4, 16\]"):
        policy.learn(Trajectory(traj.features, one_hot, traj.rewards, traj.conts, traj.weights))


def test_checkpoint_round_trip_resumes_exactly() -> None:
    torch.manual_seed(0)
    policy = DreamerPolicy(tiny(), (FEATURES,), DISCRETE)
    for seed in range(3):
        policy.learn(trajectory(policy, seed=seed))
    buffer = io.BytesIO()  # through bytes, as a checkpoint file: nothing shared with the original
    optimizers = {name: optimizer.state_dict() for name, optimizer in policy.optimizers().items()}
    torch.save({"policy": policy.state_dict(), **optimizers}, buffer)
    buffer.seek(0)
    checkpoint = torch.load(buffer)
    restored = DreamerPolicy(tiny(), (FEATURES,), DISCRETE)
    restored.load_state_dict(checkpoint["policy"])
    for name, optimizer in restored.optimizers().items():
        optimizer.load_state_dict(checkpoint[name])

    assert restored.return_norm.low.item() == policy.return_norm.low.item() != 0
    assert restored.return_norm.high.item() == policy.return_norm.high.item() != 0
    assert restored.optimizers()["actor"].updates == restored.optimizers()["critic"].updates == 3
    for a, b in zip(restored.slow_critic.parameters(), policy.slow_critic.parameters(), strict=True):
        assert torch.equal(a, b)
    traj = trajectory(policy, seed=9)
    assert restored.learn(traj) == policy.learn(traj)
    for a, b in zip(restored.state_dict().values(), policy.state_dict().values(), strict=True):
        assert torch.equal(a, b)


# --------------------------------------------------------------------------- learning


def test_learns_a_two_armed_bandit() -> None:
    """Action 1 pays 1, action 0 pays 0, every step, forever (c = 1, bootstrapped at H = 3).

    Features are noise, so every state has the same value ``p / (1 − γ)`` under a policy that picks
    action 1 with probability ``p``: the critic must learn it through the bootstrap.
    """
    torch.manual_seed(0)
    fast = OptimSpec(lr=1e-3, eps=1e-5, clip=100.0)
    spec = tiny(horizon=3, gamma=0.5, actor_optim=fast, critic_optim=fast.model_copy(update={"lr": 3e-3}))
    policy = DreamerPolicy(spec, (FEATURES,), EnvInfo("bandit", (3, 8, 8), 2))
    probe = torch.randn(1000, FEATURES)
    assert abs(policy.dist(probe).probs[:, 1].mean().item() - 0.5) < 0.15

    H, B = spec.horizon, 64
    for _ in range(300):
        features = torch.randn(H + 1, B, FEATURES)
        actions, _ = policy.act(features[:-1], {})
        rewards = (actions == 1).float()
        policy.learn(Trajectory(features, actions, rewards, torch.ones(H, B), torch.ones(H + 1, B)))

    p = policy.dist(probe).probs[:, 1].mean().item()
    assert p > 0.9
    true_value = p / (1 - spec.gamma)
    assert policy.value(probe).mean().item() == pytest.approx(true_value, rel=0.2)


def test_learns_to_push_a_continuous_action_up() -> None:
    """Reward = the action itself: the mean action should move toward +1."""
    torch.manual_seed(0)
    fast = OptimSpec(lr=1e-3, eps=1e-5, clip=100.0)
    env = EnvInfo("push", (3, 8, 8), 1, discrete=False)
    spec = tiny(horizon=3, gamma=0.5, actor_optim=fast, critic_optim=fast)
    policy = DreamerPolicy(spec, (FEATURES,), env)
    H, B = spec.horizon, 64
    for _ in range(100):
        features = torch.randn(H + 1, B, FEATURES)
        actions, _ = policy.act(features[:-1], {})
        policy.learn(Trajectory(features, actions, actions[..., 0], torch.ones(H, B), torch.ones(H + 1, B)))
    greedy, _ = policy.act(torch.randn(1000, FEATURES), {}, sample=False)
    assert greedy.mean().item() > 0.5


def test_temperature_scales_the_spread_of_sampled_actions() -> None:
    """Discrete: logits / T, so a cold sample is the mode; continuous: σ·T around the mean."""
    torch.manual_seed(0)
    features = torch.randn(2000, FEATURES)
    policy = DreamerPolicy(tiny(), (FEATURES,), DISCRETE)
    greedy, _ = policy.act(features, {}, sample=False)
    assert torch.equal(policy.act(features, {}, temperature=1e-4)[0], greedy)
    assert not torch.equal(policy.act(features, {})[0], greedy)
    policy = DreamerPolicy(tiny(), (FEATURES,), CONTINUOUS)
    mean = policy.act(features, {}, sample=False)[0]
    spread = [(policy.act(features, {}, temperature=t)[0] - mean).std() for t in (0.5, 0.25)]
    assert 1.7 < spread[0] / spread[1] < 2.3


# --------------------------------------------------------------------------- the loss terms by hand


def randomised(spec: DreamerSpec, env: EnvInfo = DISCRETE, seed: int = 0) -> DreamerPolicy:
    """A policy whose critic and slow critic are random and differ from each other (the zero
    critic and its identical slow copy would hide a value swapped for another)."""
    torch.manual_seed(seed)
    policy = DreamerPolicy(spec, (FEATURES,), env)
    with torch.no_grad():
        policy.critic.out.weight.normal_(0.0, 0.3)
        policy.critic.out.bias.normal_(0.0, 0.3)
        for p in policy.slow_critic.parameters():
            p.add_(0.5 * torch.randn_like(p))
    return policy


def terminating(policy: DreamerPolicy, H: int = 5, B: int = 12, seed: int = 0, dtype: torch.dtype = torch.float32) -> Trajectory:
    """Rewards ~ N(0, 10²) (a return spread far above 1) and rows that end mid-way."""
    gen = torch.Generator().manual_seed(seed)
    features = torch.randn(H + 1, B, FEATURES, generator=gen, dtype=dtype)
    actions, _ = policy.act(features[:-1], {})
    rewards = 10 * torch.randn(H, B, generator=gen, dtype=dtype)
    conts = (torch.rand(H, B, generator=gen, dtype=dtype) > 0.2).to(dtype)
    weights = torch.cat([torch.ones(1, B), conts.cumprod(0)])
    return Trajectory(features, actions, rewards, conts, weights)


def hand_actor_loss(policy: DreamerPolicy, traj: Trajectory, advantages: torch.Tensor) -> torch.Tensor:
    """``−mean w (A · ln π(a) + η H[π])`` for given advantages."""
    dist = policy.dist(traj.features[:-1])
    w = traj.weights[:-1]
    return -(w * (advantages * dist.log_prob(traj.actions) + policy.spec.entropy * dist.entropy())).mean()


def test_actor_loss_uses_percentile_normalised_advantages_by_hand() -> None:
    """A = (R − v) / max(1, P95 − P5) with the returns' spread well above 1 (return_norm_decay 0:
    the normaliser's percentiles are this batch's). Bugs caught: the division by the return scale
    dropped, R and v swapped (v − R), the scale multiplied instead of divided, the percentiles of
    the values instead of the returns."""
    spec = tiny(return_norm_decay=0.0, entropy=0.01)
    policy = randomised(spec)
    traj = terminating(policy)
    with torch.no_grad():
        values = policy.value(traj.features)
        returns = lambda_returns(traj.rewards, traj.conts, values, spec.gamma, spec.lam)
        low, high = torch.quantile(returns.flatten(), torch.tensor([0.05, 0.95]))
    scale = (high - low).item()
    assert scale > 5  # the division matters
    assert values[:-1].abs().mean() > 0.1  # so does v
    advantages = (returns - values[:-1]) / scale

    actor_loss, _, metrics = copy.deepcopy(policy).losses(traj)
    expected = hand_actor_loss(policy, traj, advantages)
    torch.testing.assert_close(actor_loss, expected, rtol=1e-5, atol=1e-6)
    assert metrics["return_scale"] == pytest.approx(scale, rel=1e-5)
    assert metrics["advantage_std"] == pytest.approx(advantages.std(correction=0).item(), rel=1e-4)
    # the same gradient reaches the actor
    model = copy.deepcopy(policy)
    model.losses(traj)[0].backward()
    expected.backward()
    for mine, theirs in zip(model.actor.parameters(), policy.actor.parameters(), strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-4, atol=1e-7)
    # the comparison above tells the plausible bugs apart from the right loss
    for wrong in ((returns - values[:-1]), (values[:-1] - returns) / scale, (returns - values[:-1]) * scale):
        assert abs(hand_actor_loss(policy, traj, wrong).item() - actor_loss.item()) > 1e-3


def test_critic_loss_is_returns_plus_slow_critic_regulariser_by_hand() -> None:
    """critic = −mean w (ln p_v(R) + slow_reg · ln p_v(v_slow)) where the slow critic differs from
    the critic. Bugs caught: the regulariser removed, computed with the fast critic's own values
    (a no-op target), its weight ignored, or the returns bootstrapped from the slow critic."""
    spec = tiny(slow_reg=0.7)
    policy = randomised(spec)
    traj = terminating(policy, seed=1)
    features = traj.features
    with torch.no_grad():
        values = policy.value(features)
        slow = TwoHot(policy.slow_critic(features[:-1])).mean()
        returns = lambda_returns(traj.rewards, traj.conts, values, spec.gamma, spec.lam)
    assert (slow - values[:-1]).abs().mean() > 0.1  # slow and fast critics really differ

    def hand(target_values: torch.Tensor, weight: float) -> torch.Tensor:
        critic = TwoHot(policy.critic(features[:-1]))
        fit = critic.log_prob(returns) + weight * critic.log_prob(target_values)
        return -(traj.weights[:-1] * fit).mean()

    model = copy.deepcopy(policy)
    _, critic_loss, _ = model.losses(traj)
    expected = hand(slow, 0.7)
    torch.testing.assert_close(critic_loss, expected, rtol=1e-5, atol=1e-6)
    critic_loss.backward()
    expected.backward()
    for mine, theirs in zip(model.critic.parameters(), policy.critic.parameters(), strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-4, atol=1e-7)
    assert all(p.grad is None for p in model.slow_critic.parameters())
    with torch.no_grad():  # each plausible bug gives a loss the comparison above rejects
        for wrong in (hand(slow, 0.0), hand(values[:-1], 0.7), hand(slow, 1.0)):
            assert abs(wrong.item() - critic_loss.item()) > 1e-2


@given(eta=st.floats(0.01, 1.0), seed=st.integers(0, 1000), discrete=st.booleans())
@settings(max_examples=10, deadline=None)
def test_entropy_bonus_lowers_the_actor_loss(eta: float, seed: int, discrete: bool) -> None:
    """All else equal, an entropy coefficient η changes the actor loss by exactly −η · mean w H[π]:
    the loss falls as the policy's entropy rises. Bugs caught: the bonus's sign flipped (a penalty
    on exploration), the bonus dropped, or the entropy not weighted by w."""
    env = DISCRETE if discrete else CONTINUOUS
    policy = randomised(tiny(entropy=eta), env, seed).double()  # float64: the loss difference is small
    traj = terminating(policy, seed=seed, dtype=torch.float64)
    without = copy.deepcopy(policy)
    without.spec = tiny(entropy=0.0)
    with_bonus = copy.deepcopy(policy).losses(traj)[0]
    plain = without.losses(traj)[0]
    with torch.no_grad():
        entropy = policy.dist(traj.features[:-1]).entropy()
    bonus = (traj.weights[:-1] * entropy).mean()
    torch.testing.assert_close(with_bonus - plain, -eta * bonus, rtol=1e-9, atol=1e-9)
    if discrete:  # a categorical's entropy is positive, so the bonus lowers the loss
        assert with_bonus < plain - 1e-3 * eta
    # and a step down the bonus's own gradient (the difference of the two losses through one
    # shared actor) raises the policy's entropy
    a, b = copy.deepcopy(policy), copy.deepcopy(policy)  # `without` has updated its normaliser
    b.spec, b.actor = without.spec, a.actor
    (a.losses(traj)[0] - b.losses(traj)[0]).backward()
    with torch.no_grad():
        for p in a.actor.parameters():
            p -= 1e-3 / eta * p.grad
        after = a.dist(traj.features[:-1]).entropy()
    assert (traj.weights[:-1] * after).mean() > bonus


def test_actions_carry_a_graph_only_for_backprop_under_grad_mode() -> None:
    # catches: act() switching grad mode on unconditionally (a REINFORCE actor, or any actor inside
    # imagination's no_grad, would then build a graph through every imagined step)
    features = torch.randn(5, FEATURES)
    backprop = DreamerPolicy(tiny(actor_grad="backprop"), (FEATURES,), CONTINUOUS)
    reinforce = DreamerPolicy(tiny(actor_grad="reinforce"), (FEATURES,), CONTINUOUS)
    assert backprop.act(features, {})[0].requires_grad
    assert not reinforce.act(features, {})[0].requires_grad
    with torch.no_grad():
        assert not backprop.act(features, {})[0].requires_grad
