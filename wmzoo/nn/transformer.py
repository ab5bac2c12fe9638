"""A GPT-style causal transformer with a preallocated key/value cache (minGPT, as IRIS uses it).

Micheli et al., "Transformers are Sample-Efficient World Models" (IRIS), 2023, section 2.2 and
appendix B: pre-LayerNorm blocks ``x + Attn(LN(x))``, ``x + MLP(LN(x))`` with a 4× GELU MLP,
multi-head causal self-attention, dropout on attention weights, residuals and embeddings, a final
LayerNorm, and weights initialised N(0, 0.02) (Radford et al. 2019, GPT-2).

The cache (:class:`KVCache`) holds every layer's keys and values in two preallocated tensors
``[B, layers, heads, capacity, head_dim]``; a call writes its new keys and values in place at
``[length, length + n)`` and attends over ``[0, length + n)``, so generating token by token costs
no concatenation or reallocation. Tensors are batch first so that a cache can live inside a
wmzoo state dict.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class KVCache:
    """Keys and values ``[B, layers, heads, capacity, head_dim]``, valid up to ``length``.

    Written in place beyond ``length``: two states sharing one cache may each be advanced, but not
    alternately (the second would overwrite the first's newer entries); clone to branch.
    """

    k: Tensor
    v: Tensor
    length: int

    @classmethod
    def empty(
        cls, batch: int, layers: int, heads: int, capacity: int, head_dim: int,
        device: torch.device | str | None = None, dtype: torch.dtype | None = None,
    ) -> KVCache:
        shape = (batch, layers, heads, capacity, head_dim)
        return cls(torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype), 0)

    @property
    def capacity(self) -> int:
        return self.k.shape[3]


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention (fused QKV projection), cached or not."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"embedding size {dim} is not divisible by {heads} heads")
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.attn_drop = dropout
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, cache: KVCache | None = None, layer: int = 0) -> Tensor:
        B, n, D = x.shape
        q, k, v = self.qkv(x).view(B, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        drop = self.attn_drop if self.training else 0.0
        if cache is None:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=n > 1)
        else:
            start, end = cache.length, cache.length + n
            cache.k[:, layer, :, start:end] = k
            cache.v[:, layer, :, start:end] = v
            k, v = cache.k[:, layer, :, :end], cache.v[:, layer, :, :end]
            mask = None
            if n > 1:  # query i (absolute start + i) sees keys 0 .. start + i
                mask = torch.ones(n, end, dtype=torch.bool, device=x.device).tril(start)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)
        return self.resid_drop(self.proj(y.transpose(1, 2).reshape(B, n, D)))


class Block(nn.Module):
    """Pre-LN transformer block: ``x + Attn(LN(x))``, then ``x + MLP(LN(x))`` (4× GELU)."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, dropout)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(dropout)
        )

    def forward(self, x: Tensor, cache: KVCache | None = None, layer: int = 0) -> Tensor:
        x = x + self.attn(self.ln1(x), cache, layer)
        return x + self.mlp(self.ln2(x))


class CausalTransformer(nn.Module):
    """A stack of :class:`Block` and a final LayerNorm over embedded inputs ``[B, n, dim]``.

    Positions are the caller's business (IRIS adds learned absolute ones, REM uses rotary ones).
    With a ``cache`` the inputs continue the cached sequence and the cache's ``length`` advances.
    """

    def __init__(self, layers: int, dim: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.layers, self.dim, self.heads = layers, dim, heads
        self.head_dim = dim // heads
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(dim, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)

    def empty_cache(
        self, batch: int, capacity: int, device: torch.device | str | None = None
    ) -> KVCache:
        """A cache for ``batch`` sequences of up to ``capacity`` tokens."""
        return KVCache.empty(batch, self.layers, self.heads, capacity, self.head_dim, device)

    def forward(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
        if cache is not None and cache.length + x.shape[1] > cache.capacity:
            raise ValueError(
                f"KV cache overflow: {cache.length} + {x.shape[1]} tokens > capacity {cache.capacity}"
            )
        x = self.drop(x)
        for i, block in enumerate(self.blocks):
            x = block(x, cache, i)
        if cache is not None:
            cache.length += x.shape[1]
        return self.ln_f(x)


def init_gpt_weights(module: nn.Module) -> None:
    """GPT-2 / minGPT initialisation: Linear and Embedding N(0, 0.02), zero biases, unit LayerNorm."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, 0.0, 0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
