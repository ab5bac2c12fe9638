"""The causal GPT transformer and its preallocated KV cache (wmzoo.nn.transformer)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from wmzoo.nn.transformer import CausalTransformer, init_gpt_weights


@given(
    layers=st.integers(1, 3), heads=st.sampled_from([1, 2, 4]), n=st.integers(1, 12),
    chunks=st.lists(st.integers(1, 4), min_size=1, max_size=4), seed=st.integers(0, 2**16),
)
@settings(max_examples=25, deadline=None)
def test_cached_chunks_equal_full_forward(layers: int, heads: int, n: int, chunks: list[int], seed: int) -> None:
    torch.manual_seed(seed)
    model = CausalTransformer(layers, 8 * heads, heads, dropout=0.1).eval()
    model.apply(init_gpt_weights)
    total = n + sum(chunks)
    x = torch.randn(2, total, 8 * heads)
    full = model(x)
    cache = model.empty_cache(2, total + 3)
    outs, pos = [model(x[:, :n], cache)], n
    for size in chunks:
        outs.append(model(x[:, pos:pos + size], cache))
        pos += size
    assert cache.length == total
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-5, rtol=1e-5)


def test_causal() -> None:
    torch.manual_seed(0)
    model = CausalTransformer(2, 16, 2).eval()
    x = torch.randn(1, 10, 16)
    y = x.clone()
    y[:, 6:] = torch.randn(1, 4, 16)
    torch.testing.assert_close(model(x)[:, :6], model(y)[:, :6])
    assert not torch.allclose(model(x)[:, 6:], model(y)[:, 6:])


def test_overflow_raises() -> None:
    model = CausalTransformer(1, 8, 2)
    cache = model.empty_cache(1, 4)
    model(torch.randn(1, 3, 8), cache)
    with pytest.raises(ValueError, match="overflow"):
        model(torch.randn(1, 2, 8), cache)
