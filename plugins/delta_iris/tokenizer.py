"""Δ-IRIS's context-aware discrete autoencoder: a frame is encoded *given* the previous frame
and action, so its few Δ-tokens only describe what the context cannot predict.

Paper: Micheli et al. 2024, "Efficient World Models with Context-Aware Tokenization", section 2.2
(the encoder ``E`` and decoder ``D`` conditioned on past frames and actions), appendix A.1 table 2
(the CNNs and the loss weights). Facts the paper leaves out are read from its official code
(vmicheli/delta-iris, ``config/params/{crafter,atari}.yaml``, the "official config" below).

* **Encoder.** ``[x_t, action plane, x_{t+1}]`` (``2C + 1`` channels; the action plane is an
  ``Embedding(A, H·W)`` row) → :class:`FrameEncoder` → a latent map ``[latent_dim, h, w]``
  (Crafter and Atari: 64×8×8 for 64×64 frames), cut into a ``g×g`` grid (``g² = num_tokens``,
  2×2) of patches; each patch, flattened in (row, column, channel) order (``4·4·64 = 1024``
  values), is one Δ-token of the :class:`~wmzoo.nn.quantizer.CosineEMAQuantizer`: ``1024 → 64``,
  L2-normalised, cosine-nearest of ``N = 1024`` EMA codes, straight-through, ``64 → 1024``.
* **Decoder.** ``[frame_cnn(x_t), action planes, q]`` at the latent resolution (Crafter
  ``8 + 4 + 64`` channels; ``frame_cnn`` is a second :class:`FrameEncoder`, the action an
  ``Embedding(A, 4·h·w)`` row, ``q`` the quantised patches laid back on the grid) →
  :class:`FrameDecoder` → ``x_{t+1}``. Exactly one previous frame and action (table 2).
* **Loss** (pixels in ``[0, 1]``; table 2 weights): ``0.02 · commitment + 0.1 · L1 + 1.0 · L2 +
  0.01 · max-pixel``, max-pixel being the largest squared error of each frame (Anand et al.
  2022), averaged over frames. The codebook is not trained by loss but by its EMA.
* **Imagination** decodes clamped to ``[0, 1]`` and rounded to multiples of 1/255, as the
  official code, so a decoded frame is exactly a ``uint8`` frame.

Deviations (named):
    * GroupNorm ε is 1e-6 (wmzoo's shared residual block), the official 1e-5.
    * Only the transitions ``mask`` keeps reach the quantiser (commitment and codebook EMA); the
      official code quantises the padded ones too and masks only the reconstruction.
    * The perceptual term (LPIPS, as wmzoo's IRIS tokenizer) is an option off by default; Δ-IRIS
      has none.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import Tensor, nn

from wmzoo.errors import SpecError
from wmzoo.nn.quantizer import CosineEMAQuantizer, Quantized
from wmzoo.nn.tokenizer import LPIPS, ResBlock, _norm
from wmzoo.specs import OptimSpec, Spec

GROUPS = 32  # GroupNorm groups of every norm in the official convnet (capped to divide narrow layers)


class FrameCnnSpec(Spec):
    """One of the official convnet's FrameEncoder / FrameDecoder (appendix A.1 table 2)."""

    channels: int = Field(64, ge=1, le=1024, description="C: channels of layer 0 (table 2: 64)")
    mult: tuple[int, ...] = Field(
        (1, 1, 2, 2, 4), min_length=1, max_length=12,
        description="channel multiplier per layer (table 2: channels 64, 64, 128, 128, 256)",
    )
    down: tuple[int, ...] = Field(
        (1, 0, 1, 1, 0), min_length=1, max_length=12,
        description="1: halve the resolution after this layer (table 2: [1, 0, 1, 1, 0])",
    )

    @model_validator(mode="after")
    def _layers_agree(self) -> FrameCnnSpec:
        if len(self.mult) != len(self.down):
            raise ValueError(f"mult has {len(self.mult)} layers but down has {len(self.down)}; give one entry per layer")
        if any(d not in (0, 1) for d in self.down) or any(m < 1 for m in self.mult):
            raise ValueError("down entries must be 0 or 1 and mult entries at least 1")
        return self


class DeltaTokenizerSpec(Spec):
    """Hyperparameters of Δ-IRIS's autoencoder (defaults: Crafter's official config; :data:`ATARI`)."""

    num_tokens: int = Field(4, ge=1, le=1024, description="K: Δ-tokens per frame, a square grid (official config: 4, 2×2)")
    codebook_size: int = Field(
        1024, ge=2, le=65536, description="N: codebook size, a power of 2 (official config: 1024)"
    )
    codebook_dim: int = Field(64, ge=1, le=1024, description="factorised code dimension (official config: 64)")
    latent_dim: int = Field(64, ge=1, le=1024, description="channels of the encoder's latent map (official config: 64)")
    encoder: FrameCnnSpec = Field(default_factory=FrameCnnSpec, description="the encoder CNN (table 2)")
    decoder: FrameCnnSpec = Field(
        default_factory=FrameCnnSpec, description="the decoder CNN, mirrored (table 2: as the encoder)"
    )
    frame_cnn: FrameCnnSpec = Field(
        default_factory=FrameCnnSpec,
        description="the decoder's previous-frame embedder (table 2: as the encoder; official Atari config: C 32)",
    )
    frame_latent_dim: int = Field(
        8, ge=1, le=1024, description="channels of frame_cnn's map (table 2: 8×8×8; official Atari config: 16)"
    )
    decoder_act_channels: int = Field(4, ge=1, le=256, description="action planes of the decoder (table 2: 4)")
    commitment: float = Field(0.02, ge=0, le=100, description="commitment loss weight (table 2: 0.02)")
    l1_weight: float = Field(0.1, ge=0, le=100, description="L1 reconstruction weight (table 2: 0.1)")
    l2_weight: float = Field(1.0, ge=0, le=100, description="L2 reconstruction weight (table 2: 1.0)")
    max_pixel_weight: float = Field(0.01, ge=0, le=100, description="max-pixel loss weight (table 2: 0.01)")
    revival_updates: int | None = Field(
        0, ge=0,
        description="codebook updates during which dead codes are revived (None: always; 0: only while "
        "the usage entropy is below 1 bit). Official config max_codebook_updates_with_revival: "
        "Crafter 0, Atari 400 (the tokenizer's first-epoch steps)",
    )
    perceptual_weight: float = Field(
        0.0, ge=0, le=100, description="weight of an LPIPS term (not in Δ-IRIS; needs perceptual_weights)"
    )
    perceptual_weights: str | None = Field(
        None, description="local file of LPIPS VGG16 weights (torch or safetensors state dict)"
    )
    optim: OptimSpec = Field(
        default_factory=lambda: OptimSpec(lr=1e-4, weight_decay=0.01, clip=10.0),
        description="autoencoder optimizer (official Crafter config: lr 1e-4, wd 0.01, clip 10; Atari wd 0)",
    )

    @model_validator(mode="after")
    def _geometry(self) -> DeltaTokenizerSpec:
        if math.isqrt(self.num_tokens) ** 2 != self.num_tokens:
            raise ValueError(f"num_tokens={self.num_tokens}: the tokens tile a square grid; use 1, 4, 9, 16, ...")
        downs = {name: sum(cnn.down) for name, cnn in (("encoder", self.encoder), ("decoder", self.decoder),
                                                       ("frame_cnn", self.frame_cnn))}
        if len(set(downs.values())) != 1:
            raise ValueError(
                f"encoder, decoder and frame_cnn must halve the resolution equally often (sum of down: {downs})"
            )
        return self


ATARI = DeltaTokenizerSpec(
    frame_cnn=FrameCnnSpec(channels=32), frame_latent_dim=16, revival_updates=400,
    optim=OptimSpec(lr=1e-4, weight_decay=0.0, clip=10.0),
)
"""The official Atari config: frame_cnn C 32 with 16 latent channels, revival for 400 updates, no weight decay."""


# --------------------------------------------------------------------------- CNNs


class FrameEncoder(nn.Module):
    """The official FrameEncoder: ``[N, c_in, H, W]`` → ``[N, latent_dim, H / 2^Σdown, W / 2^Σdown]``.

    3×3 conv to ``C``; per layer ``i`` a residual block (GN-SiLU-conv3×3 twice, 1×1 skip when the
    width changes) to ``mult[i]·C`` channels, then a 2×2 stride-2 conv where ``down[i]``; GN,
    SiLU, 3×3 conv to ``latent_dim``.
    """

    def __init__(self, in_channels: int, spec: FrameCnnSpec, latent_dim: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(in_channels, spec.channels, 3, 1, 1)]
        c = spec.channels
        for m, d in zip(spec.mult, spec.down):
            layers.append(ResBlock(c, m * spec.channels, GROUPS))
            c = m * spec.channels
            if d:
                layers.append(nn.Conv2d(c, c, 2, 2))
        layers += [_norm(c, GROUPS), nn.SiLU(inplace=True), nn.Conv2d(c, latent_dim, 3, 1, 1)]
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class FrameDecoder(nn.Module):
    """The official FrameDecoder, the encoder mirrored: ``[N, latent_dim, h, w]`` → ``[N, out, H, W]``.

    3×3 conv to ``mult[-1]·C``; per layer from the last, a nearest ×2 upsampling and 3×3 conv
    where ``down[i]``, then a residual block to ``mult[i-1]·C`` (``C`` for layer 0); GN, SiLU,
    3×3 conv to the image channels.
    """

    def __init__(self, latent_dim: int, spec: FrameCnnSpec, out_channels: int) -> None:
        super().__init__()
        chans = [m * spec.channels for m in spec.mult]
        layers: list[nn.Module] = [nn.Conv2d(latent_dim, chans[-1], 3, 1, 1)]
        for i in reversed(range(len(chans))):
            if spec.down[i]:
                layers += [nn.Upsample(scale_factor=2.0, mode="nearest"), nn.Conv2d(chans[i], chans[i], 3, 1, 1)]
            layers.append(ResBlock(chans[i], chans[i - 1] if i else spec.channels, GROUPS))
        layers += [_norm(spec.channels, GROUPS), nn.SiLU(inplace=True), nn.Conv2d(spec.channels, out_channels, 3, 1, 1)]
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


def _init_weights(module: nn.Module) -> None:
    """The official init: Linear and Embedding weights N(0, 0.02), Linear biases 0; convs as torch's."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, 0.0, 0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


# --------------------------------------------------------------------------- autoencoder


class DeltaTokenizer(nn.Module):
    """Δ-IRIS's autoencoder: ``encode(x_t, a_t, x_{t+1})`` → Δ-tokens, ``decode(x_t, a_t, tokens)`` → ``x_{t+1}``.

    Frames are ``uint8 [..., C, H, W]`` (or float in ``[0, 1]``, e.g. a decoded frame fed back in
    imagination), actions ``int64 [...]``, with any leading dims.
    """

    def __init__(self, spec: DeltaTokenizerSpec, obs_shape: tuple[int, int, int], num_actions: int) -> None:
        super().__init__()
        self.spec, self.obs_shape = spec, tuple(obs_shape)
        channels, height, width = self.obs_shape
        self.grid = math.isqrt(spec.num_tokens)
        self.num_tokens = spec.num_tokens
        factor = 2 ** sum(spec.encoder.down)
        if height % (factor * self.grid) or width % (factor * self.grid):
            raise SpecError(
                f"delta-iris tokenizer: a {height}x{width} image needs sides divisible by {factor * self.grid} "
                f"({factor}: the encoder's {sum(spec.encoder.down)} halvings, times the {self.grid}x{self.grid} "
                "token grid); resize the observations or change encoder.down / num_tokens"
            )
        self.latent_hw = (height // factor, width // factor)
        self.patch_hw = (self.latent_hw[0] // self.grid, self.latent_hw[1] // self.grid)
        self.encoder_act_emb = nn.Embedding(num_actions, height * width)
        self.decoder_act_emb = nn.Embedding(num_actions, spec.decoder_act_channels * math.prod(self.latent_hw))
        self.encoder = FrameEncoder(2 * channels + 1, spec.encoder, spec.latent_dim)
        self.decoder = FrameDecoder(spec.frame_latent_dim + spec.decoder_act_channels + spec.latent_dim,
                                    spec.decoder, channels)
        self.frame_cnn = FrameEncoder(channels, spec.frame_cnn, spec.frame_latent_dim)
        self.quantizer = CosineEMAQuantizer(
            spec.codebook_size, spec.codebook_dim, input_dim=spec.latent_dim * math.prod(self.patch_hw),
            commitment=spec.commitment, revival_updates=spec.revival_updates,
        )
        self.apply(_init_weights)
        # channels-last convolutions: faster on CPU (as wmzoo.nn.tokenizer)
        for cnn in (self.encoder, self.decoder, self.frame_cnn):
            cnn.to(memory_format=torch.channels_last)
        self._perceptual: list[LPIPS] = []  # a list: not a submodule, not in the state dict
        if spec.perceptual_weight > 0:
            if spec.perceptual_weights is None or channels != 3:
                raise SpecError(
                    "delta-iris tokenizer: perceptual_weight > 0 needs RGB frames and perceptual_weights, a local "
                    "file of LPIPS VGG16 weights (wmzoo cannot download them); or set perceptual_weight=0"
                )
            self._perceptual.append(LPIPS(spec.perceptual_weights))

    # ---------------------------------------------------------------- layout

    @staticmethod
    def pixels(x: Tensor) -> Tensor:
        """``uint8`` frames → float in ``[0, 1]``; float frames are taken as already in ``[0, 1]``."""
        return x.float().div(255.0) if x.dtype == torch.uint8 else x.float()

    def patches(self, z: Tensor) -> Tensor:
        """Latent map ``[N, c, h, w]`` → ``[N, K, ph·pw·c]``: grid cells in raster order, each
        flattened (row, column, channel) as the official ``(h k) (w l) c -> (h w) (k l c)``."""
        n, c = z.shape[:2]
        (ph, pw), g = self.patch_hw, self.grid
        return z.reshape(n, c, g, ph, g, pw).permute(0, 2, 4, 3, 5, 1).reshape(n, g * g, ph * pw * c)

    def unpatch(self, v: Tensor) -> Tensor:
        """The inverse of :meth:`patches`: ``[N, K, ph·pw·c]`` → ``[N, c, h, w]``."""
        (ph, pw), g = self.patch_hw, self.grid
        v = v.reshape(v.shape[0], g, g, ph, pw, -1)
        return v.permute(0, 5, 1, 3, 2, 4).reshape(v.shape[0], -1, g * ph, g * pw)

    # ---------------------------------------------------------------- encoder / decoder

    def _encode(self, x_t: Tensor, a_t: Tensor, x_next: Tensor) -> Tensor:
        """Flat ``[N, C, H, W]`` frames and ``[N]`` actions → the patches ``[N, K, input_dim]``."""
        plane = self.encoder_act_emb(a_t).view(-1, 1, *self.obs_shape[1:])
        x = torch.cat((self.pixels(x_t), plane, self.pixels(x_next)), dim=1)
        return self.patches(self.encoder(x.contiguous(memory_format=torch.channels_last)))

    def _decode(self, x_t: Tensor, a_t: Tensor, vectors: Tensor) -> Tensor:
        """Flat frames, actions and quantised patches ``[N, K, input_dim]`` → raw ``x_{t+1}`` ``[N, C, H, W]``."""
        frame = self.frame_cnn(self.pixels(x_t).contiguous(memory_format=torch.channels_last))
        planes = self.decoder_act_emb(a_t).view(-1, self.spec.decoder_act_channels, *self.latent_hw)
        x = torch.cat((frame, planes.to(frame.dtype), self.unpatch(vectors).to(frame.dtype)), dim=1)
        return self.decoder(x.contiguous(memory_format=torch.channels_last))

    def _flat(self, a_t: Tensor, *frames: Tensor) -> list[Tensor]:
        """Actions ``[...]`` and frames ``[..., C, H, W]`` with the leading dims flattened."""
        if any(tuple(f.shape[-3:]) != self.obs_shape or f.shape[:-3] != a_t.shape for f in frames):
            shapes = ", ".join(str(tuple(f.shape)) for f in frames)
            raise ValueError(f"frames {shapes} do not match actions {tuple(a_t.shape)} and obs_shape {self.obs_shape}")
        return [a_t.reshape(-1), *(f.reshape(-1, *self.obs_shape) for f in frames)]

    @torch.no_grad()
    def encode(self, x_t: Tensor, a_t: Tensor, x_next: Tensor) -> Tensor:
        """Δ-tokens ``int64 [..., K]`` of the transitions ``(x_t, a_t) → x_{t+1}`` (codebook untouched)."""
        a, x1, x2 = self._flat(a_t, x_t, x_next)
        z = F.normalize(self.quantizer.pre(self._encode(x1, a, x2)), dim=-1)
        return self.quantizer.nearest(z).reshape(*a_t.shape, self.num_tokens)

    @torch.no_grad()
    def decode(self, x_t: Tensor, a_t: Tensor, codes: Tensor) -> Tensor:
        """``x_{t+1}`` ``float [..., C, H, W]`` from the previous frame, action and Δ-tokens
        ``int64 [..., K]`` (or quantised vectors ``[..., K, input_dim]``); clamped to ``[0, 1]`` and
        rounded to multiples of 1/255 (the official imagination; no gradient: rounding has none)."""
        a, x1 = self._flat(a_t, x_t)
        vectors = codes.reshape(-1, *codes.shape[a_t.dim():])
        if not vectors.is_floating_point():
            vectors = self.quantizer.embed(vectors)
        out = self._decode(x1, a, vectors).clamp(0.0, 1.0).mul(255.0).round().div(255.0)
        return out.reshape(*a_t.shape, *self.obs_shape)

    def loss(
        self, x_t: Tensor, a_t: Tensor, x_next: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, dict[str, float]]:
        """The weighted loss (module docstring) over the transitions ``mask [...]`` keeps (all when None),
        and its unweighted terms as ``tokenizer/`` metrics."""
        a, x1, x2 = self._flat(a_t, x_t, x_next)
        if mask is not None:
            keep = mask.reshape(-1).bool()
            a, x1, x2 = a[keep], x1[keep], x2[keep]
        if a.numel() == 0:  # nothing to learn from; an empty batch would also corrupt the codebook usage
            return torch.zeros((), device=a.device, requires_grad=True), {"tokenizer/loss": 0.0}
        q: Quantized = self.quantizer(self._encode(x1, a, x2))
        target = self.pixels(x2)
        recon = self._decode(x1, a, q.vectors)
        delta = (target - recon).float()
        l1 = delta.abs().mean()
        l2 = delta.pow(2).mean()
        max_pixel = delta.pow(2).flatten(1).amax(1).mean()
        s = self.spec
        total = q.loss + s.l1_weight * l1 + s.l2_weight * l2 + s.max_pixel_weight * max_pixel
        metrics = {f"tokenizer/{k}": v for k, v in q.metrics.items()}
        metrics.update({"tokenizer/l1": float(l1.detach()), "tokenizer/l2": float(l2.detach()),
                        "tokenizer/max_pixel": float(max_pixel.detach())})
        if self._perceptual:
            perceptual = self._perceptual[0].to(recon.device)(target * 2 - 1, recon * 2 - 1)
            total = total + s.perceptual_weight * perceptual
            metrics["tokenizer/perceptual"] = float(perceptual.detach())
        metrics["tokenizer/loss"] = float(total.detach())
        return total, metrics
