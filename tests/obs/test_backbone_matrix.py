"""Every registered backbone × {image, vector, image + vector} observation specs (issue 30): it
builds, trains two updates and imagines, or refuses in one line, as its entry's ``observations``
declares."""

from __future__ import annotations

import pytest
import torch

from wmzoo.errors import SpecError
from wmzoo.imagination import imagine, random_actions
from wmzoo.interfaces import EnvInfo, ObsEntry, obs_entries
from wmzoo.optim import step_components, world_model_optimizers
from wmzoo.registry import create_world_model, default_registry
from wmzoo.testing import synthetic_batch

IMAGE = ObsEntry((3, 16, 16), "uint8")
STATE = ObsEntry((5,), "float32")
SPECS = {
    "image": EnvInfo("m-image", (3, 16, 16), 3),
    "vector": EnvInfo("m-vector", None, 3, obs_space={"state": STATE}),
    "image+vector": EnvInfo("m-both", None, 3, obs_space={"image": IMAGE, "state": STATE}),
}
SMALL = {"cnn_stages": 2}  # the latent backbones' CNN on 16x16 frames


def _overrides(backbone: str) -> dict:
    fields = default_registry().backbone(backbone).spec.model_fields
    return {k: v for k, v in SMALL.items() if k in fields}


@pytest.mark.parametrize("spec", list(SPECS))
@pytest.mark.parametrize("backbone", sorted(default_registry().tables["backbone"]))
def test_each_backbone_trains_on_each_spec_or_refuses_in_one_line(backbone, spec):
    env = SPECS[spec]
    declared = default_registry().backbone(backbone).observations
    if declared == "image" and not env.pixel:
        with pytest.raises(SpecError) as info:
            create_world_model(backbone, env, "tiny", _overrides(backbone))
        message = str(info.value)
        assert "\n" not in message and f"backbone '{backbone}'" in message and "state float32 [5]" in message
        return
    torch.manual_seed(0)
    wm = create_world_model(backbone, env, "tiny", _overrides(backbone))
    batch = synthetic_batch(env, 2, min(wm.spec.seq_len, 6), torch.device("cpu"))
    optimizers = world_model_optimizers(wm.components())
    before = {k: v.detach().clone() for k, v in wm.state_dict().items()}
    for _ in range(2):
        out = wm.loss(batch)
        step_components(optimizers, out.losses)
    assert all(torch.isfinite(v) for v in out.losses.values())
    if not env.pixel:  # every decoded entry's loss is logged under its name
        assert {f"recon_{k}" for k in env.obs_spec} <= set(out.metrics)
    changed = {k for k, v in wm.state_dict().items() if v.dtype.is_floating_point and not torch.equal(v, before[k])}
    assert changed, "two updates changed no weight"
    if not env.pixel:  # the vector entry's input path (the MLP, or TokenWM's projection) trained
        assert any(k.startswith(("encoder.mlp", "vector_in")) for k in changed), sorted(changed)
    with torch.no_grad():
        wm.eval()
        state = wm.observe(batch)
        traj = imagine(wm, random_actions(env.num_actions, env.discrete), state, 3, decode=True)
    assert traj.rewards.shape == (3, 2) and torch.isfinite(traj.rewards).all()
    decoded = obs_entries(traj.images)
    for key, value in decoded.items():
        assert tuple(value.shape[2:]) == env.obs_spec[key].shape
    assert set(decoded) == set(env.obs_spec)
