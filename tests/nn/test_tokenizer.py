"""The VQ-VAE tokenizer (wmzoo.nn.tokenizer): shapes, quantisation, equation 8, LPIPS loading."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from wmzoo.errors import WmzooError
from wmzoo.nn.tokenizer import LPIPS, Tokenizer, TokenizerSpec
from wmzoo.optim import Optimizer
from wmzoo.specs import OptimSpec

TINY = TokenizerSpec(vocab_size=32, embed_dim=16, tokens_per_side=4, channels=8, ch_mult=(1, 2))


def _obs(*lead: int, size: int = 32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (*lead, 3, size, size), generator=g, dtype=torch.uint8)


@given(side=st.sampled_from([2, 4, 8]), size=st.sampled_from([16, 32, 64]), iris=st.booleans())
@settings(max_examples=10, deadline=None)
def test_shapes(side: int, size: int, iris: bool) -> None:
    if size < side * 2:
        return
    arch = {"arch": "vqgan", "num_res_blocks": 1, "attn_resolutions": (side,)} if iris else {}
    spec = TokenizerSpec.model_validate({**TINY.model_dump(), "tokens_per_side": side, **arch})
    tok = Tokenizer(spec, (3, size, size))
    obs = _obs(2, 3, size=size)
    tokens = tok.encode(obs)
    assert tokens.shape == (2, 3, side * side) and tokens.dtype == torch.int64
    assert tokens.min() >= 0 and tokens.max() < spec.vocab_size
    assert tok.num_tokens == side * side and tok.vocab_size == spec.vocab_size
    assert tok.embed(tokens).shape == (2, 3, side * side, spec.embed_dim)
    image = tok.decode(tokens)
    assert image.shape == (2, 3, 3, size, size) and image.dtype == torch.float32
    assert image.min() >= 0 and image.max() <= 1


def test_rem_defaults_match_table_4() -> None:
    tok = Tokenizer(TokenizerSpec(), (3, 64, 64))
    assert tok.num_tokens == 64 and tok.codebook.shape == (512, 256)
    # encoder: conv -> 32 @64, then 64 @32, 128 @16, 256 @8 (table 4); "3.2M params" (REM code)
    x = tok.encoder.net[0](torch.zeros(1, 3, 64, 64))
    assert x.shape == (1, 32, 64, 64)
    for block, shape in zip(tok.encoder.net[1:4], [(64, 32, 32), (128, 16, 16), (256, 8, 8)]):
        x = block(x)
        assert x.shape[1:] == shape
    assert 3.1e6 < sum(p.numel() for p in tok.parameters()) < 3.3e6


def test_iris_nets_are_iris_appendix_a() -> None:
    # Catches: IRIS's tokenizer built as the REM/IRIS hybrid (no attention, 2 decoder blocks per
    # level, 64 channels before the codebook): 2.48M parameters instead of the official 4.03M.
    from wmzoo.nn.tokenizer import Attention
    from wmzoo_plugins.iris import PRESETS

    tok = Tokenizer(PRESETS["paper"].tokenizer, (3, 64, 64))
    # 4,027,523: the official encoder, decoder, codebook and 1×1 convs at config tokenizer/default.yaml
    assert sum(p.numel() for p in tok.parameters()) == 4_027_523
    sides, side = [], 64  # the feature-map side at each attention block of the encoder
    for layer in tok.encoder.net:
        side //= 2 if type(layer).__name__ == "_Halve" else 1
        if isinstance(layer, Attention):
            sides.append(side)
    assert sides == [16, 16, 8, 8, 4]  # after each of 2 blocks at 16 and 8, and the middle one
    assert tok.encoder.net[-1].in_channels == 512  # the 512-channel map before the codebook
    blocks = [type(m).__name__ for m in tok.decoder.net]
    assert blocks.count("ResBlock") == 2 + 3 * 5 and blocks.count("Attention") == 1 + 3 * 2
    assert blocks[2:5] == ["ResBlock", "Attention", "ResBlock"]  # the middle, before any upsampling


def test_rem_arch_has_no_residual_or_attention_blocks() -> None:
    # Catches: the hybrid coming back through a REM spec with IRIS's blocks.
    with pytest.raises(ValueError, match="arch=simple is REM's simplified CNN"):
        TokenizerSpec(num_res_blocks=2)
    with pytest.raises(ValueError, match="arch=simple"):
        TokenizerSpec(attn_resolutions=(8,))


def test_tokens_are_nearest_codes() -> None:
    tok = Tokenizer(TINY, (3, 32, 32))
    obs = _obs(5)
    h, tokens = tok._encode_vectors(obs)
    dist = torch.cdist(h, tok.codebook.expand(5, -1, -1))
    assert torch.equal(tokens, dist.argmin(-1))


def test_loss_matches_equation_8_and_straight_through() -> None:
    torch.manual_seed(0)
    tok = Tokenizer(TINY.model_copy(update={"beta": 0.25}), (3, 32, 32))
    obs = _obs(4)
    loss, metrics = tok.loss(obs)
    h, tokens = tok._encode_vectors(obs)
    e = tok.embed(tokens)
    recon = (tok.preprocess(obs) - tok._decode_vectors(e)).abs().mean()
    mse = (h - e).pow(2).mean()
    assert loss.item() == pytest.approx((recon + mse + 0.25 * mse).item(), rel=1e-5)
    assert metrics["tokenizer/recon"] == pytest.approx(recon.item(), rel=1e-5)
    loss.backward()
    # gradients reach the encoder (straight-through), the codebook and the decoder
    for part in (tok.encoder, tok.decoder, tok.quantizer):
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in part.parameters())


def test_training_lowers_the_loss_on_a_fixed_batch() -> None:
    torch.manual_seed(0)
    tok = Tokenizer(TINY, (3, 32, 32))
    obs = _obs(8)
    opt = Optimizer(tok.parameters(), OptimSpec(lr=3e-3, clip=10.0))
    first = tok.loss(obs)[0].item()
    for _ in range(30):
        opt.step(tok.loss(obs)[0])
    assert tok.loss(obs)[0].item() < 0.8 * first


def test_bad_image_size_is_one_clear_error() -> None:
    with pytest.raises(WmzooError, match="cannot be cut"):
        Tokenizer(TINY, (3, 40, 40))


def test_perceptual_needs_a_file(tmp_path) -> None:
    with pytest.raises(WmzooError, match="perceptual_weights"):
        Tokenizer(TINY.model_copy(update={"perceptual_weight": 1.0}), (3, 32, 32))
    with pytest.raises(WmzooError, match="no such file"):
        Tokenizer(TINY.model_copy(update={"perceptual_weight": 1.0, "perceptual_weights": str(tmp_path / "x.pt")}), (3, 32, 32))


def test_perceptual_loads_lpips_names_and_adds_its_term(tmp_path) -> None:
    torch.manual_seed(0)
    # a state dict in torchvision + lpips package naming, random values
    state = {}
    convs = [(3, 64), (64, 64), (64, 128), (128, 128), (128, 256), (256, 256), (256, 256),
             (256, 512), (512, 512), (512, 512), (512, 512), (512, 512), (512, 512)]
    indices = [0, 2, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28]
    for i, (c_in, c_out) in zip(indices, convs):
        state[f"net.features.{i}.weight"] = torch.randn(c_out, c_in, 3, 3) * 0.05
        state[f"net.features.{i}.bias"] = torch.zeros(c_out)
    for j, c in enumerate((64, 128, 256, 512, 512)):
        state[f"lin{j}.model.1.weight"] = torch.rand(1, c, 1, 1)
    path = tmp_path / "lpips_vgg.pt"
    torch.save(state, path)
    lpips = LPIPS(path)
    assert torch.equal(lpips.lins[2].weight, state["lin2.model.1.weight"])
    x = torch.rand(2, 3, 32, 32) * 2 - 1
    assert lpips(x, x).item() == pytest.approx(0.0, abs=1e-6)
    assert lpips(x, -x).item() > 0
    spec = TINY.model_copy(update={"perceptual_weight": 1.0, "perceptual_weights": str(path)})
    tok = Tokenizer(spec, (3, 32, 32))
    loss, metrics = tok.loss(_obs(2))
    assert metrics["tokenizer/perceptual"] > 0
    assert loss.item() == pytest.approx(metrics["tokenizer/loss"])
    assert not any(k.startswith("_perceptual") or "features" in k for k in tok.state_dict())


@pytest.mark.parametrize("arch", ["simple", "vqgan"])
def test_tokens_are_in_raster_order_and_decode_to_the_same_layout(arch: str) -> None:
    # With identity nets (one token per pixel, the pixel's colour as its vector) and a codebook
    # of the two colours used, encode -> decode must give back an asymmetric pattern exactly, and
    # token k must be pixel (k // side, k % side). Catches: the token grid decoded transposed or
    # flipped, encoder outputs flattened column-major, a reshape that mixes channels and positions.
    spec = TokenizerSpec(arch=arch, vocab_size=2, embed_dim=3, tokens_per_side=8, channels=4, ch_mult=(1,))
    tok = Tokenizer(spec, (3, 8, 8))
    tok.encoder, tok.decoder = torch.nn.Identity(), torch.nn.Identity()
    with torch.no_grad():
        tok.codebook.copy_(torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]]))  # black, white
    obs = torch.zeros(1, 3, 8, 8, dtype=torch.uint8)
    obs[..., 1, 5] = obs[..., 6, 2] = obs[..., 0, 0:3] = 255  # no symmetry under transpose or flips
    tokens = tok.encode(obs)[0]
    assert tokens.view(8, 8).tolist() == (obs[0, 0] == 255).long().tolist()
    assert torch.equal(tok.decode(tokens[None]) * 255, obs.float())
