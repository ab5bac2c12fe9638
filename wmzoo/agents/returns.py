"""Return estimates, return normalisation and losses for actor-critics trained in imagination.

DreamerV3 (Hafner et al., 2023), section 3 "Actor critic learning": bootstrapped λ-returns (eq. 7)
and the percentile return normaliser (eq. 11–12), shared by every actor-critic in wmzoo; and the
REINFORCE-with-baseline losses of IRIS (Micheli et al., 2023, section 2.3) that REM (Cohen et al.,
2024, appendix A.1.2) reuses (:func:`reinforce_losses`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.distributions import Categorical

from wmzoo.errors import SpecError
from wmzoo.interfaces import EnvInfo, Policy, State, Trajectory, reset_state
from wmzoo.optim import Optimizer
from wmzoo.specs import OptimSpec


def lambda_returns(rewards: Tensor, conts: Tensor, values: Tensor, gamma: float, lam: float) -> Tensor:
    """Bootstrapped λ-returns ``R_0 .. R_{H-1}``, time first (DreamerV3 eq. 7).

    ``rewards [H, B]`` is the reward of the action taken at step ``t``, ``conts [H, B]`` the
    probability that the episode continues after it, ``values [H + 1, B]`` the critic's values of
    the states ``0 .. H``::

        R_H = v_H
        R_t = r_t + γ c_t ((1 − λ) v_{t+1} + λ R_{t+1})

    ``λ = 1`` gives the discounted reward sum bootstrapped from ``v_H``; ``λ = 0`` the one-step
    TD target ``r_t + γ c_t v_{t+1}``.
    """
    horizon = rewards.shape[0]
    aligned = values.shape[0] == horizon + 1 and values.shape[1:] == rewards.shape[1:]
    if conts.shape != rewards.shape or not aligned:
        raise ValueError(
            f"lambda_returns: expected rewards and conts [H, ...] and values [H + 1, ...], got "
            f"{list(rewards.shape)}, {list(conts.shape)} and {list(values.shape)}"
        )
    discount = gamma * conts
    partial = rewards + discount * (1 - lam) * values[1:]  # the part of R_t not depending on R_{t+1}
    returns = [values[-1]]
    for t in reversed(range(horizon)):
        returns.append(partial[t] + discount[t] * lam * returns[-1])
    return torch.stack(returns[:0:-1])


def reinforce_losses(
    logits: Tensor, values: Tensor, trajectory: Trajectory, gamma: float, lam: float, entropy: float
) -> tuple[Tensor, dict[str, float]]:
    """``L_π + L_V`` of an imagined trajectory for a discrete actor-critic, and its metrics.

    IRIS (Micheli et al., 2023), section 2.3, the λ-return ``Λ_t`` and the losses ``L_V`` and
    ``L_π``; the same objective is REM's (Cohen et al., 2024) appendix A.1.2::

        G_t = r̂_t + γ ĉ_t ((1 − λ) V_{t+1} + λ G_{t+1}),   G_H = V_H        (lambda_returns)
        L_V = Σ_t w_t (V_t − sg(G_t))² / N
        L_π = −Σ_t w_t [ln π(a_t) sg(G_t − V_t) + α H[π_t]] / N,   N = max(1, Σ_t w_t)

    ``logits [H, B, A]`` are the actor's at states ``0 .. H − 1``, ``values [H + 1, B]`` the
    critic's at states ``0 .. H``; ``trajectory`` gives the actions, rewards, continues and the
    termination weights ``w = trajectory.weights[:-1]`` (products of continues). Deviation from both
    official codes, which take plain means over every imagined step and batch row (a sampled end
    only cuts the bootstrap, through ``ĉ`` in ``G_t``): every term is weighted by ``w`` and the sums
    are divided by the total weight ``N``, a mean over live steps, so steps after a predicted end
    teach nothing. Gradients reach ``logits``
    and ``values`` only; returns and advantages are computed without gradient. Metrics:
    ``actor_loss`` (the policy-gradient term, without the entropy bonus), ``critic_loss``, and
    the unweighted means ``entropy``, ``return_mean``, ``value_mean``.
    """
    weights = trajectory.weights.detach()[:-1]
    with torch.no_grad():
        returns = lambda_returns(
            trajectory.rewards.detach(), trajectory.conts.detach(), values.detach(), gamma, lam
        )
        advantages = returns - values[:-1].detach()
    policy = Categorical(logits=logits)
    log_prob = policy.log_prob(trajectory.actions.detach().long())
    ent = policy.entropy()
    norm = weights.sum().clamp(min=1.0)
    actor = -(weights * log_prob * advantages).sum() / norm
    bonus = (weights * ent).sum() / norm
    critic = (weights * (values[:-1] - returns) ** 2).sum() / norm
    metrics = {
        "actor_loss": actor.item(),
        "critic_loss": critic.item(),
        "entropy": ent.mean().item(),
        "return_mean": returns.mean().item(),
        "value_mean": values[:-1].mean().item(),
    }
    return actor - entropy * bonus + critic, metrics


def burn_in_steps(step: Callable[[int, State], State], initial: State, is_first: Tensor) -> State:
    """A recurrent policy's state at imagination start after its real context (``Policy.burn_in``
    of the IRIS, REM and Δ-IRIS actor-critics): ``state = step(t, state)`` for each of the
    ``T_c = is_first.shape[1] − 1`` context steps, the state reset to ``initial`` before step ``t``
    where ``is_first[:, t]``, and after the last where the start itself begins an episode."""
    state = initial
    for t in range(is_first.shape[1] - 1):
        state = step(t, reset_state(state, initial, is_first[:, t]))
    return reset_state(state, initial, is_first[:, -1])


def check_frame_policy(name: str, feature_shape: tuple[int, ...], env: EnvInfo, factor: int) -> tuple[int, int, int]:
    """The build checks of an actor-critic that reads frames with a CNN halving them to ``1 /
    factor`` (IRIS's, Δ-IRIS's): discrete actions, ``[C, H, W]`` features, sides divisible by
    ``factor``. Returns ``(C, H, W)``; a :class:`SpecError` naming the policy otherwise."""
    if not env.discrete:
        raise SpecError(f"policy {name!r} needs discrete actions; env {env.name!r} is continuous")
    if len(feature_shape) != 3:
        raise SpecError(
            f"policy {name!r} reads frames [C, H, W], but the backbone's features have shape "
            f"{tuple(feature_shape)}; use it with a backbone whose features are frames (iris, delta-iris)"
        )
    c, h, w = feature_shape
    if h % factor or w % factor:
        raise SpecError(f"policy {name!r}: frames {h}x{w} do not divide by {factor}, its CNN's downsampling")
    return c, h, w


class ReinforceActorCritic(Policy):
    """The token models' actor-critics (IRIS's ``iris-ac``, REM's ``rem-ac``): REINFORCE with a
    value baseline on λ-returns (:func:`reinforce_losses`), one :class:`wmzoo.optim.Optimizer`
    for the whole network. A subclass builds its network, sets ``_optimizer`` and
    ``optimizer_name`` (the checkpoint's key) and gives :meth:`logits_and_values`; its spec has
    ``gamma``, ``lam`` and ``entropy``."""

    optimizer_name: str
    _optimizer: Optimizer

    def add_heads(self, lstm: int, num_actions: int, optim: OptimSpec) -> None:
        """The linear actor and critic on the LSTM's ``lstm`` units (built last), then the
        optimizer over every parameter."""
        self.actor = nn.Linear(lstm, num_actions)
        self.critic = nn.Linear(lstm, 1)
        self._optimizer = Optimizer(self.parameters(), optim)

    def initial_state(self, batch_size: int) -> State:
        """The LSTM's zero state ``{"h", "c"}``."""
        zeros = torch.zeros(batch_size, self.critic.in_features, device=self.critic.weight.device)
        return {"h": zeros, "c": zeros.clone()}

    @abstractmethod
    def logits_and_values(self, trajectory: Trajectory) -> tuple[Tensor, Tensor]:
        """The actor's logits ``[H + 1, B, A]`` and the critic's values ``[H + 1, B]`` along an
        imagined trajectory, rerun from its start state ``trajectory.policy_state``."""

    def losses(self, trajectory: Trajectory) -> tuple[Tensor, dict[str, float]]:
        """``L_π + L_V`` of an imagined trajectory and its metrics."""
        logits, values = self.logits_and_values(trajectory)
        spec = self.spec
        return reinforce_losses(logits[:-1], values, trajectory, spec.gamma, spec.lam, spec.entropy)  # type: ignore[attr-defined]

    def learn(self, trajectory: Trajectory) -> dict[str, float]:
        """One step of the whole network on the summed losses."""
        loss, metrics = self.losses(trajectory)
        metrics["grad_norm"] = self._optimizer.step(loss)
        return metrics

    def optimizers(self) -> dict[str, Optimizer]:
        return {self.optimizer_name: self._optimizer}


class PercentileNormalizer(nn.Module):
    """Scale of returns from running percentiles (DreamerV3 eq. 11–12).

    Each :meth:`update` moves exponential moving averages of the batch's low and high percentiles
    (5th and 95th by default), both starting at 0::

        low  ← d · low  + (1 − d) · P_low(R)
        high ← d · high + (1 − d) · P_high(R)
        S = high − low,  scale = max(1, S)

    Dividing advantages by ``scale`` shrinks large returns to a comparable range while leaving small
    ones (``S < 1``, e.g. sparse rewards) unamplified. The averages are buffers, so a checkpoint
    restores them and a resumed run continues from the same scale.
    """

    low: Tensor
    high: Tensor

    def __init__(self, decay: float = 0.99, percentiles: tuple[float, float] = (5.0, 95.0)) -> None:
        super().__init__()
        self.decay = decay
        self.register_buffer("quantiles", torch.tensor([p / 100 for p in percentiles]), persistent=False)
        self.register_buffer("low", torch.zeros(()))
        self.register_buffer("high", torch.zeros(()))

    @torch.no_grad()
    def update(self, returns: Tensor) -> Tensor:
        """Fold the percentiles of ``returns`` (any shape, pooled) into the averages; the new scale."""
        values = returns.detach().flatten().to(self.low)
        low, high = torch.quantile(values, self.quantiles.to(values))
        self.low.lerp_(low, 1 - self.decay)
        self.high.lerp_(high, 1 - self.decay)
        return self.scale

    @property
    def scale(self) -> Tensor:
        """``max(1, high − low)``, a scalar tensor."""
        return (self.high - self.low).clamp(min=1.0)
