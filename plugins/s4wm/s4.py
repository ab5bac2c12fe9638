"""The diagonal S4 layer (S4D) and the S4 block of S4WM, each in a parallel and a recurrent form.

Papers:
    Gu, Gupta, Goel, Ré, "On the Parameterization and Initialization of Diagonal State Space
        Models" (S4D), 2022: the diagonal parameterisation, S4D-Lin / S4D-Inv initialisation,
        ZOH discretisation and the Vandermonde kernel used here.
    Gu, Goel, Ré, "Efficiently Modeling Long Sequences with Structured State Spaces" (S4), 2022:
        H independent single-input single-output SSMs, one per channel, with a skip D.
    Deng et al., "Facing Off World Model Backbones: RNNs, Transformers, and S4" (s4wm), 2023,
        section 4 eq. 4 and the project-page figure: the S4 block.

Notation (one channel; every channel h = 1..H has its own parameters):
    Λ ∈ C^{N/2}  diagonal state matrix (N/2 complex modes; their conjugates are implicit, which is
                 why outputs are 2·Re(·))                                    [``lambda_``]
    Δ            step size, log Δ ~ U(log dt_min, log dt_max)              [``log_dt``]
    B, C ∈ C^{N/2}, D ∈ R                                                     [``B``, ``C``, ``D``]
    Ā = exp(ΔΛ),  B̄ = (Ā − 1)/Λ · B                                          (ZOH)
    recurrent:  s_t = Ā s_{t−1} + B̄ u_t,   y_t = 2·Re(C s_t) + D u_t
    parallel:   y = K ∗ u + D u,  K_l = 2·Re(C B̄ Ā^l)  (Vandermonde), causal convolution by FFT
                over 2L points (O(L log L)), plus the decayed initial state 2·Re(C Ā^{t+1} s_{−1}).

Resets. ``reset[:, t]`` zeroes the state *before* step t (s_{t−1} := 0), as an episode start does.
The parallel form honours it exactly: the convolution runs once per segment between resets on the
inputs of that segment only (``_segments``), so a window that crosses an episode boundary equals two
separate passes. Complex states are ``[B, H, N/2]`` ``torch.cfloat``/``cdouble``.

File order: initialisation → S4D layer → S4 block → stack of blocks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# --------------------------------------------------------------------------- initialisation


def s4d_lambda(channels: int, modes: int, init: Literal["lin", "inv"] = "lin") -> Tensor:
    """The HiPPO-derived diagonal ``Λ`` of S4D, ``[channels, modes]`` complex (S4D §4).

    S4D-Lin: ``Λ_n = −1/2 + iπn``; S4D-Inv: ``Λ_n = −1/2 + i N/π (N/(2n+1) − 1)`` with
    ``N = 2 · modes`` the real state size.
    """
    n = torch.arange(modes, dtype=torch.float64)
    if init == "lin":
        imag = math.pi * n
    elif init == "inv":
        N = 2 * modes
        imag = N / math.pi * (N / (2 * n + 1) - 1)
    else:
        raise ValueError(f"unknown S4D init {init!r}; use 'lin' or 'inv'")
    return torch.complex(torch.full_like(n, -0.5), imag).expand(channels, modes).clone()


# --------------------------------------------------------------------------- S4D layer


class S4DLayer(nn.Module):
    """``H = d_model`` independent diagonal SSMs of real state size ``N`` (``N/2`` complex modes).

    Trainable: ``log_dt`` [H], ``Re Λ`` through ``log(−Re Λ)`` (stays negative: stable), ``Im Λ``,
    ``B`` (init ones), ``C`` (init complex normal, variance 1), ``D`` (init normal), as S4D.
    """

    def __init__(
        self,
        d_model: int,
        state_size: int = 64,
        dt_min: float = 1e-3,
        dt_max: float = 1e-1,
        init: Literal["lin", "inv"] = "lin",
    ) -> None:
        super().__init__()
        if state_size % 2:
            raise ValueError(f"state_size must be even (N/2 complex conjugate pairs), got {state_size}")
        H, M = d_model, state_size // 2
        self.d_model, self.modes = H, M
        log_dt = torch.rand(H) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
        lam = s4d_lambda(H, M, init)
        self.log_dt = nn.Parameter(log_dt)
        self.log_neg_re = nn.Parameter(torch.log(-lam.real).float())
        self.imag = nn.Parameter(lam.imag.float())
        self.B = nn.Parameter(torch.view_as_real(torch.ones(H, M, dtype=torch.cfloat)).clone())
        self.C = nn.Parameter(torch.view_as_real(torch.randn(H, M, dtype=torch.cfloat)).clone())
        self.D = nn.Parameter(torch.randn(H))

    SSM_PARAMETERS = ("log_dt", "log_neg_re", "imag", "B")
    """Δ, Λ and B: the parameters S4's code registers with their own rate and no weight decay."""

    def set_ssm_optim(self, lr_scale: float) -> None:
        """Train Δ, Λ and B at ``lr_scale`` times the model's rate, without weight decay (S4's
        ``register(name, tensor, lr)``: its own optimizer group, ``weight_decay`` 0 and the rate
        ``lr = min(0.001, model lr)`` of its example; S4WM passes that rate as a scale)."""
        for name in self.SSM_PARAMETERS:
            getattr(self, name)._optim = {"lr_scale": lr_scale, "weight_decay": 0.0}

    # -- discretisation -----------------------------------------------------------------------
    def discrete(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(dtΛ, Ā, B̄)``, each ``[H, N/2]`` complex (ZOH)."""
        lam = torch.complex(-torch.exp(self.log_neg_re), self.imag)
        dt_lam = lam * torch.exp(self.log_dt).unsqueeze(-1)
        A_bar = cexp(dt_lam)
        B_bar = (A_bar - 1) / lam * torch.view_as_complex(self.B)
        return dt_lam, A_bar, B_bar

    @staticmethod
    def powers(dt_lam: Tensor, length: int) -> tuple[Tensor, Tensor]:
        """``Ā^l`` for ``l = 0 … length−1`` as two factors, ``Ā^{qc+r} = P[..., q] · R[..., r]``:
        ``P = Ā^{qc}`` ``[H, N/2, Q]`` and ``R = Ā^r`` ``[H, N/2, c]`` with ``c = ⌈√length⌉``,
        ``Q = ⌈length/c⌉``.

        Sums against the full Vandermonde matrix ``[H, N/2, length]`` then become two small
        contractions (batched matrix products), so it is never built: at ``length = 1000`` this
        takes ~c times fewer complex exponentials and none of the matrix's memory, which the
        parallel form's backward pass would otherwise keep for every layer.
        """
        c = max(1, math.ceil(math.sqrt(length)))
        q = -(-length // c)
        real = dt_lam.real.dtype
        R = cexp(dt_lam.unsqueeze(-1) * torch.arange(c, device=dt_lam.device, dtype=real))
        P = cexp(dt_lam.unsqueeze(-1) * (c * torch.arange(q, device=dt_lam.device, dtype=real)))
        return P, R

    @staticmethod
    def weighted_powers(weights: Tensor, P: Tensor, R: Tensor, length: int) -> Tensor:
        """``Σ_n weights[..., h, n] · Ā_{h,n}^l`` for ``l < length``: ``[..., H, length]`` complex,
        from :meth:`powers`' factors (``weights`` ``[..., H, N/2]``)."""
        out = torch.einsum("...hnq,hnr->...hqr", weights.unsqueeze(-1) * P, R)
        return out.flatten(-2)[..., :length]

    @staticmethod
    def sum_powers(x: Tensor, P: Tensor, R: Tensor) -> Tensor:
        """``Σ_l x[..., h, l] · Ā_{h,n}^l``: ``[..., H, N/2]`` complex, for ``x [..., H, length]``."""
        Q, c = P.shape[-1], R.shape[-1]
        x = F.pad(x, (0, Q * c - x.shape[-1])).unflatten(-1, (Q, c)).to(R.dtype)
        return torch.einsum("...hqr,hnr,hnq->...hn", x, R, P)

    def initial_state(self, batch_size: int, dtype: torch.dtype | None = None) -> Tensor:
        ref = self.log_dt
        cdtype = (torch.ones((), dtype=dtype or ref.dtype) * 1j).dtype
        return torch.zeros(batch_size, self.d_model, self.modes, dtype=cdtype, device=ref.device)

    # -- recurrent form -----------------------------------------------------------------------
    def step(self, u: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """One step: ``u [B, H]``, ``state [B, H, N/2]`` complex → ``(y [B, H], new state)``."""
        _, A_bar, B_bar = self.discrete()
        state = A_bar * state + B_bar * u.unsqueeze(-1)
        C = torch.view_as_complex(self.C)
        y = 2 * (C * state).sum(-1).real + self.D * u
        return y, state

    # -- parallel form ------------------------------------------------------------------------
    def forward(
        self,
        u: Tensor,
        state: Tensor | None = None,
        reset: Tensor | None = None,
        all_states: bool | int = False,
        lazy: bool = False,
    ) -> tuple[Tensor, Tensor, States | None]:
        """The whole sequence at once: ``u [B, L, H]`` from ``state [B, H, N/2]`` (zeros if None).

        ``reset [B, L]`` bool zeroes the state before each marked step. Returns ``(y [B, L, H],
        s_{L−1} [B, H, N/2], states)`` where ``states`` is None if ``all_states`` is false, else the
        states after steps ``0, k, 2k, …`` with ``k = int(all_states)`` (True: every step),
        ``[B, ⌈L/k⌉, H, N/2]``, detached and computed without an autograd graph. ``lazy``: a
        function of no argument that computes them when called, from detached copies of what they
        need (the same values as long as the parameters are not stepped in between), so that a
        training step whose start states no policy reads never computes them.
        """
        Bsz, L, _ = u.shape
        x = u.transpose(1, 2)  # [B, H, L]
        dt_lam, A_bar, B_bar = self.discrete()
        C = torch.view_as_complex(self.C)
        P, R = self.powers(dt_lam, L)  # Ā^0 … Ā^{L−1}, factored
        kernel = 2 * self.weighted_powers(C * B_bar, P, R, L).real  # K_l = 2Re(C B̄ Ā^l)
        if state is None:
            state = self.initial_state(Bsz, u.dtype)
        seg, n_seg = _segments(reset, Bsz, L, u.device)
        if reset is not None:  # a reset at t = 0 drops the carried state
            state = state * (~reset[:, :1]).unsqueeze(-1).to(state.real.dtype)

        # y_t = Σ_{j in seg(t), j ≤ t} K_{t−j} u_j: one causal convolution per segment
        masks = [(seg == s).unsqueeze(1).to(x.dtype) for s in range(n_seg)]  # each [B, 1, L]
        ys = _causal_conv(torch.stack([x * m for m in masks]), kernel)
        y = sum(y_s * m for y_s, m in zip(ys, masks)) + self.D.unsqueeze(-1) * x
        # the initial state decays through Ā into the first segment: 2Re(C Ā^{t+1} s_{−1})
        y = y + 2 * self.weighted_powers(C * A_bar * state, P, R, L).real * masks[0]

        # s_{L−1} = Σ_{j in last segment} Ā^{L−1−j} B̄ u_j (+ Ā^L s_{−1} if no reset in between)
        last = (seg == seg[:, -1:]).unsqueeze(1).to(x.dtype)  # [B, 1, L]
        final = B_bar * self.sum_powers((x * last).flip(-1), P, R)  # Σ_i u_{L−1−i} Ā^i
        A_L = cexp(dt_lam * L)
        final = final + (seg[:, -1] == 0).reshape(-1, 1, 1) * A_L * state

        states: States | None = None
        if all_states:  # detached: they only start imagination, so no graph is built for them
            args = (x.detach(), seg, dt_lam.detach(), B_bar.detach(), state.detach(), int(all_states))

            def states() -> Tensor:
                with torch.no_grad():
                    return self._strided_states(*args)

            if not lazy:
                states = states()
        return y.transpose(1, 2), final, states

    @staticmethod
    def _strided_states(x: Tensor, seg: Tensor, dt_lam: Tensor, B_bar: Tensor, state: Tensor, k: int) -> Tensor:
        """``s_t`` at ``t_i = i·k`` (``i < S = ⌈L/k⌉``): ``[B, S, H, N/2]`` in O(B·S·H·N/2) memory.

        Chunk ``i`` holds the steps ``(t_{i−1}, t_i]`` (chunk 0: step 0 alone); its own inputs
        give ``c_i = Σ_j Ā^{t_i−j} B̄ u_j`` over the steps of ``t_i``'s segment. Then
        ``s_{t_i} = Σ_{i' ≤ i, same segment} (Ā^k)^{i−i'} c_{i'} + Ā^{t_i+1} s_{−1}`` (first segment
        only): a causal convolution over chunks, once per segment, as in :meth:`forward`.
        """
        Bsz, H, L = x.shape
        S = -(-L // k)
        # step j at padded position j + k − 1, so chunk i = padded [i·k, (i+1)·k) ends at t_i;
        # steps after the last start are dropped, zeros fill in before step 0 and after step L − 1
        pad_right = max(S * k - (k - 1) - L, 0)
        xp = F.pad(x, (k - 1, pad_right))[..., : S * k].reshape(Bsz, H, S, k)
        segp = F.pad(seg, (k - 1, 0), value=0)
        segp = torch.cat([segp, segp[:, -1:].expand(Bsz, pad_right)], 1)[:, : S * k].reshape(Bsz, S, k)
        seg_c = segp[..., -1]  # segment of every t_i, [B, S]
        same = (segp == seg_c.unsqueeze(-1)).unsqueeze(1).to(x.dtype)  # [B, 1, S, k]
        r = torch.arange(k - 1, -1, -1, device=x.device, dtype=dt_lam.real.dtype)
        decay = cexp(dt_lam.unsqueeze(-1) * r)  # Ā^{k−1−r}: [H, N/2, k]
        local = torch.einsum("bhsr,hnr->bhns", (xp * same).to(decay.dtype), decay)
        local = local * B_bar.unsqueeze(-1)  # c_i: [B, H, N/2, S]

        i = torch.arange(S, device=x.device, dtype=dt_lam.real.dtype)
        kernel = cexp(dt_lam.unsqueeze(-1) * (k * i))  # (Ā^k)^i: [H, N/2, S]
        k_f = torch.fft.fft(kernel, n=2 * S)
        states = state.unsqueeze(-1) * cexp(dt_lam.unsqueeze(-1) * (k * i + 1))  # Ā^{t_i+1} s_{−1}
        states = states * (seg_c == 0).unsqueeze(1).unsqueeze(1)
        for s in range(int(seg_c.max()) + 1):
            m = (seg_c == s).unsqueeze(1).unsqueeze(1)  # [B, 1, 1, S]
            conv = torch.fft.ifft(torch.fft.fft(local * m, n=2 * S) * k_f, n=2 * S)[..., :S]
            states = states + conv * m
        return states.permute(0, 3, 1, 2)


def cexp(z: Tensor) -> Tensor:
    """``exp(z)`` for complex ``z`` as ``e^{Re z}(cos Im z + i sin Im z)``: the same values, ~3×
    faster on CPU than ``torch.exp`` on a complex tensor, which is not vectorised there."""
    magnitude = torch.exp(z.real)
    return torch.complex(magnitude * torch.cos(z.imag), magnitude * torch.sin(z.imag))


def _segments(reset: Tensor | None, batch: int, length: int, device: torch.device) -> tuple[Tensor, int]:
    """Segment id of every step ``[B, L]`` (number of resets in ``(0, t]``) and their count."""
    if reset is None:
        return torch.zeros(batch, length, dtype=torch.long, device=device), 1
    seg = torch.cumsum(reset[:, 1:].long(), 1)
    seg = F.pad(seg, (1, 0))
    return seg, int(seg.max()) + 1


#: start states as computed, or a function of no argument computing them (``lazy``)
States = Tensor | Callable[[], Tensor]


def _stacked(parts: list[Any], dim: int, lazy: bool) -> States:
    """``torch.stack(parts, dim)``; with ``lazy``, ``parts`` are functions and so is the result."""
    if not lazy:
        return torch.stack(parts, dim)
    return lambda: torch.stack([part() for part in parts], dim)


def _causal_conv(x: Tensor, kernel: Tensor) -> Tensor:
    """``y_t = Σ_{j ≤ t} kernel_{t−j} x_j`` over the last axis via rfft with zero padding to 2L."""
    L = x.shape[-1]
    y = torch.fft.irfft(torch.fft.rfft(x, n=2 * L) * torch.fft.rfft(kernel, n=2 * L), n=2 * L)
    return y[..., :L]


# --------------------------------------------------------------------------- S4 block


class S4Block(nn.Module):
    """Pre-norm ``[LayerNorm → S4 → GELU → Linear → residual] × 2`` then, if ``mlp``,
    ``[LayerNorm → Linear(d_ff) → GELU → Linear → residual]`` (s4wm §4 and appendix B.1).

    A block state is ``[B, 2, H, N/2]`` complex: the states of its two S4 layers.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        state_size: int,
        dt_min: float = 1e-3,
        dt_max: float = 1e-1,
        init: Literal["lin", "inv"] = "lin",
        mlp: bool = True,
    ) -> None:
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(2))
        self.ssms = nn.ModuleList(S4DLayer(d_model, state_size, dt_min, dt_max, init) for _ in range(2))
        self.outs = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(2))
        self.mlp = (
            nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
            if mlp
            else None
        )

    def forward(
        self, x: Tensor, state: Tensor, reset: Tensor | None = None, all_states: bool | int = False,
        lazy: bool = False,
    ) -> tuple[Tensor, Tensor, States | None]:
        """``x [B, L, H]``, ``state [B, 2, H, N/2]`` → ``(x, final state, states [B, S, 2, H, N/2] | None)``
        (``S = ⌈L/k⌉`` states after steps ``0, k, 2k, …``, ``k = int(all_states)``; ``lazy``: a
        function computing them; see :class:`S4DLayer`)."""
        finals, every = [], []
        for i, (norm, ssm, out) in enumerate(zip(self.norms, self.ssms, self.outs)):
            y, final, states = ssm(norm(x), state[:, i], reset, all_states, lazy)
            x = x + out(F.gelu(y))
            finals.append(final)
            every.append(states)
        if self.mlp is not None:
            x = x + self.mlp(x)
        return x, torch.stack(finals, 1), _stacked(every, 2, lazy) if all_states else None

    def step(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """One step: ``x [B, H]``, ``state [B, 2, H, N/2]``."""
        new = []
        for i, (norm, ssm, out) in enumerate(zip(self.norms, self.ssms, self.outs)):
            y, s = ssm.step(norm(x), state[:, i])
            x = x + out(F.gelu(y))
            new.append(s)
        if self.mlp is not None:
            x = x + self.mlp(x)
        return x, torch.stack(new, 1)


class S4Blocks(nn.Module):
    """``n_layers`` S4 blocks and a final LayerNorm (S4's pre-norm ``SequenceModel``).

    ``h, s = S4Blocks(g, s_prev)`` (s4wm eq. 4). The stack state is ``[B, n_layers, 2, H, N/2]``
    complex; :meth:`forward` is the parallel form, :meth:`step` the recurrent one.
    """

    def __init__(self, n_layers: int, d_model: int, d_ff: int, state_size: int, dt_min: float,
                 dt_max: float, init: Literal["lin", "inv"] = "lin", mlp: bool = True) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            S4Block(d_model, d_ff, state_size, dt_min, dt_max, init, mlp) for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.state_shape = (n_layers, 2, d_model, state_size // 2)

    def initial_state(self, batch_size: int, dtype: torch.dtype = torch.float32) -> Tensor:
        cdtype = torch.cdouble if dtype == torch.float64 else torch.cfloat
        return torch.zeros(batch_size, *self.state_shape, dtype=cdtype, device=self.norm.weight.device)

    def forward(
        self, x: Tensor, state: Tensor, reset: Tensor | None = None, all_states: bool | int = False,
        lazy: bool = False,
    ) -> tuple[Tensor, Tensor, States | None]:
        """``x [B, L, H]`` → ``(h [B, L, H], final state, states [B, S, n_layers, 2, H, N/2] | None)``
        (``S = ⌈L/k⌉`` states after steps ``0, k, 2k, …``, ``k = int(all_states)``; ``lazy``: a
        function computing them, see :class:`S4DLayer`)."""
        finals, every = [], []
        for i, block in enumerate(self.blocks):
            x, final, states = block(x, state[:, i], reset, all_states, lazy)
            finals.append(final)
            every.append(states)
        return self.norm(x), torch.stack(finals, 1), _stacked(every, 2, lazy) if all_states else None

    def step(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """``x [B, H]``, ``state [B, n_layers, 2, H, N/2]`` → ``(h [B, H], new state)``."""
        new = []
        for i, block in enumerate(self.blocks):
            x, s = block.step(x, state[:, i])
            new.append(s)
        return self.norm(x), torch.stack(new, 1)


__all__ = ["S4Block", "S4Blocks", "S4DLayer", "s4d_lambda"]
