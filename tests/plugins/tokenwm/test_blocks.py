"""TokenWM's building blocks (wmzoo_plugins.tokenwm.blocks) against their definitions: FiLM's
modulation, the order of each block's sub-layers, the perceiver read-out as its queries'
cross-attention, the ViT's layers as torch's pre-norm encoder layers, and the attention's
training path (explicit arithmetic) equal to its inference path (torch's fused attention)."""

from __future__ import annotations

import pytest
import torch

from wmzoo_plugins.tokenwm import Attention, CrossBlock, FiLM, FiLMBlock, PerceiverReadout, ViTEncoder

from .test_model import _model


def test_film_scales_by_one_plus_gamma_and_shifts_by_beta():
    # catches: x scaled by γ instead of 1 + γ (a zero projection must leave x as it is)
    torch.manual_seed(0)
    film = FiLM(3, 4)
    x, a = torch.randn(2, 5, 4), torch.randn(2, 3)
    with torch.no_grad():
        film.proj.weight.zero_()
        film.proj.bias.copy_(torch.tensor([0.0, 1.0, -0.5, 0.0, 2.0, 0.0, 0.0, -1.0]))  # γ, then β
        out = film(x, a)
    gamma, beta = torch.tensor([0.0, 1.0, -0.5, 0.0]), torch.tensor([2.0, 0.0, 0.0, -1.0])
    torch.testing.assert_close(out, (1 + gamma) * x + beta)


@pytest.mark.parametrize("post_norm", [True, False])
def test_blocks_run_their_sub_layers_in_order(post_norm: bool):
    # catches: a block's self-attention skipped, or the prior's FiLM applied after it (3.2: the
    # action modulates the tokens the self-attention then mixes)
    torch.manual_seed(0)
    x, a, kv = torch.randn(2, 5, 16), torch.randn(2, 3), torch.randn(2, 9, 24)
    film = FiLMBlock(16, 4, 2, post_norm, 3)
    torch.testing.assert_close(film(x, a), film.ff(film.self_attn(film.film(x, a))))
    cross = CrossBlock(16, 4, 2, post_norm, kv_dim=24)
    torch.testing.assert_close(cross(x, kv), cross.ff(cross.self_attn(cross.cross(x, kv))))


@pytest.mark.parametrize("post_norm", [True, False])
def test_perceiver_readout_is_its_queries_cross_attending_to_the_tokens(post_norm: bool):
    # catches: the queries normed before the attention under post-norm, or not under pre-norm
    torch.manual_seed(0)
    read = PerceiverReadout(16, 4, 3, post_norm)
    with torch.no_grad():
        read.queries.normal_()  # the norm of a query changes it
    tokens = torch.randn(2, 5, 16)
    expected = read.cross(read.queries.expand(2, -1, -1), tokens)
    torch.testing.assert_close(read(tokens), expected)


def test_vit_layers_are_torchs_pre_norm_encoder_layers():
    # catches: a layer's two norms swapped, another activation than GELU, the position
    # embedding dropped
    torch.manual_seed(0)
    vit = ViTEncoder((3, 16, 16), 4, 24, 2, 4, 2)
    with torch.no_grad():
        vit.pos.normal_()  # the position embedding moves the output by O(1)
        for norm in (m for m in vit.modules() if isinstance(m, torch.nn.LayerNorm)):
            norm.weight.normal_(1.0, 0.5)  # norms initialised alike would hide a swap
            norm.bias.normal_(0.0, 0.5)
    frames = torch.randint(0, 256, (2, 3, 16, 16), generator=torch.Generator().manual_seed(1), dtype=torch.uint8)
    z = vit.patchify(frames.float() / 255 - 0.5).flatten(2).transpose(1, 2) + vit.pos
    torch.testing.assert_close(vit(frames), vit.norm(vit.layers(z)), atol=1e-5, rtol=1e-4)


def test_the_memory_read_with_gradient_equals_the_read_without():
    # catches: the explicit (training) path's key mask inverted, reading the empty bank slots
    # and ignoring the valid ones (the fused inference path reads the right ones)
    wm = _model()
    torch.manual_seed(1)
    h, bank = torch.randn(2, 8, 32), torch.randn(2, 2, 8, 32)
    valid = torch.tensor([[False, True], [True, True]])
    with torch.no_grad():
        fused = wm.read_memory(h, bank, valid)
    torch.testing.assert_close(wm.read_memory(h, bank, valid), fused, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(wm.train().read_memory(h, bank, valid), fused, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kv_dim", [None, 24])
def test_the_explicit_attention_is_torchs_multi_head_attention(kv_dim: int | None):
    # catches: the query, key or value bias sliced from the wrong part of in_proj_bias (torch
    # initialises it to zeros, so only non-zero biases show it), a key mask applied inverted
    torch.manual_seed(0)
    attention = Attention(16, 4, True, kv_dim)
    with torch.no_grad():
        attention.attn.in_proj_bias.normal_()
    x = torch.randn(2, 5, 16)
    kv = None if kv_dim is None else torch.randn(2, 7, kv_dim)
    ignore = torch.zeros(2, 5 if kv is None else 7, dtype=torch.bool)
    ignore[0, :2] = True
    explicit = attention(x, kv, ignore)  # with gradient: the explicit arithmetic
    keys = x if kv is None else kv
    reference = attention.norm(x + attention.attn(x, keys, keys, key_padding_mask=ignore, need_weights=False)[0])
    torch.testing.assert_close(explicit, reference, atol=1e-5, rtol=1e-4)
