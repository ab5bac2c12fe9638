"""DreamerV3's dynamics backpropagation for continuous actions (``policy.actor_grad``): the actor's
gradient flows from the imagined returns through the backbone's ``imagine_step`` into the
reparameterised actions, with gradients in the one generic imagination engine
(``imagine(grad=True)``) and the world model's parameters frozen."""

from __future__ import annotations

import pytest
import torch

from wmzoo.agents.dreamer import PRESETS, DreamerPolicy
from wmzoo.bench.harness import synthetic_batch
from wmzoo.config import run_spec
from wmzoo.errors import SpecError, WmzooError
from wmzoo.imagination import frozen, imagine
from wmzoo.interfaces import EnvInfo
from wmzoo.registry import build_policy, build_world_model, default_registry, policy_spec, world_model_spec
from wmzoo.train.agent import Agent

CONTINUOUS = EnvInfo("t-continuous", (3, 16, 16), 2, discrete=False)
DISCRETE = EnvInfo("t-discrete", (3, 16, 16), 3)


def world_model_and_starts(name: str, env: EnvInfo = CONTINUOUS):
    torch.manual_seed(0)
    wm = build_world_model(name, world_model_spec(name, "tiny", None), env)
    out = wm.loss(synthetic_batch(env, 2, 5, torch.device("cpu")))
    with torch.no_grad():  # a reward head that is not zero, so the return depends on the actions
        for p in wm.parameters():
            p.add_(0.05 * torch.randn_like(p))
    wm.eval()
    return wm, out.imagination_start()[0]  # a backbone may defer them (TrainOutput.starts)


def policy_for(wm, backbone: str = "rssm") -> DreamerPolicy:
    """The backbone's own policy (DreamerV3's, or TokenWM's on its token set) at tiny, entropy off."""
    name = default_registry().backbone(backbone).default_policy
    spec = policy_spec(name, "tiny", {"entropy": 0.0, "horizon": 4})
    policy = build_policy(name, spec, wm.feature_shape, CONTINUOUS)
    assert isinstance(policy, DreamerPolicy)
    return policy


def actor_gradient(wm, policy: DreamerPolicy, start) -> torch.Tensor:
    with frozen(wm):
        trajectory = imagine(wm, policy, start, policy.spec.horizon, grad=True)
    actor_loss = policy.losses(trajectory)[0]
    grads = torch.autograd.grad(actor_loss, list(policy.actor.parameters()), allow_unused=True)
    return torch.cat([torch.zeros(0) if g is None else g.flatten() for g in grads])


def test_actor_grad_auto_is_reinforce_for_discrete_and_backprop_for_continuous() -> None:
    features = (8,)
    assert DreamerPolicy(PRESETS["tiny"], features, CONTINUOUS).imagine_with_grad
    assert not DreamerPolicy(PRESETS["tiny"], features, DISCRETE).imagine_with_grad
    reinforce = PRESETS["tiny"].model_copy(update={"actor_grad": "reinforce"})
    assert not DreamerPolicy(reinforce, features, CONTINUOUS).imagine_with_grad
    backprop = PRESETS["tiny"].model_copy(update={"actor_grad": "backprop"})
    with pytest.raises(SpecError, match="actor_grad=backprop needs continuous actions"):
        DreamerPolicy(backprop, features, DISCRETE)


@pytest.mark.parametrize("backbone", ["rssm", "s4wm", "tssm-xl", "tokenwm"])
def test_the_actors_gradient_reaches_it_through_the_dynamics(backbone: str, monkeypatch) -> None:
    """With the entropy bonus off, the backprop actor's only gradient is the one the imagined
    rewards and values send back through ``imagine_step`` into the actions: nonzero as built,
    zero when the action reaching the dynamics is cut from the graph (the trajectory still
    carries a graph, so only the path through the dynamics is missing)."""
    wm, start = world_model_and_starts(backbone)
    policy = policy_for(wm, backbone)
    through = actor_gradient(wm, policy, start)
    assert through.abs().sum() > 0 and torch.isfinite(through).all()

    step = type(wm).imagine_step
    monkeypatch.setattr(wm, "imagine_step", lambda state, action: step(wm, state, action.detach() + 0 * action))
    cut = actor_gradient(wm, policy, start)
    assert cut.abs().max() == 0


def test_the_policy_reads_detached_features_and_the_world_model_gets_no_gradient() -> None:
    """``imagine(grad=True)``: the policy acts on detached features (the gradient reaches it only
    through its actions, DreamerV3's ``actor(sg(s))``); under ``frozen`` the world model's
    parameters take no gradient and get ``requires_grad`` back afterwards."""
    wm, start = world_model_and_starts("rssm")
    policy = policy_for(wm)
    seen = []
    act = policy.act
    policy.act = lambda features, state, **kw: seen.append(features.requires_grad) or act(features, state, **kw)
    with frozen(wm):
        trajectory = imagine(wm, policy, start, 4, grad=True)
    assert seen == [False] * 4
    assert trajectory.rewards.requires_grad and trajectory.actions.requires_grad
    policy.learn(trajectory)
    assert all(p.grad is None and p.requires_grad for p in wm.parameters())
    assert not imagine(wm, policy, start, 2).rewards.requires_grad  # the default keeps no graph


def test_the_trainer_imagines_with_gradients_and_never_updates_the_world_model() -> None:
    """``Agent.train_policy`` with a backprop policy: the actor steps with a nonzero gradient,
    the world model's weights and gradients are untouched."""
    run = run_spec("rssm", "dmc-cartpole-balance", "tiny", None, 0, None, ["policy.max_starts=8"])
    agent = Agent(run, CONTINUOUS)
    assert agent.policy.imagine_with_grad
    out = agent.train_world_model(synthetic_batch(CONTINUOUS, 2, 6, torch.device("cpu")))
    with torch.no_grad():
        for p in agent.world_model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    before = {k: v.clone() for k, v in agent.world_model.state_dict().items()}
    for p in agent.world_model.parameters():
        p.grad = None
    metrics = agent.train_policy(out)
    assert metrics["policy/actor_grad_norm"] > 0
    after = agent.world_model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None and p.requires_grad for p in agent.world_model.parameters())


def test_a_backbone_whose_imagination_carries_no_gradient_is_named_in_one_line(monkeypatch) -> None:
    wm, start = world_model_and_starts("rssm")
    policy = policy_for(wm)
    step = type(wm).imagine_step
    monkeypatch.setattr(wm, "imagine_step", lambda state, action: step(wm, state, action.detach()))
    with frozen(wm):
        trajectory = imagine(wm, policy, start, 3, grad=True)
    with pytest.raises(WmzooError, match="imagine_step is not differentiable.*actor_grad=reinforce"):
        policy.losses(trajectory)


def test_backprop_learns_to_push_a_continuous_action_up() -> None:
    """Reward = the action itself, as a differentiable function of it: the backprop actor's mean
    action moves toward +1 (REINFORCE's version is in test_dreamer.py)."""
    from wmzoo.interfaces import Trajectory
    from wmzoo.specs import OptimSpec

    torch.manual_seed(0)
    fast = OptimSpec(lr=1e-3, eps=1e-5, clip=100.0)
    env = EnvInfo("push", (3, 8, 8), 1, discrete=False)
    spec = PRESETS["tiny"].model_copy(update={"horizon": 3, "gamma": 0.5, "actor_optim": fast, "critic_optim": fast})
    policy = DreamerPolicy(spec, (8,), env)
    H, B = spec.horizon, 64
    for _ in range(60):
        features = torch.randn(H + 1, B, 8)
        actions, _ = policy.act(features[:-1], {})
        assert actions.requires_grad  # reparameterised samples
        policy.learn(Trajectory(features, actions, actions[..., 0], torch.ones(H, B), torch.ones(H + 1, B)))
    with torch.no_grad():
        greedy, _ = policy.act(torch.randn(1000, 8), {}, sample=False)
    assert greedy.mean().item() > 0.5
