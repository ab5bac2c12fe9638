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

Episode boundaries: a training window (or a cache) may hold the end of one episode and the start
of the next. ``starts`` (``[B, n]`` bool, True at the first token of a new episode, derived from a
batch's ``is_first``) restricts attention to earlier tokens of the same episode, so nothing after a
boundary depends on anything before it. The official IRIS samples windows inside one episode
(padding the rest), so its attention never crosses one; with the mask wmzoo's stream windows
behave the same. A cache keeps the episode index of each token it holds (``KVCache.episode``).
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
    alternately (the second would overwrite the first's newer entries); clone to branch (``k``,
    ``v`` and ``episode``). ``episode`` is allocated on the first call that marks a start.
    """

    k: Tensor
    v: Tensor
    length: int
    episode: Tensor | None = None  # [B, capacity] int64 episode index of each token; None: one episode

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

    def forward(
        self, x: Tensor, cache: KVCache | None = None, layer: int = 0, mask: Tensor | None = None
    ) -> Tensor:
        """``mask`` (``[B, 1, n, keys]`` bool, from :func:`attention_mask`) replaces the causal
        mask when an episode boundary is in view."""
        B, n, D = x.shape
        q, k, v = self.qkv(x).view(B, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        drop = self.attn_drop if self.training else 0.0
        if cache is not None:
            start, end = cache.length, cache.length + n
            cache.k[:, layer, :, start:end] = k
            cache.v[:, layer, :, start:end] = v
            k, v = cache.k[:, layer, :, :end], cache.v[:, layer, :, :end]
        if mask is not None:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)
        elif cache is None or n == 1:  # causal, or one query that sees every cached key
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=cache is None and n > 1)
        else:  # query i (absolute start + i) sees keys 0 .. start + i
            causal = torch.ones(n, k.shape[2], dtype=torch.bool, device=x.device).tril(k.shape[2] - n)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=causal, dropout_p=drop)
        return self.resid_drop(self.proj(y.transpose(1, 2).reshape(B, n, D)))


def episode_index(starts: Tensor, first: Tensor | int = 0) -> Tensor:
    """``[B, n]`` episode index of each token: ``first`` (the index of the token before, per row)
    plus the number of episode starts up to and including it."""
    return starts.long().cumsum(1) + (first if isinstance(first, int) else first[:, None])


def restart_positions(starts: Tensor, first: Tensor | int = 0) -> Tensor:
    """``[B, n]`` absolute position of each token when positions count from 0 again at every
    episode start (``starts [B, n]`` bool), so a token sees the same position in a training
    window as at an imagination start; ``first`` (per row or shared) is the position of the
    first token when it does not start an episode (a cache continuing an earlier call)."""
    index = torch.arange(starts.shape[1], device=starts.device).expand(starts.shape[0], -1)
    last = torch.where(starts, index, -1).cummax(1).values  # the latest start at or before each token
    base = index + (first if isinstance(first, int) else first[:, None])
    return torch.where(last >= 0, index - last, base)


def attention_mask(query: Tensor, keys: Tensor) -> Tensor:
    """``[B, 1, n, m]`` bool: query ``i`` (the last ``n`` of the ``m`` keys' positions) attends to
    key ``j`` when ``j`` is not later and in the same episode (``query``/``keys``: episode indices
    ``[B, n]`` / ``[B, m]``, non-decreasing along a row)."""
    n, m = query.shape[1], keys.shape[1]
    causal = torch.ones(n, m, dtype=torch.bool, device=query.device).tril(m - n)
    return (causal & (keys[:, None, :] == query[:, :, None]))[:, None]


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

    def forward(
        self, x: Tensor, cache: KVCache | None = None, layer: int = 0, mask: Tensor | None = None
    ) -> Tensor:
        x = x + self.attn(self.ln1(x), cache, layer, mask)
        return x + self.mlp(self.ln2(x))


class CausalTransformer(nn.Module):
    """A stack of :class:`Block` and a final LayerNorm over embedded inputs ``[B, n, dim]``.

    Positions are the caller's business (IRIS adds learned absolute ones, REM uses rotary ones).
    With a ``cache`` the inputs continue the cached sequence and the cache's ``length`` advances.
    ``starts`` (``[B, n]`` bool) marks the tokens that begin a new episode: no token attends
    across one (see the module docstring).
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

    def forward(self, x: Tensor, cache: KVCache | None = None, starts: Tensor | None = None) -> Tensor:
        n = x.shape[1]
        if cache is not None and cache.length + n > cache.capacity:
            raise ValueError(f"KV cache overflow: {cache.length} + {n} tokens > capacity {cache.capacity}")
        mask = self._mask(x, cache, starts)
        x = self.drop(x)
        for i, block in enumerate(self.blocks):
            x = block(x, cache, i, mask)
        if cache is not None:
            cache.length += n
        return self.ln_f(x)

    @staticmethod
    def _mask(x: Tensor, cache: KVCache | None, starts: Tensor | None) -> Tensor | None:
        """The episode mask, or ``None`` when every token in view belongs to one episode (the
        plain causal path). Records the new tokens' episodes in the cache."""
        B, n = x.shape[:2]
        if cache is None:
            if starts is None or not bool(starts[:, 1:].any()):
                return None
            episode = episode_index(starts)
            return attention_mask(episode, episode)
        if starts is None and cache.episode is None:
            return None
        if cache.episode is None:
            cache.episode = torch.zeros(B, cache.capacity, dtype=torch.int64, device=x.device)
        start, end = cache.length, cache.length + n
        before = cache.episode[:, start - 1] if start else torch.zeros(B, dtype=torch.int64, device=x.device)
        new = starts if starts is not None else torch.zeros(B, n, dtype=torch.bool, device=x.device)
        if start == 0:
            new = new.clone()
            new[:, 0] = False  # the first cached token starts the cache's first episode
        cache.episode[:, start:end] = episode_index(new, before)
        keys = cache.episode[:, :end]
        if bool((keys[:, 0] == keys[:, -1]).all()):
            return None
        return attention_mask(keys[:, start:], keys)


def init_gpt_weights(module: nn.Module) -> None:
    """GPT-2 / minGPT initialisation: Linear and Embedding N(0, 0.02), zero biases, unit LayerNorm."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, 0.0, 0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
