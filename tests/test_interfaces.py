"""wmzoo.interfaces: Batch.windows (the token models cut long training sequences with it)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from wmzoo.interfaces import Batch


def _batch(B: int, T: int) -> Batch:
    steps = torch.arange(B * T).reshape(B, T)
    return Batch(obs=steps[..., None, None, None].to(torch.uint8), action=steps, reward=steps.float(),
                 terminal=steps % 2 == 0, is_first=steps % 3 == 0)


@given(B=st.integers(1, 3), T=st.integers(2, 30), size=st.integers(2, 10), overlap=st.booleans())
@settings(max_examples=40, deadline=None)
def test_windows_are_consecutive_steps_of_one_row(B: int, T: int, size: int, overlap: bool) -> None:
    # Catches: windows mixing rows, a stride off by one (a transition lost or counted twice when
    # windows overlap by one step), fields cut differently.
    if size > T:
        return
    stride = size - 1 if overlap and size > 1 else size
    batch = _batch(B, T)
    win = batch.windows(size, stride)
    n = (T - size) // stride + 1
    assert win.shape == (B * n, size)
    for i in range(B * n):
        row, k = divmod(i, n)
        expected = torch.arange(size) + k * stride
        assert torch.equal(win.action[i], batch.action[row, expected])
        assert torch.equal(win.is_first[i], batch.is_first[row, expected])
        assert torch.equal(win.obs[i], batch.obs[row, expected])
    if overlap:  # every transition t -> t + 1 inside the windows exactly once
        pairs = [(int(w[j]), int(w[j + 1])) for w in win.action for j in range(size - 1)]
        assert len(pairs) == len(set(pairs)) == B * n * (size - 1)


def test_windows_that_do_not_fit_are_refused() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        _batch(1, 4).windows(5)
