"""Learning-rate schedules, per-parameter groups and skipped non-finite steps of :mod:`wmzoo.optim`."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from wmzoo.optim import Optimizer, adamw, learning_rate, step_components, world_model_optimizers
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


# --------------------------------------------------------------------------- non-finite steps


def _net_and_optimizer(seed: int = 0) -> tuple[nn.Linear, Optimizer]:
    torch.manual_seed(seed)
    net = nn.Linear(3, 2)
    return net, Optimizer(net.parameters(), OptimSpec(lr=1e-2, weight_decay=0.1, warmup=3))


def _loss(net: nn.Linear, scale: float = 1.0) -> torch.Tensor:
    return (net(torch.ones(4, 3)) ** 2).mean() * scale


def _state(net: nn.Module, opt: Optimizer) -> tuple[list[torch.Tensor], dict]:
    """Copies of the parameters and of everything the optimizer would checkpoint."""
    params = [p.detach().clone() for p in net.parameters()]
    saved = opt.state_dict()
    moments = {i: {k: v.clone() for k, v in s.items()} for i, s in saved["opt"]["state"].items()}
    groups = [{k: v for k, v in g.items() if k != "params"} for g in saved["opt"]["param_groups"]]
    return params, {"moments": moments, "groups": groups, "updates": saved["updates"]}


def _assert_same(a: tuple[list[torch.Tensor], dict], b: tuple[list[torch.Tensor], dict]) -> None:
    for x, y in zip(a[0], b[0], strict=True):
        assert torch.equal(x, y)
    assert a[1]["updates"] == b[1]["updates"] and a[1]["groups"] == b[1]["groups"]
    assert a[1]["moments"].keys() == b[1]["moments"].keys()
    for i, state in a[1]["moments"].items():
        for k, v in state.items():
            assert torch.equal(v, b[1]["moments"][i][k]), (i, k)


@pytest.mark.parametrize(("bad", "through_gradient"), [(math.nan, True), (math.inf, True), (math.nan, False)])
def test_a_non_finite_loss_is_skipped_and_changes_nothing(bad: float, through_gradient: bool) -> None:
    """Catches the step going ahead on a NaN/inf loss (weights and Adam moments poisoned), also
    when its gradient is finite (a non-finite term without gradient: a check of the gradient norm
    alone misses it), and a skip that still moves the schedule, the step count or weight decay
    (``updates``, the group's ``lr``, Adam's ``step`` would differ), or is not counted."""
    net, opt = _net_and_optimizer()
    opt.step(_loss(net))  # Adam moments exist: a skip must leave them too
    before = _state(net, opt)
    loss = _loss(net, bad) if through_gradient else _loss(net) + torch.tensor(bad)
    norm = opt.step(loss)
    _assert_same(_state(net, opt), before)
    assert opt.skipped == 1 and opt.updates == 1
    assert opt.skip_reason == ("is NaN" if math.isnan(bad) else "is +inf")
    assert all(p.grad is None for p in net.parameters())  # nothing left to leak into a later step
    assert math.isfinite(norm) is not through_gradient


def test_a_finite_step_after_a_skip_is_the_step_it_would_have_been() -> None:
    """Catches a skip that leaves a trace in the next step: the twin that never saw the NaN must
    end bit-identical (same schedule position, same moments, same weights)."""
    net, opt = _net_and_optimizer()
    twin, twin_opt = _net_and_optimizer()
    for scale in (1.0, math.nan, 2.0, 3.0):
        opt.step(_loss(net, scale))
    for scale in (1.0, 2.0, 3.0):
        twin_opt.step(_loss(twin, scale))
    _assert_same(_state(net, opt), _state(twin, twin_opt))
    assert (opt.updates, opt.skipped, twin_opt.skipped) == (3, 1, 0)
    assert opt.opt.param_groups[0]["lr"] == pytest.approx(1e-2)  # warm-up 3: the third applied step


def test_an_inf_gradient_with_a_finite_loss_is_caught() -> None:
    """Catches a check of the loss alone: the loss is finite, its gradient is not."""
    net, opt = _net_and_optimizer()
    before = _state(net, opt)
    out = net(torch.ones(4, 3))
    out.register_hook(lambda grad: torch.full_like(grad, math.inf))
    loss = out.mean()
    assert math.isfinite(loss.item())
    opt.step(loss)
    _assert_same(_state(net, opt), before)
    assert opt.skipped == 1 and "gradient norm of +inf (the loss is finite)" in opt.skip_reason


def test_step_components_skips_only_the_component_whose_loss_is_not_finite() -> None:
    """Catches one component's NaN stepping it anyway, or stopping the healthy component (the
    shared backward pass must not make the check all-or-nothing)."""
    torch.manual_seed(0)
    a, b = nn.Linear(3, 1), nn.Linear(3, 1)
    optimizers = world_model_optimizers({"a": (list(a.parameters()), OptimSpec(lr=0.1)),
                                         "b": (list(b.parameters()), OptimSpec(lr=0.1))})
    a0, b0 = [p.detach().clone() for p in a.parameters()], [p.detach().clone() for p in b.parameters()]
    x = torch.ones(2, 3)
    norms = step_components(optimizers, {"a": a(x).pow(2).mean(), "b": b(x).mean() * math.nan})
    assert math.isfinite(norms["a"]) and not math.isfinite(norms["b"])
    assert all(not torch.equal(p, q) for p, q in zip(a.parameters(), a0, strict=True))
    assert all(torch.equal(p, q) for p, q in zip(b.parameters(), b0, strict=True))
    assert (optimizers["a"].updates, optimizers["a"].skipped) == (1, 0)
    assert (optimizers["b"].updates, optimizers["b"].skipped) == (0, 1)


def test_a_component_starts_at_its_update() -> None:
    # Table 3's "start after epochs" as OptimSpec.start. Catches: a component stepping before its
    # start, its loss's gradient leaking into the shared backward (it would move the others'
    # shared inputs), a start off by one (update `start` is the first that steps).
    from wmzoo.optim import step_components, world_model_optimizers
    from wmzoo.specs import OptimSpec

    torch.manual_seed(0)
    a, b = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    opts = world_model_optimizers({
        "first": (list(a.parameters()), OptimSpec(lr=0.1)),
        "later": (list(b.parameters()), OptimSpec(lr=0.1, start=2)),
    })
    x = torch.randn(4, 2)
    for update in range(3):
        before = b.weight.detach().clone()
        norms = step_components(opts, {"first": a(x).pow(2).mean(), "later": b(x).pow(2).mean()}, update)
        assert set(norms) == ({"first", "later"} if update >= 2 else {"first"})
        assert torch.equal(b.weight, before) == (update < 2)
        assert b.weight.grad is None or update >= 2
    assert opts["first"].updates == 3 and opts["later"].updates == 1
    assert step_components(opts, {"first": a(x).sum(), "later": b(x).sum()}) .keys() == {"first", "later"}


@pytest.mark.parametrize("damage", ["moment as int32", "moment of another shape", "step as int64", "unknown parameter"])
def test_a_saved_state_whose_moments_do_not_fit_their_parameters_is_refused(damage: str) -> None:
    """Catches a checkpoint's optimizer state loaded without a check: torch casts an int32 moment
    (a float's bytes read as integers) and an integer ``step`` to the parameter's dtype, and
    broadcasts a moment of another shape, all without a word — Adam then steps with garbage."""
    net, opt = _net_and_optimizer()
    opt.step(_loss(net))
    state = opt.state_dict()
    entry = state["opt"]["state"][0]
    if damage == "moment as int32":
        entry["exp_avg"] = entry["exp_avg"].view(torch.int32)
    elif damage == "moment of another shape":
        entry["exp_avg"] = entry["exp_avg"].reshape(-1)[:1]
    elif damage == "step as int64":
        entry["step"] = torch.tensor(1)
    else:
        state["opt"]["state"][99] = entry
    fresh, fresh_opt = _net_and_optimizer()
    with pytest.raises(ValueError, match="optimizer state") as info:
        fresh_opt.load_state_dict(state)
    assert ("99" if damage == "unknown parameter" else "0/") in str(info.value)
    intact_net, intact = _net_and_optimizer()
    intact.load_state_dict(_net_and_optimizer()[1].state_dict())  # an intact state still loads
