"""DreamerV3 CNN encoder/decoder and the image loss (wmzoo.nn.cnn)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from wmzoo.nn.cnn import ConvDecoder, ConvEncoder, recon_loss


@pytest.mark.parametrize(
    ("obs_shape", "depth", "stages", "map_shape"),
    [
        ((3, 64, 64), 8, 4, (64, 4, 4)),
        ((3, 64, 64), 8, 3, (32, 8, 8)),
        ((3, 32, 32), 4, 4, (32, 2, 2)),
        ((3, 40, 40), 8, 3, (32, 5, 5)),
        ((1, 32, 16), 4, 2, (8, 8, 4)),
    ],
)
def test_shapes(obs_shape: tuple[int, int, int], depth: int, stages: int, map_shape: tuple) -> None:
    enc = ConvEncoder(obs_shape, depth, stages)
    assert enc.map_shape == map_shape
    assert enc.out_dim == map_shape[0] * map_shape[1] * map_shape[2]
    convs = [m for m in enc.modules() if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [depth * 2**i for i in range(stages)]
    assert all(c.bias is None and c.kernel_size == (4, 4) and c.stride == (2, 2) for c in convs)
    obs = torch.randint(0, 256, (2, 3, *obs_shape), dtype=torch.uint8)
    embed = enc(obs)
    assert embed.shape == (2, 3, enc.out_dim)
    dec = ConvDecoder(obs_shape, 20, depth, stages)
    image = dec(torch.randn(2, 3, 20))
    assert image.shape == (2, 3, *obs_shape) and image.dtype == torch.float32
    deconvs = [m for m in dec.modules() if isinstance(m, nn.ConvTranspose2d)]
    mirrored = [depth * 2**i for i in reversed(range(stages - 1))]
    assert [c.out_channels for c in deconvs] == [*mirrored, obs_shape[0]]


def test_encoder_scales_pixels_to_minus_half_half() -> None:
    enc = ConvEncoder((3, 32, 32), 4, 2)
    seen = {}
    enc.net[0].register_forward_pre_hook(lambda mod, args: seen.update(x=args[0]))
    obs = torch.zeros(1, 3, 32, 32, dtype=torch.uint8)
    obs[..., :16] = 255
    enc(obs)
    assert seen["x"].min() == -0.5 and seen["x"].max() == 0.5


def test_encoder_rows_are_independent() -> None:
    # No batch statistics: changing one frame changes only that frame's embedding.
    enc = ConvEncoder((3, 32, 32), 4, 3)
    obs = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
    other = obs.clone()
    other[2] = 255 - other[2]
    a, b = enc(obs), enc(other)
    torch.testing.assert_close(a[[0, 1, 3]], b[[0, 1, 3]])
    assert not torch.allclose(a[2], b[2])


def test_image_size_must_divide() -> None:
    with pytest.raises(ValueError, match="2\\*\\*stages = 16"):
        ConvEncoder((3, 56, 56), 8, 4)
    with pytest.raises(ValueError, match="divisible"):
        ConvDecoder((3, 56, 56), 10, 8, 4)


def test_decoder_output_is_offset_to_the_unit_interval() -> None:
    dec = ConvDecoder((3, 32, 32), 10, 4, 3)
    last = dec.net[-1]
    nn.init.zeros_(last.weight)
    nn.init.zeros_(last.bias)
    assert torch.equal(dec(torch.randn(5, 10)), torch.full((5, 3, 32, 32), 0.5))


def test_recon_loss_is_sum_over_pixels_mean_over_batch() -> None:
    obs = torch.zeros(2, 3, 3, 4, 4, dtype=torch.uint8)
    obs[0] = 255
    pred = torch.full((2, 3, 3, 4, 4), 0.5)
    # Every pixel is off by 0.5: 0.25 per value, 3·4·4 = 48 values per image.
    torch.testing.assert_close(recon_loss(pred, obs), torch.tensor(12.0))
    pred[0] = 1.0
    torch.testing.assert_close(recon_loss(pred, obs), torch.tensor(6.0))


def test_autoencoder_learns() -> None:
    torch.manual_seed(0)
    enc, dec = ConvEncoder((3, 32, 32), 8, 3), ConvDecoder((3, 32, 32), 64, 8, 3)
    proj = nn.Linear(enc.out_dim, 64)
    params = [*enc.parameters(), *dec.parameters(), *proj.parameters()]
    opt = torch.optim.Adam(params, lr=3e-3)
    obs = torch.zeros(8, 3, 32, 32, dtype=torch.uint8)
    for i in range(8):
        obs[i, i % 3, 4 * i : 4 * i + 8, 8:16] = 255
    losses = []
    for _ in range(40):
        loss = recon_loss(dec(proj(enc(obs))), obs)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]
