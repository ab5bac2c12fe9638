"""Transformer-XL: rel-shift, segment recurrence with the cache, steps, episode masks, causality.

The reference below is written independently of the module's vectorised code: one pass over the
whole concatenated sequence, each score built from explicit distances (no rel-shift), with a
banded causal mask of the width segment recurrence gives (query at segment position ``i`` sees
``m + i`` earlier tokens) and the same-episode rule.
"""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

from wmzoo_plugins.tssm_xl.transformer_xl import (
    TransformerXL,
    attention_mask,
    rel_shift,
    sinusoid_embedding,
)


def make_stack(d: int, heads: int, layers: int, m: int, seed: int, dtype=torch.float64) -> TransformerXL:
    torch.manual_seed(seed)
    stack = TransformerXL(d, heads, d // heads, 2 * d, layers, m, dropout=0.0).to(dtype).eval()
    with torch.no_grad():  # non-trivial u, v and LayerNorm affines
        for p in stack.parameters():
            if p.dim() < 2:
                p.normal_(0, 0.5)
    return stack


def run_segments(stack: TransformerXL, x: Tensor, is_first: Tensor, seg: int | list[int]) -> Tensor:
    """Stream ``x [B, N, d]`` through the stack in segments (``seg`` steps each, or the given
    lengths), carrying the cache from one segment to the next."""
    lengths = seg if isinstance(seg, list) else [seg] * math.ceil(x.shape[1] / seg)
    memory, valid = stack.initial_memory(x.shape[0], x.device, x.dtype)
    outs, s = [], 0
    for n in lengths:
        xl = stack(x[:, s : s + n], memory, valid, is_first[:, s : s + n])
        memory, valid = xl.memory, xl.memory_valid
        outs.append(xl.out)
        s += n
    return torch.cat(outs, 1)


def reference(stack: TransformerXL, x: Tensor, is_first: Tensor, seg: int) -> Tensor:
    """Full sequence, one pass: query ``p`` sees keys ``j`` with ``p − m − (p mod seg) ≤ j ≤ p``
    in the same episode; score ``(q+u)·k_j + (q+v)·W_r R_{p−j}`` from explicit distances."""
    B, N, d = x.shape
    m = stack.cache_len
    p = torch.arange(N)[:, None]
    j = torch.arange(N)[None, :]
    episode = is_first.long().cumsum(1)
    allowed = (j <= p) & (j >= p - m - p % seg)
    allowed = allowed[None] & (episode[:, :, None] == episode[:, None, :])
    distance = (p - j).clamp(min=0).to(x.dtype)  # [N, N]
    R = sinusoid_embedding(distance.reshape(-1), d).reshape(N, N, d)
    h = x
    for layer in stack.layers:
        attn = layer.attn
        H, D = attn.n_heads, attn.head_dim
        q, k, v = attn.qkv(layer.norm_attn(h)).view(B, N, 3, H, D).unbind(2)
        r = attn.r_net(R).view(N, N, H, D)
        score = torch.einsum("bphd,bjhd->bhpj", q + attn.u, k)
        score = score + torch.einsum("bphd,pjhd->bhpj", q + attn.v, r)
        score = (score / math.sqrt(D)).masked_fill(~allowed[:, None], float("-inf"))
        out = torch.einsum("bhpj,bjhd->bphd", score.softmax(-1), v).reshape(B, N, H * D)
        h = h + attn.out(out)
        h = h + layer.ff(layer.norm_ff(h))
    return stack.norm(h)


def test_rel_shift_aligns_distances() -> None:
    Q, K = 4, 9
    x = torch.randn(2, Q, K)
    y = rel_shift(x)
    for i in range(Q):
        for j in range(K - Q + i + 1):  # visible keys; the rest is masked garbage
            distance = (K - Q + i) - j
            assert y[0, i, j] == x[0, i, K - 1 - distance]
            assert y[1, i, j] == x[1, i, K - 1 - distance]


def test_attention_mask_is_txl_triu_plus_episodes() -> None:
    M, T = 3, 4
    valid = torch.tensor([[False, True, True], [True, True, True]])
    is_first = torch.tensor([[False, False, False, False], [False, False, True, False]])
    mask = attention_mask(valid, is_first)
    causal = ~torch.ones(T, M + T, dtype=torch.bool).triu(1 + M)
    # row 0: the invalid memory slot 0 is hidden, the rest is the TXL mask
    expected0 = causal.clone()
    expected0[:, 0] = False
    assert torch.equal(mask[0], expected0)
    # row 1: steps 2, 3 start a new episode and see only steps 2..i
    expected1 = causal.clone()
    expected1[2:, : M + 2] = False
    assert torch.equal(mask[1], expected1)


@given(
    seed=st.integers(0, 10_000),
    m=st.integers(1, 6),
    seg=st.integers(1, 5),
    n_seg=st.integers(2, 4),
    layers=st.integers(1, 3),
    heads=st.sampled_from([1, 2]),
)
@settings(max_examples=20, deadline=None)
def test_segments_with_cache_equal_banded_full_attention(
    seed: int, m: int, seg: int, n_seg: int, layers: int, heads: int
) -> None:
    stack = make_stack(8, heads, layers, m, seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, seg * n_seg, 8, generator=g, dtype=torch.float64)
    is_first = torch.rand(2, seg * n_seg, generator=g) < 0.15
    with torch.no_grad():
        torch.testing.assert_close(run_segments(stack, x, is_first, seg), reference(stack, x, is_first, seg))


@given(seed=st.integers(0, 10_000), m=st.integers(1, 5), n=st.integers(2, 12))
@settings(max_examples=15, deadline=None)
def test_steps_with_rolling_cache_equal_reference_and_segment_pass(seed: int, m: int, n: int) -> None:
    stack = make_stack(8, 2, 2, m, seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, n, 8, generator=g, dtype=torch.float64)
    is_first = torch.rand(3, n, generator=g) < 0.2
    with torch.no_grad():
        steps = run_segments(stack, x, is_first, 1)
        # one token at a time: each query sees the last m tokens (window m + 1)
        torch.testing.assert_close(steps, reference(stack, x, is_first, 1))
        # while the history fits into the cache, the step form equals one segment pass
        fits = min(n, m + 1)
        full = run_segments(stack, x[:, :fits], is_first[:, :fits], fits)
        torch.testing.assert_close(steps[:, :fits], full)


def test_episode_boundary_equals_fresh_run() -> None:
    """Outputs from an is_first on equal those of a fresh stack (empty cache) on that episode
    alone, segmented the same way."""
    stack = make_stack(16, 2, 2, 4, seed=1)
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    is_first = torch.zeros(2, 12, dtype=torch.bool)
    is_first[0, 5] = True  # inside the second segment of 4
    is_first[1, 8] = True  # at the start of the third
    with torch.no_grad():
        mixed = run_segments(stack, x, is_first, 4)
        fresh0 = run_segments(stack, x[:1, 5:], is_first[:1, 5:], [3, 4])
        fresh1 = run_segments(stack, x[1:, 8:], is_first[1:, 8:], [4])
        torch.testing.assert_close(mixed[0, 5:], fresh0[0])
        torch.testing.assert_close(mixed[1, 8:], fresh1[0])
        # without the boundary the cached past is seen and the outputs differ
        no_boundary = run_segments(stack, x, torch.zeros_like(is_first), 4)
        assert not torch.allclose(mixed[0, 5:], no_boundary[0, 5:])
        assert not torch.allclose(mixed[1, 8:], no_boundary[1, 8:])
        torch.testing.assert_close(mixed[0, :5], no_boundary[0, :5])


def test_previous_episode_in_memory_is_invisible() -> None:
    """After is_first, changing anything before it changes nothing."""
    stack = make_stack(16, 2, 2, 8, seed=2)
    x = torch.randn(1, 10, 16, dtype=torch.float64)
    y = x.clone()
    y[:, :6] = torch.randn(1, 6, 16, dtype=torch.float64)
    is_first = torch.zeros(1, 10, dtype=torch.bool)
    is_first[0, 6] = True
    with torch.no_grad():
        a = run_segments(stack, x, is_first, 3)
        b = run_segments(stack, y, is_first, 3)
        fresh = run_segments(stack, x[:, 6:], is_first[:, 6:], [3, 1])
    torch.testing.assert_close(a[:, 6:], b[:, 6:])
    torch.testing.assert_close(a[:, 6:], fresh)
    assert not torch.allclose(a[:, :6], b[:, :6])


def test_causality() -> None:
    stack = make_stack(16, 2, 3, 5, seed=3)
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    is_first = torch.zeros(2, 12, dtype=torch.bool)
    k = 6
    y = x.clone()
    y[:, k + 1 :] = torch.randn_like(y[:, k + 1 :])  # (a constant shift would vanish in LayerNorm)
    with torch.no_grad():
        for seg in (1, 4, 12):
            a, b = run_segments(stack, x, is_first, seg), run_segments(stack, y, is_first, seg)
            torch.testing.assert_close(a[:, : k + 1], b[:, : k + 1])
            assert not torch.allclose(a[:, k + 1], b[:, k + 1])


def test_cache_is_detached_and_bounded() -> None:
    stack = make_stack(8, 2, 2, 3, seed=4, dtype=torch.float32)
    x = torch.randn(2, 5, 8, requires_grad=True)
    memory, valid = stack.initial_memory(2, x.device, x.dtype)
    assert not valid.any()
    xl = stack(x, memory, valid, torch.zeros(2, 5, dtype=torch.bool))
    assert xl.memory.shape == (2, 2, 3, 8) and not xl.memory.requires_grad
    torch.testing.assert_close(xl.memory[:, 0], x[:, -3:].detach())  # layer 0 caches its inputs
    assert xl.memory_valid.all()
    # gradient reaches this segment's inputs only through the segment, never through the cache
    xl2 = stack(torch.randn(2, 2, 8), xl.memory, xl.memory_valid, torch.zeros(2, 2, dtype=torch.bool))
    xl2.out.sum().backward()
    assert x.grad is None


def test_attention_cost_grows_with_the_cache() -> None:
    """Keys per query (the score matrix) are m + T: cost linear in m."""
    x = torch.randn(1, 4, 8)
    widths = []
    for m in (16, 32, 64):
        stack = make_stack(8, 2, 1, m, seed=0, dtype=torch.float32)
        memory, valid = stack.initial_memory(1, x.device, x.dtype)
        seen = {}
        hook = stack.layers[0].attn.register_forward_pre_hook(lambda mod, args: seen.update(shape=args[2].shape))
        stack(x, memory, valid, torch.zeros(1, 4, dtype=torch.bool))
        hook.remove()
        widths.append(seen["shape"][-1])
    assert widths == [20, 36, 68]


def test_sinusoid_embedding_by_hand() -> None:
    # catches: a frequency base other than 10000, distances shifted by one (the reference
    # above uses the same function, so it cannot see either)
    emb = sinusoid_embedding(torch.tensor([0.0, 3.0], dtype=torch.float64), 4)
    w = torch.tensor([1.0, 10000 ** -0.5], dtype=torch.float64)
    expected = torch.stack([torch.tensor([0.0, 0.0, 1.0, 1.0], dtype=torch.float64),
                            torch.cat([(3 * w).sin(), (3 * w).cos()])])
    torch.testing.assert_close(emb, expected)
