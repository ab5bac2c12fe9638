"""The S4D layer and S4 blocks: parallel (FFT convolution) form = recurrent form, with carried
states, resets and segment-by-segment continuation; initialisation and discretisation."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from wmzoo_plugins.s4wm.s4 import S4Blocks, S4DLayer, s4d_lambda


def layer64(H: int, N: int, seed: int, init: str = "lin") -> S4DLayer:
    torch.manual_seed(seed)
    return S4DLayer(H, N, init=init).double()


def recurrent(layer: S4DLayer, u: torch.Tensor, state: torch.Tensor, reset: torch.Tensor | None = None):
    """Step-by-step reference: ``(y [B, L, H], states [B, L, H, N/2])``."""
    ys, states = [], []
    for t in range(u.shape[1]):
        if reset is not None:
            state = state * (~reset[:, t]).reshape(-1, 1, 1)
        y, state = layer.step(u[:, t], state)
        ys.append(y)
        states.append(state)
    return torch.stack(ys, 1), torch.stack(states, 1)


def random_state(B: int, layer: S4DLayer, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, layer.d_model, layer.modes, dtype=torch.cdouble, generator=g)


@given(
    H=st.integers(1, 6), N=st.sampled_from([2, 4, 8, 16]), L=st.integers(1, 40), B=st.integers(1, 3),
    seed=st.integers(0, 10_000), init=st.sampled_from(["lin", "inv"]), nonzero=st.booleans(),
)
@settings(max_examples=30, deadline=None)
def test_convolution_equals_recurrence(H, N, L, B, seed, init, nonzero) -> None:
    layer = layer64(H, N, seed, init)
    u = torch.randn(B, L, H, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    s0 = random_state(B, layer, seed) if nonzero else layer.initial_state(B, torch.float64)
    y, final, states = layer(u, s0, all_states=True)
    y_ref, states_ref = recurrent(layer, u, s0)
    torch.testing.assert_close(y, y_ref, atol=1e-8, rtol=1e-8)
    torch.testing.assert_close(final, states_ref[:, -1], atol=1e-8, rtol=1e-8)
    torch.testing.assert_close(states, states_ref, atol=1e-8, rtol=1e-8)


@given(L=st.integers(2, 30), seed=st.integers(0, 10_000), resets=st.lists(st.integers(0, 29), max_size=4))
@settings(max_examples=25, deadline=None)
def test_resets_inside_a_window(L, seed, resets) -> None:
    """A reset zeroes the state before its step; the parallel form splits the window exactly."""
    layer = layer64(3, 8, seed)
    B = 2
    u = torch.randn(B, L, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    reset = torch.zeros(B, L, dtype=torch.bool)
    for r in resets:
        reset[0, r % L] = True
    reset[1, L // 2] = True
    s0 = random_state(B, layer, seed + 1)
    y, final, states = layer(u, s0, reset, all_states=True)
    y_ref, states_ref = recurrent(layer, u, s0, reset)
    torch.testing.assert_close(y, y_ref, atol=1e-8, rtol=1e-8)
    torch.testing.assert_close(final, states_ref[:, -1], atol=1e-8, rtol=1e-8)
    torch.testing.assert_close(states, states_ref, atol=1e-8, rtol=1e-8)
    # after a reset nothing before it matters: row 1 from L // 2 on equals a fresh pass
    y_fresh, _, _ = layer(u[1:, L // 2 :])
    torch.testing.assert_close(y[1:, L // 2 :], y_fresh, atol=1e-8, rtol=1e-8)


@given(L1=st.integers(1, 20), L2=st.integers(1, 20), seed=st.integers(0, 10_000))
@settings(max_examples=20, deadline=None)
def test_segments_with_carried_state_equal_one_pass(L1, L2, seed) -> None:
    layer = layer64(4, 8, seed)
    u = torch.randn(2, L1 + L2, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    y, final, _ = layer(u)
    y1, carry, _ = layer(u[:, :L1])
    y2, final2, _ = layer(u[:, L1:], carry)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y, atol=1e-8, rtol=1e-8)
    torch.testing.assert_close(final2, final, atol=1e-8, rtol=1e-8)


def test_float32_close_to_recurrence() -> None:
    torch.manual_seed(0)
    layer = S4DLayer(8, 16)
    u = torch.randn(2, 64, 8)
    y, final, _ = layer(u)
    y_ref, states = recurrent(layer, u, layer.initial_state(2))
    torch.testing.assert_close(y, y_ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(final, states[:, -1], atol=1e-4, rtol=1e-4)


def test_kernel_and_discretisation_by_hand() -> None:
    """One channel, one mode: K_l = 2Re(C B̄ Ā^l), Ā = exp(ΔΛ), B̄ = (Ā − 1)/Λ · B (ZOH)."""
    layer = S4DLayer(1, 2).double()
    with torch.no_grad():
        layer.log_dt.fill_(math.log(0.1))
        layer.log_neg_re.fill_(math.log(0.5))
        layer.imag.fill_(2.0)
        layer.B.copy_(torch.tensor([[[1.0, 0.0]]]))
        layer.C.copy_(torch.tensor([[[0.3, -0.7]]]))
        layer.D.fill_(0.0)
    lam = complex(-0.5, 2.0)
    A_bar = complex(math.exp(-0.05) * math.cos(0.2), math.exp(-0.05) * math.sin(0.2))
    B_bar = (A_bar - 1) / lam
    C = complex(0.3, -0.7)
    impulse = torch.zeros(1, 5, 1, dtype=torch.float64)
    impulse[0, 0, 0] = 1.0
    y, _, _ = layer(impulse)
    expected = [2 * (C * B_bar * A_bar**l).real for l in range(5)]
    torch.testing.assert_close(y[0, :, 0], torch.tensor(expected, dtype=torch.float64))


def test_s4d_initialisations() -> None:
    lin = s4d_lambda(2, 4, "lin")
    assert torch.allclose(lin.real, torch.full((2, 4), -0.5, dtype=torch.float64))
    assert torch.allclose(lin.imag[0], math.pi * torch.arange(4, dtype=torch.float64))
    inv = s4d_lambda(1, 4, "inv")  # N = 8: N/π (N/(2n+1) − 1)
    expected = [8 / math.pi * (8 / (2 * n + 1) - 1) for n in range(4)]
    assert torch.allclose(inv.imag[0], torch.tensor(expected, dtype=torch.float64))
    torch.manual_seed(0)
    dt = S4DLayer(1000, 4, dt_min=1e-3, dt_max=1e-1).log_dt.exp()
    assert 1e-3 <= dt.min() and dt.max() <= 1e-1 and dt.median() < 2e-2  # log-uniform
    with pytest.raises(ValueError, match="even"):
        S4DLayer(2, 3)


def test_s4d_input_output_and_skip_initialisation() -> None:
    # catches: B not initialised to ones, C not a unit-variance complex normal, D zero (the skip
    # connection off at the start) or scaled (S4D: B = 1, C ~ CN(0, 1), D ~ N(0, 1))
    torch.manual_seed(0)
    layer = S4DLayer(256, 16)
    assert torch.equal(torch.view_as_complex(layer.B), torch.ones(256, 8, dtype=torch.cfloat))
    power = torch.view_as_complex(layer.C.detach()).abs().square().mean()  # E|C|² = 1 over 2048 draws
    assert 0.9 < float(power) < 1.1
    D = layer.D.detach()
    assert 0.85 < float(D.std()) < 1.15 and abs(float(D.mean())) < 0.2


@pytest.mark.parametrize("mlp", [True, False])
def test_blocks_parallel_equals_step(mlp: bool) -> None:
    torch.manual_seed(0)
    blocks = S4Blocks(3, 6, 12, 8, 1e-3, 1e-1, mlp=mlp).double()
    x = torch.randn(2, 12, 6, dtype=torch.float64)
    reset = torch.zeros(2, 12, dtype=torch.bool)
    reset[0, 5] = True
    s0 = torch.randn(2, *blocks.state_shape, dtype=torch.cdouble)
    h, final, states = blocks(x, s0, reset, all_states=True)
    s, hs = s0, []
    for t in range(12):
        s = s * (~reset[:, t]).reshape(-1, 1, 1, 1, 1)
        h_t, s = blocks.step(x[:, t], s)
        hs.append(h_t)
        torch.testing.assert_close(states[:, t], s, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(h, torch.stack(hs, 1), atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(final, s, atol=1e-9, rtol=1e-9)
    assert (blocks.blocks[0].mlp is not None) == mlp


@given(L=st.integers(1, 24), k=st.integers(1, 9), seed=st.integers(0, 10_000),
       resets=st.lists(st.integers(0, 23), max_size=4))
@settings(max_examples=25, deadline=None)
def test_strided_states_equal_every_step_states(L, k, seed, resets) -> None:
    """``all_states=k`` gives the states after steps 0, k, 2k, … — those of the recurrence, with
    resets anywhere (inside a chunk, on a start) and a carried initial state — and no graph."""
    layer = layer64(3, 8, seed)
    B = 2
    u = torch.randn(B, L, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    reset = torch.zeros(B, L, dtype=torch.bool)
    for r in resets:
        reset[0, r % L] = True
    reset[1, L // 2] = True
    s0 = random_state(B, layer, seed + 1).requires_grad_(True)
    y, final, states = layer(u, s0, reset, all_states=k)
    y_ref, states_ref = recurrent(layer, u.detach(), s0.detach(), reset)
    assert states.shape == (B, -(-L // k), 3, 4) and not states.requires_grad
    torch.testing.assert_close(states, states_ref[:, ::k], atol=1e-8, rtol=1e-8)
    torch.testing.assert_close(y, y_ref, atol=1e-8, rtol=1e-8)
