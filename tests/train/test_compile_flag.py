"""train.compile: the world model's loss and imagination step go through torch.compile, and a
backbone whose code does not compile runs eagerly after one warning line."""

from __future__ import annotations

import pytest
import torch

from wmzoo import device
from wmzoo.bench.harness import SYNTHETIC_ENV, synthetic_batch
from wmzoo.config import run_spec
from wmzoo.device import compile_failures, is_compiled
from wmzoo.train.agent import Agent


def _agent(compile: bool, backbone: str = "rssm") -> Agent:
    run = run_spec(backbone, "minigrid-empty-5x5", "tiny", overrides=[f"train.compile={str(compile).lower()}"])
    torch.manual_seed(0)
    return Agent(run, SYNTHETIC_ENV)


def test_the_flag_compiles_the_loss_and_the_imagination_step(monkeypatch):
    # Catches: train.compile accepted but ignored (nothing passed to torch.compile), or the wrong
    # methods compiled.
    compiled = []

    def fake_compile(fn):
        compiled.append(fn.__name__)
        return fn

    monkeypatch.setattr(device.torch, "compile", fake_compile)
    assert not is_compiled(_agent(False).world_model) and compiled == []
    agent = _agent(True)
    assert is_compiled(agent.world_model) and sorted(compiled) == ["imagine_step", "loss"]
    out = agent.train_world_model(synthetic_batch(SYNTHETIC_ENV, 2, 8, agent.device))
    assert "policy/actor_loss" in agent.train_policy(out)
    assert "world_model" in agent.state_tree()  # the checkpoint tree is the same module's


def test_a_method_that_does_not_compile_warns_once_and_runs_eagerly(monkeypatch, capsys):
    # Catches: a backbone that dynamo cannot trace failing the run (or warning at every call)
    # instead of running eagerly.
    from torch._dynamo.exc import Unsupported

    calls = []

    def failing_compile(fn):
        def run(*args, **kwargs):
            calls.append(1)
            raise Unsupported("a data-dependent branch")
        return run

    monkeypatch.setattr(device.torch, "compile", failing_compile)
    agent = _agent(True)
    batch = synthetic_batch(SYNTHETIC_ENV, 2, 8, agent.device)
    for _ in range(2):
        out = agent.train_world_model(batch)
    assert torch.isfinite(torch.tensor(out.metrics["model/loss"]))
    assert len(calls) == 1  # tried once, then eager
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("wmzoo: warning: train.compile: rssm.loss does not compile")
    assert "loss" in compile_failures(agent.world_model)


def test_errors_of_the_model_itself_are_not_swallowed(monkeypatch):
    # Catches: the eager fallback hiding a real bug of the model (a shape error) behind a warning.
    def broken_compile(fn):
        def run(*args, **kwargs):
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")
        return run

    monkeypatch.setattr(device.torch, "compile", broken_compile)
    agent = _agent(True)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        agent.train_world_model(synthetic_batch(SYNTHETIC_ENV, 2, 8, agent.device))


@pytest.mark.slow
def test_rssm_compiles_for_real_and_matches_eager(monkeypatch):
    # Catches: a compiled loss that computes something else than the eager one (minutes on CPU).
    import torch._inductor.config

    # inductor draws its own random numbers unless told to use eager's (RSSM samples its latents)
    monkeypatch.setattr(torch._inductor.config, "fallback_random", True)
    eager, compiled = _agent(False), _agent(True)
    batch = synthetic_batch(SYNTHETIC_ENV, 2, 4, eager.device)
    torch.manual_seed(1)
    a = eager.world_model.loss(batch).losses["model"]
    torch.manual_seed(1)
    b = compiled.world_model.loss(batch).losses["model"]
    assert compile_failures(compiled.world_model) == {}
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-3)
