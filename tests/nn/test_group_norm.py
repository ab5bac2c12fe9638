"""The tokenizers' GroupNorm: a channels-last half-precision map on a CPU runs torch's forward in
the layout whose kernel is fast and a backward written out in that layout
(``_ChannelsLastGroupNorm``); the results are :class:`torch.nn.GroupNorm`'s."""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch import nn

from wmzoo.nn.tokenizer import GroupNorm, ResBlock, _ChannelsLastGroupNorm, _norm

CL = torch.channels_last


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 3), groups=st.sampled_from([1, 2, 4]), per_group=st.integers(1, 3),
       side=st.sampled_from([(1, 2), (3, 5), (8, 8), (32, 32), (33, 40), (96, 128)]), seed=st.integers(0, 2**16))
@example(n=3, groups=4, per_group=3, side=(96, 128), seed=0)  # three chunks of one sample
@example(n=3, groups=2, per_group=1, side=(96, 128), seed=1)  # two chunks: of two samples, then one
def test_the_written_out_backward_is_group_norms_gradient(n, groups, per_group, side, seed):
    # Catches: a sign or a factor of the x̂ term, ρ left out of dw, a group mean over the wrong
    # axis (channels of other groups), the mean and deviation of the other layout's path (below
    # and above 1,024 pixels), the output handed back contiguous, a chunk of samples skipped or
    # written twice (96 × 128 maps: a chunk per sample or two). In float64 the written-out
    # gradient equals autograd's through torch's GroupNorm to rounding.
    torch.manual_seed(seed)
    c = groups * per_group
    plain = nn.GroupNorm(groups, c, eps=1e-6).double()
    with torch.no_grad():
        plain.weight.normal_()
        plain.bias.normal_()
    x = torch.randn(n, c, *side, dtype=torch.float64).contiguous(memory_format=CL)
    g = torch.randn(n, c, *side, dtype=torch.float64)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    w, bias = plain.weight.detach().clone().requires_grad_(), plain.bias.detach().clone().requires_grad_()
    ours = _ChannelsLastGroupNorm.apply(a, w, bias, groups, 1e-6)
    ref = plain(b)
    assert ours.is_contiguous(memory_format=CL)
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-10)
    (ours * g).sum().backward()
    (ref * g).sum().backward()
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(w.grad, plain.weight.grad, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(bias.grad, plain.bias.grad, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("side", [8, 32])  # below 1,024 pixels (through the contiguous layout) and from there
@pytest.mark.parametrize("autocast", [False, True])
def test_the_module_matches_plain_group_norm_in_bfloat16_and_keeps_channels_last(side, autocast):
    # Catches: the module not taking the written-out path for a bfloat16 map that needs a
    # gradient, inference taking it (a graph built under no_grad), the result or its gradient
    # changed beyond bfloat16 rounding, a contiguous map handed to the next convolution.
    torch.manual_seed(0)
    ours = _norm(16, 8)
    assert isinstance(ours, GroupNorm)
    plain = nn.GroupNorm(8, 16, eps=1e-6)
    with torch.no_grad():
        ours.weight.normal_()
        ours.bias.normal_()
    plain.load_state_dict(ours.state_dict())
    x = torch.randn(3, 16, side, side)
    half = x.to(torch.bfloat16).contiguous(memory_format=CL).requires_grad_()
    ref = x.to(torch.bfloat16).float().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        y = ours(half)
    assert type(y.grad_fn).__name__ == "_ChannelsLastGroupNormBackward"
    assert y.dtype == torch.bfloat16 and y.is_contiguous(memory_format=CL)
    yr = plain(ref)
    torch.testing.assert_close(y.float(), yr, atol=3e-2, rtol=2e-2)
    g = torch.randn_like(yr)
    (y.float() * g).sum().backward()
    (yr * g).sum().backward()
    scale = ref.grad.abs().max()
    assert (half.grad.float() - ref.grad).abs().max() < 2e-2 * scale
    for p, q in ((ours.weight, plain.weight), (ours.bias, plain.bias)):
        assert (p.grad - q.grad).abs().max() < 2e-2 * q.grad.abs().max()
    with torch.no_grad():
        y0 = ours(half)
    assert y0.grad_fn is None and y0.is_contiguous(memory_format=CL)
    torch.testing.assert_close(y0, y.detach())


def test_a_residual_block_with_the_in_place_silu_has_the_out_of_place_gradient():
    # Catches: a SiLU made in place on a tensor another backward reads (the norm's input, the
    # skip): its gradient would differ from the block's with every SiLU out of place.
    torch.manual_seed(0)
    block = ResBlock(8, 16, 4).to(memory_format=CL)
    copy = ResBlock(8, 16, 4).to(memory_format=CL)
    copy.load_state_dict(block.state_dict())
    copy.body[1], copy.body[4] = nn.SiLU(), nn.SiLU()
    assert block.body[1].inplace and block.body[4].inplace
    x = torch.randn(2, 8, 12, 12).to(torch.bfloat16).contiguous(memory_format=CL)
    for dtype in (torch.float32, torch.bfloat16):
        a, b = x.to(dtype).requires_grad_(), x.to(dtype).requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            ya, yb = block(a), copy(b)
        torch.testing.assert_close(ya, yb)
        ya.float().square().sum().backward()
        yb.float().square().sum().backward()
        torch.testing.assert_close(a.grad, b.grad)
        for p, q in zip(block.parameters(), copy.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
            p.grad = q.grad = None
