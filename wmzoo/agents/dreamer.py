"""DreamerV3's actor-critic, learned from trajectories imagined by any backbone.

Hafner, Pasukonis, Ba, Lillicrap. *Mastering Diverse Domains through World Models*, 2023
(arXiv:2301.04104), section 3 "Actor critic learning". Both networks read the world model's
features ``s_t`` (1-D, detached: no gradient reaches the world model):

- actor ``π(a_t | s_t)``: a categorical with 1 % uniform mixture for discrete actions; for
  continuous ones a Normal with ``tanh`` mean and std in ``[0.1, 1]``, samples clipped to ``[-1, 1]``
  (the clip passes a gradient scaled by ``1 / |a|``, as the official RSSM's ``action_clip``).
  Trained on normalised advantages plus an entropy bonus (eq. 10–12), by ``actor_grad``:
  ``reinforce`` (the score function ``ln π(a_t | s_t)`` times the advantage) or ``backprop``
  (dynamics backpropagation: the advantage itself, differentiated through the backbone's
  imagined steps into the reparameterised actions; world-model parameters are not updated).
  ``auto`` (the default) follows the first release of the official code (January 2023, with the
  paper's first version: ``actor_grad_disc: reinforce``, ``actor_grad_cont: backprop``):
  REINFORCE for discrete actions, backprop for continuous ones. The code's 2024 revision (with the
  paper's revised version) uses REINFORCE for both: ``actor_grad=reinforce``.
- critic ``v(s_t)``: symlog two-hot over 255 bins (zero-initialised output, so values start at 0),
  trained toward λ-returns (eq. 7–8) and regularised toward a slow EMA copy of itself.

Module order: spec → policy → presets → plugin hook.
"""

from __future__ import annotations

import copy
from typing import Annotated, Literal

import torch
from pydantic import Field, ValidationInfo, field_validator
from torch import Tensor, nn
from torch.distributions import Categorical, Distribution, Independent, Normal

from wmzoo.agents.returns import PercentileNormalizer, lambda_returns
from wmzoo.errors import SpecError, WmzooError
from wmzoo.hookspecs import PolicyEntry, hookimpl
from wmzoo.imagination import frozen
from wmzoo.interfaces import EnvInfo, Policy, State, Trajectory
from wmzoo.nn import MLP, TwoHot, unimix_logits
from wmzoo.optim import Optimizer
from wmzoo.specs import OptimSpec, PolicySpec

Percentile = Annotated[float, Field(ge=0, le=100)]

# --------------------------------------------------------------------------- spec


class DreamerSpec(PolicySpec):
    """DreamerV3 actor-critic hyperparameters; the defaults are the paper's (size S networks)."""

    gamma: float = Field(0.997, gt=0, le=1, description="discount γ (DreamerV3: 1 − 1/333)")
    lam: float = Field(0.95, ge=0, le=1, description="λ of the λ-returns")
    entropy: float = Field(3e-4, ge=0, le=1, description="actor entropy bonus η")
    actor_grad: Literal["auto", "reinforce", "backprop"] = Field(
        "auto", description="actor gradient: REINFORCE, or backprop through the imagined dynamics "
        "(continuous actions only); auto: REINFORCE for discrete, backprop for continuous actions "
        "(DreamerV3's first release)",
    )
    units: int = Field(512, ge=1, le=8192, description="hidden units of the actor and critic MLPs")
    layers: int = Field(2, ge=0, le=16, description="hidden layers of the actor and critic MLPs")
    unimix: float = Field(0.01, ge=0, lt=1, description="uniform mixture of discrete action probabilities")
    min_std: float = Field(0.1, gt=0, le=10, description="continuous actions: smallest action std")
    max_std: float = Field(1.0, gt=0, le=10, description="continuous actions: largest action std")
    critic_bins: int = Field(
        255, ge=3, le=1023, description="two-hot bins of the critic over symlog [-20, 20]"
    )
    slow_critic_decay: float = Field(
        0.98, ge=0, lt=1, description="EMA decay of the slow critic, updated after every critic step"
    )
    slow_reg: float = Field(
        1.0, ge=0, le=100, description="weight of the critic's regulariser toward the slow critic"
    )
    return_norm_decay: float = Field(
        0.99, ge=0, lt=1, description="EMA decay of the return percentiles (return normalisation)"
    )
    return_norm_percentiles: tuple[Percentile, Percentile] = Field(
        (5.0, 95.0), description="low and high return percentiles whose spread scales advantages"
    )
    actor_optim: OptimSpec = Field(
        OptimSpec(lr=3e-5, eps=1e-5, clip=100.0), description="AdamW of the actor"
    )
    critic_optim: OptimSpec = Field(
        OptimSpec(lr=3e-5, eps=1e-5, clip=100.0), description="AdamW of the critic"
    )

    @field_validator("max_std")
    @classmethod
    def _std_range(cls, high: float, info: ValidationInfo) -> float:
        low = info.data.get("min_std", 0.0)
        if high < low:
            raise ValueError(f"must not be below min_std {low}")
        return high

    @field_validator("return_norm_percentiles")
    @classmethod
    def _percentile_order(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not value[0] < value[1]:
            raise ValueError(f"the low percentile {value[0]} must be below the high one {value[1]}")
        return value


# --------------------------------------------------------------------------- policy


class DreamerPolicy(Policy):
    """DreamerV3's actor, critic and slow critic over 1-D world-model features."""

    spec: DreamerSpec

    def __init__(self, spec: DreamerSpec, feature_shape: tuple[int, ...], env: EnvInfo) -> None:
        super().__init__()
        self.spec = spec
        self.env = env
        if spec.actor_grad == "backprop" and env.discrete:
            raise SpecError(f"policy.actor_grad=backprop needs continuous actions; env {env.name!r} has "
                            "discrete ones (use reinforce or auto)")
        self.imagine_with_grad = not env.discrete and spec.actor_grad != "reinforce"
        outputs = env.num_actions if env.discrete else 2 * env.num_actions  # logits, or mean and std
        self.actor = self.network(tuple(feature_shape), outputs)
        self.critic = self.network(tuple(feature_shape), spec.critic_bins, zero_init=True)
        self.slow_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.return_norm = PercentileNormalizer(spec.return_norm_decay, spec.return_norm_percentiles)
        self._optimizers = {
            "actor": Optimizer(self.actor.parameters(), spec.actor_optim),
            "critic": Optimizer(self.critic.parameters(), spec.critic_optim),
        }

    def network(self, feature_shape: tuple[int, ...], outputs: int, zero_init: bool = False) -> nn.Module:
        """The actor's or the critic's net from features ``[..., *feature_shape]`` to ``outputs``:
        DreamerV3's MLP on 1-D features. A subclass that reads other features (a token set)
        overrides it and keeps the learning rules."""
        if len(feature_shape) != 1:
            raise WmzooError(
                f"policy 'dreamer' reads 1-D features, but the backbone's features have shape "
                f"{feature_shape}; flatten them in the backbone's features() or pick a policy "
                f"that reads {len(feature_shape)}-D features"
            )
        return MLP(feature_shape[0], outputs, self.spec.units, self.spec.layers, zero_init=zero_init)

    def dist(self, features: Tensor) -> Distribution:
        """``π(· | s)``: unimix categorical, or Normal(tanh(μ), σ) with σ in ``[min_std, max_std]``."""
        out = self.actor(features)
        if self.env.discrete:
            return Categorical(logits=unimix_logits(out, self.spec.unimix))
        mean, std = out.chunk(2, -1)
        low, high = self.spec.min_std, self.spec.max_std
        std = (high - low) * torch.sigmoid(std + 2.0) + low
        return Independent(Normal(torch.tanh(mean), std), 1)

    def value(self, features: Tensor) -> Tensor:
        """The critic's expected return ``v(s)`` (two-hot mean), ``[...]``."""
        return TwoHot(self.critic(features)).mean()

    def act(
        self, features: Tensor, state: State, sample: bool = True, temperature: float = 1.0
    ) -> tuple[Tensor, State]:
        """int64 indices ``[B]`` (discrete) or float ``[B, A]`` in ``[-1, 1]``; greedy: mode / mean;
        ``temperature`` divides the logits or multiplies the standard deviation. Continuous
        samples are reparameterised, so under grad mode (dynamics backpropagation) they carry the
        actor's gradient; otherwise no graph is kept."""
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.imagine_with_grad):
            dist = self.dist(features)
            if self.env.discrete:
                action = Categorical(logits=dist.logits / temperature).sample() if sample else dist.logits.argmax(-1)
            elif sample:
                normal = dist.base_dist  # type: ignore[attr-defined]
                noisy = Normal(normal.loc, normal.scale * temperature).rsample()
                action = noisy / noisy.detach().abs().clamp(min=1.0)  # clipped to [-1, 1], gradient / |a|
            else:
                action = dist.mean
        return action, state

    def losses(self, trajectory: Trajectory) -> tuple[Tensor, Tensor, dict[str, float]]:
        """Actor and critic losses of one imagined trajectory (and updates the return normaliser).

        With ``w_t`` the trajectory's weights, ``R_t`` the λ-returns and ``S`` the normaliser::

            actor  = −mean_{t<H} w_t (sg((R_t − v_t) / max(1, S)) ln π(a_t | s_t) + η H[π(· | s_t)])
            critic = −mean_{t<H} w_t (ln p_v(sg(R_t) | s_t) + slow_reg · ln p_v(sg(v_slow(s_t)) | s_t))

        With dynamics backpropagation (``imagine_with_grad``) the actor's first term is
        ``(R_t − v_t) / max(1, sg(S))`` itself, differentiated through ``trajectory`` (imagined
        with gradients): :meth:`backprop_advantages`.
        """
        features = trajectory.features.detach()
        horizon, batch = trajectory.rewards.shape
        expected = (horizon, batch, *self.env.action_shape)
        if tuple(trajectory.actions.shape) != expected:
            raise ValueError(
                f"trajectory.actions: expected shape {list(expected)} for env {self.env.name!r}, "
                f"got {list(trajectory.actions.shape)}"
            )
        weights = trajectory.weights.detach()[:-1]

        critic_logits = self.critic(features)
        with torch.no_grad():
            values = TwoHot(critic_logits.detach()).mean()  # [H + 1, B]
            rewards, conts = trajectory.rewards.detach(), trajectory.conts.detach()
            returns = lambda_returns(rewards, conts, values, self.spec.gamma, self.spec.lam)
            scale = self.return_norm.update(returns)
            advantages = (returns - values[:-1]) / scale
            slow_values = TwoHot(self.slow_critic(features[:-1])).mean()

        policy = self.dist(features[:-1])
        entropy = policy.entropy()
        log_prob = policy.log_prob(trajectory.actions.detach())
        if self.imagine_with_grad:
            objective = self.backprop_advantages(trajectory, scale)
        else:
            objective = advantages * log_prob
        actor_loss = -(weights * (objective + self.spec.entropy * entropy)).mean()

        critic = TwoHot(critic_logits[:-1])
        fit = critic.log_prob(returns) + self.spec.slow_reg * critic.log_prob(slow_values)
        critic_loss = -(weights * fit).mean()

        metrics = {
            "actor_loss": actor_loss.item(),
            "critic_loss": critic_loss.item(),
            "entropy": entropy.mean().item(),
            "return_mean": returns.mean().item(),
            "value_mean": values[:-1].mean().item(),
            "return_scale": scale.item(),
            "advantage_std": advantages.std(correction=0).item(),
        }
        return actor_loss, critic_loss, metrics

    def backprop_advantages(self, trajectory: Trajectory, scale: Tensor) -> Tensor:
        """``(R_t − v(s_t)) / max(1, S)`` ``[H, B]`` with the gradient of the imagined rewards
        and features (DreamerV3's first release, ``ImagActorCritic.loss`` with ``backprop``: the
        λ-return ``R_t`` of the imagined rewards and critic values, minus the critic's value of
        ``s_t``, both functions of the actions before ``t``); the continues and ``S`` are
        constants. One line when the backbone's imagination carries no gradient."""
        if not (trajectory.rewards.requires_grad or trajectory.features.requires_grad):
            raise WmzooError(
                f"policy.actor_grad={self.spec.actor_grad}: the imagined trajectory carries no gradient, "
                "so the backbone's imagine_step is not differentiable in the action; set policy.actor_grad=reinforce"
            )
        with frozen(self.critic):  # the gradient passes through the critic to the features only
            values = TwoHot(self.critic(trajectory.features)).mean()
        returns = lambda_returns(
            trajectory.rewards, trajectory.conts.detach(), values, self.spec.gamma, self.spec.lam
        )
        return (returns - values[:-1]) / scale

    def learn(self, trajectory: Trajectory) -> dict[str, float]:
        """An actor step, a critic step, then the slow critic EMA ``θ_slow ← d θ_slow + (1 − d) θ``."""
        actor_loss, critic_loss, metrics = self.losses(trajectory)
        metrics["actor_grad_norm"] = self._optimizers["actor"].step(actor_loss)
        metrics["critic_grad_norm"] = self._optimizers["critic"].step(critic_loss)
        with torch.no_grad():
            for slow, fast in zip(self.slow_critic.parameters(), self.critic.parameters(), strict=True):
                slow.lerp_(fast, 1 - self.spec.slow_critic_decay)
        return metrics

    def optimizers(self) -> dict[str, Optimizer]:
        return self._optimizers


# --------------------------------------------------------------------------- presets

PRESETS: dict[str, DreamerSpec] = {
    # CPU tests: small nets, few imagination starts, a higher learning rate so minutes of training move.
    "tiny": DreamerSpec(
        units=64, layers=1, max_starts=256,
        actor_optim=OptimSpec(lr=1e-4, eps=1e-5, clip=100.0),
        critic_optim=OptimSpec(lr=1e-4, eps=1e-5, clip=100.0),
    ),
    # A CPU hour: the small train preset replays 32 steps per env step where DreamerV3 replays 512,
    # so the policy gets ~16x fewer updates; lr 1e-4 (DreamerV2's critic rate) makes up for part of it.
    "small": DreamerSpec(
        units=256, layers=2, max_starts=256,
        actor_optim=OptimSpec(lr=1e-4, eps=1e-5, clip=100.0),
        critic_optim=OptimSpec(lr=1e-4, eps=1e-5, clip=100.0),
    ),
    # DreamerV3 as published, size S (512 units, 2 layers); imagines from every start state.
    "paper": DreamerSpec(),
}


# --------------------------------------------------------------------------- plugin


@hookimpl
def wmzoo_policies() -> list[PolicyEntry]:
    return [
        PolicyEntry(
            name="dreamer",
            spec=DreamerSpec,
            presets=PRESETS,
            build=DreamerPolicy,
            description="DreamerV3 actor-critic: actor on percentile-normalised λ-return advantages "
            "(REINFORCE for discrete actions, backprop through the imagined dynamics for continuous ones), "
            "two-hot critic regularised toward a slow EMA critic",
        )
    ]
