"""The observation spec in the contract (issue 30): EnvInfo's entries, their JSON form (a pixel
env's unchanged), Batch validation, spaces an env may give, and what ``wmzoo list`` shows."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from wmzoo import EnvEntry, hookimpl
from wmzoo.cli import main
from wmzoo.errors import WmzooError
from wmzoo.interfaces import Batch, EnvInfo, ObsEntry
from wmzoo.registry import default_registry, env_info
from wmzoo.testing import synthetic_batch

BOTH = EnvInfo("both", None, 3, obs_space={"image": ObsEntry((3, 8, 8), "uint8"), "state": ObsEntry((4,), "float32")})


def test_a_pixel_env_is_one_image_entry_and_writes_what_it_wrote_before():
    info = EnvInfo("px", (3, 16, 16), 6)
    assert info.pixel and info.obs_spec == {"image": ObsEntry((3, 16, 16), "uint8")}
    assert info.to_dict() == {"name": "px", "obs_shape": [3, 16, 16], "num_actions": 6, "discrete": True}
    assert EnvInfo("px", None, 6, obs_space={"image": ObsEntry((3, 16, 16), "uint8")}) == info


def test_a_dict_spec_round_trips_through_json():
    assert not BOTH.pixel and BOTH.obs_shape is None
    back = EnvInfo.from_dict(json.loads(json.dumps(BOTH.to_dict())))
    assert back == BOTH and list(back.obs_spec) == ["image", "state"]
    assert back.describe_obs() == "image uint8 [3, 8, 8], state float32 [4]"


@pytest.mark.parametrize("entry", [((3, 8), "uint8"), ((4,), "uint8"), ((3, 8, 8), "float32"), ((0,), "float32")])
def test_an_entry_is_an_image_or_a_vector(entry):
    with pytest.raises(ValueError, match="neither an image"):
        ObsEntry(*entry)


def test_batch_validate_names_the_entry():
    batch = synthetic_batch(BOTH, 2, 3, torch.device("cpu"))
    batch.validate(BOTH)
    bad = Batch(**{**batch.__dict__, "obs": {**batch.obs, "state": batch.obs["state"].double()}})
    with pytest.raises(ValueError, match=r"batch.obs\['state'\]: expected torch.float32"):
        bad.validate(BOTH)
    with pytest.raises(ValueError, match=r"batch.obs: expected \['image', 'state'\], got one tensor"):
        Batch(**{**batch.__dict__, "obs": batch.obs["image"]}).validate(BOTH)


def test_spaces_become_specs():
    env = gym.Env()
    env.action_space = spaces.Discrete(2)
    env.observation_space = spaces.Box(0, 255, (3, 8, 8), np.uint8)
    assert env_info(env, "e").pixel
    env.observation_space = spaces.Dict({"pos": spaces.Box(-1, 1, (2,), np.float64),
                                         "image": spaces.Box(0, 255, (1, 8, 8), np.uint8)})
    # in the space's order (Gymnasium sorts a plain dict's keys); a float64 vector is stored float32
    assert env_info(env, "e").obs_space == (("image", ObsEntry((1, 8, 8), "uint8")), ("pos", ObsEntry((2,), "float32")))


@pytest.mark.parametrize("space", [spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3))), spaces.Text(5),
                                   spaces.Box(-1, 1, (3,)), spaces.Dict({"x": spaces.Discrete(4)})])
def test_a_space_that_is_neither_is_one_line_naming_it(space):
    env = gym.Env()
    env.action_space, env.observation_space = spaces.Discrete(2), space
    with pytest.raises(WmzooError) as info:
        env_info(env, "odd")
    message = str(info.value)
    assert "\n" not in message and str(space) in message and "environment 'odd'" in message


class TupleEnvs:
    @hookimpl
    def wmzoo_envs(self) -> list[EnvEntry]:
        def make(name: str, **_: object) -> gym.Env:
            env = gym.Env()
            env.action_space = spaces.Discrete(2)
            env.observation_space = spaces.Tuple((spaces.Discrete(2), spaces.Text(4)))
            return env

        return [EnvEntry(name="fake-tuple", make=make, description="a Tuple space")]


def test_the_cli_refuses_such_an_env_in_one_line_exit_2(capsys, tmp_path):
    plugin = TupleEnvs()
    default_registry().register(plugin)
    try:
        code = main(["run", "--backbone", "rssm", "--env", "fake-tuple", "--preset", "tiny", "--steps", "10",
                     "--logdir", str(tmp_path / "run")])
    finally:
        default_registry().unregister(plugin)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("wmzoo") and "error:" in err and "Tuple(Discrete(2), Text(" in err


def test_wmzoo_list_shows_what_each_backbone_observes(capsys):
    assert main(["list", "--kind", "backbone"]) == 0
    out = capsys.readouterr().out.splitlines()
    for name, shown in (("iris", "one image only"), ("rssm", "images, vectors and dicts of them")):
        at = next(i for i, line in enumerate(out) if line.split() and line.split()[0] == name)
        assert out[at + 1].strip() == f"observations: {shown}"


def test_key_selection_errors_are_one_line(capsys, tmp_path):
    cases = [
        (["--set", "model.encoder_keys=("], "model.encoder_keys: '(' is not a regular expression"),
        (["--set", "model.decoder_keys=camera"], "model.decoder_keys='camera' selects none of env 'gym-cartpole'"),
    ]
    for extra, expected in cases:
        code = main(["run", "--backbone", "rssm", "--env", "gym-cartpole", "--preset", "tiny", "--steps", "10",
                     "--logdir", str(tmp_path / "r"), *extra])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and expected in err, err
        assert not (tmp_path / "r" / "checkpoint.safetensors").exists()


def test_decoder_keys_choose_what_is_reconstructed():
    from wmzoo.registry import create_world_model

    wm = create_world_model("rssm", BOTH, "tiny", {"cnn_stages": 2, "decoder_keys": "state"})
    out = wm.loss(synthetic_batch(BOTH, 2, 4, torch.device("cpu")))
    assert "recon_state" in out.metrics and "recon_image" not in out.metrics
    assert wm.encoder.images == ["image"] and wm.encoder.vectors == ["state"]  # the encoder still reads both
    decoded = wm.decode(wm.initial_state(2))
    assert set(decoded) == {"state"} and decoded["state"].dtype == torch.float32
