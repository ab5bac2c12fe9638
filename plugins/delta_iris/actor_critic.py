"""Δ-IRIS's actor-critic (``delta-iris-ac``): a CNN and an LSTM on frames, REINFORCE with a value
baseline on λ-returns from an EMA target critic.

Micheli et al. 2024 (Δ-IRIS), section 2.3 and appendix A.3, and its code (vmicheli/delta-iris
``models/actor_critic``): the objective of IRIS (``wmzoo.agents.returns``) with two changes —
the critic is a two-hot symlog distribution over 255 bins on Crafter (a scalar on Atari),
zero-initialised, and the returns and baselines are the values of a *target* copy of the whole
network whose weights follow the online ones as an EMA (τ = 0.995, updated after every step)::

    v̄_t = target critic,   G_t = r̂_t + γ ĉ_t ((1 − λ) v̄_{t+1} + λ G_{t+1}),   G_H = v̄_H
    L_V = E Σ_t CE(twohot(symlog G_t), V(x̂_≤t))        (Atari: (V − G_t)²)
    L_π = −E Σ_t [ln π(a_t | x̂_≤t) sg(G_t − v̄_t) + α H(π(· | x̂_≤t))]

Network: FrameEncoder (C 32, 5 layers, latent 16: 16×8×8 = 1024 for 64×64 frames in ``[0, 1]``)
→ ``LSTMCell`` 512 → linear actor and critic; Adam lr 1e-4, clip 10. Both the online and the
target LSTM burn in on the real frames before each imagination start (official: 5).
γ 0.997 / entropy 0.001 (Crafter), 0.995 / 0.002 (Atari), λ 0.95.

Deviation (as ``iris-ac``): the losses are weighted by the imagination engine's termination
weights and divided by their sum; the official masks the steps after the first sampled end.
"""

from __future__ import annotations

import copy

import torch
from pydantic import Field
from torch import Tensor, nn
from torch.distributions import Categorical

from wmzoo.agents.returns import burn_in_steps, check_frame_policy, lambda_returns
from wmzoo.interfaces import BurnIn, EnvInfo, Policy, State, Trajectory
from wmzoo.nn.distributions import TwoHot
from wmzoo.optim import Optimizer
from wmzoo.specs import OptimSpec, PolicySpec

from .model import ATARI_EPOCH_UPDATES
from .tokenizer import FrameCnnSpec, FrameEncoder


class DeltaIrisActorCriticSpec(PolicySpec):
    """Hyperparameters of Δ-IRIS's actor-critic (defaults: the official Crafter config)."""

    gamma: float = Field(0.997, gt=0, le=1, description="discount γ (Crafter 0.997, Atari 0.995)")
    lam: float = Field(0.95, ge=0, le=1, description="λ of the λ-returns")
    entropy: float = Field(0.001, ge=0, le=1, description="entropy weight α (Crafter 0.001, Atari 0.002)")
    two_hot: bool = Field(True, description="critic: two-hot symlog over 255 bins (Crafter) or a scalar (Atari)")
    cnn: FrameCnnSpec = Field(default_factory=lambda: FrameCnnSpec(channels=32), description="the frame CNN (C 32)")
    cnn_latent: int = Field(16, ge=1, le=1024, description="channels of the CNN's map (16)")
    lstm: int = Field(512, ge=1, le=8192, description="LSTM cell size (512)")
    target_decay: float = Field(0.995, ge=0, lt=1, description="τ of the target network's EMA (0.995)")
    optim: OptimSpec = Field(
        default_factory=lambda: OptimSpec(lr=1e-4, clip=10.0), description="Adam lr 1e-4, clip 10 (official)"
    )


class Trunk(nn.Module):
    """CNN → LSTM → actor and critic heads; the online network and its target copy."""

    def __init__(self, spec: DeltaIrisActorCriticSpec, feature_shape: tuple[int, ...], num_actions: int) -> None:
        super().__init__()
        c, h, w = feature_shape
        factor = 2 ** sum(spec.cnn.down)
        self.cnn = FrameEncoder(c, spec.cnn, spec.cnn_latent)
        self.lstm = nn.LSTMCell(spec.cnn_latent * (h // factor) * (w // factor), spec.lstm)
        self.actor = nn.Linear(spec.lstm, num_actions)
        self.critic = nn.Linear(spec.lstm, 255 if spec.two_hot else 1)
        nn.init.zeros_(self.critic.weight)
        nn.init.zeros_(self.critic.bias)

    def forward(self, frames: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Action logits, critic output, and the LSTM state after frames ``[B, C, H, W]`` in [0, 1]."""
        x = self.cnn(frames).permute(0, 2, 3, 1).flatten(1)  # the official (h w c) order
        h, c = self.lstm(x, (h, c))
        return self.actor(h), self.critic(h), h, c


class DeltaIrisActorCritic(Policy):
    """The online network (trained) and its EMA target (read for returns and baselines)."""

    spec: DeltaIrisActorCriticSpec

    def __init__(self, spec: DeltaIrisActorCriticSpec, feature_shape: tuple[int, ...], env: EnvInfo) -> None:
        super().__init__()
        check_frame_policy("delta-iris-ac", feature_shape, env, 2 ** sum(spec.cnn.down))
        self.spec, self.env = spec, env
        self.model = Trunk(spec, tuple(feature_shape), env.num_actions)
        self.target = copy.deepcopy(self.model).requires_grad_(False)
        self._optimizer = Optimizer(self.model.parameters(), spec.optim)

    def initial_state(self, batch_size: int) -> State:
        """Zero LSTM states of the online (``h``, ``c``) and the target network (``th``, ``tc``)."""
        zeros = torch.zeros(batch_size, self.spec.lstm, device=self.model.actor.weight.device)
        return {"h": zeros, "c": zeros.clone(), "th": zeros.clone(), "tc": zeros.clone()}

    def _value(self, critic: Tensor) -> Tensor:
        return TwoHot(critic.float()).mean() if self.spec.two_hot else critic.squeeze(-1)

    def _step(self, frames: Tensor, state: State) -> tuple[Tensor, Tensor, Tensor, State]:
        """Online logits and critic output, target value, and the next state."""
        logits, critic, h, c = self.model(frames, state["h"], state["c"])
        with torch.no_grad():
            _, target, th, tc = self.target(frames, state["th"], state["tc"])
        return logits, critic, self._value(target), {"h": h, "c": c, "th": th, "tc": tc}

    @torch.no_grad()
    def burn_in(self, context: BurnIn) -> State:
        """Both LSTMs over the real frames before the start, reset at episode starts."""
        features = context.features
        return burn_in_steps(lambda t, state: self._step(features[:, t], state)[3],
                             self.initial_state(features.shape[0]), context.is_first)

    @torch.no_grad()
    def act(
        self, features: Tensor, state: State, sample: bool = True, temperature: float = 1.0
    ) -> tuple[Tensor, State]:
        if not state:
            state = self.initial_state(features.shape[0])
        logits, _, h, c = self.model(features, state["h"], state["c"])
        action = Categorical(logits=logits / temperature).sample() if sample else logits.argmax(-1)
        return action, {**state, "h": h, "c": c}

    def losses(self, trajectory: Trajectory) -> tuple[Tensor, dict[str, float]]:
        """``L_π + L_V`` (module docstring) of an imagined trajectory, and its metrics."""
        frames = trajectory.features.detach()
        state = trajectory.policy_state or self.initial_state(frames.shape[1])
        logits, critics, targets = [], [], []
        for t in range(frames.shape[0]):
            lg, cr, tv, state = self._step(frames[t], state)
            logits.append(lg)
            critics.append(cr)
            targets.append(tv)
        logit, critic, target = torch.stack(logits[:-1]), torch.stack(critics[:-1]), torch.stack(targets)
        weights = trajectory.weights.detach()[:-1]
        with torch.no_grad():
            returns = lambda_returns(trajectory.rewards.detach(), trajectory.conts.detach(), target,
                                     self.spec.gamma, self.spec.lam)
            advantages = returns - target[:-1]
        policy = Categorical(logits=logit)
        log_prob = policy.log_prob(trajectory.actions.detach().long())
        ent = policy.entropy()
        norm = weights.sum().clamp(min=1.0)
        if self.spec.two_hot:
            dist = TwoHot(critic.float())
            value_error = -dist.log_prob(returns)
        else:
            value_error = (critic.squeeze(-1) - returns) ** 2
        actor = -(weights * log_prob * advantages).sum() / norm
        bonus = (weights * ent).sum() / norm
        critic_loss = (weights * value_error).sum() / norm
        metrics = {
            "actor_loss": actor.item(), "critic_loss": critic_loss.item(), "entropy": ent.mean().item(),
            "return_mean": returns.mean().item(), "value_mean": target[:-1].mean().item(),
        }
        return actor - self.spec.entropy * bonus + critic_loss, metrics

    def learn(self, trajectory: Trajectory) -> dict[str, float]:
        """One step of the online network, then the target's EMA step (official: every step)."""
        loss, metrics = self.losses(trajectory)
        metrics["grad_norm"] = self._optimizer.step(loss)
        with torch.no_grad():
            for target, online in zip(self.target.parameters(), self.model.parameters()):
                target.lerp_(online, 1.0 - self.spec.target_decay)
        return metrics

    def optimizers(self) -> dict[str, Optimizer]:
        return {"actor_critic": self._optimizer}


PRESETS: dict[str, DeltaIrisActorCriticSpec] = {
    # CPU tests: a small CNN and LSTM, a short horizon, starts from the world-model batch.
    "tiny": DeltaIrisActorCriticSpec(
        horizon=8, cnn=FrameCnnSpec(channels=8, mult=(1, 1, 2), down=(1, 1, 1)), cnn_latent=4, lstm=64,
        max_starts=16, optim=OptimSpec(lr=3e-4, clip=10.0),
    ),
    "small": DeltaIrisActorCriticSpec(
        horizon=15, cnn=FrameCnnSpec(channels=16, mult=(1, 1, 2, 2), down=(1, 0, 1, 1)), cnn_latent=8, lstm=256,
        max_starts=32, segment=6,
    ),
    # Crafter (appendix B, official config): H = 15, γ 0.997, λ 0.95, entropy 0.001, two-hot critic, ε 0.01;
    # its own batch of 86 segments of 6 frames: 5 burn in, the last starts imagination.
    "paper": DeltaIrisActorCriticSpec(horizon=15, max_starts=86, segment=6, epsilon=0.01),
    # Atari (appendix C, official config): H = 20, γ 0.995, entropy 0.002, scalar critic, 64 × 6
    # segments, ε 0.01 while collecting; after epoch 75, 70 epochs after the tokenizer's first update
    # (the run preset trains it 200 times an epoch: train.policy_updates 5 every 3 of G's 120).
    "paper-atari": DeltaIrisActorCriticSpec(
        horizon=20, gamma=0.995, entropy=0.002, two_hot=False, max_starts=64, segment=6, epsilon=0.01,
        start=70 * ATARI_EPOCH_UPDATES,
    ),
}
