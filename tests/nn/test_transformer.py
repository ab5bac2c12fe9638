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
    boundaries=st.booleans(),
)
@settings(max_examples=40, deadline=None)
def test_cached_chunks_equal_full_forward(
    layers: int, heads: int, n: int, chunks: list[int], seed: int, boundaries: bool
) -> None:
    # Catches: a cache written at the wrong offset, a chunk's causal mask off by one, or (with
    # episode boundaries) a cache that forgets which episode its tokens belong to.
    torch.manual_seed(seed)
    model = CausalTransformer(layers, 8 * heads, heads, dropout=0.1).eval()
    model.apply(init_gpt_weights)
    total = n + sum(chunks)
    x = torch.randn(2, total, 8 * heads)
    starts = torch.rand(2, total) < 0.2 if boundaries else None
    full = model(x, starts=starts)
    cache = model.empty_cache(2, total + 3)
    cut = (lambda a, b: None) if starts is None else (lambda a, b: starts[:, a:b])
    outs, pos = [model(x[:, :n], cache, cut(0, n))], n
    for size in chunks:
        outs.append(model(x[:, pos:pos + size], cache, cut(pos, pos + size)))
        pos += size
    assert cache.length == total
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cached", [False, True])
def test_nothing_after_an_episode_start_depends_on_what_came_before(cached: bool) -> None:
    # Catches: attention into the previous episode inside a training window (the mask missing,
    # keyed on the wrong token, or lost between cached calls), and a mask that also cuts the
    # first episode short.
    torch.manual_seed(0)
    model = CausalTransformer(2, 16, 2).eval()
    x = torch.randn(2, 12, 16)
    starts = torch.zeros(2, 12, dtype=torch.bool)
    starts[0, 5] = starts[1, 8] = True

    def run(inputs: torch.Tensor) -> torch.Tensor:
        if not cached:
            return model(inputs, starts=starts)
        cache = model.empty_cache(2, 12)
        return torch.cat([model(inputs[:, a:b], cache, starts[:, a:b]) for a, b in ((0, 3), (3, 7), (7, 12))], 1)

    out = run(x)
    for row, b in ((0, 5), (1, 8)):
        torch.testing.assert_close(out[row, b:], model(x[row : row + 1, b:])[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out[row, :b], model(x[row : row + 1, :b])[0], atol=1e-5, rtol=1e-5)
    y = x.clone()
    y[0, :5], y[1, :8] = torch.randn(5, 16), torch.randn(8, 16)
    changed = run(y)
    torch.testing.assert_close(changed[0, 5:], out[0, 5:])
    torch.testing.assert_close(changed[1, 8:], out[1, 8:])
    assert not torch.allclose(changed[0, :5], out[0, :5])


@pytest.mark.parametrize("at", [0, 1])
def test_a_start_cuts_off_exactly_the_tokens_before_it(at: int) -> None:
    # Catches: an episode start at a window's first token treated as a boundary (every token of
    # the window then sees a different episode from its predecessors' cache entries), and the
    # "no boundary in view" shortcut looking past the second token (a start at token 1 is a
    # boundary: token 0 belongs to the episode before).
    torch.manual_seed(0)
    model = CausalTransformer(1, 8, 2).eval()
    x = torch.randn(1, 6, 8)
    starts = torch.zeros(1, 6, dtype=torch.bool)
    starts[0, at] = True
    torch.testing.assert_close(model(x, starts=starts)[:, at:], model(x[:, at:]), atol=1e-5, rtol=1e-5)


def test_causal() -> None:
    # Catches: a query attending to later tokens (the causal mask dropped or transposed).
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


def reference_gpt(model: CausalTransformer, x: torch.Tensor) -> torch.Tensor:
    """minGPT written out: ``x + Attn(LN1(x))``, ``x + MLP(LN2(x))`` (4× GELU), causal softmax
    attention ``softmax(QKᵀ / √d_head) V`` per head, then the final LayerNorm."""
    import torch.nn.functional as F

    B, n, D = x.shape
    H, dh = model.heads, model.head_dim
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for block in model.blocks:
        h = F.layer_norm(x, (D,), block.ln1.weight, block.ln1.bias)
        q, k, v = (h @ block.attn.qkv.weight.T + block.attn.qkv.bias).split(D, -1)
        q, k, v = (t.reshape(B, n, H, dh).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2) / dh**0.5).masked_fill(~causal, float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, n, D)
        x = x + y @ block.attn.proj.weight.T + block.attn.proj.bias
        f = F.layer_norm(x, (D,), block.ln2.weight, block.ln2.bias)
        lin1, lin2 = block.mlp[0], block.mlp[2]
        x = x + F.gelu(f @ lin1.weight.T + lin1.bias) @ lin2.weight.T + lin2.bias
    return F.layer_norm(x, (D,), model.ln_f.weight, model.ln_f.bias)


def test_transformer_is_the_explicit_gpt_stack() -> None:
    # catches: LN1 and LN2 swapped, a residual dropped, the final LayerNorm left out, another MLP
    # activation (every parameter random, so two LayerNorms cannot stand in for each other)
    torch.manual_seed(0)
    model = CausalTransformer(2, 8, 2).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape) * 0.5)
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(model(x), reference_gpt(model, x), atol=1e-5, rtol=1e-5)


def test_gpt_initialisation() -> None:
    # catches: a weight std other than 0.02, biases left at their default initialisation
    torch.manual_seed(0)
    model = CausalTransformer(1, 256, 4)
    model.apply(init_gpt_weights)
    w = model.blocks[0].mlp[0].weight
    assert 0.019 < w.std().item() < 0.021 and abs(w.mean().item()) < 1e-3
    assert all(m.bias.abs().max() == 0 for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert model.ln_f.weight.eq(1).all() and model.ln_f.bias.eq(0).all()


def test_restart_positions_and_episode_index_by_hand() -> None:
    # catches: positions before the first start not offset by `first`, positions counted from 1
    # after a start, episode indices not cumulative
    from wmzoo.nn.transformer import episode_index, restart_positions

    starts = torch.tensor([[False, False, True, False, True, False], [False] * 6])
    assert restart_positions(starts).tolist() == [[0, 1, 0, 1, 0, 1], [0, 1, 2, 3, 4, 5]]
    assert restart_positions(starts, 10).tolist() == [[10, 11, 0, 1, 0, 1], [10, 11, 12, 13, 14, 15]]
    assert restart_positions(starts, torch.tensor([3, 7])).tolist() == [[3, 4, 0, 1, 0, 1], [7, 8, 9, 10, 11, 12]]
    assert episode_index(starts).tolist() == [[0, 0, 1, 1, 2, 2], [0] * 6]
    assert episode_index(starts, torch.tensor([4, 2])).tolist() == [[4, 4, 5, 5, 6, 6], [2] * 6]
