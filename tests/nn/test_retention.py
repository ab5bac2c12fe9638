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


def explicit_retention(q, k, v, gamma, theta, offset: float = 0.0):
    """(QKᵀ ⊙ D) V with Θ_n = e^{inθ} at absolute positions ``offset + n``, written out with complex
    numbers (``q, k, v`` ``[B, h, T, d]``)."""
    B, h, T, d = q.shape
    n = torch.arange(T, dtype=q.dtype) + offset
    rot = torch.polar(torch.ones(T, d // 2, dtype=q.dtype), n[:, None] * theta.to(q.dtype))
    qc = torch.view_as_complex(q.reshape(B, h, T, d // 2, 2).contiguous()) * rot
    kc = torch.view_as_complex(k.reshape(B, h, T, d // 2, 2).contiguous()) * rot
    scores = (qc[:, :, :, None] * kc[:, :, None].conj()).real.sum(-1)  # Re(Q Kᴴ)
    diff = n[:, None] - n[None]
    D = torch.where(diff >= 0, gamma.to(q.dtype)[:, None, None] ** diff.clamp(min=0), 0.0)
    return (scores * D) @ v


def test_parallel_is_the_explicit_absolute_position_formula():
    """(QKᵀ ⊙ D) V with Θ_n = e^{inθ} at absolute positions, written out with complex numbers."""
    q, k, v = _qkv(3, 1, 2, 7, 4)
    gamma, theta = decay_rates(2, "paper"), rotary_frequencies(4, 10000.0)
    torch.testing.assert_close(retention_parallel(q, k, v, gamma, theta), explicit_retention(q, k, v, gamma, theta, 11.0))


def test_rotary_frequencies_by_hand():
    # catches: θ_j spread over the wrong exponent range (e.g. base^(−2j/(d/2−1))), or base ignored
    theta = rotary_frequencies(8, 10000.0)
    torch.testing.assert_close(theta, torch.tensor([1.0, 10000 ** (-1 / 3), 10000 ** (-2 / 3), 1e-4], dtype=torch.float64))
    torch.testing.assert_close(rotary_frequencies(4, 100.0), torch.tensor([1.0, 0.01], dtype=torch.float64))


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


@settings(max_examples=15, deadline=None)
@given(L=st.integers(1, 6), P=st.integers(1, 6), seed=st.integers(0, 1000), empty=st.booleans())
def test_absorb_then_predict_equals_the_two_calls_of_an_imagination_step(L, P, seed, empty):
    """REM's imagination step fused: the block's last output and the new state as one call over
    the block, the prediction tokens' outputs as a second call from that state, not writing it.
    Catches: the state absorbing the prediction tokens, their read of the state before the block,
    a decay or rotary position off by the block's length, the wrong token kept as the block's."""
    net = _net(seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, L, 16, generator=g, dtype=torch.float64)
    u = torch.randn(3, P, 16, generator=g, dtype=torch.float64)
    state = net.initial_state(3, dtype=torch.float64) if empty else net(torch.randn(3, 5, 16, generator=g, dtype=torch.float64))[1]
    last, yu, new = net.absorb_then_predict(x, u, state)
    y_ref, new_ref = net(x, state)
    assert last.shape == (3, 16) and yu.shape == (3, P, 16)
    torch.testing.assert_close(new, new_ref)
    torch.testing.assert_close(last, y_ref[:, -1])
    torch.testing.assert_close(yu, net(u, new_ref, update_state=False)[0])
    with pytest.raises(ValueError, match="cannot be combined with resets"):
        net(torch.cat([x, u], 1), state, reset=torch.zeros(3, L + P, dtype=torch.bool), absorb=L)


def test_spec_rejects_heads_that_do_not_divide():
    with pytest.raises(ValueError, match="heads"):
        RetNetSpec(d_model=30, n_heads=4)


def _randomised(seed: int, **kw) -> RetNet:
    """A small stack with every parameter drawn at random (LayerNorm gains and all biases too), so
    that two LayerNorms, or a bias and zero, cannot stand in for each other."""
    net = _net(seed, **kw)
    g = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5 + (1.0 if p.dim() == 1 and p.shape[0] == 16 else 0.0))
    return net


def reference_stack(net: RetNet, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs and final state of REM A.3 written out with plain tensor operations and the explicit retention formula:
    ``X = MSR(LN1(Y)) + Y``, ``Y' = FFN(LN2(X)) + X``, with ``MSR(h) = (swish(h W_G) ⊙
    GroupNorm_h(heads)) W_O``, ``k`` scaled by ``1/√d_head``, decays from the spec's kind and
    ``θ_j = base^{−j/(d/2 − 1)}``. The state after token ``n`` in its own frame is
    ``Σ_m γ^{n−m} (k_m e^{−i(n−m)θ})ᵀ v_m``."""
    spec = net.spec
    H, dh = spec.n_heads, spec.head_dim
    gamma = decay_rates(H, spec.decays)
    j = torch.arange(dh // 2, dtype=torch.float64)
    theta = spec.rotary_base ** (-j / (dh // 2 - 1))
    act = torch.nn.functional.gelu if spec.activation == "gelu" else torch.nn.functional.silu
    N, T, d = x.shape
    age = (T - 1 - torch.arange(T, dtype=torch.float64))[:, None]  # n − m for the last token n
    back = torch.polar(torch.ones(T, dh // 2, dtype=torch.float64), -age * theta)
    states = []
    for layer in net.layers:
        msr = layer.msr
        h = torch.nn.functional.layer_norm(x, (d,), layer.norm1.weight, layer.norm1.bias, spec.norm_eps)
        W, b = msr.qkv.weight, msr.qkv.bias
        q, k, v = (h @ W[i * d:(i + 1) * d].T + b[i * d:(i + 1) * d] for i in range(3))
        split = lambda t: t.reshape(N, T, H, dh).transpose(1, 2)  # noqa: E731
        heads = explicit_retention(split(q), split(k) / dh**0.5, split(v), gamma, theta)  # [N, H, T, dh]
        kc = torch.view_as_complex((split(k) / dh**0.5).reshape(N, H, T, dh // 2, 2).contiguous()) * back
        aged = torch.view_as_real(kc).flatten(-2) * (gamma[:, None, None] ** age)
        states.append(aged.transpose(-1, -2) @ split(v))
        mu = heads.mean(-1, keepdim=True)
        var = heads.var(-1, unbiased=False, keepdim=True)
        normed = ((heads - mu) / torch.sqrt(var + spec.norm_eps)).transpose(1, 2).reshape(N, T, d)
        gate = torch.nn.functional.silu(h @ msr.gate.weight.T + msr.gate.bias)
        x = x + (gate * normed) @ msr.out.weight.T + msr.out.bias
        f = torch.nn.functional.layer_norm(x, (d,), layer.norm2.weight, layer.norm2.bias, spec.norm_eps)
        lin1, lin2 = layer.ffn[0], layer.ffn[2]
        x = x + act(f @ lin1.weight.T + lin1.bias) @ lin2.weight.T + lin2.bias
    return x, torch.stack(states, 1)


@pytest.mark.parametrize(
    "kw",
    [{}, {"decays": "log-spaced", "activation": "silu", "rotary_base": 50.0}],
    ids=["paper-gelu", "log-spaced-silu-base50"],
)
def test_stack_is_the_explicit_rem_layer(kw):
    # catches: k not scaled by 1/√d_head, q and k swapped, the gate's swish replaced, GroupNorm
    # dropped, a residual dropped, LN1 and LN2 swapped, the spec's decays / activation / rotary base
    # ignored by the modules (every form of the stack agrees with the others under these bugs)
    net = _randomised(3, **kw)
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    expected, state = reference_stack(net, x)
    # the module keeps γ and θ as float32 buffers: agreement to float32 rounding
    for y, s in (net(x), net.recurrent(x)):
        torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(s, state, rtol=1e-5, atol=1e-5)  # GroupNorm hides a scale of k, the state does not


def test_group_norm_has_no_parameters_and_linear_biases_start_at_zero():
    # catches: GroupNorm built with affine parameters (the official code has none), biases not zeroed
    net = _net(0)
    for layer in net.layers:
        assert list(layer.msr.norm.parameters()) == []
        for lin in (layer.msr.qkv, layer.msr.gate, layer.msr.out, layer.ffn[0], layer.ffn[2]):
            assert lin.bias.abs().max() == 0 and lin.weight.abs().max() > 0


def test_pop_forward_with_an_episode_start_predicts_that_block_from_an_empty_state():
    # catches: the block states before an episode start not cleared for the prediction tokens
    c, L, P = 3, 2, 2
    net = _randomised(5)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, c * L, 16, generator=g, dtype=torch.float64)
    u = torch.randn(2, c, P, 16, generator=g, dtype=torch.float64)
    state = net(torch.randn(2, 3, 16, generator=g, dtype=torch.float64))[1]
    reset = torch.zeros(2, c * L, dtype=torch.bool)
    reset[0, L] = reset[1, 0] = True  # row 0: block 1 starts an episode; row 1: block 0
    y, yu, new = net.pop_forward(x, u, state, L, reset)
    y_ref, new_ref = net(x, state, reset)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(new, new_ref)
    for row, j in ((0, 1), (1, 0)):
        torch.testing.assert_close(yu[row, j], net(u[row : row + 1, j], None, update_state=False)[0][0])
    s = state[:1]
    torch.testing.assert_close(yu[0, 0], net(u[:1, 0], s, update_state=False)[0][0])  # before the start
    s = net(x[:1, :2 * L], s, reset[:1, :2 * L])[1]
    torch.testing.assert_close(yu[0, 2], net(u[:1, 2], s, update_state=False)[0][0])  # after it


def test_block_len_rejects_partial_blocks_and_resets_inside_a_block():
    # catches: a chunk that is not whole blocks, or a reset inside a block, passing unchecked
    q, k, v = _qkv(0, 1, 1, 6, 2)
    gamma, theta = decay_rates(1, "paper"), rotary_frequencies(2, 10000.0)
    with pytest.raises(ValueError, match="whole number"):
        retention_chunk(q, k, v, gamma, theta, block_len=4)
    for at in (1, 2, 4, 5):
        reset = torch.zeros(1, 6, dtype=torch.bool)
        reset[0, at] = True
        with pytest.raises(ValueError, match="first token of a block"):
            retention_chunk(q, k, v, gamma, theta, reset=reset, block_len=3)
    reset = torch.zeros(1, 6, dtype=torch.bool)
    reset[0, 3] = True
    retention_chunk(q, k, v, gamma, theta, reset=reset, block_len=3)  # a block start is allowed
