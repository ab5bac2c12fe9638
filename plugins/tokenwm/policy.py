"""``tokenwm-ac``: TokenWM's policy network (section 3.6) trained in imagination with DreamerV3's
actor-critic rules (the RL extension; the paper trains the policy by imitation).

Section 3.6: π(a_t | h*_t, c) "first use[s] the perceiver-decoder to extract the output tokens,
then ... goes through MLPs". Here the actor and the critic are each that network: ``queries``
learned tokens cross-attend to the state tokens h* ``[N_h, D]``, are flattened and go through
DreamerV3's MLP (``units`` × ``layers``; table 2: 2 policy MLP layers). Everything else (unimix
categorical or bounded Normal, REINFORCE on percentile-normalised λ-return advantages, two-hot
critic toward a slow critic) is :class:`wmzoo.agents.dreamer.DreamerPolicy`'s.
"""

from __future__ import annotations

from pydantic import Field
from torch import nn

from wmzoo.agents.dreamer import PRESETS as DREAMER_PRESETS
from wmzoo.agents.dreamer import DreamerPolicy, DreamerSpec
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
        if len(feature_shape) != 2:
            raise WmzooError(f"policy 'tokenwm-ac' reads a token set [N, D], but the backbone's features "
                             f"have shape {feature_shape}; pick a policy for {len(feature_shape)}-D features")
        _, dim = feature_shape
        spec = self.spec
        if dim % spec.heads:
            raise SpecError(f"policy.heads={spec.heads} must divide the width of the state tokens, {dim}")
        return nn.Sequential(
            PerceiverReadout(dim, spec.heads, spec.queries, post_norm=True),
            nn.Flatten(-2),
            MLP(spec.queries * dim, outputs, spec.units, spec.layers, zero_init=zero_init),
        )


PRESETS: dict[str, TokenWMPolicySpec] = {
    "tiny": TokenWMPolicySpec(**DREAMER_PRESETS["tiny"].model_dump(), queries=2, heads=4),
    "small": TokenWMPolicySpec(**DREAMER_PRESETS["small"].model_dump(), queries=4, heads=4),
    # table 2: 8 heads everywhere, 2 policy MLP layers (DreamerV3-S's 512 units)
    "paper": TokenWMPolicySpec(**DREAMER_PRESETS["paper"].model_dump(), queries=4, heads=8),
}
