"""The generic imagination engine: horizon, carried state, termination masking, action replay."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from wmzoo.imagination import imagine, random_actions, replay_actions
from wmzoo.interfaces import State, Step


class CounterModel:
    """Analytic dynamics: x' = x + a; reward = x'; continues while x' < limit."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.calls = 0

    def features(self, state: State) -> torch.Tensor:
        return state["x"][:, None].float()

    def decode(self, state: State) -> torch.Tensor:
        return state["x"].to(torch.uint8)[:, None, None, None].expand(-1, 1, 2, 2)

    def imagine_step(self, state: State, action: torch.Tensor) -> Step:
        self.calls += 1
        x = state["x"] + action
        cont = (x < self.limit).float()
        return Step(state={"x": x}, reward=x.float(), cont=cont, features=x[:, None].float())


@settings(max_examples=50, deadline=None)
@given(
    batch=st.integers(1, 5),
    horizon=st.integers(1, 12),
    limit=st.integers(1, 20),
    seed=st.integers(0, 1000),
)
def test_engine_rolls_carries_state_and_masks_after_termination(batch, horizon, limit, seed):
    g = torch.Generator().manual_seed(seed)
    actions = torch.randint(0, 3, (horizon, batch), generator=g)
    start = {"x": torch.randint(0, 4, (batch,), generator=g)}
    model = CounterModel(limit)
    traj = imagine(model, replay_actions(actions), start, horizon, decode=True)  # type: ignore[arg-type]

    assert model.calls == horizon
    assert traj.features.shape == (horizon + 1, batch, 1)
    assert traj.images is not None and traj.images.shape == (horizon + 1, batch, 1, 2, 2)
    expected_x = start["x"][None] + torch.cumsum(actions, 0)
    assert torch.equal(traj.features[1:, :, 0], expected_x.float())
    assert torch.equal(traj.actions, actions)
    # weights[t] = prod_{k<t} cont_k: zero from the first predicted termination on
    alive = torch.cumprod((expected_x < limit).float(), 0)
    assert torch.equal(traj.weights[0], torch.ones(batch))
    assert torch.equal(traj.weights[1:], alive)


def test_start_cont_zeroes_weights_of_terminal_starts():
    model = CounterModel(limit=100)
    start = {"x": torch.zeros(3, dtype=torch.long)}
    traj = imagine(model, replay_actions(torch.ones(4, 3, dtype=torch.long)), start, 4,  # type: ignore[arg-type]
                   start_cont=torch.tensor([1.0, 0.0, 1.0]))
    assert torch.equal(traj.weights[:, 1], torch.zeros(5))
    assert torch.equal(traj.weights[:, 0], torch.ones(5))


def test_the_trajectory_keeps_the_policy_state_it_started_from():
    """A recurrent policy's state given at the start (a burned-in one) is the trajectory's, so the
    policy can rerun the rollout from it. Catches: the policy's initial state (or the state after the
    last step) recorded instead of the given one."""
    def counting(features: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        return torch.ones(features.shape[0], dtype=torch.long), {"n": state["n"] + 1}

    start = {"x": torch.zeros(2, dtype=torch.long)}
    given = {"n": torch.tensor([7, 9])}
    traj = imagine(CounterModel(limit=100), counting, start, 4, policy_state=given)  # type: ignore[arg-type]
    assert traj.policy_state.keys() == {"n"} and traj.policy_state["n"].tolist() == [7, 9]


def test_random_actions_are_in_range():
    act = random_actions(5, discrete=True, generator=torch.Generator().manual_seed(0))
    actions = torch.cat([act(torch.zeros(64, 3), {})[0] for _ in range(10)])
    assert actions.dtype == torch.int64
    assert set(actions.tolist()) == set(range(5))
    cont = random_actions(2, discrete=False)(torch.zeros(100, 3), {})[0]
    assert cont.shape == (100, 2) and cont.abs().max() <= 1


class LinearModel(torch.nn.Module):
    """Differentiable dynamics with a parameter: x' = W x + a; reward = Σ x'; always continues."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)

    def features(self, state: State) -> torch.Tensor:
        return state["x"]

    def decode(self, state: State) -> torch.Tensor:
        return state["x"].round().clamp(0, 255).to(torch.uint8)[:, :, None, None]

    def imagine_step(self, state: State, action: torch.Tensor) -> Step:
        x = self.lin(state["x"]) + action
        return Step(state={"x": x}, reward=x.sum(-1), cont=torch.ones(x.shape[0]), features=x)


def test_grad_keeps_the_graph_to_the_actions_and_the_policy_reads_detached_features():
    # catches: a graph kept when grad is off, the policy reading features that carry gradient
    model = LinearModel()
    seen: list[bool] = []
    raw = torch.tensor([[0.5, -0.5]], requires_grad=True)

    def act(features: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        seen.append(features.requires_grad)
        return raw * 1.0, state

    start = {"x": torch.ones(1, 2)}
    traj = imagine(model, act, start, 3)  # type: ignore[arg-type]
    assert not traj.rewards.requires_grad and not traj.features.requires_grad
    seen.clear()
    traj = imagine(model, act, start, 3, grad=True)  # type: ignore[arg-type]
    assert seen == [False, False, False]  # actor(sg(s))
    (grad,) = torch.autograd.grad(traj.rewards.sum(), raw)
    assert grad.abs().sum() > 0


def test_the_recorded_policy_state_survives_a_policy_that_updates_its_state_in_place():
    # catches: the trajectory keeping the very dict the policy then mutates (the start state lost)
    def counting(features: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        state["n"] = state["n"] + 1
        return torch.ones(features.shape[0], dtype=torch.long), state

    start = {"x": torch.zeros(2, dtype=torch.long)}
    traj = imagine(CounterModel(limit=100), counting, start, 3, policy_state={"n": torch.tensor([7, 9])})  # type: ignore[arg-type]
    assert traj.policy_state["n"].tolist() == [7, 9]


def test_decoded_images_follow_the_imagined_states():
    # catches: every image decoded from the start state instead of the state of its step
    start = {"x": torch.tensor([0, 5])}
    traj = imagine(CounterModel(limit=100), replay_actions(torch.tensor([[1, 2], [3, 1]])), start, 2, decode=True)  # type: ignore[arg-type]
    assert traj.images is not None
    assert traj.images[:, :, 0, 0, 0].tolist() == [[0, 5], [1, 7], [4, 8]]


def test_frozen_parameters_take_no_gradient_inside_and_keep_their_flags_after():
    # catches: frozen() not switching requires_grad off, or not restoring it afterwards (or
    # unfreezing a parameter that was frozen before)
    from wmzoo.imagination import frozen

    model = LinearModel()
    model.lin.bias.requires_grad_(False)  # frozen before: stays frozen
    x = torch.ones(1, 2, requires_grad=True)
    with frozen(model):
        assert not any(p.requires_grad for p in model.parameters())
        model.lin(x).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0 and model.lin.weight.grad is None
    assert model.lin.weight.requires_grad and not model.lin.bias.requires_grad
