"""λ-returns, the percentile return normaliser and the REINFORCE losses against independent references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from wmzoo.agents.returns import PercentileNormalizer, lambda_returns, reinforce_losses
from wmzoo.interfaces import Trajectory


def reference_lambda_returns(
    rewards: np.ndarray, conts: np.ndarray, values: np.ndarray, gamma: float, lam: float
) -> np.ndarray:
    """The λ-return by its definition: a λ-weighted average of n-step returns (no recursion).

    ``G_t^(n) = Σ_{k<n} (Π_{j<k} γ c_{t+j}) r_{t+k} + (Π_{j<n} γ c_{t+j}) v_{t+n}`` and
    ``R_t = (1 − λ) Σ_{n=1}^{N−1} λ^{n−1} G_t^(n) + λ^{N−1} G_t^(N)`` with ``N = H − t``.
    """
    H, B = rewards.shape
    out = np.zeros((H, B))
    for t in range(H):
        for b in range(B):
            N = H - t
            n_step = []
            for n in range(1, N + 1):
                total, discount = 0.0, 1.0
                for k in range(n):
                    total += discount * rewards[t + k, b]
                    discount *= gamma * conts[t + k, b]
                n_step.append(total + discount * values[t + n, b])
            mix = sum((1 - lam) * lam ** (n - 1) * n_step[n - 1] for n in range(1, N))
            out[t, b] = mix + lam ** (N - 1) * n_step[N - 1]
    return out


@settings(max_examples=40, deadline=None)
@given(
    H=st.integers(1, 7),
    B=st.integers(1, 3),
    gamma=st.floats(0.01, 1.0),
    lam=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
)
def test_lambda_returns_match_the_n_step_definition(
    H: int, B: int, gamma: float, lam: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(H, B))
    conts = rng.uniform(size=(H, B)) * (rng.uniform(size=(H, B)) > 0.2)  # some exact terminations
    values = rng.normal(size=(H + 1, B)) * 3
    got = lambda_returns(*(torch.from_numpy(x) for x in (rewards, conts, values)), gamma, lam)
    expected = reference_lambda_returns(rewards, conts, values, gamma, lam)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-9, atol=1e-9)


def _case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rewards = torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
    conts = torch.tensor([[1.0], [0.5], [1.0]], dtype=torch.float64)
    values = torch.tensor([[10.0], [20.0], [30.0], [40.0]], dtype=torch.float64)
    return rewards, conts, values


def test_lambda_one_is_the_discounted_sum_bootstrapped_from_the_last_value() -> None:
    g = 0.9
    got = lambda_returns(*_case(), gamma=g, lam=1.0)[:, 0].tolist()
    R2 = 3 + g * 1.0 * 40
    R1 = 2 + g * 0.5 * R2
    R0 = 1 + g * 1.0 * R1
    assert got == pytest.approx([R0, R1, R2])
    assert R0 == pytest.approx(1 + g * 2 + g * g * 0.5 * 3 + g**3 * 0.5 * 40)


def test_lambda_zero_is_the_one_step_td_target() -> None:
    g = 0.9
    got = lambda_returns(*_case(), gamma=g, lam=0.0)[:, 0].tolist()
    assert got == pytest.approx([1 + g * 20, 2 + g * 0.5 * 30, 3 + g * 40])


def test_lambda_returns_reject_misaligned_values() -> None:
    rewards, conts, values = _case()
    with pytest.raises(ValueError, match=r"values \[H \+ 1"):
        lambda_returns(rewards, conts, values[:-1], 0.9, 0.95)


# --------------------------------------------------------------------------- normaliser


def test_one_update_from_zero_moves_a_fraction_one_minus_decay() -> None:
    x = torch.linspace(0, 1000, 1001)[torch.randperm(1001)].reshape(7, 143)
    norm = PercentileNormalizer(decay=0.9, percentiles=(5.0, 95.0))
    scale = norm.update(x)
    p5, p95 = np.percentile(x.numpy(), [5, 95])  # 50 and 950 on this grid
    assert norm.low.item() == pytest.approx(0.1 * p5, rel=1e-6)
    assert norm.high.item() == pytest.approx(0.1 * p95, rel=1e-6)
    assert scale.item() == pytest.approx(0.1 * (950 - 50), rel=1e-6)


def test_the_averages_follow_the_ema_over_updates() -> None:
    norm = PercentileNormalizer(decay=0.99, percentiles=(10.0, 90.0))
    spreads = []
    for shift, width in [(0.0, 500.0), (100.0, 2000.0), (-50.0, 300.0)]:
        x = shift + width * torch.rand(4000)
        p10, p90 = np.percentile(x.numpy(), [10, 90])
        spreads.append(p90 - p10)
        norm.update(x)
    expected = 0.0
    for s in spreads:
        expected = 0.99 * expected + 0.01 * s
    assert (norm.high - norm.low).item() == pytest.approx(expected, rel=1e-5)
    assert norm.scale.item() == pytest.approx(max(1.0, expected), rel=1e-5)


def test_scale_is_never_below_one() -> None:
    norm = PercentileNormalizer()
    for _ in range(50):
        scale = norm.update(0.01 * torch.randn(64))
        assert scale.item() == 1.0
    assert 0 < (norm.high - norm.low).item() < 1


def test_state_dict_carries_the_averages() -> None:
    norm = PercentileNormalizer()
    norm.update(100 * torch.randn(256))
    restored = PercentileNormalizer()
    restored.load_state_dict(norm.state_dict())
    assert restored.low.item() == norm.low.item() != 0
    assert restored.high.item() == norm.high.item() != 0


# --------------------------------------------------------------------------- REINFORCE losses


def _reinforce_case() -> tuple[torch.Tensor, torch.Tensor, Trajectory]:
    """H = 2, B = 2, two actions; column 1 ends after step 0, so its step 1 has weight 0."""
    q = [0.0, math.log(3.0)]  # π = (1/4, 3/4)
    logits = torch.tensor([[q, q], [q, [0.0, 0.0]]], dtype=torch.float64, requires_grad=True)
    values = torch.tensor([[1.0, 1.0], [3.0, 4.0], [4.0, 0.0]], dtype=torch.float64, requires_grad=True)
    trajectory = Trajectory(
        features=torch.zeros(3, 2, 1),
        actions=torch.tensor([[1, 0], [1, 1]]),
        rewards=torch.tensor([[1.0, 2.0], [0.0, 1.0]], dtype=torch.float64),
        conts=torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=torch.float64),
        weights=torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 0.0]], dtype=torch.float64),
    )
    return logits, values, trajectory


def test_reinforce_losses_match_a_hand_computation() -> None:
    logits, values, trajectory = _reinforce_case()
    loss, metrics = reinforce_losses(logits, values, trajectory, gamma=0.5, lam=0.5, entropy=0.1)
    # γ = λ = 0.5. Column 0: G_2 = 4, G_1 = 0 + 0.5 (0.5·4 + 0.5·4) = 2, G_0 = 1 + 0.5 (0.5·3 + 0.5·2) = 2.25.
    # Column 1: G_1 = 1 + 0.5 (0.5·0 + 0.5·0) = 1, G_0 = 2 + 0.5·0·(...) = 2.
    # Live steps (weight 1): (t0, b0) A = 1.25, a = 1; (t0, b1) A = 1, a = 0; (t1, b0) A = −1, a = 1.
    # The dead step (t1, b1): A = −3, value error 9, uniform policy: must not count. N = 3.
    ln_q = [math.log(1 / 4), math.log(3 / 4)]
    h_q = -(0.25 * ln_q[0] + 0.75 * ln_q[1])
    actor = -(1.25 * ln_q[1] + 1.0 * ln_q[0] - 1.0 * ln_q[1]) / 3
    critic = ((1 - 2.25) ** 2 + (1 - 2) ** 2 + (3 - 2) ** 2) / 3
    assert loss.item() == pytest.approx(actor - 0.1 * h_q + critic, rel=1e-12)
    assert metrics == pytest.approx({
        "actor_loss": actor,
        "critic_loss": critic,
        "entropy": (3 * h_q + math.log(2)) / 4,  # unweighted mean over all steps
        "return_mean": (2.25 + 2 + 2 + 1) / 4,
        "value_mean": (1 + 1 + 3 + 4) / 4,
    }, rel=1e-12)
    loss.backward()
    assert logits.grad is not None and values.grad is not None
    # the zero-weight step and the bootstrap value get no gradient; returns are targets only
    assert logits.grad[1, 1].abs().sum() == 0 and logits.grad[0, 0].abs().sum() > 0
    assert values.grad[1, 1] == 0 and values.grad[2].abs().sum() == 0
    assert values.grad[0, 0].item() == pytest.approx(2 * (1 - 2.25) / 3, rel=1e-12)


def test_reinforce_losses_normalise_by_at_least_one() -> None:
    logits, values, trajectory = _reinforce_case()
    trajectory.weights = torch.full((3, 2), 0.1, dtype=torch.float64)  # Σ w = 0.4 < 1: divide by 1
    _, metrics = reinforce_losses(logits, values, trajectory, gamma=0.5, lam=0.5, entropy=0.0)
    errors = [(1 - 2.25) ** 2, (1 - 2) ** 2, (3 - 2) ** 2, (4 - 1) ** 2]
    assert metrics["critic_loss"] == pytest.approx(0.1 * sum(errors), rel=1e-12)
    trajectory.weights = torch.zeros(3, 2, dtype=torch.float64)
    loss, _ = reinforce_losses(logits, values, trajectory, gamma=0.5, lam=0.5, entropy=0.1)
    assert loss.item() == 0.0


# --------------------------------------------------------------------------- burn-in and build checks


def test_burn_in_steps_resets_before_each_episode_start_and_after_the_last_context_step() -> None:
    # catches: resets before a context step ignored, the start's own is_first ignored, the start
    # step itself run as context (T_c = T − 1 steps, not T)
    from wmzoo.agents.returns import burn_in_steps

    calls: list[int] = []

    def step(t: int, state: dict) -> dict:
        calls.append(t)
        return {"n": state["n"] * 10 + t + 1}

    initial = {"n": torch.zeros(3, dtype=torch.long)}
    is_first = torch.zeros(3, 4, dtype=torch.bool)
    is_first[1, 2] = True  # row 1: a new episode at context step 2
    is_first[2, 3] = True  # row 2: the imagination start begins an episode
    out = burn_in_steps(step, initial, is_first)
    assert calls == [0, 1, 2]
    assert out["n"].tolist() == [123, 3, 0]


def test_check_frame_policy_checks_both_sides() -> None:
    # catches: a frame width that does not divide by the CNN's factor passing unchecked
    from wmzoo.agents.returns import check_frame_policy
    from wmzoo.errors import SpecError
    from wmzoo.interfaces import EnvInfo

    env = EnvInfo("e", (3, 64, 64), 4)
    assert check_frame_policy("p", (3, 64, 32), env, 16) == (3, 64, 32)
    for shape in ((3, 64, 40), (3, 40, 64)):
        with pytest.raises(SpecError, match="do not divide by 16"):
            check_frame_policy("p", shape, env, 16)
    with pytest.raises(SpecError, match=r"frames \[C, H, W\]"):
        check_frame_policy("p", (64,), env, 16)
    with pytest.raises(SpecError, match="discrete"):
        check_frame_policy("p", (3, 64, 64), EnvInfo("c", (3, 64, 64), 2, discrete=False), 16)
