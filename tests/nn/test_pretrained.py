"""Pre-trained encoders from a local folder (wmzoo.nn.pretrained): DINOv2 patch tokens as its own
image processor and model give them, frozen and outside checkpoints; sentence embeddings as
sentence-transformers gives them; one clear line for every way the folder can be wrong."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from wmzoo.errors import MissingDependencyError, WmzooError
from wmzoo.nn.pretrained import DINOv2Encoder, SentenceEncoder

transformers = pytest.importorskip("transformers")
from pretrained_fakes import write_dinov2, write_sentence_encoder  # noqa: E402


@pytest.fixture(scope="module")
def dino(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dinov2(tmp_path_factory.mktemp("dinov2") / "dinov2-tiny")


@pytest.fixture(scope="module")
def sentences(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sentence_encoder(tmp_path_factory.mktemp("sentences") / "minilm-tiny")


def _reference_tokens(folder: Path, frames: torch.Tensor, skip: int) -> torch.Tensor:
    """Patch tokens the way Hugging Face's own DINOv2 pipeline computes them: its image processor
    (rescale 1/255, ImageNet mean/std from transformers' constants; no resize or crop: the frames are
    already the model's size), the model, the tokens after the class (and register) tokens."""
    from transformers.utils.constants import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

    processor = transformers.BitImageProcessor(do_resize=False, do_center_crop=False, do_convert_rgb=False,
                                               image_mean=IMAGENET_DEFAULT_MEAN, image_std=IMAGENET_DEFAULT_STD)
    pixels = processor([f.numpy() for f in frames], return_tensors="pt", input_data_format="channels_first")
    model = transformers.AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        return model(**pixels).last_hidden_state[:, skip:]


@pytest.mark.parametrize("registers", [0, 2])
def test_dinov2_tokens_are_those_of_the_models_own_processor_and_model(tmp_path, registers):
    # catches: frames not scaled to [0, 1], another mean/std, channels swapped, the class token (or
    # the register tokens of a DINOv2 with registers) kept among the patch tokens
    folder = write_dinov2(tmp_path / "dino", registers=registers)
    frames = torch.randint(0, 256, (3, 3, 16, 16), dtype=torch.uint8)
    encoder = DINOv2Encoder(folder, 16)
    expected = _reference_tokens(folder, frames, 1 + registers)
    assert encoder.tokens == 16 and encoder.dim == 32
    torch.testing.assert_close(encoder(frames), expected, rtol=1e-4, atol=1e-4)


def test_dinov2_resizes_any_frame_to_its_size_and_keeps_leading_dims(dino):
    # catches: frames fed at their own size (a 20x20 frame would give 25 tokens), leading dims mixed up
    encoder = DINOv2Encoder(dino, 16)
    frames = torch.randint(0, 256, (2, 3, 3, 20, 20), dtype=torch.uint8)
    z = encoder(frames)
    assert z.shape == (2, 3, 16, 32)
    torch.testing.assert_close(z[1, 2], encoder(frames[1, 2:3])[0])
    flat = torch.full((1, 3, 20, 20), 77, dtype=torch.uint8)  # a flat frame stays flat when resized
    torch.testing.assert_close(encoder(flat), encoder(torch.full((1, 3, 16, 16), 77, dtype=torch.uint8)))


def test_dinov2_is_frozen_and_outside_parameters_and_state_dict(dino):
    # catches: the pre-trained weights in every checkpoint (hundreds of MB) or in the optimizer, a
    # .to()/.double() that leaves them behind, train() switching them out of eval mode
    encoder = DINOv2Encoder(dino, 16)
    assert list(encoder.parameters()) == [] and list(encoder.state_dict()) == []
    inner = encoder.__dict__["model"]
    assert not any(p.requires_grad for p in inner.parameters())
    encoder.double().train()
    assert next(inner.parameters()).dtype == torch.float64 and not inner.training
    assert encoder(torch.zeros(1, 3, 16, 16, dtype=torch.uint8)).dtype == torch.float64


def test_dinov2_bad_folders_say_what_is_wrong_in_one_line(tmp_path, dino, sentences, monkeypatch):
    # catches: a traceback (or a download attempt) for a missing folder, another kind of model
    # accepted as DINOv2, a size the patches do not divide, a missing library without its extra
    cases = [
        (tmp_path / "nowhere", 16, "no such folder"),
        (sentences.parent / f"{sentences.name}-bert", 16, "must be a DINOv2"),
        (dino, 18, "multiple of the DINOv2 patch size 4"),
        (tmp_path, 16, "not a Hugging Face model folder"),
    ]
    for folder, size, message in cases:
        with pytest.raises(WmzooError, match=message) as err:
            DINOv2Encoder(folder, size)
        assert "\n" not in str(err.value)
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(MissingDependencyError, match=r"wmzoo\[pretrained\]"):
        DINOv2Encoder(dino, 16)


def test_sentence_embeddings_are_sentence_transformers_own(sentences):
    # catches: an embedding that skips the folder's modules (its pooling, its Dense layer), one
    # embedding for every instruction, a cache keyed on the wrong thing
    from sentence_transformers import SentenceTransformer

    encoder = SentenceEncoder(sentences)
    reference = SentenceTransformer(str(sentences), device="cpu")
    missions = ["go to the red ball", "pick up a blue key", "go to the red ball"]
    codes = [encoder.encode(m) for m in missions]
    assert encoder.dim == 12 and codes[0].shape == (12,) and codes[0].dtype == np.float32
    np.testing.assert_allclose(np.stack(codes), reference.encode(missions), rtol=1e-5, atol=1e-6)
    assert not np.allclose(codes[0], codes[1])


def test_sentence_encoder_bad_folders(tmp_path, dino, monkeypatch):
    with pytest.raises(WmzooError, match="policy.text_encoder='.*nowhere': no such folder"):
        SentenceEncoder(tmp_path / "nowhere")
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(MissingDependencyError, match=r"wmzoo\[pretrained\]"):
        SentenceEncoder(dino)
