"""Checkpoints: exact round trip, atomic writes, corrupt files give one clear error."""

from __future__ import annotations

import os

import pytest
import torch

from wmzoo.errors import WmzooError
from wmzoo.train.checkpoint import load_checkpoint, save_checkpoint


def _tree():
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    return {
        "model": model.state_dict(),
        "optim": opt.state_dict(),  # integer keys, nested tuples, scalar tensors
        "progress": {"env_steps": 7, "credit": 0.25, "name": "x", "none": None},
        "list": [torch.arange(3), 1.5, [True, False]],
    }


def test_round_trip_restores_tensors_ints_and_optimizer(tmp_path):
    tree = _tree()
    path = save_checkpoint(tmp_path / "ckpt.safetensors", tree)
    back = load_checkpoint(path, sections=())
    for key, value in tree["model"].items():
        assert torch.equal(back["model"][key], value)
    assert set(back["optim"]["state"]) == {0, 1}  # integer keys survive
    assert torch.equal(back["optim"]["state"][0]["exp_avg"], tree["optim"]["state"][0]["exp_avg"])
    assert back["progress"] == tree["progress"]
    assert torch.equal(back["list"][0], torch.arange(3)) and back["list"][1:] == [1.5, [True, False]]
    opt = torch.optim.AdamW(torch.nn.Linear(3, 2).parameters(), lr=1e-3)
    opt.load_state_dict(back["optim"])  # loads into a real optimizer


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, {"a": torch.ones(2)})
    save_checkpoint(path, {"a": torch.zeros(2)})
    assert sorted(os.listdir(tmp_path)) == ["ckpt.safetensors"]
    assert torch.equal(load_checkpoint(path, sections=())["a"], torch.zeros(2))


def test_failed_save_keeps_the_previous_checkpoint(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, {"a": torch.ones(2)})
    with pytest.raises(TypeError):
        save_checkpoint(path, {"a": object()})
    assert torch.equal(load_checkpoint(path, sections=())["a"], torch.ones(2))
    assert sorted(os.listdir(tmp_path)) == ["ckpt.safetensors"]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "foreign"])
def test_corrupt_checkpoints_raise_one_line(tmp_path, damage):
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, {"w": torch.randn(64, 64)})
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00\x01not a checkpoint" * 10)
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        from safetensors.torch import save_file

        save_file({"w": torch.ones(1)}, str(path))
    with pytest.raises(WmzooError) as info:
        load_checkpoint(path, sections=())
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert ("corrupt or truncated" in message) or ("not a wmzoo checkpoint" in message)


def test_missing_checkpoint(tmp_path):
    with pytest.raises(WmzooError, match="no such file"):
        load_checkpoint(tmp_path / "nope.safetensors", sections=())
