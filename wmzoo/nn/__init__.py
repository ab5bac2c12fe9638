"""Building blocks shared by several backbones and policies (each lives here once)."""

from wmzoo.nn.cnn import ConvDecoder, ConvEncoder, recon_loss
from wmzoo.nn.distributions import (
    OneHotCategoricalST,
    TwoHot,
    symexp,
    symlog,
    unimix_logits,
)
from wmzoo.nn.latent import CategoricalLatent, KLSpec, kl_loss, sample_latent
from wmzoo.nn.mlp import MLP, NormedLinear
from wmzoo.nn.specs import LatentWorldModelSpec
from wmzoo.nn.world_model import LatentWorldModel, latent_objective

__all__ = [
    "MLP",
    "CategoricalLatent",
    "ConvDecoder",
    "ConvEncoder",
    "KLSpec",
    "LatentWorldModel",
    "LatentWorldModelSpec",
    "NormedLinear",
    "OneHotCategoricalST",
    "TwoHot",
    "kl_loss",
    "latent_objective",
    "recon_loss",
    "sample_latent",
    "symexp",
    "symlog",
    "unimix_logits",
]
