"""The image encoder and decoder of DreamerV3 (Hafner et al., 2023, appendix "Networks").

Encoder: ``stages`` convolutions of kernel 4, stride 2, padding 1 (each halves H and W), no bias,
each followed by a LayerNorm over channels and SiLU; stage ``i`` has ``depth · 2^i`` channels; the
last feature map is flattened (64×64 input, 4 stages, depth 48: ``4·4·384 = 6144`` features).
Decoder: a linear layer to that smallest map, then transposed convolutions mirroring the encoder;
the last one is linear and its output plus 0.5 is the mean image in ``[0, 1]`` scale.

Any square or rectangular ``H, W`` divisible by ``2^stages`` works (64 with 3 or 4 stages, 40
with 3, 32 with up to 5). Shared by RSSM, S4WM and TSSM-XL. Both run their convolutions on
``channels_last`` tensors (about 20 % faster on CPU here; the channel LayerNorm then needs no copy).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from wmzoo.errors import SpecError
from wmzoo.interfaces import Decoder, Encoder


class ChannelLayerNorm(nn.LayerNorm):
    """LayerNorm over the channel axis of ``[N, C, H, W]`` (DreamerV3 normalises channels-last).

    On a ``channels_last`` tensor both permutes are free views.
    """

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def _map_shape(obs_shape: tuple[int, int, int], depth: int, stages: int) -> tuple[int, int, int]:
    """``(channels, H, W)`` of the smallest feature map; checks that the image size divides."""
    _, height, width = obs_shape
    factor = 2**stages
    if stages < 1 or height % factor or width % factor:
        most = max((s for s in range(1, 13) if not height % 2**s and not width % 2**s), default=0)
        raise SpecError(
            f"cnn_stages={stages}: a {height}x{width} image must be divisible by 2**stages = {factor}; "
            + (f"use cnn_stages between 1 and {most}" if most else "resize the observations (train.image_size)")
        )
    return depth * 2 ** (stages - 1), height // factor, width // factor


class ConvEncoder(Encoder):
    """``uint8 [..., C, H, W] → [..., out_dim]``, pixels scaled to ``[-0.5, 0.5]``."""

    def __init__(
        self, obs_shape: tuple[int, int, int], depth: int = 32, stages: int = 4, eps: float = 1e-3
    ) -> None:
        super().__init__()
        self.obs_shape = tuple(obs_shape)
        self.map_shape = _map_shape(self.obs_shape, depth, stages)
        self.out_dim = math.prod(self.map_shape)
        layers: list[nn.Module] = []
        channels = obs_shape[0]
        for i in range(stages):
            out = depth * 2**i
            layers += [
                nn.Conv2d(channels, out, 4, stride=2, padding=1, bias=False),
                ChannelLayerNorm(out, eps=eps),
                nn.SiLU(),
            ]
            channels = out
        self.net = nn.Sequential(*layers)

    def forward(self, obs: Tensor) -> Tensor:
        lead = obs.shape[:-3]
        x = obs.reshape(-1, *obs.shape[-3:]).float() / 255.0 - 0.5
        x = self.net(x.contiguous(memory_format=torch.channels_last))
        return x.reshape(*lead, self.out_dim)


class ConvDecoder(Decoder):
    """``[..., in_dim] → float [..., C, H, W]``: the mean image in ``[0, 1]`` scale (unclamped)."""

    def __init__(
        self,
        obs_shape: tuple[int, int, int],
        in_dim: int,
        depth: int = 32,
        stages: int = 4,
        eps: float = 1e-3,
    ) -> None:
        super().__init__()
        self.obs_shape = tuple(obs_shape)
        self.map_shape = _map_shape(self.obs_shape, depth, stages)
        self.linear = nn.Linear(in_dim, math.prod(self.map_shape))
        layers: list[nn.Module] = []
        channels = self.map_shape[0]
        for i in reversed(range(stages - 1)):
            out = depth * 2**i
            layers += [
                nn.ConvTranspose2d(channels, out, 4, stride=2, padding=1, bias=False),
                ChannelLayerNorm(out, eps=eps),
                nn.SiLU(),
            ]
            channels = out
        layers.append(nn.ConvTranspose2d(channels, obs_shape[0], 4, stride=2, padding=1))
        self.net = nn.Sequential(*layers)

    def forward(self, features: Tensor) -> Tensor:
        lead = features.shape[:-1]
        x = self.linear(features.reshape(-1, features.shape[-1])).reshape(-1, *self.map_shape)
        x = self.net(x.contiguous(memory_format=torch.channels_last))
        return (x + 0.5).reshape(*lead, *self.obs_shape)


def recon_loss(pred: Tensor, obs: Tensor) -> Tensor:
    """Sum of squared errors over ``C, H, W`` of ``pred − obs / 255``, mean over the leading axes.

    The negative log-likelihood of a unit-variance Gaussian up to constants and a factor 1/2
    (DreamerV3's image loss).
    """
    err = pred - obs.to(pred.dtype) / 255.0
    return err.square().sum((-3, -2, -1)).mean()


__all__ = ["ChannelLayerNorm", "ConvDecoder", "ConvEncoder", "recon_loss"]
