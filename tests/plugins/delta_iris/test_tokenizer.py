"""Δ-IRIS's context-aware autoencoder (wmzoo_plugins.delta_iris.tokenizer): the official
geometry and parameter count, the patch layout, the weighted loss, the gradient paths and that
the decoder really uses the previous frame."""

from __future__ import annotations

import pydantic
import pytest
import torch

from wmzoo.errors import SpecError
from wmzoo_plugins.delta_iris import ATARI, DeltaTokenizer, DeltaTokenizerSpec, FrameCnnSpec

TINY_CNN = FrameCnnSpec(channels=8, mult=(1, 2), down=(1, 1))


def _tiny(obs_shape=(3, 16, 16), num_actions=3, seed=0, **kw) -> DeltaTokenizer:
    torch.manual_seed(seed)
    spec = DeltaTokenizerSpec(
        codebook_size=16, codebook_dim=8, latent_dim=4, encoder=TINY_CNN, decoder=TINY_CNN,
        frame_cnn=TINY_CNN, frame_latent_dim=4, decoder_act_channels=2, **kw,
    )
    return DeltaTokenizer(spec, obs_shape, num_actions)


def _batch(lead, obs_shape=(3, 16, 16), num_actions=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x1 = torch.randint(0, 256, (*lead, *obs_shape), generator=g, dtype=torch.uint8)
    x2 = torch.randint(0, 256, (*lead, *obs_shape), generator=g, dtype=torch.uint8)
    return x1, torch.randint(0, num_actions, lead, generator=g), x2


# Catches: a default drifting from the paper's table 2 / the official Crafter and Atari configs
# (e.g. the L1 and L2 weights swapped, the Atari frame_cnn left at Crafter's width).
def test_spec_defaults_are_the_official_configs():
    s = DeltaTokenizerSpec()
    assert (s.num_tokens, s.codebook_size, s.codebook_dim, s.latent_dim) == (4, 1024, 64, 64)
    for cnn in (s.encoder, s.decoder, s.frame_cnn):
        assert (cnn.channels, cnn.mult, cnn.down) == (64, (1, 1, 2, 2, 4), (1, 0, 1, 1, 0))
    assert (s.frame_latent_dim, s.decoder_act_channels, s.revival_updates) == (8, 4, 0)
    assert (s.commitment, s.l1_weight, s.l2_weight, s.max_pixel_weight) == (0.02, 0.1, 1.0, 0.01)
    assert s.perceptual_weight == 0.0 and (s.optim.lr, s.optim.weight_decay, s.optim.clip) == (1e-4, 0.01, 10.0)
    assert (ATARI.frame_cnn.channels, ATARI.frame_latent_dim, ATARI.revival_updates, ATARI.optim.weight_decay) == (
        32, 16, 400, 0.0)
    assert ATARI.encoder == s.encoder and ATARI.decoder == s.decoder


# Catches: geometry that cannot be built slipping through to a reshape error deep in forward
# (a non-square token count, CNNs reaching different resolutions, a frame the grid cannot tile).
def test_spec_and_image_geometry_are_validated():
    with pytest.raises(pydantic.ValidationError, match="square grid"):
        DeltaTokenizerSpec(num_tokens=6)
    with pytest.raises(pydantic.ValidationError, match="halve the resolution equally"):
        DeltaTokenizerSpec(frame_cnn=FrameCnnSpec(down=(1, 1, 1, 1, 0)))
    with pytest.raises(pydantic.ValidationError, match="one entry per layer"):
        FrameCnnSpec(mult=(1, 2), down=(1,))
    with pytest.raises(SpecError, match=r"60x60 image needs sides divisible by 16"):
        DeltaTokenizer(DeltaTokenizerSpec(), (3, 60, 60), 4)
    with pytest.raises(SpecError, match="divisible by 8"):
        _tiny(obs_shape=(3, 16, 20))


# Catches: leading dims mixed up when flattening (actions paired with the wrong frames), a grid
# that only works for square or 64×64 frames, decode not clamping/rounding to uint8 levels, and
# decoding tokens differing from decoding their code vectors.
@pytest.mark.parametrize("obs_shape", [(3, 16, 16), (1, 24, 24), (3, 16, 32)])
@pytest.mark.parametrize("lead", [(), (5,), (2, 3)])
def test_shapes_for_image_sizes_and_leading_dims(obs_shape, lead):
    model = _tiny(obs_shape).eval()
    x1, a, x2 = _batch(lead, obs_shape)
    tokens = model.encode(x1, a, x2)
    assert tokens.shape == (*lead, 4) and tokens.dtype == torch.int64
    assert int(tokens.min()) >= 0 and int(tokens.max()) < 16
    out = model.decode(x1, a, tokens)
    assert out.shape == (*lead, *obs_shape) and out.dtype == torch.float32
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0
    assert torch.equal(out * 255, (out * 255).round())  # exactly uint8 levels
    torch.testing.assert_close(model.decode(x1, a, model.quantizer.embed(tokens)), out, atol=1 / 255 + 1e-6, rtol=0)
    assert torch.equal(model.decode(x1.float() / 255, a, tokens), out)  # a decoded (float) frame fed back
    # each transition decodes as it does alone: no mixing across the flattened leading dims
    if lead:
        first = (0,) * len(lead)
        assert torch.equal(model.encode(x1[first], a[first], x2[first]), tokens[first])
        assert torch.equal(model.decode(x1[first], a[first], tokens[first]), out[first])
    loss, metrics = model.train().loss(x1, a, x2)
    assert loss.dim() == 0 and torch.isfinite(loss) and metrics["tokenizer/loss"] == pytest.approx(float(loss.detach()))


# Catches: a transposed (w, h) or misordered grid, or a patch flattened in another order than
# the official (row, column, channel): token k must hold exactly raster cell (k // g, k % g).
def test_patch_layout_maps_each_token_to_its_grid_cell():
    model = _tiny((3, 16, 32))  # latent 4×8: cells 2×4, so h and w cannot be confused
    c, (h, w), (ph, pw) = 4, model.latent_hw, model.patch_hw
    assert (h, w, ph, pw) == (4, 8, 2, 4)
    z = torch.randn(2, c, h, w)
    patches = model.patches(z)
    assert patches.shape == (2, 4, ph * pw * c)
    for k in range(4):
        row, col = divmod(k, 2)
        cell = z[:, :, row * ph:(row + 1) * ph, col * pw:(col + 1) * pw]  # [N, c, ph, pw]
        assert torch.equal(patches[:, k], cell.permute(0, 2, 3, 1).reshape(2, -1))
    assert torch.equal(model.unpatch(patches), z)


def _hand_terms(model: DeltaTokenizer, x1, a, x2) -> dict[str, torch.Tensor]:
    """Table 2's unweighted loss terms, computed step by step from the modules."""
    plane = model.encoder_act_emb(a).view(-1, 1, *x1.shape[-2:])
    z = model.encoder(torch.cat([x1 / 255, plane, x2 / 255], 1))
    patches = model.patches(z)
    unit = torch.nn.functional.normalize(model.quantizer.pre(patches), dim=-1)
    codes = model.quantizer.codebook[(unit @ model.quantizer.codebook.t()).argmax(-1)]
    commitment = (unit - codes).pow(2).mean()
    grid = model.unpatch(model.quantizer.post(codes))
    planes = model.decoder_act_emb(a).view(-1, 2, *model.latent_hw)
    recon = model.decoder(torch.cat([model.frame_cnn(x1 / 255), planes, grid], 1))
    delta = x2 / 255 - recon
    return {"commitment": commitment, "l1": delta.abs().mean(), "l2": delta.pow(2).mean(),
            "max_pixel": delta.pow(2).flatten(1).max(1).values.mean()}


def _hand_loss(model: DeltaTokenizer, x1, a, x2) -> torch.Tensor:
    """Table 2's weighted loss of the terms :func:`_hand_terms` computes."""
    terms = _hand_terms(model, x1, a, x2)
    return 0.02 * terms["commitment"] + 0.1 * terms["l1"] + 1.0 * terms["l2"] + 0.01 * terms["max_pixel"]


# Catches: a wrong or swapped weight, the max-pixel term taken over the batch instead of per
# frame, pixels not scaled to [0, 1], and a mask that is ignored or misaligned with the frames.
def test_loss_equals_the_hand_computed_weighted_terms_and_respects_the_mask():
    model = _tiny().eval()  # eval: the codebook does not move between the two computations
    x1, a, x2 = _batch((2, 3))
    loss, metrics = model.loss(x1, a, x2)
    torch.testing.assert_close(loss, _hand_loss(model, x1.reshape(6, 3, 16, 16), a.reshape(6), x2.reshape(6, 3, 16, 16)))
    assert {"tokenizer/l1", "tokenizer/l2", "tokenizer/max_pixel", "tokenizer/commitment"} <= set(metrics)
    mask = torch.tensor([[True, False, True], [False, True, True]])
    garbage = x2.clone()
    garbage[~mask] = 255 - garbage[~mask]  # the masked-out targets change: the loss must not
    masked, _ = model.loss(x1, a, garbage, mask)
    torch.testing.assert_close(masked, _hand_loss(model, x1[mask], a[mask], x2[mask]))


# catches: a loss term logged under another term's name (the metrics are the unweighted terms)
def test_loss_metrics_are_the_hand_computed_unweighted_terms():
    model = _tiny().eval()
    x1, a, x2 = _batch((4,))
    _, metrics = model.loss(x1, a, x2)
    terms = _hand_terms(model, x1, a, x2)
    for name in ("l1", "l2", "max_pixel"):
        assert metrics[f"tokenizer/{name}"] == pytest.approx(float(terms[name].detach()), rel=1e-5), name


# catches: the encoder's action plane embedding every action alike (the Δ-tokens then cannot
# describe a change the action causes)
def test_the_encoder_reads_the_action():
    model = _tiny().eval()
    x1, a, x2 = _batch((4,))
    with torch.no_grad():
        assert not torch.allclose(model._encode(x1, a, x2), model._encode(x1, (a + 1) % 3, x2))


# Catches: an all-padding batch dividing by zero in the codebook usage EMA (NaN forever after).
def test_an_empty_mask_is_a_zero_loss_and_leaves_the_codebook_alone():
    model = _tiny().train()
    x1, a, x2 = _batch((2, 3))
    before = {k: v.clone() for k, v in model.quantizer.state_dict().items()}
    loss, _ = model.loss(x1, a, x2, torch.zeros(2, 3, dtype=torch.bool))
    loss.backward()
    assert float(loss.detach()) == 0.0
    for k, v in model.quantizer.state_dict().items():
        assert torch.equal(v, before[k]), k


# Catches: encode (used to burn in real context) moving the EMA codebook as a training step would.
def test_encode_does_not_update_the_codebook():
    model = _tiny().train()
    before = model.quantizer.codebook.clone()
    model.encode(*_batch((4,)))
    assert torch.equal(model.quantizer.codebook, before) and int(model.quantizer.updates) == 0
    model.loss(*_batch((4,)))  # a training step does update it
    assert not torch.equal(model.quantizer.codebook, before) and int(model.quantizer.updates) == 1


# Catches: a detach cutting a path (straight-through applied to the wrong tensor, the decoder's
# conditioning detached, an action embedding unused) and a codebook trained by the optimiser.
def test_gradients_reach_every_trained_part_but_not_the_codebook():
    model = _tiny().train()
    loss, _ = model.loss(*_batch((4,)))
    loss.backward()
    for name in ("encoder", "decoder", "frame_cnn", "encoder_act_emb", "decoder_act_emb", "quantizer.pre",
                 "quantizer.post"):
        grads = [p.grad for n, p in model.named_parameters() if n.startswith(name)]
        assert grads and all(g is not None for g in grads), name
        assert sum(float(g.abs().sum()) for g in grads) > 0, name
    assert "quantizer.codebook" not in dict(model.named_parameters())
    assert model.quantizer.codebook.grad is None and not model.quantizer.codebook.requires_grad


def _conv(i: int, o: int, k: int) -> int:
    return i * o * k * k + o


def _res(i: int, o: int) -> int:  # GN(i), conv3, GN(o), conv3, 1×1 skip when the width changes
    return 2 * i + _conv(i, o, 3) + 2 * o + _conv(o, o, 3) + (_conv(i, o, 1) if i != o else 0)


_MULT, _DOWN = (1, 1, 2, 2, 4), (1, 0, 1, 1, 0)


def official_encoder_count(c_in: int, width: int, latent: int) -> int:
    """Parameters of the official FrameEncoder (convnet.py, the config's mult and down)."""
    n, c = _conv(c_in, width, 3), width
    for m, d in zip(_MULT, _DOWN):
        n += _res(c, m * width) + (_conv(m * width, m * width, 2) if d else 0)
        c = m * width
    return n + 2 * c + _conv(c, latent, 3)


def _official_count(num_actions: int, frame_channels: int, frame_latent: int) -> int:
    """Parameters of the official Tokenizer, counted from its convnet.py and config by hand."""
    encoder = official_encoder_count

    def decoder(latent, width, out):
        n, prev = _conv(latent, _MULT[-1] * width, 3), width
        for m, d in zip(_MULT, _DOWN):
            n += _res(m * width, prev) + (_conv(m * width, m * width, 3) if d else 0)
            prev = m * width
        return n + 2 * width + _conv(width, out, 3)

    quantizer = (1024 * 64 + 64) + (64 * 1024 + 1024)
    embeddings = num_actions * 64 * 64 + num_actions * 4 * 8 * 8
    return (encoder(7, 64, 64) + decoder(frame_latent + 4 + 64, 64, 3) + encoder(3, frame_channels, frame_latent)
            + quantizer + embeddings)


# Catches: any architectural drift from the official code (a missing residual block or skip
# projection, a 3×3 instead of 2×2 downsampling, the upsampling conv dropped, wrong widths), and
# the official init (Linear/Embedding N(0, 0.02), Linear biases 0) not applied.
def test_parameter_count_and_init_match_the_official():
    crafter = DeltaTokenizer(DeltaTokenizerSpec(), (3, 64, 64), 17)
    atari = DeltaTokenizer(ATARI, (3, 64, 64), 18)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(crafter) == _official_count(17, 64, 8) == 5_409_611
    assert count(atari) == _official_count(18, 32, 16) == 4_126_643
    assert crafter.latent_hw == (8, 8) and crafter.patch_hw == (4, 4) and crafter.quantizer.pre.in_features == 1024
    with torch.no_grad():
        assert float(crafter.encoder_act_emb.weight.std()) == pytest.approx(0.02, rel=0.05)
        assert float(crafter.quantizer.pre.weight.std()) == pytest.approx(0.02, rel=0.05)
        assert float(crafter.quantizer.post.bias.abs().max()) == 0.0


_MOVES = torch.tensor([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]])  # stay, up, down, left, right


def _square_task(n: int, g: torch.Generator):
    """A 2×2 square on an 8×8 torus moved one pixel by the action: x_{t+1} = f(x_t, a_t)."""
    base = torch.zeros(1, 8, 8, dtype=torch.uint8)
    base[:, :2, :2] = 255
    pos = torch.randint(0, 8, (n, 2), generator=g)
    a = torch.randint(0, 5, (n,), generator=g)
    frames = lambda p: torch.stack([base.roll((int(r), int(c)), (1, 2)) for r, c in p])  # noqa: E731
    return frames(pos), a, frames((pos + _MOVES[a]) % 8)


# Catches: a decoder that ignores its context (frame_cnn output dropped or zeroed, the frame
# embedding concatenated from the wrong tensor): with 2 codes × 4 tokens (16 messages) the tokens
# cannot name the square's 64 positions, so only the previous frame can place it (Must-show of
# the issue: reconstruction with the true previous frame beats a wrong one).
def test_decoder_uses_the_previous_frame():
    torch.manual_seed(0)
    cnn = FrameCnnSpec(channels=8, mult=(1,), down=(1,))
    spec = DeltaTokenizerSpec(codebook_size=2, codebook_dim=4, latent_dim=4, encoder=cnn, decoder=cnn,
                              frame_cnn=cnn, frame_latent_dim=4, decoder_act_channels=2)
    model = DeltaTokenizer(spec, (1, 8, 8), 5)
    g = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        loss, _ = model.loss(*_square_task(32, g))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    x1, a, x2 = _square_task(256, g)
    tokens = model.encode(x1, a, x2)
    true = (model.decode(x1, a, tokens) - x2 / 255).pow(2).mean()
    wrong = (model.decode(x1.roll(1, 0), a, tokens) - x2 / 255).pow(2).mean()
    blank = (x2 / 255).pow(2).mean()  # 0.0625: predicting an empty frame
    assert float(true) < 0.6 * float(blank), (float(true), float(blank))
    assert float(wrong) > 2.5 * float(true), (float(true), float(wrong))
