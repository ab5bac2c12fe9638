"""Vector quantisers: continuous vectors → discrete tokens and their code vectors.

Two codebooks, one interface (``quantizer(h) -> Quantized``, ``quantizer.embed(tokens)``):

* :class:`VectorQuantizer`, learned by loss (van den Oord et al. 2017, "Neural Discrete
  Representation Learning", section 3.2; IRIS and REM): tokens are nearest code vectors in L2,
  ``z = argmin_i ||h − e_i||``; the codebook term ``||sg(h) − e_z||²`` trains the codes and the
  commitment term ``β ||h − sg(e_z)||²`` the encoder (REM equation 8).
* :class:`CosineEMAQuantizer`, Δ-IRIS's ("Efficient World Models with Context-Aware
  Tokenization", section 2.1): factorised and normalised codes (Yu et al. 2021, "Vector-quantized
  image modeling with improved VQGAN", section 3.2) — a linear map to a small code dimension,
  L2-normalised, nearest code by cosine similarity, a linear map back — with the codebook an
  exponential moving average of the vectors assigned to each code (Razavi et al. 2019) rather
  than trained by loss, and dead codes revived (the official code, vmicheli/delta-iris): codes
  whose usage falls below 1/(10 N) are reset to random input vectors while the usage entropy is
  below ``log2 N − 2`` bits. Only the commitment term is a loss (weight 0.02).

Both pass gradients to the input with the straight-through estimator (Bengio et al. 2013):
``vectors = h + sg(e_z − h)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from wmzoo.errors import SpecError


@dataclass
class Quantized:
    """What a quantiser returns for inputs ``[..., input_dim]``."""

    tokens: Tensor  # [...] int64
    vectors: Tensor  # [..., input_dim]: code vectors, straight-through to the input
    loss: Tensor  # scalar: the quantiser's loss terms, weighted
    metrics: dict[str, float] = field(default_factory=dict)  # unprefixed names


class VectorQuantizer(nn.Module):
    """The loss-trained codebook ``E ∈ R^{N×d}`` of IRIS and REM.

    Initialised ``U(−1/N, 1/N)`` as IRIS's code. ``loss = ||sg(h) − e_z||² + β ||h − sg(e_z)||²``
    (means over elements); metrics ``codebook``, ``commitment``, ``codes_used``.
    """

    def __init__(self, num_codes: int, dim: int, beta: float = 1.0) -> None:
        super().__init__()
        self.num_codes, self.dim, self.beta = num_codes, dim, beta
        self.embedding = nn.Embedding(num_codes, dim)
        nn.init.uniform_(self.embedding.weight, -1.0 / num_codes, 1.0 / num_codes)

    @property
    def codebook(self) -> Tensor:
        """``[N, d]``, the code vectors."""
        return self.embedding.weight

    def nearest(self, h: Tensor) -> Tensor:
        """Tokens ``[...]`` of the code vectors nearest ``h [..., d]`` in L2."""
        codes = self.embedding.weight
        dist = h.pow(2).sum(-1, keepdim=True) - 2 * h @ codes.t() + codes.pow(2).sum(-1)
        return dist.argmin(-1)

    def embed(self, tokens: Tensor) -> Tensor:
        """Code vectors ``[..., d]`` of tokens ``[...]``."""
        return self.embedding(tokens)

    def forward(self, h: Tensor) -> Quantized:
        tokens = self.nearest(h)
        e = self.embed(tokens)
        codebook = (h.detach() - e).pow(2).mean()
        commitment = (h - e.detach()).pow(2).mean()
        with torch.no_grad():
            used = torch.bincount(tokens.flatten(), minlength=self.num_codes).gt(0).sum()
        metrics = {"codebook": float(codebook.detach()), "commitment": float(commitment.detach()), "codes_used": float(used)}
        return Quantized(tokens, h + (e - h).detach(), codebook + self.beta * commitment, metrics)


class CosineEMAQuantizer(nn.Module):
    """Δ-IRIS's factorised, normalised codebook with EMA updates and dead-code revival.

    ``input_dim → dim`` (``pre``), L2-normalise, nearest of ``N`` unit code vectors by cosine
    similarity, straight-through, ``dim → input_dim`` (``post``). In training mode each call moves
    the codebook towards the normalised mean of the vectors assigned to each code (decay
    ``decay``; codes that got none move towards 0 and are renormalised, as the official code),
    updates the usage frequencies (decay ``usage_decay``) and, while ``revival_updates`` allows
    (``None``: always; ``0``: never, unless the entropy has collapsed below 1 bit), revives codes
    used less than ``1 / (10 N)`` when the usage entropy is below ``log2 N − 2``.
    Loss: ``commitment · ||h' − sg(e_z)||²`` on the normalised ``h'``. Metrics ``commitment``,
    ``codes_used``, ``codebook_entropy`` (bits), ``codes_revived``.
    """

    codebook: Tensor
    usage: Tensor
    updates: Tensor

    def __init__(
        self, num_codes: int, dim: int, input_dim: int, commitment: float = 0.02, decay: float = 0.99,
        usage_decay: float = 0.98, revival_updates: int | None = None,
    ) -> None:
        super().__init__()
        if num_codes < 2 or not math.log2(num_codes).is_integer():
            raise SpecError(f"codebook size {num_codes}: the revival threshold needs a power of 2 (e.g. 1024)")
        self.num_codes, self.dim = num_codes, dim
        self.commitment, self.decay, self.usage_decay = commitment, decay, usage_decay
        self.revival_updates = revival_updates
        self.entropy_threshold = math.log2(num_codes) - 2
        self.pre = nn.Linear(input_dim, dim)
        self.post = nn.Linear(dim, input_dim)
        self.register_buffer("codebook", torch.empty(num_codes, dim).uniform_(-1.0 / num_codes, 1.0 / num_codes))
        self.register_buffer("usage", torch.full((num_codes,), 1.0 / num_codes))
        self.register_buffer("updates", torch.zeros((), dtype=torch.int64))

    def nearest(self, z: Tensor) -> Tensor:
        """Tokens of unit vectors ``z [..., dim]``: the codes of highest cosine similarity."""
        return (z @ self.codebook.t()).argmax(-1)

    def embed(self, tokens: Tensor) -> Tensor:
        """``post(e_z)`` ``[..., input_dim]`` of tokens ``[...]``."""
        return self.post(self.codebook[tokens])

    def entropy(self) -> float:
        """Entropy in bits of the codes' usage frequencies."""
        p = self.usage[self.usage > 0]
        return float(-(p * p.log2()).sum())

    def forward(self, h: Tensor) -> Quantized:
        z = F.normalize(self.pre(h), dim=-1)
        tokens = self.nearest(z)
        e = self.codebook[tokens]
        commitment = (z - e).pow(2).mean()  # the codebook is a buffer: no gradient into it
        metrics = {"commitment": float(commitment.detach())}
        if self.training:
            metrics.update(self._update(z.detach().reshape(-1, self.dim), tokens.reshape(-1)))
        with torch.no_grad():
            metrics["codes_used"] = float(torch.bincount(tokens.flatten(), minlength=self.num_codes).gt(0).sum())
        vectors = self.post(z + (e - z).detach())
        return Quantized(tokens, vectors, self.commitment * commitment, metrics)

    @torch.no_grad()
    def _update(self, z: Tensor, tokens: Tensor) -> dict[str, float]:
        """One EMA step of the codebook and the usage, then revival (see the class docstring)."""
        z = z.to(self.codebook.dtype)  # bf16 under autocast; the codebook stays float32
        one_hot = F.one_hot(tokens, self.num_codes).to(z.dtype)  # [n, N]
        counts = one_hot.sum(0)
        means = F.normalize((one_hot.t() @ z) / counts.clamp(min=1)[:, None], dim=-1)
        self.codebook.lerp_(means, 1 - self.decay)
        self.usage.lerp_(counts / z.shape[0], 1 - self.usage_decay)
        entropy = self.entropy()
        allowed = entropy < 1 or self.revival_updates is None or int(self.updates) < self.revival_updates
        revived = 0
        if allowed and entropy < self.entropy_threshold:
            dead = torch.nonzero(self.usage < 1.0 / (10 * self.num_codes)).flatten()
            dead = dead[torch.randperm(dead.numel(), device=dead.device)[: z.shape[0]]]
            donors = torch.randperm(z.shape[0], device=z.device)[: dead.numel()]
            self.codebook[dead] = z[donors]
            self.usage[dead] = 1.0 / self.num_codes
            revived = dead.numel()
        self.codebook.copy_(F.normalize(self.codebook, dim=-1))
        self.updates += 1
        return {"codebook_entropy": self.entropy(), "codes_revived": float(revived)}
