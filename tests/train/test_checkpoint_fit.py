"""Loading a checkpoint tree into an agent: the old policy-optimizer format still loads, and a
tree that does not fit the model is one line naming the mismatch."""

from __future__ import annotations

import pytest
import torch

from wmzoo.config import run_spec
from wmzoo.errors import WmzooError
from wmzoo.interfaces import EnvInfo
from wmzoo.train.agent import Agent

ENV = EnvInfo(name="t", obs_shape=(3, 16, 16), num_actions=3)


def _agent() -> Agent:
    torch.manual_seed(0)
    return Agent(run_spec("rssm", "minigrid-empty-5x5", "tiny", None, None, None, []), ENV)


def test_checkpoints_from_before_policy_optimizers_were_wmzoo_optimizers_load():
    # Catches: resuming a run written before the policies' optimizers became wmzoo Optimizers
    # failing (an unexpected `updates` buffer) or restarting their learning-rate schedule at 0.
    agent = _agent()
    for opt in agent.policy.optimizers().values():
        opt.updates = 7
    tree = agent.state_tree()
    tree["policy"] = {**tree["policy"], "updates": torch.tensor(7)}
    tree["policy_optim"] = {name: state["opt"] for name, state in tree["policy_optim"].items()}
    fresh = _agent()
    fresh.load_state_tree(tree)
    assert all(opt.updates == 7 for opt in fresh.policy.optimizers().values())


@pytest.mark.parametrize("damage", ["missing", "shape", "optimizer"])
def test_a_tree_that_does_not_fit_is_one_line(damage):
    # Catches: a checkpoint of another model format or preset ending in a multi-line torch
    # traceback instead of one line naming the tensor.
    tree = _agent().state_tree()
    key = next(iter(tree["world_model"]))
    if damage == "missing":
        tree["world_model"] = {k: v for k, v in tree["world_model"].items() if k != key}
    elif damage == "shape":
        tree["world_model"] = {**tree["world_model"], key: torch.zeros(3, 3, 3)}
    else:
        tree["world_model_optim"] = {}
    with pytest.raises(WmzooError) as info:
        _agent().load_state_tree(tree, "checkpoint X")
    message = str(info.value)
    assert message.startswith("checkpoint X does not fit this wmzoo's rssm / dreamer") and "\n" not in message
    assert (key in message) if damage != "optimizer" else "KeyError" in message
