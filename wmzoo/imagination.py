"""The one generic imagination engine (docs/architecture.md, "Imagination engine").

``imagine`` is the only loop over imagined steps in wmzoo. It owns the horizon, the carried
world-model and policy states, and termination masking; the backbone supplies one step
(:meth:`~wmzoo.interfaces.WorldModel.imagine_step`) and the policy one action
(:meth:`~wmzoo.interfaces.Policy.act`). How a backbone computes its step (one GRU step, one S4
recurrence, K token calls, one parallel POP call) is its own business.

By default it imagines without gradients (policies trained with REINFORCE need none). With
``grad=True`` it keeps the graph, so that a loss on the imagined rewards, continues and features
backpropagates through the backbone's ``imagine_step`` into the actions (DreamerV3's dynamics
backpropagation for continuous actions, :class:`~wmzoo.agents.dreamer.DreamerPolicy`); the policy
then reads detached features, so the gradient reaches the policy through its actions only, as in
DreamerV3 (``actor(sg(s))``). Which parameters receive gradients is the caller's choice
(:func:`frozen` keeps the world model's out).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from wmzoo.interfaces import Policy, State, Trajectory, WorldModel, stack_obs

ActFn = Callable[[Tensor, State], tuple[Tensor, State]]


def imagine(
    world_model: WorldModel,
    policy: Policy | ActFn,
    start: State,
    horizon: int,
    *,
    start_cont: Tensor | None = None,
    policy_state: State | None = None,
    decode: bool = False,
    grad: bool = False,
) -> Trajectory:
    """Roll ``world_model`` forward ``horizon`` steps from ``start`` under ``policy``.

    ``policy`` is a :class:`~wmzoo.interfaces.Policy` (sampling actions) or any function
    ``(features, policy_state) -> (action, policy_state)`` — e.g. replaying recorded actions.
    ``start_cont`` ``[B]`` marks start states that are already terminal (weight 0).
    The returned ``weights[t]`` is the product of continue probabilities before step ``t``,
    so rewards imagined past a predicted termination count for nothing.
    ``grad``: keep the autograd graph through every imagined step (see the module docstring);
    the policy then acts on ``features.detach()``.
    """
    with torch.set_grad_enabled(grad):
        return _imagine(world_model, policy, start, horizon, start_cont, policy_state, decode, grad)


def _imagine(
    world_model: WorldModel, policy: Policy | ActFn, start: State, horizon: int,
    start_cont: Tensor | None, policy_state: State | None, decode: bool, grad: bool,
) -> Trajectory:
    act: ActFn = policy.act if isinstance(policy, Policy) else policy
    features = world_model.features(start)
    batch = features.shape[0]
    if policy_state is not None:
        pstate = policy_state
    else:
        pstate = policy.initial_state(batch) if isinstance(policy, Policy) else {}
    initial_pstate = dict(pstate)
    weight = torch.ones(batch, device=features.device) if start_cont is None else start_cont.float()

    feats, actions, rewards, conts, weights = [features], [], [], [], [weight]
    images = [world_model.decode(start)] if decode else None
    state = start
    for _ in range(horizon):
        action, pstate = act(features.detach() if grad else features, pstate)
        step = world_model.imagine_step(state, action)
        state, features = step.state, step.features
        weight = weight * step.cont
        feats.append(features)
        actions.append(action)
        rewards.append(step.reward)
        conts.append(step.cont)
        weights.append(weight)
        if images is not None:
            images.append(world_model.decode(state))

    return Trajectory(
        features=torch.stack(feats),
        actions=torch.stack(actions),
        rewards=torch.stack(rewards),
        conts=torch.stack(conts),
        weights=torch.stack(weights),
        policy_state=initial_pstate,
        images=stack_obs(images) if images is not None else None,
    )


@contextmanager
def frozen(module: nn.Module) -> Iterator[None]:
    """Within the block, ``module``'s parameters take no gradient (``requires_grad`` off),
    while gradients still flow through its computations to their inputs; restored after."""
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


def replay_actions(actions: Tensor) -> ActFn:
    """An ``ActFn`` that plays back ``actions [H, B, ...]`` in order (open-loop imagination)."""
    step = iter(range(actions.shape[0]))

    def act(features: Tensor, state: State) -> tuple[Tensor, State]:
        return actions[next(step)].to(features.device), state

    return act


def random_actions(env_num_actions: int, discrete: bool, generator: torch.Generator | None = None) -> ActFn:
    """An ``ActFn`` taking uniformly random actions (the bench harness's policy)."""

    def act(features: Tensor, state: State) -> tuple[Tensor, State]:
        batch = features.shape[0]
        if discrete:
            return torch.randint(env_num_actions, (batch,), generator=generator).to(features.device), state
        return (torch.rand(batch, env_num_actions, generator=generator) * 2 - 1).to(features.device), state

    return act
