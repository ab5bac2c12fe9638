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

from pydantic import Field
from torch import nn

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
        reader, width = token_reader("tokenwm-ac", feature_shape, self.spec.queries, self.spec.heads)
        return nn.Sequential(reader, MLP(width, outputs, self.spec.units, self.spec.layers, zero_init=zero_init))


def token_reader(policy: str, feature_shape: tuple[int, ...], queries: int, heads: int) -> tuple[nn.Module, int]:
    """Section 3.6's read-out: ``queries`` learned tokens cross-attend to the state tokens
    ``[N_h, D]`` and are flattened (width ``queries · D``)."""
    if len(feature_shape) != 2:
        raise WmzooError(f"policy '{policy}' reads a token set [N, D], but the backbone's features "
                         f"have shape {feature_shape}; pick a policy for {len(feature_shape)}-D features")
    _, dim = feature_shape
    if dim % heads:
        raise SpecError(f"policy.heads={heads} must divide the width of the state tokens, {dim}")
    return nn.Sequential(PerceiverReadout(dim, heads, queries, post_norm=True), nn.Flatten(-2)), queries * dim


class TokenWMImitationSpec(ImitationSpec):
    """Behaviour cloning through section 3.6's read-out, trained jointly with the world model."""

    queries: int = Field(4, ge=1, le=256, description="learned queries of the perceiver read-out (3.6)")
    heads: int = Field(8, ge=1, le=64, description="attention heads of the read-out (must divide the tokens' width)")
    detach: bool = Field(False, description="stop the policy's gradient at h* (eq. 1 trains TokenWM with it; "
                         "appendix B: RSSM must detach)")


class TokenWMImitationPolicy(ImitationPolicy):
    """π(a_t | h*_t, c): perceiver read-out of h*, concatenated with c, MLPs (figure 1b)."""

    spec: TokenWMImitationSpec

    def reader(self, feature_shape: tuple[int, ...]) -> tuple[nn.Module, int]:
        return token_reader("tokenwm-bc", feature_shape, self.spec.queries, self.spec.heads)


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
