"""TokenWM with section 4's frozen pre-trained DINOv2 (model.encoder_weights): the posterior reads
its patch tokens, ``target: features`` reconstructs them, the viewer learns the frame without
training the state, checkpoints carry none of its weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from wmzoo.interfaces import Batch, EnvInfo
from wmzoo.testing import check_world_model
from wmzoo_plugins.tokenwm import PRESETS, TokenWMSpec, TokenWMWorldModel

pytest.importorskip("transformers")
from pretrained_fakes import write_dinov2  # noqa: E402

ENV = EnvInfo(name="t", obs_shape=(3, 16, 16), num_actions=4)


@pytest.fixture(scope="module")
def dino(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dinov2(tmp_path_factory.mktemp("dinov2") / "dinov2-tiny", size=8, patch=4, width=24)


def _model(dino: Path, **overrides) -> TokenWMWorldModel:
    torch.manual_seed(0)
    spec = TokenWMSpec.model_validate({**PRESETS["tiny"].model_dump(), "patch": 4, "encoder_weights": str(dino),
                                       "encoder_size": 8, "target": "features", **overrides})
    return TokenWMWorldModel(spec, ENV)


def _batch(B: int = 2, T: int = 5) -> Batch:
    g = torch.Generator().manual_seed(1)
    is_first = torch.zeros(B, T, dtype=torch.bool)
    is_first[:, 0] = True
    return Batch(obs=torch.randint(0, 256, (B, T, *ENV.obs_shape), generator=g, dtype=torch.uint8),
                 action=torch.randint(4, (B, T), generator=g), reward=torch.randn(B, T, generator=g),
                 terminal=torch.zeros(B, T, dtype=torch.bool), is_first=is_first)


def test_the_posterior_reads_dinov2_tokens_and_the_decoder_reconstructs_them(dino):
    # catches: the ViT kept beside DINOv2, z's token count or width taken from the ViT fields
    # (8x8 at size 8, patch 4: 4 tokens of width 24, not 16 of encoder_dim 32), the features
    # target scored against pixels, ẑ built with the pixels' +0.5 offset
    wm = _model(dino)
    assert not any(name.startswith("encoder.") for name, _ in wm.named_parameters())
    batch = _batch()
    z = wm.encoder(batch.obs)
    assert z.shape == (2, 5, 4, 24) and wm.obs_pos.shape == (4, 24)
    out = wm.loss(batch)
    states, _ = wm.rollout(batch)
    with torch.no_grad():
        expected = (wm.reconstruct(states["h"]) - z).square().mean()
    assert out.metrics["recon"] == pytest.approx(float(expected), rel=1e-5)
    zero = torch.zeros(2, 5, 64, 32)
    assert wm.reconstruct(zero).shape == (2, 5, 4, 24)
    assert wm.decode({"h": zero[:, 0, :8]}).shape == (2, 3, 16, 16)


def test_the_viewer_learns_the_frame_without_training_the_state(dino):
    # catches: the viewer's gradient reaching h (it would train the world model toward pixels,
    # which target: features does not), the viewer missing from the loss (it would never learn)
    wm = _model(dino, state_weight=0.0, recon_weight=0.0, reward_weight=0.0, cont_weight=0.0)
    out = wm.loss(_batch())
    assert out.metrics["view"] > 0 and out.metrics["model"] == pytest.approx(out.metrics["view"], rel=1e-5)
    out.losses["model"].backward()
    for name, p in wm.named_parameters():
        moved = p.grad is not None and bool(p.grad.abs().sum() > 0)
        assert moved == name.startswith("viewer_"), name


def test_checkpoints_carry_no_pretrained_weights_and_load_back(dino):
    # catches: DINOv2's weights saved in the state dict (or its keys required when loading)
    wm = _model(dino)
    state = wm.state_dict()
    assert not any(k.startswith("encoder.") for k in state)
    again = _model(dino)
    again.load_state_dict(state)
    batch = _batch()
    wm.eval(), again.eval()
    torch.testing.assert_close(again.loss(batch).metrics["model"], wm.loss(batch).metrics["model"])


def test_tokenwm_with_dinov2_passes_the_backbone_contract(dino):
    # catches: a pre-trained encoder breaking the interface (observe/imagine/decode shapes, components
    # owning every trained parameter, the loss's gradient)
    check_world_model(_model(dino), ENV)
    check_world_model(_model(dino, target="pixels"), ENV)


def test_target_features_needs_encoder_weights():
    with pytest.raises(ValueError, match="target 'features' reconstructs a pre-trained encoder's features"):
        TokenWMSpec(target="features")
