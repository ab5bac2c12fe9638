"""TokenWM's policy network (section 3.6), trained two ways: ``tokenwm-bc`` by imitation, the
paper's setting (eq. 1, jointly with the world model), and ``tokenwm-ac`` in imagination with
DreamerV3's actor-critic rules (the RL extension).

Section 3.6: π(a_t | h*_t, c) "first use[s] the perceiver-decoder to extract the output tokens,
then ... goes through MLPs". Here the actor and the critic are each that network: ``queries``
learned tokens cross-attend to the state tokens h* ``[N_h, D]``, are flattened and go through
DreamerV3's MLP (``units`` × ``layers``; table 2: 2 policy MLP layers). Everything else (unimix
categorical or bounded Normal, REINFORCE on percentile-normalised λ-return advantages, two-hot
critic toward a slow critic) is :class:`wmzoo.agents.dreamer.DreamerPolicy`'s.

``tokenwm-bc`` is :class:`wmzoo.agents.imitation.ImitationPolicy` reading h* through the same
perceiver read-out, then "concatenate[d] with the repeated embedding c" of the instruction and
MLPs (figure 1b); its gradient trains the world model (eq. 1; appendix B: TokenWM trains stably
with it), so it does not detach.
"""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import Field
from torch import Tensor, nn

from wmzoo.agents.dreamer import PRESETS as DREAMER_PRESETS
from wmzoo.agents.dreamer import DreamerPolicy, DreamerSpec
from wmzoo.agents.imitation import PRESETS as IMITATION_PRESETS
from wmzoo.agents.imitation import ImitationPolicy, ImitationSpec
from wmzoo.errors import SpecError, WmzooError
from wmzoo.nn import MLP

from .blocks import PerceiverReadout


class TokenWMPolicySpec(DreamerSpec):
    """DreamerV3's actor-critic fields and the perceiver read-out of section 3.6."""

    queries: int = Field(4, ge=1, le=256, description="learned queries of the perceiver read-out (3.6)")
    heads: int = Field(8, ge=1, le=64, description="attention heads of the read-out (must divide the tokens' width)")


class TokenWMPolicy(DreamerPolicy):
    """DreamerV3's actor-critic whose actor and critic read a token set through perceiver queries."""

    spec: TokenWMPolicySpec

    def network(self, feature_shape: tuple[int, ...], outputs: int, zero_init: bool = False) -> nn.Module:
        read, width = token_reader("tokenwm-ac", feature_shape, self.spec.queries, self.spec.heads)
        return nn.Sequential(*read, MLP(width, outputs, self.spec.units, self.spec.layers, zero_init=zero_init))


def token_reader(policy: str, feature_shape: tuple[int, ...], queries: int, heads: int
                 ) -> tuple[list[nn.Module], int]:
    """Section 3.6's read-out: ``queries`` learned tokens cross-attend to the state tokens
    ``[N_h, D]`` and are flattened (the modules in order, and the width ``queries · D``)."""
    if len(feature_shape) != 2:
        raise WmzooError(f"policy '{policy}' reads a token set [N, D], but the backbone's features "
                         f"have shape {feature_shape}; pick a policy for {len(feature_shape)}-D features")
    _, dim = feature_shape
    if dim % heads:
        raise SpecError(f"policy.heads={heads} must divide the width of the state tokens, {dim}")
    return [PerceiverReadout(dim, heads, queries, post_norm=True), nn.Flatten(-2)], queries * dim


class TokenWMImitationSpec(ImitationSpec):
    """Behaviour cloning through section 3.6's read-out, trained jointly with the world model."""

    queries: int = Field(4, ge=1, le=256, description="learned queries of the perceiver read-out (3.6)")
    heads: int = Field(8, ge=1, le=64, description="attention heads of the read-out (must divide the tokens' width)")
    detach: bool = Field(False, description="stop the policy's gradient at h* (eq. 1 trains TokenWM with it; "
                         "appendix B: RSSM must detach)")
    groups: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=list, description="continuous actions: sizes of the groups of action dimensions, one "
        "read-out query each (3.6: translation 3, rotation 3, gripper 1 → [3, 3, 1]); empty: one read-out for all",
    )


class TokenWMImitationPolicy(ImitationPolicy):
    """π(a_t | h*_t, c): perceiver read-out of h*, concatenated with c, MLPs (figure 1b).

    With ``groups`` (3.6's "actions in a group form"), read-out query ``g`` is group ``g``'s own
    token: it is concatenated with c and its own MLP gives the bins of that group's dimensions."""

    spec: TokenWMImitationSpec

    def reader(self, feature_shape: tuple[int, ...]) -> tuple[nn.Module, int]:
        groups = self.spec.groups
        if groups:
            if self.env.discrete or sum(groups) != self.env.num_actions:
                kind = "discrete actions" if self.env.discrete else f"{self.env.num_actions} action dimensions"
                raise SpecError(f"policy.groups={groups}: groups split continuous action dimensions; "
                                f"this env has {kind}")
            if self.spec.queries != len(groups):
                raise SpecError(f"policy.groups={groups} reads one query per group: set policy.queries={len(groups)}")
        read, width = token_reader("tokenwm-bc", feature_shape, self.spec.queries, self.spec.heads)
        return (read[0], width // self.spec.queries) if groups else (nn.Sequential(*read), width)

    def action_head(self, width: int) -> nn.Module:
        if not self.spec.groups:
            return super().action_head(width)
        spec = self.spec
        return nn.ModuleList(MLP(width + self.text_width, size * self.choices, spec.units, spec.layers)
                             for size in spec.groups)

    def logits(self, features: Tensor, condition: Tensor) -> Tensor:
        if not self.spec.groups:
            return super().logits(features, condition)
        tokens, c = self.read(features), self.text(condition)  # [..., groups, D], [..., c's width]
        out = [head(torch.cat([tokens[..., g, :], c], -1)).unflatten(-1, (size, self.choices))
               for g, (head, size) in enumerate(zip(self.head, self.spec.groups))]
        return torch.cat(out, -2)  # [..., A, bins]


IMITATION: dict[str, TokenWMImitationSpec] = {
    "tiny": TokenWMImitationSpec(**IMITATION_PRESETS["tiny"].model_dump(exclude={"detach"}), queries=2, heads=4),
    "small": TokenWMImitationSpec(**IMITATION_PRESETS["small"].model_dump(exclude={"detach"}), queries=4, heads=4),
    "paper": TokenWMImitationSpec(**IMITATION_PRESETS["paper"].model_dump(exclude={"detach"}), queries=4, heads=8),  # table 2
}

PRESETS: dict[str, TokenWMPolicySpec] = {
    "tiny": TokenWMPolicySpec(**DREAMER_PRESETS["tiny"].model_dump(), queries=2, heads=4),
    "small": TokenWMPolicySpec(**DREAMER_PRESETS["small"].model_dump(), queries=4, heads=4),
    # table 2: 8 heads everywhere, 2 policy MLP layers (DreamerV3-S's 512 units)
    "paper": TokenWMPolicySpec(**DREAMER_PRESETS["paper"].model_dump(), queries=4, heads=8),
}
