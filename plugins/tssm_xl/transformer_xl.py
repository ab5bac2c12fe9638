"""Transformer-XL with relative positions, a per-layer memory and episode-boundary masking.

Paper:
    Dai et al., "Transformer-XL: Attentive Language Models Beyond a Fixed-Length Context", 2019
    (section 3.2 segment-level recurrence, 3.3 relative positional encodings); the mechanics
    follow its reference code (kimiyoung/transformer-xl, ``mem_transformer.py``,
    ``RelPartialLearnableMultiHeadAttn`` with ``pre_lnorm=True``, as TSSM/TransDreamer uses).

Mechanics:
    * Every layer ``l`` keeps a memory of its last ``m`` *inputs* ``[B, m, d]``, detached: no
      gradient flows into past segments. Keys and values run over ``[memory; segment]``
      (``M + T`` rows), queries over the segment (``T`` rows).
    * Causal mask ``triu(ones(T, M + T), 1 + M)``: query ``i`` sees the ``M`` memory slots and
      segment steps ``0..i``, so its context is ``M + i`` earlier tokens plus itself.
    * Scores (Dai et al. eq. in 3.3, terms (a)+(c) and (b)+(d)):
      ``(q_i + u)·k_j + (q_i + v)·W_r R_{i−j}``, ``R`` sinusoidal, ``u``, ``v`` learned per head;
      ``R`` is computed for distances ``M+T−1 … 0`` and aligned with :func:`rel_shift`.
    * Pre-LN layers: ``x + Attn(LN([mem; x]))``, then ``x + FF(LN(x))``; a final LayerNorm.
    * **Episode boundaries** (wmzoo addition; Transformer-XL streams one text): a key is visible
      to a query only when both belong to the same episode. Episode ids are
      ``cumsum(is_first)`` over the segment; memory slots carry id 0 when ``memory_valid``, −1
      otherwise, so a memory from a previous episode, or the empty initial memory, is masked,
      and within a segment a key before the last ``is_first`` at or before the query is masked.
      Relative distances are unaffected: the memory is always a contiguous window of the past.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn


def sinusoid_embedding(distance: Tensor, dim: int) -> Tensor:
    """``[K] → [K, dim]``: ``[sin(d·ω), cos(d·ω)]`` with ``ω_k = 10000^(−2k/dim)`` (TXL ``PositionalEmbedding``)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=distance.device, dtype=distance.dtype) / dim))
    angle = distance[:, None] * inv_freq[None, :]
    return torch.cat([angle.sin(), angle.cos()], -1)


def rel_shift(x: Tensor) -> Tensor:
    """The rel-shift trick of ``mem_transformer.py`` on batch-first scores ``[..., Q, K]``.

    Column ``c`` of the input holds the score for distance ``K − 1 − c``. The output holds at
    ``[i, j]`` the input's ``[i, j + Q − 1 − i]``: the score for distance ``(K − Q + i) − j``
    between query ``i`` (key index ``K − Q + i``) and key ``j``. Entries with ``j > K − Q + i``
    (the future) are garbage and must be masked.
    """
    *lead, q, k = x.shape
    padded = torch.cat([x.new_zeros(*lead, q, 1), x], -1)  # [..., Q, K+1]
    return padded.reshape(*lead, k + 1, q)[..., 1:, :].reshape(*lead, q, k)


def episode_ids(memory_valid: Tensor, is_first: Tensor) -> tuple[Tensor, Tensor]:
    """``(key_ids [B, M+T], query_ids [B, T])``: ids are equal iff in the same episode.

    Segment step ``t`` has id ``cumsum(is_first)[t]``; valid memory slots id 0 (the episode
    running when the segment starts), invalid ones −1 (never equal to a query's id).
    """
    query = is_first.long().cumsum(1)
    memory = torch.where(memory_valid, 0, -1).to(query.dtype)
    return torch.cat([memory, query], 1), query


def attention_mask(memory_valid: Tensor, is_first: Tensor) -> Tensor:
    """``[B, T, M+T]`` bool, true where query ``i`` may attend to key ``j``.

    The causal part is Transformer-XL's ``triu(ones(T, M+T), 1 + M)`` (masked above it); the
    episode part compares :func:`episode_ids`.
    """
    M, T = memory_valid.shape[1], is_first.shape[1]
    keys, queries = episode_ids(memory_valid, is_first)
    causal = ~torch.ones(T, M + T, dtype=torch.bool, device=is_first.device).triu(1 + M)
    return causal & (keys[:, None, :] == queries[:, :, None])


# --------------------------------------------------------------------------- layers


class RelMultiHeadAttention(nn.Module):
    """Multi-head attention with relative positions (TXL ``RelPartialLearnableMultiHeadAttn``)."""

    def __init__(self, d_model: int, n_heads: int, head_dim: int, dropout: float) -> None:
        super().__init__()
        self.n_heads, self.head_dim = n_heads, head_dim
        self.qkv = nn.Linear(d_model, 3 * n_heads * head_dim, bias=False)
        self.r_net = nn.Linear(d_model, n_heads * head_dim, bias=False)  # W_{k,R}
        self.out = nn.Linear(n_heads * head_dim, d_model, bias=False)
        self.u = nn.Parameter(torch.randn(n_heads, head_dim) * 0.02)  # content bias (r_w_bias)
        self.v = nn.Parameter(torch.randn(n_heads, head_dim) * 0.02)  # position bias (r_r_bias)
        self.drop_attn = nn.Dropout(dropout)

    def forward(self, keys_in: Tensor, pos: Tensor, allowed: Tensor) -> Tensor:
        """``keys_in [B, K, d]`` (normalised ``[memory; segment]``), ``pos [K, d]`` for
        distances ``K−1 … 0``, ``allowed [B, Q, K]`` → ``[B, Q, d]`` for the last ``Q`` rows."""
        B, K, _ = keys_in.shape
        Q, H, D = allowed.shape[1], self.n_heads, self.head_dim
        q, k, v = self.qkv(keys_in).view(B, K, 3, H, D).unbind(2)
        q = q[:, K - Q :]  # queries: the segment
        r = self.r_net(pos).view(K, H, D)
        content = torch.einsum("bqhd,bkhd->bhqk", q + self.u, k)  # terms (a) + (c)
        position = rel_shift(torch.einsum("bqhd,khd->bhqk", q + self.v, r))  # terms (b) + (d)
        score = (content + position) / math.sqrt(D)
        score = score.masked_fill(~allowed[:, None], float("-inf"))
        prob = self.drop_attn(score.softmax(-1))
        attn = torch.einsum("bhqk,bkhd->bqhd", prob, v).reshape(B, Q, H * D)
        return self.out(attn)


class TransformerXLLayer(nn.Module):
    """Pre-LN block: ``x + Attn(LN([mem; x]))``, then ``x + FF(LN(x))`` with a GELU FF."""

    def __init__(self, d_model: int, n_heads: int, head_dim: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.norm_attn = nn.LayerNorm(d_model)
        self.attn = RelMultiHeadAttention(d_model, n_heads, head_dim, dropout)
        self.norm_ff = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model)
        )
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, memory: Tensor, pos: Tensor, allowed: Tensor) -> Tensor:
        keys_in = self.norm_attn(torch.cat([memory, x], 1))
        x = x + self.drop(self.attn(keys_in, pos, allowed))
        return x + self.drop(self.ff(self.norm_ff(x)))


# --------------------------------------------------------------------------- the stack


class XLOutput(NamedTuple):
    """One pass of :class:`TransformerXL` over a segment."""

    out: Tensor  # [B, T, d] output of the last layer after the final LayerNorm
    memory: Tensor  # [B, L, M, d] each layer's memory after the segment (detached)
    memory_valid: Tensor  # [B, M] bool: slot belongs to the episode of the last step
    history: Tensor  # [B, L, M+T, d] [old memory; segment inputs] per layer (detached)
    key_ids: Tensor  # [B, M+T] episode ids of the history rows (see episode_ids)
    query_ids: Tensor  # [B, T]

    def memory_at(self, steps: Tensor) -> tuple[Tensor, Tensor]:
        """Memories after each of ``steps`` ``[n]`` (segment positions): the last ``M`` rows of
        the history up to and including that step. Returns ``([B, n, L, M, d], [B, n, M])``."""
        M = self.memory.shape[2]
        windows = self.history.unfold(2, M, 1)[:, :, steps + 1]  # [B, L, n, d, M]
        memory = windows.permute(0, 2, 1, 4, 3)
        ids = self.key_ids.unfold(1, M, 1)[:, steps + 1]  # [B, n, M]
        return memory, ids == self.query_ids[:, steps, None]


class TransformerXL(nn.Module):
    """A stack of pre-LN Transformer-XL layers over a segment ``[B, T, d]`` with memory.

    The memory is a fixed-size buffer of ``cache_len`` rows per layer with a validity mask:
    :meth:`initial_memory` is all invalid. Calling it with ``T = 1`` is one imagination step.
    """

    def __init__(
        self, d_model: int, n_heads: int, head_dim: int, d_ff: int, n_layers: int, cache_len: int, dropout: float
    ) -> None:
        super().__init__()
        self.d_model, self.n_layers, self.cache_len = d_model, n_layers, cache_len
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            TransformerXLLayer(d_model, n_heads, head_dim, d_ff, dropout) for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)

    def initial_memory(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``(zeros [B, L, M, d], all-false [B, M])``: an empty memory that masks every slot."""
        memory = torch.zeros(batch_size, self.n_layers, self.cache_len, self.d_model, device=device, dtype=dtype)
        return memory, torch.zeros(batch_size, self.cache_len, dtype=torch.bool, device=device)

    def forward(self, x: Tensor, memory: Tensor, memory_valid: Tensor, is_first: Tensor) -> XLOutput:
        """``x [B, T, d]``, ``memory [B, L, M, d]``, ``memory_valid [B, M]``, ``is_first [B, T]``."""
        M, T = self.cache_len, x.shape[1]
        allowed = attention_mask(memory_valid, is_first)
        distance = torch.arange(M + T - 1, -1, -1, device=x.device, dtype=x.dtype)
        pos = self.drop(sinusoid_embedding(distance, self.d_model))
        h = self.drop(x)
        inputs = []
        for l, layer in enumerate(self.layers):
            inputs.append(h)
            h = layer(h, memory[:, l], pos, allowed)
        history = torch.cat([memory, torch.stack(inputs, 1)], 2).detach()
        key_ids, query_ids = episode_ids(memory_valid, is_first)
        new_valid = (key_ids == query_ids[:, -1:])[:, -M:]
        return XLOutput(self.norm(h), history[:, :, -M:], new_valid, history, key_ids, query_ids)


__all__ = [
    "RelMultiHeadAttention",
    "TransformerXL",
    "TransformerXLLayer",
    "XLOutput",
    "attention_mask",
    "episode_ids",
    "rel_shift",
    "sinusoid_embedding",
]
