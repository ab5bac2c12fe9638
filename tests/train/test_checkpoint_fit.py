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


def test_offline_data_of_another_env_is_refused(tmp_path):
    # Catches: `--offline <MiniGrid data> --env crafter` training a MiniGrid model that `eval`
    # then scores on Crafter.
    from wmzoo.data.dataset import write_env_info
    from wmzoo.train.rundir import data_env_info

    write_env_info(tmp_path, EnvInfo(name="minigrid-empty-5x5", obs_shape=(3, 64, 64), num_actions=7))
    crafter = run_spec("rssm", "crafter", "tiny", None, None, None, [])
    with pytest.raises(WmzooError, match="recorded on env 'minigrid-empty-5x5', not 'crafter'"):
        data_env_info(tmp_path, crafter)
    same = run_spec("rssm", "minigrid-empty-5x5", "tiny", None, None, None, [])
    assert data_env_info(tmp_path, same).num_actions == 7


@pytest.mark.parametrize(("device", "message"), [
    ("foo", "is not a device"), ("cuda", "no CUDA GPU"), ("meta", "wmzoo runs on cpu, cuda, cuda:N, mps or auto"),
])
def test_devices_this_machine_lacks_are_one_line(device, message):
    # Catches: train.device=cuda on a CPU machine (or a typo) ending in a torch traceback.
    from wmzoo.train.agent import resolve_device

    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(WmzooError, match=message):
        resolve_device(device)


def test_a_run_too_short_for_a_gif_still_ends_with_a_checkpoint(tmp_path, capsys):
    # Catches: the closing imagination GIF observing more context frames than the replay holds
    # (`--steps 5` ended in an IndexError after training, before "checkpoint:").
    from wmzoo.cli import main

    code = main(["run", "--backbone", "rssm", "--env", "minigrid-empty-5x5", "--preset", "tiny",
                 "--steps", "5", "--logdir", str(tmp_path / "run"), "--no-progress"])
    assert code == 0 and (tmp_path / "run" / "checkpoint.safetensors").is_file()
