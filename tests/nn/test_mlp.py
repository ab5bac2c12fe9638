"""DreamerV3's dense blocks (wmzoo.nn.mlp) against a hand-written forward pass."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from wmzoo.nn.mlp import MLP


def test_mlp_is_bias_free_linear_layernorm_1e3_silu_then_a_linear_output() -> None:
    # catches: a bias on the hidden Linear, LayerNorm's eps other than 1e-3, another activation
    torch.manual_seed(0)
    mlp = MLP(5, 3, hidden=4, layers=2)
    with torch.no_grad():
        for p in mlp.parameters():
            p.copy_(torch.randn(p.shape))
    x = torch.randn(6, 5) * 1e-2  # tiny activations: the eps matters
    h = x
    for block in mlp.hidden:
        lin, norm = block[0], block[1]
        assert lin.bias is None
        h = F.silu(F.layer_norm(h @ lin.weight.T, (4,), norm.weight, norm.bias, 1e-3))
    torch.testing.assert_close(mlp(x), h @ mlp.out.weight.T + mlp.out.bias)


def test_mlp_without_hidden_layers_is_one_linear_map_and_zero_init_starts_at_zero() -> None:
    # catches: the output layer sized for hidden units when there are none, zero_init ignored
    mlp = MLP(5, 3, hidden=8, layers=0)
    x = torch.randn(2, 5)
    torch.testing.assert_close(mlp(x), x @ mlp.out.weight.T + mlp.out.bias)
    assert MLP(5, 3, hidden=8, layers=1, zero_init=True)(x).abs().max() == 0
