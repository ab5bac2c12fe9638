"""The discrete autoencoder (VQ-VAE) tokenizer of the token-based world models (IRIS, REM).

Papers:
    Cohen et al., "Improving Token-Based World Models with Parallel Observation Prediction" (REM),
        2024: section 2 ("V - Tokenizer"), appendix A.1.1, equation 8 and table 4.
    Micheli et al., "Transformers are Sample-Efficient World Models" (IRIS), 2023: the tokenizer
        REM follows (a VQ-VAE after van den Oord et al. 2017 in VQGAN's code, Esser et al. 2021,
        without the discriminator).

An image ``o_t`` is encoded to ``K = tokens_per_side²`` vectors ``h_t^k ∈ R^d`` (``d = embed_dim``)
on a raster grid; each is replaced by the index of its nearest code vector in the codebook
``E ∈ R^{N×d}`` (``N = vocab_size``): the tokens ``z_t^k = argmin_i ||h_t^k − e_i||``. Decoding
looks the codes up and runs the mirrored CNN. Training minimises equation 8::

    L = ||x − D(z)||_1 + ||sg(E(x)) − E(z)||²_2 + β ||sg(E(z)) − E(x)||²_2 + w · L_perceptual(x, D(z))

with the straight-through estimator for the gradient into the encoder.

Two architectures (``arch``), each as its paper's code builds it:

* ``simple`` (REM table 4, its simplified CNN): a 3×3 conv to ``channels``, then per downsampling
  level ``GN(8) → SiLU → 3×3 stride-2 conv (padding 1 on the right and bottom only) → 3×3 conv``
  taking the channels from ``channels · ch_mult[i-1]`` to ``channels · ch_mult[i]``, then
  ``GN → SiLU → 3×3 conv``; the decoder mirrors it with nearest-exact ×2 interpolation. No
  residual and no attention blocks.
* ``vqgan`` (IRIS appendix A: VQGAN's encoder and decoder, Esser et al. 2021, without the
  discriminator): a 3×3 conv to ``channels``; at each resolution ``num_res_blocks`` residual
  blocks (``GN → SiLU → conv → GN → SiLU → conv`` plus the input), each followed by a
  self-attention block where the resolution is in ``attn_resolutions``, then (except at the
  last) a stride-2 3×3 conv padded right and bottom; a middle ``ResBlock → Attn → ResBlock``;
  ``GN → SiLU → 3×3 conv`` to ``z_channels``. The decoder: a 3×3 conv from ``z_channels``, the
  middle blocks, then per resolution (coarsest first) ``num_res_blocks + 1`` residual blocks
  (with attention where listed) and a nearest ×2 + 3×3 conv upsampling, ``GN → SiLU → conv``.

In both, as in both official codes (leor-c/REM, eloialonso/iris), 1×1 convolutions map to and
from the code dimension around the quantiser.

Deviations (named):
    * The number of downsampling levels follows the image: ``log2(H / tokens_per_side)``; levels
      beyond ``ch_mult`` reuse its last multiplier, so one spec serves 32×32 and 64×64 images.
    * The perceptual term (LPIPS on VGG16, Zhang et al. 2018) needs pretrained weights that wmzoo
      cannot download: it is off by default (``perceptual_weight = 0``) and reads the weights from
      the local file ``perceptual_weights`` when given (:class:`LPIPS`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import Tensor, nn

from wmzoo.errors import SpecError, WmzooError
from wmzoo.nn.quantizer import VectorQuantizer
from wmzoo.specs import OptimSpec, Spec

# --------------------------------------------------------------------------- spec


class TokenizerSpec(Spec):
    """Hyperparameters of the VQ-VAE tokenizer (defaults: REM, tables 2–4)."""

    vocab_size: int = Field(512, ge=2, le=65536, description="N: codebook size (REM table 2)")
    embed_dim: int = Field(256, ge=1, le=4096, description="d: code-vector size")
    tokens_per_side: int = Field(
        8, ge=1, le=64, description="tokens per image side: K = tokens_per_side² (REM 8, IRIS 4)"
    )
    channels: int = Field(32, ge=1, le=1024, description="channels of the first conv (REM table 4)")
    ch_mult: tuple[int, ...] = Field(
        (1, 2, 4, 8),
        min_length=1,
        description="channel multiplier per level (level 0 before any downsampling); levels "
        "beyond the tuple reuse its last value",
    )
    arch: Literal["simple", "vqgan"] = Field(
        "simple", description="encoder/decoder: REM's simplified CNN (REM table 4) or VQGAN's nets as IRIS builds them (IRIS appendix A)"
    )
    num_res_blocks: int = Field(
        0, ge=0, le=8, description="arch=vqgan: residual blocks per resolution (IRIS 2; the decoder has one more)"
    )
    attn_resolutions: tuple[int, ...] = Field(
        (), description="arch=vqgan: feature-map sides with self-attention after each residual block (IRIS 16, 8)"
    )
    z_channels: int | None = Field(
        None, ge=1, le=4096,
        description="channels of the map before the pre-quantisation 1×1 conv (IRIS 512; None: the last level's)",
    )
    groups: int = Field(8, ge=1, le=64, description="GroupNorm groups (REM 8, IRIS 32)")
    beta: float = Field(1.0, ge=0, le=100, description="β: commitment weight of equation 8")
    recon: Literal["l1", "l2"] = Field(
        "l1", description="reconstruction loss (equation 8: L1; REM's code uses L2)"
    )
    perceptual_weight: float = Field(
        0.0, ge=0, le=100, description="weight of the LPIPS term (needs perceptual_weights)"
    )
    perceptual_weights: str | None = Field(
        None, description="local file of LPIPS VGG16 weights (torch or safetensors state dict)"
    )
    optim: OptimSpec = Field(
        default_factory=lambda: OptimSpec(lr=1e-4, weight_decay=0.01, clip=10.0),
        description="tokenizer optimizer (REM table 3: lr 1e-4, wd 0.01, clip 10)",
    )

    @model_validator(mode="after")
    def _rem_is_simplified(self) -> TokenizerSpec:
        if self.arch == "simple" and (self.num_res_blocks or self.attn_resolutions):
            raise ValueError(
                "arch=simple is REM's simplified CNN, without residual or attention blocks; "
                "set num_res_blocks=0 and attn_resolutions=[] or use arch=vqgan"
            )
        return self


# --------------------------------------------------------------------------- building blocks


def _group_norm_channels_last(x: Tensor, weight: Tensor, bias: Tensor, groups: int,
                              eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """torch's GroupNorm forward of a channels-last half-precision map, with its group means and
    inverse deviations ``[N, G]``, in the layout whose kernel is fast: below 1,024 pixels torch's
    channels-last kernel walks each group with strided reads (bfloat16, one thread: 104 × 64 ×
    16 × 16 in 25 ms against 4.5 ms through the contiguous layout and back); from there it is
    the faster one (104 × 32 × 64 × 64: 7 ms against 51 ms)."""
    N, C, H, W = x.shape
    if H * W >= 1024:
        return torch.native_group_norm(x, weight, bias, N, C, H * W, groups, eps)
    y, mean, rstd = torch.native_group_norm(x.contiguous(), weight, bias, N, C, H * W, groups, eps)
    return y.contiguous(memory_format=torch.channels_last), mean, rstd


_CACHED_ELEMENTS = 1 << 18  # a chunk of 512 KiB in bfloat16


class _ChannelsLastGroupNorm(torch.autograd.Function):
    """GroupNorm of a channels-last half-precision map on a CPU: the forward of
    :func:`_group_norm_channels_last`, and the backward written out in three passes over the map
    (two sums over the pixels, then ``dx = g·a + x·b + c`` with per-(sample, channel) ``a, b,
    c``), which keep the layout, a few samples at a time.

    With ``x̂ = (x − μ)·ρ`` (``μ, ρ`` the group's mean and inverse deviation over its ``M``
    elements), ``y = w·x̂ + β`` has ``dx = ρ·(w·g − S₁/M − x̂·S₂/M)``, ``S₁ = Σ_group w·g`` and
    ``S₂ = Σ_group w·g·x̂``; ``dw = Σ g·x̂`` and ``dβ = Σ g`` per channel. Sums and the
    coefficients in float32 (float64 stays float64)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, groups: int, eps: float) -> Tensor:  # type: ignore[override]
        y, mean, rstd = _group_norm_channels_last(x, weight, bias, groups, eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.groups = groups
        return y

    @staticmethod
    def backward(ctx, g: Tensor) -> tuple[Tensor, Tensor, Tensor, None, None]:  # type: ignore[override]
        x, weight, mean, rstd = ctx.saved_tensors
        N, C, H, W = x.shape
        per_group = C // ctx.groups
        acc = torch.promote_types(x.dtype, torch.float32)
        # a few samples at a time, both sums of a chunk while it is in the CPU's cache, as are the
        # float32 copies the sums make and the products (the whole map at once: 4× slower for
        # 104 × 32 × 64 × 64)
        step = max(1, _CACHED_ELEMENTS // x[0].numel())
        chunks = [slice(i, i + step) for i in range(0, N, step)]
        mu = mean.to(acc).repeat_interleave(per_group, 1)  # [N, C]
        rho = rstd.to(acc).repeat_interleave(per_group, 1)
        w = weight.to(acc)
        sums = [(g[n].sum((2, 3), dtype=acc), (g[n] * x[n]).sum((2, 3), dtype=acc)) for n in chunks]
        sum_g = torch.cat([s for s, _ in sums])  # Σ_pixels g    [N, C]
        sum_gx = torch.cat([s for _, s in sums])  # Σ_pixels g·x  [N, C]
        sum_gxhat = (sum_gx - mu * sum_g) * rho  # Σ_pixels g·x̂  [N, C]
        M = H * W * per_group

        def group_mean(v: Tensor) -> Tensor:  # [N, C] → each channel's group mean over M elements
            return v.view(N, ctx.groups, per_group).sum(-1).repeat_interleave(per_group, 1) / M

        s1, s2 = group_mean(sum_g * w), group_mean(sum_gxhat * w)
        a, b = (w * rho).to(x.dtype)[..., None, None], (-rho * rho * s2).to(x.dtype)[..., None, None]
        c = (rho * (mu * rho * s2 - s1)).to(x.dtype)[..., None, None]
        dx = torch.empty_like(g)
        for n in chunks:
            torch.addcmul(c[n], g[n], a[n], out=dx[n]).addcmul_(x[n], b[n])
        return dx, sum_gxhat.sum(0).to(weight.dtype), sum_g.sum(0).to(weight.dtype), None, None


class GroupNorm(nn.GroupNorm):
    """:class:`torch.nn.GroupNorm` that runs a channels-last half-precision map on a CPU where it is
    fast (the tokenizers' and the frame CNNs' convolutions are channels-last: faster on a CPU).
    torch's own channels-last GroupNorm backward in bfloat16 is several times slower than the
    contiguous one (104 × 32 × 64 × 64, one thread: 0.48 s against 0.05 s with the forward), and
    moving the map to the contiguous layout and back costs two transposing copies each way
    (0.14 s): the backward is :class:`_ChannelsLastGroupNorm`'s, the forward
    :func:`_group_norm_channels_last`'s. Float32 and other layouts run :class:`torch.nn.GroupNorm`
    unchanged. The same parameters and results (to the half precision's rounding)."""

    def forward(self, x: Tensor) -> Tensor:
        if (x.dim() == 4 and x.device.type == "cpu" and x.dtype in (torch.bfloat16, torch.float16)
                and self.affine and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)):
            if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
                return _ChannelsLastGroupNorm.apply(x, self.weight, self.bias, self.num_groups, self.eps)
            return _group_norm_channels_last(x, self.weight, self.bias, self.num_groups, self.eps)[0]
        return super().forward(x)


def _norm(channels: int, groups: int) -> nn.GroupNorm:
    """GroupNorm with ε = 1e-6 and affine parameters (table 4), groups capped to divide."""
    return GroupNorm(math.gcd(groups, channels), channels, eps=1e-6)


class ResBlock(nn.Module):
    """IRIS's ResnetBlock: ``x + conv(SiLU(GN(conv(SiLU(GN(x))))))`` (1×1 skip when widening)."""

    def __init__(self, c_in: int, c_out: int, groups: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            _norm(c_in, groups), nn.SiLU(inplace=True), nn.Conv2d(c_in, c_out, 3, 1, 1),
            _norm(c_out, groups), nn.SiLU(inplace=True), nn.Conv2d(c_out, c_out, 3, 1, 1),
        )
        self.skip = nn.Identity() if c_in == c_out else nn.Conv2d(c_in, c_out, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.skip(x) + self.body(x)


class Downsample(nn.Module):
    """Table 4's EncoderBlock: GN → SiLU → 3×3 stride-2 conv with asymmetric padding → 3×3 conv."""

    def __init__(self, c_in: int, c_out: int, groups: int) -> None:
        super().__init__()
        self.norm = _norm(c_in, groups)
        self.down = nn.Conv2d(c_in, c_out, 3, 2, 0)
        self.conv = nn.Conv2d(c_out, c_out, 3, 1, 1)

    def forward(self, x: Tensor) -> Tensor:
        x = F.pad(F.silu(self.norm(x), inplace=True), (0, 1, 0, 1))  # right and bottom only
        return self.conv(self.down(x))


class Upsample(nn.Module):
    """Table 4's DecoderBlock: GN → SiLU → nearest-exact ×2 → 3×3 conv → 3×3 conv."""

    def __init__(self, c_in: int, c_out: int, groups: int) -> None:
        super().__init__()
        self.norm = _norm(c_in, groups)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, 1, 1)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1)

    def forward(self, x: Tensor) -> Tensor:
        x = F.interpolate(F.silu(self.norm(x), inplace=True), scale_factor=2.0, mode="nearest-exact")
        return self.conv2(self.conv1(x))


def _level_channels(spec: TokenizerSpec, levels: int) -> list[int]:
    """Channels at each of ``levels + 1`` resolutions (the last multiplier repeats)."""
    return [spec.channels * spec.ch_mult[min(i, len(spec.ch_mult) - 1)] for i in range(levels + 1)]


def _levels(obs_shape: tuple[int, int, int], tokens_per_side: int) -> int:
    """Downsampling levels from ``H × W`` to ``tokens_per_side²``; one clear error otherwise."""
    _, height, width = obs_shape
    ratio = height // tokens_per_side
    if height != width or height % tokens_per_side or ratio & (ratio - 1):
        raise SpecError(
            f"tokenizer: a {height}x{width} image cannot be cut into {tokens_per_side}x{tokens_per_side} "
            "tokens by halving; use square images whose side is tokens_per_side times a power of 2"
        )
    return int(math.log2(ratio))


class TokenEncoder(nn.Module):
    """REM's encoder: ``float [N, C, H, W]`` in ``[-1, 1]`` → pre-quantisation vectors ``[N, d, s, s]``."""

    def __init__(self, spec: TokenizerSpec, obs_shape: tuple[int, int, int]) -> None:
        super().__init__()
        levels = _levels(obs_shape, spec.tokens_per_side)
        chans = _level_channels(spec, levels)
        layers: list[nn.Module] = [nn.Conv2d(obs_shape[0], chans[0], 3, 1, 1)]
        for i in range(levels):
            layers.append(Downsample(chans[i], chans[i + 1], spec.groups))
        z = spec.z_channels or chans[-1]
        layers += [_norm(chans[-1], spec.groups), nn.SiLU(inplace=True), nn.Conv2d(chans[-1], z, 3, 1, 1)]
        layers.append(nn.Conv2d(z, spec.embed_dim, 1))  # pre-quantisation 1×1 conv
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class TokenDecoder(nn.Module):
    """REM's decoder: code vectors ``[N, d, s, s]`` → image ``[N, C, H, W]`` in ``[-1, 1]`` scale (unclamped)."""

    def __init__(self, spec: TokenizerSpec, obs_shape: tuple[int, int, int]) -> None:
        super().__init__()
        levels = _levels(obs_shape, spec.tokens_per_side)
        chans = _level_channels(spec, levels)[::-1]
        z = spec.z_channels or chans[0]
        layers: list[nn.Module] = [
            nn.Conv2d(spec.embed_dim, z, 1),  # post-quantisation 1×1 conv
            nn.Conv2d(z, chans[0], 3, 1, 1),
        ]
        for i in range(levels):
            layers.append(Upsample(chans[i], chans[i + 1], spec.groups))
        layers += [_norm(chans[-1], spec.groups), nn.SiLU(inplace=True), nn.Conv2d(chans[-1], obs_shape[0], 3, 1, 1)]
        self.net = nn.Sequential(*layers)

    def forward(self, z: Tensor) -> Tensor:
        return self.net(z)


class Attention(nn.Module):
    """VQGAN's AttnBlock: ``x + proj(softmax(q kᵀ / √c) v)`` over the ``H·W`` positions, with
    ``q, k, v`` 1×1 convs of ``GN(x)`` (one head)."""

    def __init__(self, channels: int, groups: int) -> None:
        super().__init__()
        self.norm = _norm(channels, groups)
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)
        self.proj = nn.Conv2d(channels, channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        n, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(n, 3, c, h * w).transpose(2, 3).unbind(1)
        y = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None])[:, 0]  # [n, hw, c]
        return x + self.proj(y.transpose(1, 2).reshape(n, c, h, w))


def _stage(c_in: int, c_out: int, blocks: int, attention: bool, groups: int) -> list[nn.Module]:
    """``blocks`` residual blocks (the first ``c_in → c_out``), each followed by attention if asked."""
    layers: list[nn.Module] = []
    for i in range(blocks):
        layers.append(ResBlock(c_in if i == 0 else c_out, c_out, groups))
        if attention:
            layers.append(Attention(c_out, groups))
    return layers


def _middle(channels: int, groups: int) -> list[nn.Module]:
    return [ResBlock(channels, channels, groups), Attention(channels, groups), ResBlock(channels, channels, groups)]


class VqganEncoder(nn.Module):
    """IRIS's (VQGAN's) encoder: ``float [N, C, H, W]`` in ``[-1, 1]`` → ``[N, d, s, s]``."""

    def __init__(self, spec: TokenizerSpec, obs_shape: tuple[int, int, int]) -> None:
        super().__init__()
        levels = _levels(obs_shape, spec.tokens_per_side)
        chans, g = _level_channels(spec, levels), spec.groups
        side = obs_shape[1]
        layers: list[nn.Module] = [nn.Conv2d(obs_shape[0], chans[0], 3, 1, 1)]
        c = chans[0]
        for i in range(levels + 1):  # IRIS: 5 resolutions 64 … 4
            layers += _stage(c, chans[i], spec.num_res_blocks, side in spec.attn_resolutions, g)
            c = chans[i]
            if i < levels:
                layers.append(_Halve(c))
                side //= 2
        z = spec.z_channels or c
        layers += [*_middle(c, g), _norm(c, g), nn.SiLU(inplace=True), nn.Conv2d(c, z, 3, 1, 1)]
        layers.append(nn.Conv2d(z, spec.embed_dim, 1))  # pre-quantisation 1×1 conv
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class VqganDecoder(nn.Module):
    """IRIS's (VQGAN's) decoder: ``[N, d, s, s]`` → image ``[N, C, H, W]`` in ``[-1, 1]`` scale."""

    def __init__(self, spec: TokenizerSpec, obs_shape: tuple[int, int, int]) -> None:
        super().__init__()
        levels = _levels(obs_shape, spec.tokens_per_side)
        chans, g = _level_channels(spec, levels)[::-1], spec.groups
        side = spec.tokens_per_side
        z = spec.z_channels or chans[0]
        layers: list[nn.Module] = [
            nn.Conv2d(spec.embed_dim, z, 1),  # post-quantisation 1×1 conv
            nn.Conv2d(z, chans[0], 3, 1, 1), *_middle(chans[0], g),
        ]
        c = chans[0]
        for i in range(levels + 1):
            layers += _stage(c, chans[i], spec.num_res_blocks + 1, side in spec.attn_resolutions, g)
            c = chans[i]
            if i < levels:
                layers += [nn.Upsample(scale_factor=2.0, mode="nearest"), nn.Conv2d(c, c, 3, 1, 1)]
                side *= 2
        layers += [_norm(c, g), nn.SiLU(inplace=True), nn.Conv2d(c, obs_shape[0], 3, 1, 1)]
        self.net = nn.Sequential(*layers)

    def forward(self, z: Tensor) -> Tensor:
        return self.net(z)


class _Halve(nn.Module):
    """VQGAN's Downsample: pad right and bottom by one, 3×3 stride-2 conv (channels kept)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, 2, 0)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(F.pad(x, (0, 1, 0, 1)))


# --------------------------------------------------------------------------- perceptual loss

# VGG16's convolutional configuration ("D"); "M" is a 2×2 max-pool. Indices of the resulting
# nn.Sequential match torchvision's ``vgg16().features`` so its state dict loads unchanged.
_VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512)
_LPIPS_TAPS = (3, 8, 15, 22, 29)  # relu1_2, relu2_2, relu3_3, relu4_3, relu5_3


class LPIPS(nn.Module):
    """LPIPS (Zhang et al., 2018) on VGG16 features, frozen, with weights from a local file.

    The file is a ``torch.save`` or safetensors state dict holding both VGG16's convolutions as
    ``[prefix.]features.<i>.weight|bias`` (torchvision's ``vgg16().features`` names) and the five
    1×1 linear layers as ``lin<j>.model.1.weight`` (the ``lpips`` package's ``vgg.pth`` names) or
    ``lins.<j>.weight``. Inputs are images in ``[-1, 1]``. It is kept out of the tokenizer's
    state dict (frozen, and 58 MB).
    """

    shift: Tensor
    scale: Tensor

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for item in _VGG16:
            if item == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(c_in, int(item), 3, 1, 1), nn.ReLU()]
                c_in = int(item)
        self.features = nn.Sequential(*layers)
        self.lins = nn.ModuleList(nn.Conv2d(c, 1, 1, bias=False) for c in (64, 128, 256, 512, 512))
        self.register_buffer("shift", torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1))
        self.register_buffer("scale", torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1))
        self._load(Path(path))
        self.requires_grad_(False)
        self.eval()

    def _load(self, path: Path) -> None:
        if not path.is_file():
            raise WmzooError(f"perceptual_weights: no such file {str(path)!r}")
        try:
            if path.suffix == ".safetensors":
                from safetensors.torch import load_file

                raw = load_file(str(path))
            else:
                raw = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # any unreadable file is a user error
            raise WmzooError(f"perceptual_weights: cannot read {str(path)!r} ({type(exc).__name__})") from None
        state: dict[str, Tensor] = {}
        for key, value in raw.items():
            if m := re.search(r"(?:^|\.)(features\.\d+\.(?:weight|bias))$", key):
                state[m.group(1)] = value
            elif m := re.search(r"(?:^|\.)lin(\d)\.model\.1\.weight$", key):
                state[f"lins.{m.group(1)}.weight"] = value
            elif m := re.search(r"(?:^|\.)(lins\.\d\.weight)$", key):
                state[m.group(1)] = value
        missing = sorted(set(self.state_dict()) - {"shift", "scale"} - set(state))
        if missing:
            raise WmzooError(f"perceptual_weights: {str(path)!r} lacks {len(missing)} tensors, e.g. {missing[0]!r}")
        self.load_state_dict(state, strict=False)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        """Mean LPIPS distance between image batches ``x`` and ``y`` ``[N, 3, H, W]``."""
        x, y = (x - self.shift) / self.scale, (y - self.shift) / self.scale
        total = x.new_zeros(())
        lin = iter(self.lins)
        for i, layer in enumerate(self.features):
            x, y = layer(x), layer(y)
            if i in _LPIPS_TAPS:
                fx = x / (x.norm(dim=1, keepdim=True) + 1e-10)
                fy = y / (y.norm(dim=1, keepdim=True) + 1e-10)
                total = total + next(lin)((fx - fy) ** 2).mean()
            if i == _LPIPS_TAPS[-1]:
                break
        return total


# --------------------------------------------------------------------------- tokenizer


class Tokenizer(nn.Module):
    """The VQ-VAE ``V``: ``encode`` images to ``K`` tokens, ``embed`` and ``decode`` tokens.

    ``quantizer`` (:class:`~wmzoo.nn.quantizer.VectorQuantizer`) holds the codebook ``E``
    ``[N, d]`` (``codebook``); the world models read (and REM shares) it.
    """

    def __init__(self, spec: TokenizerSpec, obs_shape: tuple[int, int, int]) -> None:
        super().__init__()
        self.spec = spec
        self.obs_shape = tuple(obs_shape)
        self.side = spec.tokens_per_side
        self.num_tokens = self.side**2
        self.vocab_size = spec.vocab_size
        vqgan = spec.arch == "vqgan"
        self.encoder = (VqganEncoder if vqgan else TokenEncoder)(spec, self.obs_shape)
        self.decoder = (VqganDecoder if vqgan else TokenDecoder)(spec, self.obs_shape)
        # channels-last convolutions: ~20 % faster on CPU for IRIS's 64-channel CNN (as wmzoo.nn.cnn)
        self.encoder.to(memory_format=torch.channels_last)
        self.decoder.to(memory_format=torch.channels_last)
        self.quantizer = VectorQuantizer(spec.vocab_size, spec.embed_dim, spec.beta)
        self._register_load_state_dict_pre_hook(_codebook_key)
        self._perceptual: list[LPIPS] = []  # a list: not a submodule, not in the state dict
        if spec.perceptual_weight > 0:
            if spec.perceptual_weights is None:
                raise SpecError(
                    "tokenizer: perceptual_weight > 0 needs perceptual_weights, a local file of LPIPS "
                    "VGG16 weights (wmzoo cannot download them); or set perceptual_weight=0"
                )
            self._perceptual.append(LPIPS(spec.perceptual_weights))

    @staticmethod
    def preprocess(obs: Tensor) -> Tensor:
        """``uint8`` pixels → float in ``[-1, 1]`` (IRIS's input scale)."""
        return obs.float().div(127.5).sub(1.0)

    def _encoder_outputs(self, x: Tensor) -> Tensor:
        """Preprocessed images ``[N, C, H, W]`` → encoder outputs ``h`` ``[N, K, d]`` in raster order."""
        return self.encoder(x.contiguous(memory_format=torch.channels_last)).flatten(2).transpose(1, 2)

    def _encode_vectors(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """``uint8 [N, C, H, W]`` → encoder outputs ``h`` ``[N, K, d]`` and tokens ``[N, K]``."""
        h = self._encoder_outputs(self.preprocess(obs))
        return h, self.quantizer.nearest(h)

    def encode(self, obs: Tensor) -> Tensor:
        """Tokens ``LongTensor [..., K]`` of ``uint8`` images ``[..., C, H, W]``."""
        lead = obs.shape[:-3]
        _, tokens = self._encode_vectors(obs.reshape(-1, *obs.shape[-3:]))
        return tokens.reshape(*lead, self.num_tokens)

    @property
    def codebook(self) -> Tensor:
        """``E`` ``[N, d]``: the code vectors (a parameter, trained by :meth:`loss`)."""
        return self.quantizer.codebook

    def embed(self, tokens: Tensor) -> Tensor:
        """Code vectors ``[..., K, d]`` of tokens ``[..., K]``."""
        return self.quantizer.embed(tokens)

    def _decode_vectors(self, vectors: Tensor) -> Tensor:
        """Code vectors ``[N, K, d]`` → decoder output ``[N, C, H, W]`` in ``[-1, 1]`` scale."""
        grid = vectors.transpose(1, 2).reshape(vectors.shape[0], -1, self.side, self.side)
        return self.decoder(grid.contiguous(memory_format=torch.channels_last))

    def decode(self, tokens: Tensor) -> Tensor:
        """Images ``float [..., C, H, W]`` in ``[0, 1]`` from tokens ``[..., K]``."""
        lead = tokens.shape[:-1]
        vectors = self.embed(tokens.reshape(-1, self.num_tokens))
        image = self._decode_vectors(vectors).add(1.0).div(2.0).clamp(0.0, 1.0)
        return image.reshape(*lead, *image.shape[1:])

    def loss(self, obs: Tensor) -> tuple[Tensor, dict[str, float]]:
        """Equation 8 on ``uint8`` images ``[N, C, H, W]``: the loss and its terms as floats."""
        x = self.preprocess(obs)
        q = self.quantizer(self._encoder_outputs(x))  # codebook + β commitment, straight-through vectors
        recon_x = self._decode_vectors(q.vectors)
        diff = x - recon_x
        recon = diff.abs().mean() if self.spec.recon == "l1" else diff.pow(2).mean()
        total = recon + q.loss
        metrics = {"tokenizer/recon": float(recon.detach()), **{f"tokenizer/{k}": v for k, v in q.metrics.items()}}
        if self._perceptual:
            lpips = self._perceptual[0].to(x.device)
            perceptual = lpips(x, recon_x)
            total = total + self.spec.perceptual_weight * perceptual
            metrics["tokenizer/perceptual"] = float(perceptual.detach())
        metrics["tokenizer/loss"] = float(total.detach())
        return total, metrics


def _codebook_key(state: dict, prefix: str, *args: object) -> None:
    """Checkpoints written before the quantiser moved into :mod:`wmzoo.nn.quantizer` hold the
    codebook as ``<prefix>embedding.weight``: load it under its new name."""
    old = f"{prefix}embedding.weight"
    if old in state:
        state[f"{prefix}quantizer.embedding.weight"] = state.pop(old)


@torch.no_grad()
def next_token_accuracy(predicted: Tensor, target: Tensor, previous: Tensor) -> dict[str, float]:
    """A token world model's next-frame accuracy beside two baselines, over ``M`` scored frames.

    ``predicted``, ``target`` and ``previous`` are token ids ``[M, K]``: the model's most likely
    tokens of each scored frame, its true tokens, and the true tokens of the frame before it.

    * ``obs_acc``: the fraction of tokens predicted right.
    * ``obs_acc_freq``: the frequency baseline, predicting at each position ``k`` the token most
      frequent at ``k`` among these very targets (an upper bound of any frequency predictor).
    * ``obs_acc_copy``: predicting that every token stays as in the previous frame.
    """
    if target.numel() == 0:
        return {}
    mode = torch.mode(target, dim=0).values  # [K]: the most frequent token per position
    return {
        "world_model/obs_acc": float((predicted == target).float().mean()),
        "world_model/obs_acc_freq": float((mode == target).float().mean()),
        "world_model/obs_acc_copy": float((previous == target).float().mean()),
    }
