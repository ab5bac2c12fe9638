"""Building blocks shared by several backbones and policies (each lives here once)."""

from wmzoo.nn.distributions import (
    OneHotCategoricalST,
    TwoHot,
    symexp,
    symlog,
    unimix_logits,
)
from wmzoo.nn.mlp import MLP, NormedLinear

__all__ = [
    "MLP",
    "NormedLinear",
    "OneHotCategoricalST",
    "TwoHot",
    "symexp",
    "symlog",
    "unimix_logits",
]
