"""The tokenizers' GroupNorm: a channels-last map under CPU autocast is normalised in the
contiguous layout (torch's channels-last bf16 kernels are slow), with the same results."""

from __future__ import annotations

import torch
from torch import nn

from wmzoo.nn.tokenizer import GroupNorm, _norm


def test_channels_last_under_autocast_matches_plain_group_norm_and_keeps_its_layout():
    # Catches: the contiguous detour changing the result or its gradient, or handing the next
    # (channels-last) convolution a contiguous map.
    torch.manual_seed(0)
    ours = _norm(16, 8)
    assert isinstance(ours, GroupNorm)
    plain = nn.GroupNorm(8, 16, eps=1e-6)
    plain.load_state_dict(ours.state_dict())
    x = torch.randn(3, 16, 8, 8).contiguous(memory_format=torch.channels_last)
    for autocast in (False, True):
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            ya, yb = ours(a), plain(b)
        assert ya.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(ya, yb, atol=1e-2, rtol=1e-2)
        (ya.float().square().sum()).backward()
        (yb.float().square().sum()).backward()
        torch.testing.assert_close(a.grad, b.grad, atol=5e-2, rtol=5e-2)
