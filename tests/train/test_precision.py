"""train.precision=bf16: mixed precision (autocast) for every backbone; weights stay float32."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from wmzoo.bench.harness import SYNTHETIC_ENV, synthetic_batch
from wmzoo.config import run_spec
from wmzoo.train.agent import Agent

BACKBONES = ["rssm", "s4wm", "tssm-xl", "iris", "rem", "delta-iris", "tokenwm"]


def _agent(backbone: str, precision: str) -> Agent:
    run = run_spec(backbone, "minigrid-empty-5x5", "tiny", overrides=[f"train.precision={precision}"])
    torch.manual_seed(0)
    return Agent(run, SYNTHETIC_ENV)


def _update(agent: Agent) -> tuple[dict[str, float], dict[str, float], dict[str, set[torch.dtype]]]:
    """One world-model and one policy update; the losses, and the dtypes every nn.Linear of the
    world model produced in each."""
    seen: dict[str, set[torch.dtype]] = {"world_model": set(), "policy": set()}
    phase = ["world_model"]
    hooks = [m.register_forward_hook(lambda m, a, out: seen[phase[0]].add(out.dtype))
             for m in agent.world_model.modules() if isinstance(m, nn.Linear)]
    torch.manual_seed(1)
    out = agent.train_world_model(synthetic_batch(SYNTHETIC_ENV, 2, 8, agent.device, seed=3))
    phase[0] = "policy"
    policy = agent.train_policy(out)
    for h in hooks:
        h.remove()
    losses = {k: v for k, v in out.metrics.items() if k.endswith("/loss")}
    return losses, {k: v for k, v in policy.items() if k.endswith("_loss")}, seen


def test_precision_is_recorded_and_validated():
    # Catches: a typo'd precision silently training in fp32.
    assert run_spec("rssm", "minigrid-empty-5x5", "tiny", overrides=["train.precision=bf16"]).train.precision == "bf16"
    from wmzoo.errors import WmzooError

    with pytest.raises(WmzooError, match="train.precision"):
        run_spec("rssm", "minigrid-empty-5x5", "tiny", overrides=["train.precision=fp16"])


@pytest.mark.parametrize("backbone", BACKBONES)
def test_a_bf16_update_is_close_to_fp32_and_keeps_float32_weights(backbone):
    # Catches: bf16 not reaching the world model or imagination (no bf16 activations: the autocast
    # region not entered, or left before the loss / the imagination), losses that go NaN or far
    # from fp32's in bf16 (a reduction left in bf16), weights cast to bf16 for good, and no step.
    fp32_losses, fp32_policy, fp32_dtypes = _update(_agent(backbone, "fp32"))
    agent = _agent(backbone, "bf16")
    before = [p.detach().clone() for p in agent.world_model.parameters()]
    losses, policy, dtypes = _update(agent)
    assert fp32_dtypes == {"world_model": {torch.float32}, "policy": {torch.float32}}
    assert torch.bfloat16 in dtypes["world_model"] and torch.bfloat16 in dtypes["policy"], dtypes
    assert losses.keys() == fp32_losses.keys() and policy.keys() == fp32_policy.keys()
    # every component's loss computed in bf16 (a plugin's own region must not switch it off)
    assert all(losses[name] != fp32_losses[name] for name in losses), (losses, fp32_losses)
    for name, value in {**losses, **policy}.items():
        reference = {**fp32_losses, **fp32_policy}[name]
        assert math.isfinite(value), name
        assert abs(value - reference) <= 0.05 * abs(reference) + 0.02, (name, value, reference)
    params = list(agent.world_model.parameters()) + list(agent.policy.parameters())
    assert all(p.dtype == torch.float32 for p in params)
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.world_model.parameters()))


def test_bf16_acting_returns_numpy_actions():
    # Catches: acting under autocast handing numpy a bfloat16 tensor (numpy has no bfloat16).
    import numpy as np

    agent = _agent("rssm", "bf16")
    obs = np.zeros((2, *SYNTHETIC_ENV.obs_shape), np.uint8)
    action = agent.act(obs, np.array([True, True]))
    assert action.shape == (2,) and action.dtype == np.int64


def test_imagination_casts_each_weight_once_not_per_step():
    # Catches: an autocast region per imagined step (or per call) in place of one per imagination,
    # which casts every world-model weight to bf16 again at every step.
    from torch.profiler import ProfilerActivity, profile

    agent = _agent("rssm", "bf16")
    out = agent.train_world_model(synthetic_batch(SYNTHETIC_ENV, 2, 4, agent.device))
    own = {tuple(p.shape) for p in agent.world_model.parameters() if p.dim() >= 2}
    own -= {tuple(p.shape) for p in agent.policy.parameters()}

    def weight_casts(horizon: int) -> int:
        agent.policy.spec = agent.policy.spec.model_copy(update={"horizon": horizon})
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            agent.train_policy(out)
        return sum(e.name == "aten::_to_copy" and tuple(e.input_shapes[0] if e.input_shapes else ()) in own
                   for e in prof.events())

    short, long = weight_casts(2), weight_casts(6)
    assert 0 < short == long
