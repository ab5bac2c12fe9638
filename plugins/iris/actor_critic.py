"""IRIS's actor-critic (``iris-ac``): a CNN and an LSTM on reconstructed frames, REINFORCE with a
value baseline on λ-returns and an entropy bonus.

Micheli et al. 2023 (IRIS), section 2.3 and appendix E, and its code (eloialonso/iris
``actor_critic.py``); the same objective is REM's appendix A.1.2 (table 5: γ 0.995, λ 0.95,
entropy weight 0.001)::

    G_t = r̂_t + γ (1 − d̂_t) ((1 − λ) V(x̂_{t+1}) + λ G_{t+1}),   G_H = V(x̂_H)
    L_V = E Σ_t (V(x̂_t) − sg(G_t))²
    L_π = −E Σ_t [ln π(a_t | x̂_≤t) sg(G_t − V(x̂_t)) + α H(π(· | x̂_≤t))]

Network: 4 × [3×3 conv, 2×2 max-pool, ReLU] with 32, 32, 64, 64 channels on frames scaled to
``[-1, 1]``, flattened (1024 for 64×64) → ``LSTMCell`` 512 → linear actor and critic heads, one
optimizer for both (IRIS: Adam lr 1e-4, clip 10). Burn-in: before imagining, the LSTM runs over
the reconstructions of the ``burn_in`` real frames preceding each start (IRIS: 20), reset at
episode starts (:meth:`IrisActorCritic.burn_in`, fed by the world model's ``TrainOutput.burn_in``).

The losses are :func:`wmzoo.agents.returns.reinforce_losses`, shared with REM's ``rem-ac``.
Deviations: the losses are weighted by the imagination engine's termination weights (products of
continues) and divided by the total weight, where IRIS's code takes plain means over every imagined
step (a sampled end only cuts the bootstrap).
"""

from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor, nn
from torch.distributions import Categorical

from wmzoo.agents.returns import ReinforceActorCritic, burn_in_steps, check_frame_policy
from wmzoo.interfaces import BurnIn, EnvInfo, State, Trajectory
from wmzoo.specs import OptimSpec, PolicySpec


class IrisActorCriticSpec(PolicySpec):
    """IRIS actor-critic hyperparameters (defaults: IRIS / REM table 5)."""

    gamma: float = Field(0.995, gt=0, le=1, description="discount γ")
    lam: float = Field(0.95, ge=0, le=1, description="λ of the λ-returns")
    entropy: float = Field(0.001, ge=0, le=1, description="entropy weight α")
    channels: tuple[int, ...] = Field(
        (32, 32, 64, 64), min_length=1, description="channels of the conv + max-pool stages"
    )
    lstm: int = Field(512, ge=1, le=8192, description="LSTM cell size")
    optim: OptimSpec = Field(
        default_factory=lambda: OptimSpec(lr=1e-4, clip=10.0), description="actor-critic optimizer"
    )


class IrisActorCritic(ReinforceActorCritic):
    """Shared CNN + LSTM trunk, linear actor and critic heads."""

    optimizer_name = "actor_critic"  # the checkpoint's key

    spec: IrisActorCriticSpec

    def __init__(self, spec: IrisActorCriticSpec, feature_shape: tuple[int, ...], env: EnvInfo) -> None:
        super().__init__()
        c, h, w = check_frame_policy("iris-ac", feature_shape, env, 2 ** len(spec.channels))
        self.spec, self.env = spec, env
        layers: list[nn.Module] = []
        for out in spec.channels:
            layers += [nn.Conv2d(c, out, 3, 1, 1), nn.MaxPool2d(2, 2), nn.ReLU()]
            c = out
        self.cnn = nn.Sequential(*layers, nn.Flatten())
        flat = c * (h // 2 ** len(spec.channels)) * (w // 2 ** len(spec.channels))
        self.lstm = nn.LSTMCell(flat, spec.lstm)
        self.add_heads(spec.lstm, env.num_actions, spec.optim)

    def step(self, frames: Tensor, state: State) -> tuple[Tensor, Tensor, State]:
        """Logits ``[B, A]``, value ``[B]`` and the next state for frames ``[B, C, H, W]`` in [0, 1]."""
        h, c = self.lstm(self.cnn(frames * 2.0 - 1.0), (state["h"], state["c"]))
        return self.actor(h), self.critic(h).squeeze(-1), {"h": h, "c": c}

    def burn_in(self, context: BurnIn) -> State:
        """Run the LSTM over the real context's reconstructions, resetting at episode starts
        (IRIS's LSTM reads frames only, so ``context.actions`` are not used)."""
        features = context.features
        return burn_in_steps(lambda t, state: self.step(features[:, t], state)[2],
                             self.initial_state(features.shape[0]), context.is_first)

    @torch.no_grad()
    def act(
        self, features: Tensor, state: State, sample: bool = True, temperature: float = 1.0
    ) -> tuple[Tensor, State]:
        if not state:
            state = self.initial_state(features.shape[0])
        logits, _, state = self.step(features, state)
        action = Categorical(logits=logits / temperature).sample() if sample else logits.argmax(-1)
        return action, state

    def logits_and_values(self, trajectory: Trajectory) -> tuple[Tensor, Tensor]:
        """Rerun the LSTM over the imagined frames from the burnt-in start state."""
        features = trajectory.features.detach()
        state = trajectory.policy_state or self.initial_state(features.shape[1])
        logits, values = [], []
        for t in range(features.shape[0]):
            lg, v, state = self.step(features[t], state)
            logits.append(lg)
            values.append(v)
        return torch.stack(logits), torch.stack(values)


PRESETS: dict[str, IrisActorCriticSpec] = {
    # CPU tests: a small CNN and LSTM, short horizon.
    "tiny": IrisActorCriticSpec(horizon=8, channels=(8, 8, 16, 16), lstm=64, max_starts=16,
                                optim=OptimSpec(lr=3e-4, clip=10.0)),
    "small": IrisActorCriticSpec(horizon=15, channels=(16, 16, 32, 32), lstm=256,
                                 optim=OptimSpec(lr=1e-4, clip=10.0)),
    # IRIS: H = 20, γ 0.995, λ 0.95, entropy 0.001, Adam 1e-4, clip 10; collection ε 0.01;
    # from epoch 50, 45 epochs x 200 world-model updates after the tokenizer's first (epoch 5);
    # its own batch of 64 segments of 21 frames: 20 burn in, the last starts imagination.
    "paper": IrisActorCriticSpec(horizon=20, start=45 * 200, epsilon=0.01, max_starts=64, segment=21),
    # REM table 2 / 3 / 5: H = 10, ε 0.01; actor-critic lr 1e-4, clip 3, wd 0.01, from epoch 50;
    # batch 128 x 21 (REM's code).
    "rem-config": IrisActorCriticSpec(
        horizon=10, start=45 * 200, epsilon=0.01, max_starts=128, segment=21,
        optim=OptimSpec(lr=1e-4, weight_decay=0.01, clip=3.0),
    ),
}
