"""Learning-rate schedules and per-parameter groups of :mod:`wmzoo.optim`."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from wmzoo.optim import Optimizer, adamw, learning_rate
from wmzoo.specs import OptimSpec


def test_warmup_then_constant() -> None:
    spec = OptimSpec(lr=1e-3, warmup=4)
    assert [learning_rate(spec, u) for u in range(6)] == pytest.approx(
        [2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3]
    )


def test_warmup_then_cosine_to_the_floor() -> None:
    spec = OptimSpec(lr=1.0, warmup=2, schedule="cosine", decay_steps=4, min_lr_ratio=0.2)
    rates = [learning_rate(spec, u) for u in range(9)]
    # warm-up 0.5, 1; then 0.2 + 0.8 · (1 + cos(pi k / 4)) / 2 for k = 0..4; then held at 0.2
    cosine = [0.2 + 0.8 * 0.5 * (1 + math.cos(math.pi * k / 4)) for k in range(5)]
    assert rates == pytest.approx([0.5, 1.0, *cosine, 0.2, 0.2])
    assert rates[4] == pytest.approx(0.6)  # half-way: the mean of lr and the floor


@given(st.integers(0, 100), st.integers(1, 100), st.integers(0, 500))
def test_cosine_is_bounded_and_non_increasing_after_warmup(warmup: int, decay: int, update: int) -> None:
    spec = OptimSpec(lr=0.5, warmup=warmup, schedule="cosine", decay_steps=decay, min_lr_ratio=0.1)
    rate = learning_rate(spec, update)
    assert 0 < rate <= 0.5 + 1e-12
    if update >= warmup:
        assert rate >= 0.05 - 1e-12
        assert learning_rate(spec, update + 1) <= rate + 1e-12


def test_cosine_without_a_length_is_refused() -> None:
    with pytest.raises(ValueError, match="decay_steps"):
        OptimSpec(schedule="cosine")


def test_marked_parameters_get_their_own_rate_and_no_weight_decay() -> None:
    fast, slow = nn.Linear(2, 2), nn.Linear(2, 2)
    for p in slow.parameters():
        p._optim = {"lr_scale": 0.1, "weight_decay": 0.0}
    spec = OptimSpec(lr=1e-2, weight_decay=0.5, warmup=2)
    opt = Optimizer([*fast.parameters(), *slow.parameters()], spec)
    groups = {g["lr_scale"]: g for g in opt.opt.param_groups}
    assert set(groups) == {1.0, 0.1}
    assert groups[0.1]["weight_decay"] == 0.0 and groups[1.0]["weight_decay"] == 0.5
    torch.nn.functional.mse_loss(fast(torch.ones(1, 2)) + slow(torch.ones(1, 2)), torch.zeros(1, 2)).backward()
    opt.step()  # first warm-up step: half the rate
    assert groups[1.0]["lr"] == pytest.approx(5e-3) and groups[0.1]["lr"] == pytest.approx(5e-4)


def test_adamw_without_marks_is_one_group() -> None:
    assert len(adamw(nn.Linear(3, 3).parameters(), OptimSpec()).param_groups) == 1
