"""The discrete latent of DreamerV2/V3: ``stoch`` categoricals of ``classes`` classes each.

Shared by RSSM, S4WM and TSSM-XL. ``z_t`` is a one-hot tensor ``[..., stoch, classes]`` sampled
with straight-through gradients; its logits are mixed with 1 % uniform ("unimix", DreamerV3 §2).

The KL term comes in two forms, both as :class:`KLSpec` fields:

- DreamerV3 (Hafner et al., 2023, eq. 5): free bits and two scales,
  ``β_dyn · max(free, KL(sg(q) ‖ p)) + β_rep · max(free, KL(q ‖ sg(p)))`` with ``β_dyn = 0.5``,
  ``β_rep = 0.1``, ``free = 1`` nat;
- DreamerV2 KL balancing (Hafner et al., 2021, algorithm 2), as pydreamer and the s4wm paper
  (tables 7–8, "KL balancing 0.8") use it: ``α · KL(sg(q) ‖ p) + (1 − α) · KL(q ‖ sg(p))``.

Both KLs are summed over the ``stoch`` axis before the free-bits clip.
"""

from __future__ import annotations

from typing import NamedTuple

from pydantic import Field, model_validator
from torch import Tensor, nn

from wmzoo.nn.distributions import OneHotCategoricalST, unimix_logits
from wmzoo.nn.mlp import MLP
from wmzoo.specs import Spec

DEFAULT_DYN_SCALE = 0.5
DEFAULT_REP_SCALE = 0.1


class KLSpec(Spec):
    """Weights of the KL between the posterior ``q(z_t | ·, e_t)`` and the prior ``p(z_t | ·)``."""

    free: float = Field(
        1.0, ge=0, le=100, description="free nats: each KL term (summed over stoch) is clipped below here"
    )
    dyn_scale: float = Field(
        DEFAULT_DYN_SCALE, ge=0, le=100, description="β_dyn, weight of KL(sg(q) ‖ p): trains the prior"
    )
    rep_scale: float = Field(
        DEFAULT_REP_SCALE, ge=0, le=100, description="β_rep, weight of KL(q ‖ sg(p)): trains the posterior"
    )
    balance: float | None = Field(
        None,
        ge=0,
        le=1,
        description="DreamerV2 KL balancing α: weights α and 1 − α replace dyn_scale and rep_scale",
    )

    @model_validator(mode="after")
    def _one_form(self) -> KLSpec:
        if self.balance is not None and (self.dyn_scale, self.rep_scale) != (
            DEFAULT_DYN_SCALE,
            DEFAULT_REP_SCALE,
        ):
            raise ValueError(
                "balance sets the weights to α and 1 − α; leave dyn_scale/rep_scale at their "
                "defaults, or set balance to null to use them"
            )
        return self

    @property
    def weights(self) -> tuple[float, float]:
        """``(weight of the dyn term, weight of the rep term)`` in either form."""
        if self.balance is not None:
            return self.balance, 1.0 - self.balance
        return self.dyn_scale, self.rep_scale


class KLTerms(NamedTuple):
    """Per-step KL terms, each ``[...]`` (summed over the ``stoch`` axis)."""

    loss: Tensor  # weighted sum of the clipped terms: what to minimise
    dyn: Tensor  # KL(sg(q) ‖ p) before the clip (its value is KL(q ‖ p))
    rep: Tensor  # KL(q ‖ sg(p)) before the clip


def kl_loss(post_logits: Tensor, prior_logits: Tensor, spec: KLSpec) -> KLTerms:
    """The KL loss of DreamerV3 eq. 5 (or DreamerV2 balancing) for logits ``[..., stoch, classes]``."""
    post, prior = OneHotCategoricalST(post_logits), OneHotCategoricalST(prior_logits)
    dyn = OneHotCategoricalST(post_logits.detach()).kl(prior).sum(-1)
    rep = post.kl(OneHotCategoricalST(prior_logits.detach())).sum(-1)
    w_dyn, w_rep = spec.weights
    loss = w_dyn * dyn.clamp(min=spec.free) + w_rep * rep.clamp(min=spec.free)
    return KLTerms(loss, dyn, rep)


def sample_latent(logits: Tensor, sample: bool = True) -> Tensor:
    """One-hot ``z`` ``[..., stoch, classes]`` with straight-through gradients: a sample or the mode."""
    dist = OneHotCategoricalST(logits)
    return dist.sample() if sample else dist.mode()


class CategoricalLatent(nn.Module):
    """``MLP → logits [..., stoch, classes]`` mixed with ``unimix`` uniform.

    With ``layers=1`` this is DreamerV3's ``img_out``/``obs_out`` layer followed by its
    ``*_stats`` projection (prior ``p(z_t | h_t)`` and posterior ``q(z_t | h_t, e_t)``).
    """

    def __init__(
        self,
        in_dim: int,
        stoch: int,
        classes: int,
        hidden: int,
        layers: int = 1,
        unimix: float = 0.01,
    ) -> None:
        super().__init__()
        self.stoch, self.classes, self.unimix = stoch, classes, unimix
        self.mlp = MLP(in_dim, stoch * classes, hidden, layers)

    @property
    def dim(self) -> int:
        """Size of a flattened ``z``."""
        return self.stoch * self.classes

    def forward(self, x: Tensor) -> Tensor:
        logits = self.mlp(x).reshape(*x.shape[:-1], self.stoch, self.classes)
        return unimix_logits(logits, self.unimix)


__all__ = ["CategoricalLatent", "KLSpec", "KLTerms", "kl_loss", "sample_latent"]
