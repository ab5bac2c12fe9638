"""Retentive networks (RetNet): multi-scale retention in parallel, recurrent and chunkwise form.

Papers:
    Sun et al., "Retentive Network: A Successor to Transformer for Large Language Models", 2023:
        retention (eq. 1-8), multi-scale retention and the RetNet layer.
    Cohen et al., "Improving Token-Based World Models with Parallel Observation Prediction" (REM),
        2024: section 2.2 (chunkwise eq. 4-5), section 2.4 (intermediate states eq. 6-7, POP,
        algorithms 1-2) and appendix A.3 (layer, decays, MSR).

One retention head with decay ``γ`` and rotary frequencies ``θ`` (``Θ_n = e^{inθ}``, A.3) maps
``q, k, v`` ``[..., T, d]`` to::

    o_n = Σ_{m ≤ n} γ^{n−m} (q_n Θ_n)(k_m Θ̄_m)ᵀ v_m                 parallel   (A.3: (QKᵀ ⊙ D) V)

**States in their own frame.** The recurrent state of the papers, ``S_n = Σ γ^{n−m} (k_m Θ̄_m)ᵀ v_m``,
holds keys rotated at *absolute* positions, so every query must know its absolute index (the
chunk index ``i`` of eq. 4). Here a state is kept rotated into the frame of its own last position,
``T_n = R_n S_n`` (``R_p`` rotates the key dimension by ``−pθ``), which turns the relative phase of
rotary positions into local positions and gives exactly the same outputs::

    T_n = γ R_1 T_{n−1} + k_nᵀ v_n,   o_n = q_n T_n                     recurrent
    Y = (Q Kᵀ ⊙ D) V + (Q T_p) ⊙ ξ,   T_{p+B} = R_B ((K ⊙ ζ)ᵀ V + γ^B T_p)   chunkwise (eq. 4-5)

with ``Q, K`` rotated at the chunk-local positions ``1..B`` (``ξ_i = γ^i``, ``ζ_m = γ^{B−m}``). A
state therefore needs no position counter, states of different time steps can be batched (the POP
extension of section 2.4 becomes a plain batched chunk call) and positions never grow large in
float32. Rotation acts on (even, odd) pairs with ``θ_j = base^{−j/(d/2 − 1)}`` (the official
code's ``yet-another-retnet`` frequencies); xPos's extra length scaling is not used (A.3 writes
``Θ_n = e^{inθ}``; the decay already bounds long-range terms).

Episode boundaries: ``reset[b, t]`` clears row ``b``'s state just before token ``t``; every form
then behaves as if a fresh sequence started there (masking the decay matrix ``D`` across episodes).

File order: spec → functional retention → multi-scale retention → layer → stack.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import Tensor, nn

from wmzoo.specs import Spec

# --------------------------------------------------------------------------- spec


class RetNetSpec(Spec):
    """A RetNet stack (defaults: REM table 7 and appendix A.3)."""

    d_model: int = Field(256, ge=2, le=8192, description="d: embedding dimension (REM table 7: 256)")
    n_heads: int = Field(4, ge=1, le=128, description="retention heads per layer (table 7: 4)")
    n_layers: int = Field(5, ge=1, le=96, description="RetNet layers (table 7: 5)")
    d_ff: int = Field(1024, ge=1, le=65536, description="feed-forward hidden units (table 7: 1024)")
    dropout: float = Field(0.1, ge=0, lt=1, description="dropout on the residual branches (table 7: 0.1)")
    norm_eps: float = Field(1e-6, gt=0, le=1, description="LayerNorm and GroupNorm epsilon (table 7: 1e-6)")
    decays: Literal["paper", "log-spaced"] = Field(
        "paper",
        description="per-head decays γ: 'paper' = 1 − 2^(−5−arange(h)) (A.3); 'log-spaced' = "
        "1 − exp(linspace(ln 1/32, ln 1/512, h)) (REM's official code)",
    )
    activation: Literal["gelu", "silu"] = Field(
        "gelu", description="feed-forward activation: 'gelu' (A.3 eq. 10) or 'silu' (official code)"
    )
    rotary_base: float = Field(10000.0, gt=1, description="base of the rotary frequencies θ")

    @model_validator(mode="after")
    def _heads_divide(self) -> RetNetSpec:
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"d_model {self.d_model} must split into {self.n_heads} heads of an even width"
            )
        return self

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


def decay_rates(n_heads: int, kind: Literal["paper", "log-spaced"]) -> Tensor:
    """Per-head decays ``γ`` ``[h]`` (float64)."""
    if kind == "paper":  # REM A.3 / RetNet: η = 1 − 2^(−5 − arange(0, h))
        return 1 - 2.0 ** (-5 - torch.arange(n_heads, dtype=torch.float64))
    # official REM (yet-another-retnet): 1 − exp(linspace(log 1/32, log 1/512, h))
    return 1 - torch.exp(torch.linspace(math.log(1 / 32), math.log(1 / 512), n_heads, dtype=torch.float64))


def rotary_frequencies(head_dim: int, base: float) -> Tensor:
    """``θ_j = base^{−j/(d/2 − 1)}`` for the ``d/2`` (even, odd) pairs of a head, float64."""
    return base ** -torch.linspace(0, 1, head_dim // 2, dtype=torch.float64)


# --------------------------------------------------------------------------- functional retention


def rotate(x: Tensor, angle: Tensor) -> Tensor:
    """Rotate the (even, odd) pairs of the last dimension of ``x`` by ``angle`` (broadcast to
    ``x[..., ::2]``): ``(a, b) → (a cos φ − b sin φ, a sin φ + b cos φ)``."""
    return _rotate(x, torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype))


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)


def rotate_state(state: Tensor, steps: Tensor | float, theta: Tensor) -> Tensor:
    """``R_steps state``: move a state ``[..., d_k, d_v]`` ``steps`` positions ahead (its key
    dimension rotated by ``−steps·θ``). ``steps`` broadcasts against ``state[..., 0, 0]``."""
    steps = torch.as_tensor(steps, dtype=theta.dtype, device=theta.device)
    angle = -steps[..., None, None] * theta  # [..., 1, d_k/2]
    return rotate(state.transpose(-1, -2), angle).transpose(-1, -2)


@dataclass(frozen=True)
class ChunkTables:
    """What a chunk of ``T`` tokens needs that depends only on ``T`` and the heads' ``γ``, ``θ``:
    rotary cos/sin at positions ``1..T`` ``[T, d/2]``, the decay mask ``D`` ``[h, T, T]``,
    ``ξ_i = γ^i`` and ``ζ_m = γ^{T−m}`` ``[h, T, 1]``, ``γ^T`` ``[h, 1, 1]``, ``log γ`` ``[h]`` and the
    cos/sin of ``R_T`` (the state's move to the chunk's end) ``[d/2]``."""

    cos: Tensor
    sin: Tensor
    decay: Tensor
    xi: Tensor
    zeta: Tensor
    gamma_T: Tensor
    log_g: Tensor
    end_cos: Tensor
    end_sin: Tensor


def chunk_tables(T: int, gamma: Tensor, theta: Tensor, dtype: torch.dtype) -> ChunkTables:
    """:class:`ChunkTables` for ``T`` tokens (``gamma``, ``theta`` on the target device)."""
    with torch.inference_mode(False), torch.no_grad():  # plain tensors, reusable under autograd
        pos = torch.arange(1, T + 1, device=theta.device, dtype=theta.dtype)
        angle = pos[:, None] * theta  # [T, d/2]
        log_g = torch.log(gamma)  # [h]
        diff = pos[:, None] - pos[None, :]
        decay = torch.where(diff >= 0, torch.exp(diff.clamp(min=0) * log_g[:, None, None]), 0.0)
        return ChunkTables(
            cos=torch.cos(angle).to(dtype), sin=torch.sin(angle).to(dtype), decay=decay.to(dtype),
            xi=torch.exp(pos[None, :] * log_g[:, None]).to(dtype)[:, :, None],
            zeta=torch.exp((T - pos)[None, :] * log_g[:, None]).to(dtype)[:, :, None],
            gamma_T=torch.exp(T * log_g).to(dtype)[:, None, None], log_g=log_g,
            end_cos=torch.cos(-T * theta).to(dtype), end_sin=torch.sin(-T * theta).to(dtype),
        )


def retention_chunk(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    gamma: Tensor,
    theta: Tensor,
    state: Tensor | None = None,
    reset: Tensor | None = None,
    block_len: int | None = None,
    update_state: bool = True,
    tables: ChunkTables | None = None,
    state_tables: ChunkTables | None = None,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """One chunk of retention from ``state`` (REM eq. 4-5; with ``state = None`` the parallel form).

    ``q, k, v`` ``[B, h, T, d]``, ``gamma`` ``[h]``, ``theta`` ``[d/2]``, ``state`` ``[B, h, d, d]``
    in its own frame, ``reset`` bool ``[B, T]``. Returns ``(out [B, h, T, d], new state or None,
    block states or None)``. With ``block_len = L`` (``T = cL``) the states after each of the ``c``
    blocks are returned too, ``[B, c, h, d, d]``, computed as REM eq. 6-7: per-block sums
    ``S̃_j = (K_j ⊙ ζ)ᵀ V_j`` in parallel, then ``S_j = S̃_j + γ^L S_{j−1}`` (resets may then only
    fall on block starts). ``tables``: :func:`chunk_tables` of ``T`` when the caller keeps them.
    ``state_tables``: :func:`chunk_tables` of ``n < T``: the new state absorbs the first ``n``
    tokens alone, while every token's output is computed (the later ones read the state those
    ``n`` leave, as a second chunk from it would: retention is linear in the state); no ``reset``.
    """
    B, h, T, d = q.shape
    dtype, device = q.dtype, q.device
    theta = theta.to(device)
    t = tables if tables is not None else chunk_tables(T, gamma.to(device), theta, dtype)
    Q, K = _rotate(q, t.cos, t.sin), _rotate(k, t.cos, t.sin)
    scores = (Q @ K.transpose(-1, -2)) * t.decay
    fresh = last = None
    if reset is not None:  # mask pairs of tokens from different episodes
        ids = reset.long().cumsum(1)  # tokens share an id when no reset lies between them
        scores = scores * (ids[:, :, None] == ids[:, None, :]).to(dtype)[:, None]
        fresh = (ids == 0).to(dtype)[:, None, :, None]  # tokens that still see the carried state
        last = (ids == ids[:, -1:]).to(dtype)[:, None, :, None]  # tokens of the last episode
    out = scores @ v
    if state is not None:
        read = (Q @ state) * t.xi  # ξ_i = γ^i
        out = out + (read if fresh is None else read * fresh)
    if not update_state:
        return out, None, None
    if block_len is not None:
        blocks = _block_states(K, v, t.log_g, theta, state, reset, block_len)
        return out, blocks[:, -1], blocks
    if state_tables is not None:  # the state absorbs the first n tokens alone
        if reset is not None:
            raise ValueError("state_tables cannot be combined with resets")
        n = state_tables.zeta.shape[1]
        K, v, t = K[:, :, :n], v[:, :, :n], state_tables
    weighted = K * t.zeta if last is None else K * t.zeta * last  # ζ_m = γ^{T−m}
    new = weighted.transpose(-1, -2) @ v
    if state is not None:
        carried = t.gamma_T * state
        new = new + (carried if fresh is None else carried * fresh[:, :, -1:, :])
    return out, _rotate(new.transpose(-1, -2), t.end_cos, t.end_sin).transpose(-1, -2), None


def _block_states(
    K: Tensor, v: Tensor, log_g: Tensor, theta: Tensor, state: Tensor | None,
    reset: Tensor | None, block_len: int,
) -> Tensor:
    """REM eq. 6-7 in chunk-local frame, then each state moved into its own frame ``[B, c, h, d, d]``."""
    B, h, T, d = K.shape
    if T % block_len:
        raise ValueError(f"a chunk of {T} tokens is not a whole number of {block_len}-token blocks")
    c, L = T // block_len, block_len
    if reset is not None and reset.reshape(B, c, L)[:, :, 1:].any():
        raise ValueError("with block_len, resets may only fall on the first token of a block")
    r = torch.arange(1, L + 1, device=K.device, dtype=log_g.dtype)
    zeta = torch.exp((L - r)[None, :] * log_g[:, None]).to(K.dtype)  # ζ_m = γ^{L−m}, [h, L]
    Kb = K.reshape(B, h, c, L, d) * zeta[None, :, None, :, None]
    partial = Kb.transpose(-1, -2) @ v.reshape(B, h, c, L, -1)  # S̃_j (eq. 6), [B, h, c, d, d]
    keep = torch.ones(B, c, dtype=K.dtype, device=K.device)
    if reset is not None:
        keep = 1.0 - reset.reshape(B, c, L)[:, :, 0].to(K.dtype)
    gL = torch.exp(L * log_g).to(K.dtype)[:, None, None]
    prev = state if state is not None else torch.zeros_like(partial[:, :, 0])
    states = []
    for j in range(c):  # eq. 7, sequential over the c blocks
        prev = partial[:, :, j] + gL * prev * keep[:, j, None, None, None]
        states.append(prev)
    local = torch.stack(states, 1)  # [B, c, h, d, d]
    steps = torch.arange(1, c + 1, device=K.device, dtype=theta.dtype) * L
    return rotate_state(local, steps[:, None], theta.to(K.device))


def retention_parallel(
    q: Tensor, k: Tensor, v: Tensor, gamma: Tensor, theta: Tensor, reset: Tensor | None = None
) -> Tensor:
    """The parallel form over a whole sequence from an empty state: ``(QKᵀ ⊙ D) V``."""
    return retention_chunk(q, k, v, gamma, theta, None, reset, update_state=False)[0]


def retention_step(
    q: Tensor, k: Tensor, v: Tensor, gamma: Tensor, theta: Tensor, state: Tensor,
    reset: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The recurrent form for one token ``q, k, v`` ``[B, h, d]``: ``T ← γ R_1 T + kᵀv``, ``o = qT``."""
    if reset is not None:
        state = state * (~reset).to(state.dtype)[:, None, None, None]
    g = gamma.to(q.device, q.dtype)[:, None, None]
    state = g * rotate_state(state, 1.0, theta.to(q.device)) + k[..., :, None] * v[..., None, :]
    return (q[..., None, :] @ state).squeeze(-2), state


def retention_recurrent(
    q: Tensor, k: Tensor, v: Tensor, gamma: Tensor, theta: Tensor,
    state: Tensor | None = None, reset: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The recurrent form token by token over ``[B, h, T, d]``; returns outputs and the last state."""
    B, h, T, d = q.shape
    state = q.new_zeros(B, h, d, v.shape[-1]) if state is None else state
    outs = []
    for t in range(T):
        o, state = retention_step(
            q[:, :, t], k[:, :, t], v[:, :, t], gamma, theta, state, None if reset is None else reset[:, t]
        )
        outs.append(o)
    return torch.stack(outs, 2), state


def retention_chunkwise(
    q: Tensor, k: Tensor, v: Tensor, gamma: Tensor, theta: Tensor, chunk: int,
    state: Tensor | None = None, reset: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The chunkwise form (REM eq. 4-5): chunks of ``chunk`` tokens, state carried between them."""
    outs = []
    for start in range(0, q.shape[2], chunk):
        sl = slice(start, start + chunk)
        o, state, _ = retention_chunk(
            q[:, :, sl], k[:, :, sl], v[:, :, sl], gamma, theta, state,
            None if reset is None else reset[:, sl],
        )
        outs.append(o)
    assert state is not None
    return torch.cat(outs, 2), state


# --------------------------------------------------------------------------- multi-scale retention


class MultiScaleRetention(nn.Module):
    """MSR (A.3): heads of retention with their own decay, ``GroupNorm_h``, swish gate, output map.

    ``MSR(X) = (swish(X W_G) ⊙ GroupNorm_h(Concat(head_1 .. head_h))) W_O``; ``q, k, v`` projections
    with bias, ``k`` scaled by ``1/√d_head``, GroupNorm per token without affine parameters (as the
    official code).
    """

    gamma: Tensor
    theta: Tensor

    def __init__(self, spec: RetNetSpec) -> None:
        super().__init__()
        d, self.heads, self.head_dim = spec.d_model, spec.n_heads, spec.head_dim
        self.qkv = nn.Linear(d, 3 * d)
        self.gate = nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        self.norm = nn.GroupNorm(spec.n_heads, d, eps=spec.norm_eps, affine=False)
        # float32 buffers (they follow the module's dtype); chunk-local positions stay small
        self.register_buffer("gamma", decay_rates(spec.n_heads, spec.decays).float(), persistent=False)
        self.register_buffer("theta", rotary_frequencies(spec.head_dim, spec.rotary_base).float(), persistent=False)
        self._tables: dict[tuple[int, torch.device, torch.dtype], ChunkTables] = {}

    def tables(self, T: int, dtype: torch.dtype) -> ChunkTables:
        """This module's :func:`chunk_tables` for chunks of ``T`` tokens, built once per length,
        device and dtype (imagination runs the same two chunk lengths at every step)."""
        key = (T, self.theta.device, dtype)
        if key not in self._tables:
            self._tables[key] = chunk_tables(T, self.gamma, self.theta, dtype)
        return self._tables[key]

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``x [N, T, d]`` → ``q, k, v`` ``[N, h, T, d_head]`` (``k`` scaled)."""
        q, k, v = self.qkv(x).unflatten(-1, (3, self.heads, self.head_dim)).permute(2, 0, 3, 1, 4)
        return q, k / math.sqrt(self.head_dim), v

    def finish(self, x: Tensor, heads: Tensor) -> Tensor:
        """Heads ``[N, h, T, d_head]`` → ``(swish(x W_G) ⊙ GroupNorm_h(heads)) W_O`` ``[N, T, d]``."""
        y = heads.transpose(1, 2).flatten(2)
        y = self.norm(y.reshape(-1, y.shape[-1])).reshape(y.shape)
        return self.out(F.silu(self.gate(x)) * y)


# --------------------------------------------------------------------------- layer and stack


class RetNetLayer(nn.Module):
    """``X = MSR(LN(Y)) + Y``, ``Y' = FFN(LN(X)) + X`` (A.3 eq. 9-10), dropout on both branches."""

    def __init__(self, spec: RetNetSpec) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(spec.d_model, eps=spec.norm_eps)
        self.msr = MultiScaleRetention(spec)
        self.norm2 = nn.LayerNorm(spec.d_model, eps=spec.norm_eps)
        act = nn.GELU() if spec.activation == "gelu" else nn.SiLU()
        self.ffn = nn.Sequential(nn.Linear(spec.d_model, spec.d_ff), act, nn.Linear(spec.d_ff, spec.d_model))
        self.drop = nn.Dropout(spec.dropout)

    def _ffn(self, x: Tensor) -> Tensor:
        return x + self.drop(self.ffn(self.norm2(x)))

    def chunk(
        self, x: Tensor, state: Tensor | None, reset: Tensor | None, update_state: bool = True,
        keep_last: int | None = None, absorb: int | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Chunkwise form over ``x [N, T, d]`` from ``state [N, h, d_h, d_h]``; with
        ``keep_last = n`` only the last ``n`` tokens' outputs are computed past the retention
        (the state still absorbs every token); ``absorb = n``: the state absorbs the first ``n``
        tokens alone (:func:`retention_chunk`'s ``state_tables``)."""
        h = self.norm1(x)
        q, k, v = self.msr.project(h)
        o, new, _ = retention_chunk(
            q, k, v, self.msr.gamma, self.msr.theta, state, reset, update_state=update_state,
            tables=self.msr.tables(x.shape[1], q.dtype),
            state_tables=None if absorb is None else self.msr.tables(absorb, q.dtype),
        )
        if keep_last is not None:
            first = x.shape[1] - keep_last
            x, h, o = x[:, first:], h[:, first:], o[:, :, first:]
        return self._ffn(x + self.drop(self.msr.finish(h, o))), new

    def step(self, x: Tensor, state: Tensor, reset: Tensor | None) -> tuple[Tensor, Tensor]:
        """Recurrent form for one token ``x [N, d]``."""
        h = self.norm1(x[:, None])
        q, k, v = self.msr.project(h)
        o, state = retention_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], self.msr.gamma, self.msr.theta, state, reset)
        return self._ffn(x + self.drop(self.msr.finish(h, o[:, :, None]))[:, 0]), state

    def pop(
        self, x: Tensor, u: Tensor, state: Tensor | None, reset: Tensor | None, block_len: int
    ) -> tuple[Tensor, Tensor, Tensor]:
        """REM algorithm 2 (POPLayer): real tokens ``x [N, cL, d]`` chunkwise with the states after
        every block (eq. 6-7), then each block's prediction latents ``u [N, c, P, d]`` from the
        state before that block, all blocks in one batched call, states not updated."""
        N, c, P, d = u.shape
        h = self.norm1(x)
        q, k, v = self.msr.project(h)
        o, new, blocks = retention_chunk(
            q, k, v, self.msr.gamma, self.msr.theta, state, reset, block_len=block_len,
            tables=self.msr.tables(x.shape[1], q.dtype),
        )
        assert new is not None and blocks is not None
        x = self._ffn(x + self.drop(self.msr.finish(h, o)))
        first = torch.zeros_like(blocks[:, :1]) if state is None else state[:, None]
        before = torch.cat([first, blocks[:, :-1]], 1)  # S_[i, j−1] for j = 1..c
        if reset is not None:  # a block that starts an episode predicts from an empty state
            keep = ~reset.reshape(N, c, block_len)[:, :, 0]
            before = before * keep.to(before.dtype)[:, :, None, None, None]
        hu = self.norm1(u.reshape(N * c, P, d))
        qu, ku, vu = self.msr.project(hu)
        ou, _, _ = retention_chunk(
            qu, ku, vu, self.msr.gamma, self.msr.theta, before.flatten(0, 1), update_state=False,
            tables=self.msr.tables(P, qu.dtype),
        )
        u = self._ffn(u.reshape(N * c, P, d) + self.drop(self.msr.finish(hu, ou)))
        return x, u.reshape(N, c, P, d), new


class RetNet(nn.Module):
    """A stack of RetNet layers (pre-LN, no final norm, Xavier-normal init as the official code).

    A state is one tensor ``[N, layers, heads, d_head, d_head]`` (batch first). ``forward`` is one
    chunkwise call, the unit the REM paper counts as one world-model call; ``recurrent`` runs the
    recurrent form token by token; ``pop_forward`` is REM's algorithm 1.
    """

    def __init__(self, spec: RetNetSpec) -> None:
        super().__init__()
        self.spec = spec
        self.layers = nn.ModuleList(RetNetLayer(spec) for _ in range(spec.n_layers))
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_normal_(module.weight)
                nn.init.zeros_(module.bias)

    def initial_state(
        self, batch: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> Tensor:
        """The empty state ``[N, layers, heads, d_head, d_head]``."""
        s = self.spec
        return torch.zeros(batch, s.n_layers, s.n_heads, s.head_dim, s.head_dim, device=device, dtype=dtype)

    def forward(
        self, x: Tensor, state: Tensor | None = None, reset: Tensor | None = None, update_state: bool = True,
        keep_last: int | None = None, absorb: int | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """One chunk ``x [N, T, d]`` from ``state`` (None: empty): outputs and the new state (None
        when ``update_state`` is false: prediction tokens read the state but never write it).
        ``keep_last = n``: outputs of the last ``n`` tokens only, ``[N, n, d]``; the last layer then
        skips the rest, whose outputs nothing reads (REM's state update reads one token's).
        ``absorb = n``: the new state is the one after the first ``n`` tokens, which the later
        tokens read without writing it: ``forward(cat(x, u), s, absorb=n)`` equals
        ``forward(x, s)`` then ``forward(u, new, update_state=False)`` in one call (REM's
        imagination step, :meth:`absorb_then_predict`)."""
        states = []
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x, new = layer.chunk(
                x, None if state is None else state[:, i], reset, update_state, keep_last if i == last else None,
                absorb,
            )
            states.append(new)
        return x, torch.stack(states, 1) if update_state else None  # type: ignore[arg-type]

    def absorb_then_predict(self, x: Tensor, u: Tensor, state: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The state after the block ``x [N, L, d]``, and the outputs of ``u [N, P, d]`` read from
        it without writing it, in one chunkwise call of ``L + P`` tokens (REM figure 4's two calls
        of an imagination step fused; equal to them up to float rounding, as retention is linear in
        the state). Returns ``(x's last output [N, d], u's outputs [N, P, d], new state)``."""
        L, P = x.shape[1], u.shape[1]
        y, new = self(torch.cat([x, u], 1), state, keep_last=P + 1, absorb=L)
        assert new is not None
        return y[:, 0], y[:, 1:], new

    def chunkwise(
        self, x: Tensor, chunk: int, state: Tensor | None = None, reset: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Chunks of ``chunk`` tokens, one :meth:`forward` each, the state carried between them."""
        state = self.initial_state(x.shape[0], x.device, x.dtype) if state is None else state
        outs = []
        for start in range(0, x.shape[1], chunk):
            sl = slice(start, start + chunk)
            y, state = self(x[:, sl], state, None if reset is None else reset[:, sl])
            outs.append(y)
        assert state is not None
        return torch.cat(outs, 1), state

    def recurrent(
        self, x: Tensor, state: Tensor | None = None, reset: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """The recurrent form, one token at a time."""
        state = self.initial_state(x.shape[0], x.device, x.dtype) if state is None else state
        outs = []
        for t in range(x.shape[1]):
            y, states = x[:, t], []
            for i, layer in enumerate(self.layers):
                y, s = layer.step(y, state[:, i], None if reset is None else reset[:, t])
                states.append(s)
            state = torch.stack(states, 1)
            outs.append(y)
        return torch.stack(outs, 1), state

    def pop_forward(
        self, x: Tensor, u: Tensor, state: Tensor | None, block_len: int, reset: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """REM algorithm 1: one chunk of ``c`` blocks ``x [N, cL, d]`` and prediction-token
        embeddings ``u [N, c, P, d]`` layer by layer. Returns the real tokens' outputs, the
        prediction tokens' outputs (block ``j``'s read the state before block ``j``) and the state
        after the chunk."""
        states = []
        for i, layer in enumerate(self.layers):
            x, u, new = layer.pop(x, u, None if state is None else state[:, i], reset, block_len)
            states.append(new)
        return x, u, torch.stack(states, 1)
