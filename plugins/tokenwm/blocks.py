"""TokenWM's building blocks: attention sub-layers over token sets, FiLM, the ViT encoder, the
perceiver read-out and the memory bank (paper sections 3.1–3.6).

Every sub-layer is residual with the norm where the spec puts it (``post_norm``):
post-norm ``x ← LN(x + f(x))`` (the paper's choice, section 3.2: "the post-norm structure
renormalizes the output after every layer [and] stabilizes the transition"; pre-norm "tends to
diverge when rolling out the model for longer"), or pre-norm ``x ← x + f(LN(x))``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Attention(nn.Module):
    """Multi-head attention of queries ``x [B, N, D]`` over ``kv [B, S, D_kv]`` (``kv = x``:
    self-attention), residual, normed after (post-norm) or before (pre-norm). Keys where
    ``ignore [B, S]`` is true are not attended to.

    The parameters are those of :class:`torch.nn.MultiheadAttention` (same names and
    initialisation), but the forward pass is its arithmetic alone (the projections, one
    :func:`~torch.nn.functional.scaled_dot_product_attention`, the output projection) without
    its per-call checks, mask conversion and copies, which dominate a step of TokenWM's recurrence
    over a few small token sets. The keys and values can be projected apart (:meth:`project_kv`)
    and passed in (``kv_proj``): once for a whole sequence (the posterior's patch tokens), or
    cached per state (the memory bank)."""

    def __init__(self, dim: int, heads: int, post_norm: bool, kv_dim: int | None = None) -> None:
        super().__init__()
        kv_dim = dim if kv_dim is None else kv_dim
        self.attn = nn.MultiheadAttention(dim, heads, kdim=kv_dim, vdim=kv_dim, batch_first=True)
        self.norm = nn.LayerNorm(dim)
        self.post_norm, self.heads, self.dim = post_norm, heads, dim

    def kv_weight(self) -> Tensor:
        """The stacked key and value projections ``[2·D, D_kv]``."""
        a = self.attn
        if a._qkv_same_embed_dim:
            return a.in_proj_weight[self.dim:]
        return torch.cat([a.k_proj_weight, a.v_proj_weight])

    def project_kv(self, kv: Tensor, bias: bool = True) -> Tensor:
        """Keys and values of ``kv [..., S, D_kv]``, stacked ``[..., S, 2·D]`` (``bias=False``:
        without the projection's bias, for sums of projected parts)."""
        return F.linear(kv, self.kv_weight(), self.attn.in_proj_bias[self.dim:] if bias else None)

    def project_q(self, x: Tensor) -> Tensor:
        a = self.attn
        weight = a.in_proj_weight[: self.dim] if a._qkv_same_embed_dim else a.q_proj_weight
        return F.linear(x, weight, a.in_proj_bias[: self.dim])

    def attend(self, q: Tensor, kv: Tensor, mask: Tensor | None = None) -> Tensor:
        return attend(self.attn, q, kv, mask)

    def forward(self, x: Tensor, kv: Tensor | None = None, ignore: Tensor | None = None,
                kv_proj: Tensor | None = None, mask: Tensor | None = None) -> Tensor:
        """``kv_proj``: ``kv`` already projected (:meth:`project_kv`); ``mask``: ``~ignore`` as
        :meth:`attend` reads it, when the caller has it."""
        q = x if self.post_norm else self.norm(x)
        if kv_proj is None and mask is None and not (self.training or torch.is_grad_enabled()):
            # inference (imagining, acting): torch's fused multi-head attention is faster still
            kv = q if kv is None else kv
            out = x + self.attn(q, kv, kv, key_padding_mask=ignore, need_weights=False)[0]
            return self.norm(out) if self.post_norm else out
        if kv_proj is None and kv is None:  # self-attention: one projection of q, k and v
            proj = F.linear(q, self.attn.in_proj_weight, self.attn.in_proj_bias)
            q, kv_proj = proj.split([self.dim, 2 * self.dim], -1)  # backward: one cat, not two zero-filled slices
        else:
            if kv_proj is None:
                kv_proj = self.project_kv(kv)
            q = self.project_q(q)
        if mask is None and ignore is not None:
            mask = ~ignore[:, None, None, :]
        out = x + self.attend(q, kv_proj, mask)
        return self.norm(out) if self.post_norm else out


def attend(attn: nn.MultiheadAttention, q: Tensor, kv: Tensor, mask: Tensor | None = None) -> Tensor:
    """``attn``'s attention of projected queries ``q [B, N, D]`` over projected keys and values
    ``kv [B, S, 2·D]``, then its output projection; ``mask [B, 1, 1, S]`` true where a key is
    attended to."""
    B, N, D = q.shape
    S, h = kv.shape[-2], attn.num_heads
    q = q.reshape(B, N, h, D // h).transpose(1, 2)
    k, v = kv.reshape(B, S, 2, h, D // h).permute(2, 0, 3, 1, 4)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return attn.out_proj(out.transpose(1, 2).reshape(B, N, D))


class FeedForward(nn.Module):
    """``Linear → GELU → Linear`` of width ``mult · D``, residual, normed as :class:`Attention`."""

    def __init__(self, dim: int, mult: int, post_norm: bool) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, mult * dim), nn.GELU(), nn.Linear(mult * dim, dim))
        self.norm = nn.LayerNorm(dim)
        self.post_norm = post_norm

    def forward(self, x: Tensor) -> Tensor:
        if self.post_norm:
            return self.norm(x + self.net(x))
        return x + self.net(self.norm(x))


class FiLM(nn.Module):
    """Feature-wise linear modulation ``x ← (1 + γ(a)) ⊙ x + β(a)`` by a vector ``a [B, A]``
    (Perez et al. 2018; RT-1 conditions its image tokens this way). Unlike RT-1, which
    zero-initialises it to keep a pre-trained image network intact, the projection has the
    default initialisation: zero-initialised, the action's gradient vanished behind the
    zero-initialised reward head and the model learned to ignore the action (tested)."""

    def __init__(self, cond_dim: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(cond_dim, 2 * dim)

    def forward(self, x: Tensor, cond: Tensor | None = None, projected: Tensor | None = None) -> Tensor:
        """``projected``: ``self.proj(cond)``, when the caller projected a whole sequence at once."""
        gamma, beta = (self.proj(cond) if projected is None else projected).unsqueeze(-2).chunk(2, -1)
        return (1 + gamma) * x + beta


class CrossBlock(nn.Module):
    """One block of the posterior (3.3) and of the memory reader (3.5): cross-attention of the
    state tokens over other tokens, self-attention, feed-forward."""

    def __init__(self, dim: int, heads: int, mult: int, post_norm: bool, kv_dim: int | None = None) -> None:
        super().__init__()
        self.cross = Attention(dim, heads, post_norm, kv_dim)
        self.self_attn = Attention(dim, heads, post_norm)
        self.ff = FeedForward(dim, mult, post_norm)

    def forward(self, x: Tensor, kv: Tensor | None = None, ignore: Tensor | None = None,
                kv_proj: Tensor | None = None, mask: Tensor | None = None) -> Tensor:
        """``kv_proj``, ``mask``: as :meth:`Attention.forward` takes them, for the cross-attention."""
        return self.ff(self.self_attn(self.cross(x, kv, ignore, kv_proj, mask)))


class FiLMBlock(nn.Module):
    """One block of the prior (3.2): FiLM by the action, self-attention, feed-forward."""

    def __init__(self, dim: int, heads: int, mult: int, post_norm: bool, action_dim: int) -> None:
        super().__init__()
        self.film = FiLM(action_dim, dim)
        self.self_attn = Attention(dim, heads, post_norm)
        self.ff = FeedForward(dim, mult, post_norm)

    def forward(self, x: Tensor, action: Tensor | None = None, film: Tensor | None = None) -> Tensor:
        """``film``: the FiLM projection of the action, when the caller has it (:class:`FiLM`)."""
        return self.ff(self.self_attn(self.film(x, action, film)))


class PerceiverReadout(nn.Module):
    """Perceiver-IO decoding (Jaegle et al. 2021; TokenWM 3.4 and 3.6): ``queries`` learned tokens
    cross-attend to a token set ``[B, N, D]`` and give ``[B, queries, D]``."""

    def __init__(self, dim: int, heads: int, queries: int, post_norm: bool) -> None:
        super().__init__()
        self.queries = nn.Parameter(torch.randn(queries, dim) * 0.02)
        self.cross = Attention(dim, heads, post_norm)

    def forward(self, tokens: Tensor) -> Tensor:
        lead = tokens.shape[:-2]
        flat = tokens.reshape(-1, *tokens.shape[-2:])
        cross, M = self.cross, flat.shape[0]
        # the queries are the same for every row: normed and projected once, not once per row
        x = self.queries.expand(M, -1, -1)
        q = cross.project_q(self.queries if cross.post_norm else cross.norm(self.queries)).expand(M, -1, -1)
        out = x + cross.attend(q, cross.project_kv(flat))
        out = cross.norm(out) if cross.post_norm else out
        return out.reshape(*lead, *out.shape[-2:])


class ViTEncoder(nn.Module):
    """z_t = f_φ(o_t) (3.1): a ViT trained from scratch. ``p × p`` patches of the frame, a learned
    position embedding, pre-norm transformer layers, a final LayerNorm; ``[..., N_z, D_z]`` patch
    tokens (no class token: the patch features are the output)."""

    def __init__(self, obs_shape: tuple[int, int, int], patch: int, dim: int, layers: int, heads: int, mult: int) -> None:
        super().__init__()
        c, h, w = obs_shape
        self.patchify = nn.Conv2d(c, dim, patch, stride=patch)
        self.pos = nn.Parameter(torch.randn((h // patch) * (w // patch), dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, mult * dim, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)

    def forward(self, obs: Tensor) -> Tensor:
        """uint8 frames ``[..., C, H, W]`` → ``[..., N_z, D_z]``. Each layer's arithmetic is
        :class:`torch.nn.TransformerEncoderLayer`'s (pre-norm, GELU, no dropout; its parameters),
        without its multi-head attention's per-call layout copies (:func:`attend`)."""
        lead = obs.shape[:-3]
        x = obs.reshape(-1, *obs.shape[-3:]).float() / 255.0 - 0.5
        z = self.patchify(x).flatten(2).transpose(1, 2) + self.pos
        for layer in self.layers.layers:
            attn, D = layer.self_attn, z.shape[-1]
            proj = F.linear(layer.norm1(z), attn.in_proj_weight, attn.in_proj_bias)
            z = z + attend(attn, *proj.split([D, 2 * D], -1))
            z = z + layer.linear2(F.gelu(layer.linear1(layer.norm2(z))))
        z = self.norm(z)
        return z.reshape(*lead, *z.shape[-2:])


def push(bank: Tensor, valid: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
    """The memory bank as a FIFO queue (3.5): drop the oldest of ``bank [B, n, N_h, D]`` (slot 0),
    append ``h [B, N_h, D]`` as the newest (slot n − 1); ``valid [B, n]`` moves with it."""
    bank = torch.cat([bank[:, 1:], h.unsqueeze(1)], 1)
    valid = torch.cat([valid[:, 1:], valid.new_ones(valid.shape[0], 1)], 1)
    return bank, valid
