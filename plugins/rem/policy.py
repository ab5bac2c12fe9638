"""REM's action-conditioned actor-critic in latent (token) space (the ``rem-ac`` policy).

Paper: Cohen et al. 2024 (REM), appendix A.1.2 ("Actor-Critic Learning", "Agent Architecture",
"Action Dependant Actor Critic"), tables 5 and 6; it follows IRIS (Micheli et al. 2023).

The shared backbone reads the tokenizer's code vectors of the current frame on their grid
(``[d, s, s]``, the world model's features) through table 6's CNN (3×3 conv → 128, SiLU, 3×3 conv
→ 64, SiLU, flatten, Linear → 512, SiLU) and an LSTM cell of 512 units. After each action the LSTM
takes one more step on a learned embedding of the action taken, so the next decision knows the
sampled action (the "action dependant" part). Linear actor and critic heads read the LSTM output.
Before imagining, the LSTM reads the real block M starts from, frame and action (``burn_in``;
section 2: "M and C are initialized with a short trajectory segment").

Learning (no gradient into the world model): λ-returns
``G_t = r̂_t + γ ĉ_t ((1 − λ) V_{t+1} + λ G_{t+1})``, ``G_H = V_H`` (``ĉ = 1 − d̂``), critic
``(V_t − sg(G_t))²``, actor REINFORCE with baseline ``−ln π(a_t) sg(G_t − V_t) − α H[π]``, each
term weighted by the imagined trajectory's termination weights and divided by their sum
(:func:`wmzoo.agents.returns.reinforce_losses`, shared with IRIS's ``iris-ac``); one AdamW for the
shared network.

Module order: spec → policy → presets → plugin hook (in ``__init__``).
"""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import Field
from torch import Tensor, nn
from torch.distributions import Categorical

from wmzoo.agents.returns import ReinforceActorCritic, burn_in_steps
from wmzoo.errors import SpecError
from wmzoo.interfaces import BurnIn, EnvInfo, State, Trajectory
from wmzoo.specs import OptimSpec, PolicySpec

# --------------------------------------------------------------------------- spec

Channels = Annotated[int, Field(ge=1, le=4096)]


class REMActorCriticSpec(PolicySpec):
    """REM's actor-critic (defaults: tables 2, 3, 5 and 6)."""

    gamma: float = Field(0.995, gt=0, le=1, description="discount γ (table 5)")
    lam: float = Field(0.95, ge=0, le=1, description="λ of the λ-returns (table 5)")
    entropy: float = Field(0.001, ge=0, le=1, description="entropy weight α (table 5)")
    conv_channels: tuple[Channels, Channels] = Field(
        (128, 64), description="channels of the two 3x3 convolutions (table 6)"
    )
    hidden: int = Field(512, ge=1, le=8192, description="units of the linear layer after the CNN (table 6)")
    lstm: int = Field(512, ge=1, le=8192, description="LSTM units (appendix A.1.2)")
    optim: OptimSpec = Field(
        OptimSpec(lr=1e-4, weight_decay=0.01, clip=3.0),
        description="AdamW of the whole agent (table 3: lr 1e-4, wd 0.01, clip 3)",
    )


# --------------------------------------------------------------------------- policy


class REMActorCritic(ReinforceActorCritic):
    """Shared CNN + LSTM backbone with linear actor and critic heads over token code vectors."""

    optimizer_name = "agent"  # the checkpoint's key

    spec: REMActorCriticSpec

    def __init__(self, spec: REMActorCriticSpec, feature_shape: tuple[int, ...], env: EnvInfo) -> None:
        super().__init__()
        if len(feature_shape) != 3:
            raise SpecError(
                f"policy 'rem-ac' reads code vectors on a grid [d, s, s], but the backbone's features "
                f"have shape {tuple(feature_shape)}; pick a policy for {len(feature_shape)}-D features"
            )
        if not env.discrete:
            raise SpecError(f"policy 'rem-ac' needs discrete actions; env {env.name!r} has continuous ones")
        channels, side, side2 = feature_shape
        c1, c2 = spec.conv_channels
        self.spec, self.env = spec, env
        self.encoder = nn.Sequential(  # table 6
            nn.Conv2d(channels, c1, 3, 1, 1), nn.SiLU(),
            nn.Conv2d(c1, c2, 3, 1, 1), nn.SiLU(),
            nn.Flatten(), nn.Linear(c2 * side * side2, spec.hidden), nn.SiLU(),
        )
        self.action_embed = nn.Embedding(env.num_actions, spec.hidden)
        self.cell = nn.LSTMCell(spec.hidden, spec.lstm)
        self.add_heads(spec.lstm, env.num_actions, spec.optim)

    def _observe(self, encoded: Tensor, state: State) -> State:
        h, c = self.cell(encoded, (state["h"], state["c"]))
        return {"h": h, "c": c}

    def _after_action(self, action: Tensor, state: State) -> State:
        """The extra LSTM step on the action just taken (appendix A.1.2)."""
        return self._observe(self.action_embed(action.long()), state)

    def burn_in(self, context: BurnIn) -> State:
        """Section 2: C starts from the same short real segment as M. The LSTM reads each context
        frame and, when given, the action taken there, resetting where ``is_first`` says."""
        features, actions = context.features, context.actions

        def step(t: int, state: State) -> State:
            state = self._observe(self.encoder(features[:, t]), state)
            return state if actions is None else self._after_action(actions[:, t], state)

        return burn_in_steps(step, self.initial_state(features.shape[0]), context.is_first)

    @torch.no_grad()
    def act(
        self, features: Tensor, state: State, sample: bool = True, temperature: float = 1.0
    ) -> tuple[Tensor, State]:
        """Sample (or, greedy, argmax) an action from the frame's code vectors, then feed it back."""
        state = self._observe(self.encoder(features), state or self.initial_state(features.shape[0]))
        logits = self.actor(state["h"])
        action = Categorical(logits=logits / temperature).sample() if sample else logits.argmax(-1)
        return action, self._after_action(action, state)

    def logits_and_values(self, trajectory: Trajectory) -> tuple[Tensor, Tensor]:
        """Appendix A.1.2: the LSTM reruns over the imagined code vectors from the burnt-in state,
        taking its extra step on each action taken."""
        features = trajectory.features.detach()  # [H + 1, B, d, s, s]
        horizon, batch = trajectory.rewards.shape
        encoded = self.encoder(features.flatten(0, 1)).unflatten(0, (horizon + 1, batch))
        state = trajectory.policy_state or self.initial_state(batch)
        logits, values = [], []
        for t in range(horizon + 1):
            state = self._observe(encoded[t], state)
            logits.append(self.actor(state["h"]))
            values.append(self.critic(state["h"]).squeeze(-1))
            if t < horizon:
                state = self._after_action(trajectory.actions[t], state)
        return torch.stack(logits), torch.stack(values)


# --------------------------------------------------------------------------- presets

POLICY_PRESETS: dict[str, REMActorCriticSpec] = {
    "tiny": REMActorCriticSpec(
        conv_channels=(16, 8), hidden=64, lstm=64, max_starts=32, horizon=10,
        optim=OptimSpec(lr=3e-4, weight_decay=0.01, clip=3.0),
    ),
    "small": REMActorCriticSpec(conv_channels=(64, 32), hidden=256, lstm=256, max_starts=64, horizon=10),
    # table 2: H = 10, collection ε 0.01; table 3: batch 128 imagination starts, lr 1e-4,
    # wd 0.01, clip 3, from epoch 50 (45 epochs x 200 world-model updates after the tokenizer's
    # first, at epoch 5); tables 5-6.
    "paper": REMActorCriticSpec(horizon=10, max_starts=128, segment=21, start=45 * 200, epsilon=0.01),
}
