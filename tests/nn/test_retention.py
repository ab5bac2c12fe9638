"""Retention: parallel == recurrent == chunkwise (with episode resets), REM's block states
(eq. 6-7), the RetNet stack's forms and POP forward, decays and causality."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from wmzoo.nn.retention import (
    RetNet,
    RetNetSpec,
    decay_rates,
    retention_chunk,
    retention_chunkwise,
    retention_parallel,
    retention_recurrent,
    rotary_frequencies,
)


def _qkv(seed: int, B: int, h: int, T: int, d: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, h, T, d, generator=g, dtype=torch.float64) for _ in range(3)]


def _resets(seed: int, B: int, T: int, p: float) -> torch.Tensor:
    return torch.rand(B, T, generator=torch.Generator().manual_seed(seed + 1)) < p


@settings(max_examples=25, deadline=None)
@given(
    B=st.integers(1, 3), h=st.integers(1, 4), T=st.integers(1, 20), half=st.integers(1, 4),
    chunk=st.integers(1, 8), kind=st.sampled_from(["paper", "log-spaced"]),
    reset_p=st.sampled_from([0.0, 0.2]), seed=st.integers(0, 10_000),
)
def test_parallel_recurrent_chunkwise_agree(B, h, T, half, chunk, kind, reset_p, seed):
    d = 2 * half
    q, k, v = _qkv(seed, B, h, T, d)
    gamma, theta = decay_rates(h, kind), rotary_frequencies(d, 10000.0)
    reset = _resets(seed, B, T, reset_p) if reset_p else None
    parallel = retention_parallel(q, k, v, gamma, theta, reset)
    recurrent, s_rec = retention_recurrent(q, k, v, gamma, theta, reset=reset)
    chunked, s_chunk = retention_chunkwise(q, k, v, gamma, theta, chunk, reset=reset)
    torch.testing.assert_close(recurrent, parallel, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(chunked, parallel, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(s_chunk, s_rec, rtol=1e-9, atol=1e-9)


def test_parallel_is_the_explicit_absolute_position_formula():
    """(QKᵀ ⊙ D) V with Θ_n = e^{inθ} at absolute positions, written out with complex numbers."""
    B, h, T, d = 1, 2, 7, 4
    q, k, v = _qkv(3, B, h, T, d)
    gamma, theta = decay_rates(h, "paper"), rotary_frequencies(d, 10000.0)
    n = torch.arange(T, dtype=torch.float64) + 11.0  # any absolute offset
    rot = torch.polar(torch.ones(T, d // 2, dtype=torch.float64), n[:, None] * theta)
    qc = torch.view_as_complex(q.reshape(B, h, T, d // 2, 2).contiguous()) * rot
    kc = torch.view_as_complex(k.reshape(B, h, T, d // 2, 2).contiguous()) * rot
    scores = (qc[:, :, :, None] * kc[:, :, None].conj()).real.sum(-1)  # Re(Q Kᴴ)
    diff = n[:, None] - n[None]
    D = torch.where(diff >= 0, gamma[:, None, None] ** diff.clamp(min=0), 0.0)
    torch.testing.assert_close(retention_parallel(q, k, v, gamma, theta), (scores * D) @ v)


@settings(max_examples=20, deadline=None)
@given(c=st.integers(1, 4), L=st.integers(1, 5), seed=st.integers(0, 10_000), with_state=st.booleans())
def test_block_states_eq_6_7_match_block_by_block(c, L, seed, with_state):
    B, h, d = 2, 3, 4
    q, k, v = _qkv(seed, B, h, c * L, d)
    gamma, theta = decay_rates(h, "paper"), rotary_frequencies(d, 10000.0)
    state = torch.randn(B, h, d, d, dtype=torch.float64) if with_state else None
    reset = torch.zeros(B, c * L, dtype=torch.bool)
    reset[0, L * (c // 2)] = c > 1  # one episode start on a block boundary
    out, last, blocks = retention_chunk(q, k, v, gamma, theta, state, reset, block_len=L)
    ref_out, ref_last, _ = retention_chunk(q, k, v, gamma, theta, state, reset)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(last, ref_last)
    s = state
    for j in range(c):
        sl = slice(j * L, (j + 1) * L)
        _, s, _ = retention_chunk(q[:, :, sl], k[:, :, sl], v[:, :, sl], gamma, theta, s, reset[:, sl])
        torch.testing.assert_close(blocks[:, j], s)


def test_decays():
    torch.testing.assert_close(decay_rates(4, "paper"), torch.tensor([0.96875, 0.984375, 0.9921875, 0.99609375], dtype=torch.float64))
    torch.testing.assert_close(
        decay_rates(4, "log-spaced"), torch.tensor([0.96875, 0.98760, 0.99508, 0.99805], dtype=torch.float64),
        atol=1e-5, rtol=0,
    )


def _net(seed: int, **kw) -> RetNet:
    torch.manual_seed(seed)
    spec = RetNetSpec(d_model=16, n_heads=2, n_layers=2, d_ff=24, dropout=0.0, **kw)
    return RetNet(spec).double().eval()


@settings(max_examples=10, deadline=None)
@given(T=st.integers(1, 14), chunk=st.integers(1, 6), seed=st.integers(0, 1000), resets=st.booleans(),
       activation=st.sampled_from(["gelu", "silu"]))
def test_stack_forms_agree(T, chunk, seed, resets, activation):
    net = _net(seed, activation=activation)
    x = torch.randn(2, T, 16, dtype=torch.float64)
    reset = _resets(seed, 2, T, 0.25) if resets else None
    y, s = net(x, reset=reset)
    y_rec, s_rec = net.recurrent(x, reset=reset)
    y_chunk, s_chunk = net.chunkwise(x, chunk, reset=reset)
    torch.testing.assert_close(y_rec, y)
    torch.testing.assert_close(y_chunk, y)
    torch.testing.assert_close(s_rec, s)
    torch.testing.assert_close(s_chunk, s)


@settings(max_examples=10, deadline=None)
@given(T=st.integers(1, 10), keep=st.integers(0, 10), seed=st.integers(0, 1000), with_state=st.booleans())
def test_keep_last_computes_only_the_last_outputs_and_the_same_state(T, keep, seed, with_state):
    keep = min(keep, T)
    net = _net(seed)
    x = torch.randn(2, T, 16, dtype=torch.float64)
    state = torch.randn(2, 2, 2, 8, 8, dtype=torch.float64) if with_state else None
    y, s = net(x, state)
    y_last, s_last = net(x, state, keep_last=keep)
    assert y_last.shape == (2, keep, 16)
    torch.testing.assert_close(y_last, y[:, T - keep :])
    torch.testing.assert_close(s_last, s)


def test_chunk_tables_are_cached_per_length_and_reused():
    net = _net(0)
    msr = net.layers[0].msr
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    net(x)
    tables = msr.tables(5, torch.float64)
    net(x)
    assert msr.tables(5, torch.float64) is tables and set(msr._tables) == {(5, msr.theta.device, torch.float64)}


def test_causal():
    net = _net(0)
    x = torch.randn(1, 10, 16, dtype=torch.float64)
    x2 = x.clone()
    x2[:, 6:] = torch.randn(1, 4, 16, dtype=torch.float64)
    torch.testing.assert_close(net(x)[0][:, :6], net(x2)[0][:, :6])
    assert not torch.allclose(net(x)[0][:, 6:], net(x2)[0][:, 6:])


@settings(max_examples=10, deadline=None)
@given(c=st.integers(1, 4), L=st.integers(1, 4), P=st.integers(1, 4), seed=st.integers(0, 1000))
def test_pop_forward_matches_prediction_tokens_run_from_each_block_state(c, L, P, seed):
    """Algorithm 1: the prediction latents of block j equal a plain chunk call over u from the
    state before block j (obtained block by block), and the real outputs equal a plain chunk."""
    net = _net(seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, c * L, 16, generator=g, dtype=torch.float64)
    u = torch.randn(P, 16, generator=g, dtype=torch.float64).expand(2, c, P, 16)
    state = net(torch.randn(2, 3, 16, generator=g, dtype=torch.float64))[1]
    y, yu, new = net.pop_forward(x, u, state, L)
    y_ref, new_ref = net(x, state)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(new, new_ref)
    s = state
    for j in range(c):
        torch.testing.assert_close(yu[:, j], net(u[:, j], s, update_state=False)[0])
        s = net(x[:, j * L:(j + 1) * L], s)[1]


def test_spec_rejects_heads_that_do_not_divide():
    with pytest.raises(ValueError, match="heads"):
        RetNetSpec(d_model=30, n_heads=4)
