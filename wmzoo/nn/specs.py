"""The spec fields of a latent-state world model built from this package's parts (once here).

A backbone whose world model is a CNN encoder / decoder (:mod:`wmzoo.nn.cnn`), a categorical
latent with its KL loss (:mod:`wmzoo.nn.latent`) and the two-hot reward and continue heads
(:mod:`wmzoo.nn.heads`) around its own sequence model (RSSM, S4WM, TSSM-XL) subclasses
:class:`LatentWorldModelSpec` and declares only the fields of that sequence model.

The defaults are DreamerV3's size S (Hafner et al., 2023: 32 × 32 latents, 2 × 512 MLP
units, CNN depth 32, free bits 1 with β_dyn = 0.5, β_rep = 0.1); a backbone's presets set every
value their paper gives.
"""

from __future__ import annotations

from pydantic import Field

from wmzoo.nn.latent import KLSpec
from wmzoo.nn.obs import ObsKeysSpec
from wmzoo.specs import OptimSpec, WorldModelSpec


class LatentWorldModelSpec(WorldModelSpec, ObsKeysSpec):
    """CNN, vector MLP, categorical latent, MLP heads, loss scales and optimizer (defaults:
    DreamerV3 size S); ``encoder_keys`` / ``decoder_keys`` select the observation entries."""

    stoch: int = Field(32, ge=1, le=1024, description="z_t: number of categorical variables")
    classes: int = Field(32, ge=2, le=1024, description="classes per categorical variable")
    hidden: int = Field(
        512,
        ge=1,
        le=16384,
        description="units of every MLP layer of the latents, the sequence-model input, the heads and "
        "the vector encoder/decoder (not those inside the sequence model's own blocks)",
    )
    mlp_layers: int = Field(
        2, ge=0, le=16, description="hidden layers of the reward and continue heads and of the vector "
        "observations' encoder and decoder MLPs"
    )
    cnn_depth: int = Field(32, ge=1, le=1024, description="channels of the first CNN stage (×2 per stage)")
    cnn_stages: int = Field(
        4, ge=1, le=8, description="stride-2 CNN stages; the image size must divide by 2**stages"
    )
    unimix: float = Field(0.01, ge=0, lt=1, description="uniform mixture of the latent categoricals")
    kl: KLSpec = Field(
        default_factory=KLSpec,
        description="KL loss: free nats and DreamerV3 weights, or DreamerV2 balancing",
    )
    recon_scale: float = Field(
        1.0, ge=0, le=1000, description="weight of the reconstruction loss (every decoded entry's)"
    )
    reward_scale: float = Field(1.0, ge=0, le=1000, description="weight of the reward loss")
    cont_scale: float = Field(1.0, ge=0, le=1000, description="weight of the continue loss")
    reward_bins: int = Field(255, ge=2, le=4096, description="two-hot bins of the reward head")
    start_stride: int = Field(
        1,
        ge=1,
        le=4096,
        description="imagination starts from every k-th step's state (1: every step); bounds memory "
        "for models with large states",
    )
    optim: OptimSpec = Field(default_factory=OptimSpec, description="world-model optimizer")
