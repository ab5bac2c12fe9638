"""Vector quantisers (wmzoo.nn.quantizer): the loss-trained codebook of IRIS/REM and Δ-IRIS's
cosine EMA codebook with dead-code revival."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from wmzoo.errors import SpecError
from wmzoo.nn.quantizer import CosineEMAQuantizer, VectorQuantizer
from wmzoo.nn.tokenizer import Tokenizer, TokenizerSpec


@given(n=st.integers(2, 40), dim=st.integers(1, 8), beta=st.floats(0.0, 2.0), seed=st.integers(0, 1000))
@settings(max_examples=20, deadline=None)
def test_loss_trained_codebook_is_nearest_l2_with_equation_8_terms(n: int, dim: int, beta: float, seed: int) -> None:
    # Catches: argmax instead of argmin, distances to the wrong axis, β on the wrong term, the
    # codebook term without its stop-gradient (it would train the encoder twice).
    torch.manual_seed(seed)
    vq = VectorQuantizer(n, dim, beta)
    with torch.no_grad():
        vq.codebook.normal_()
    h = torch.randn(3, 5, dim, requires_grad=True)
    q = vq(h)
    assert torch.equal(q.tokens, torch.cdist(h.detach(), vq.codebook.detach()[None]).argmin(-1))
    e = vq.codebook.detach()[q.tokens]
    mse = (h.detach() - e).pow(2).mean()
    assert q.loss.item() == pytest.approx(((1 + beta) * mse).item(), rel=1e-5, abs=1e-6)
    torch.testing.assert_close(q.vectors, e)
    (q.vectors.sum() + 0 * q.loss).backward()  # straight-through: d vectors / d h = identity
    torch.testing.assert_close(h.grad, torch.ones_like(h))


def test_codebook_term_trains_the_codes_and_commitment_the_encoder() -> None:
    torch.manual_seed(0)
    vq = VectorQuantizer(4, 2, beta=0.25)
    h = torch.randn(6, 2, requires_grad=True)
    vq(h).loss.backward()
    e = vq.codebook.detach()[vq.nearest(h.detach())]
    torch.testing.assert_close(h.grad, 0.25 * 2 * (h.detach() - e) / h.numel())
    assert vq.codebook.grad is not None and vq.codebook.grad.abs().sum() > 0


def _ema(num: int = 8, dim: int = 4, input_dim: int = 6, **kw) -> CosineEMAQuantizer:
    torch.manual_seed(0)
    return CosineEMAQuantizer(num, dim, input_dim, **kw)


def test_cosine_tokens_and_commitment_on_normalised_factorised_vectors() -> None:
    # Catches: the lookup before the down-projection or the normalisation, L2 instead of cosine,
    # a commitment weight other than 0.02, a gradient into the codebook buffer.
    ema = _ema().eval()
    h = torch.randn(2, 3, 6, requires_grad=True)
    q = ema(h)
    z = F.normalize(ema.pre(h.detach()), dim=-1)
    assert torch.equal(q.tokens, (z @ ema.codebook.t()).argmax(-1))
    e = ema.codebook[q.tokens]
    assert q.loss.item() == pytest.approx(0.02 * (z - e).pow(2).mean().item(), rel=1e-5)
    torch.testing.assert_close(q.vectors, ema.post(e))
    torch.testing.assert_close(ema.embed(q.tokens), q.vectors)
    q.loss.backward()
    assert h.grad is not None and h.grad.abs().sum() > 0
    assert not ema.codebook.requires_grad


def test_ema_update_by_hand_and_only_in_training() -> None:
    # Catches: the EMA towards the raw (unnormalised) mean, the decay used the wrong way round
    # (0.01 kept, 0.99 moved), usage counted per batch instead of as frequencies, updates in eval.
    ema = _ema()
    ema.codebook.copy_(F.normalize(torch.randn(8, 4), dim=-1))
    before, usage = ema.codebook.clone(), ema.usage.clone()
    h = torch.randn(32, 6)
    ema.eval()
    ema(h)
    assert torch.equal(ema.codebook, before) and int(ema.updates) == 0
    ema.train()
    q = ema(h)
    z = F.normalize(ema.pre(h), dim=-1).detach()
    one_hot = F.one_hot(q.tokens, 8).float()
    counts = one_hot.sum(0)
    means = F.normalize(one_hot.t() @ z / counts.clamp(min=1)[:, None], dim=-1)
    torch.testing.assert_close(ema.codebook, F.normalize(before + 0.01 * (means - before), dim=-1))
    torch.testing.assert_close(ema.usage, usage + 0.02 * (counts / 32 - usage))
    assert int(ema.updates) == 1 and q.metrics["codes_revived"] == 0.0  # uniform usage: 3 bits > 1


def test_dead_codes_are_revived_from_inputs_while_entropy_is_low() -> None:
    # Catches: revival never triggered (a collapsed codebook stays collapsed), codes revived from
    # something other than the batch's normalised vectors, usage not reset after a revival.
    ema = _ema(num=8)
    ema.usage.copy_(torch.tensor([1.0] + [0.0] * 7))  # all usage on code 0: entropy 0 < log2 8 - 2
    h = torch.randn(16, 6)
    q = ema(h)
    z = F.normalize(ema.pre(h), dim=-1).detach()
    assert q.metrics["codes_revived"] >= 6  # codes unused by this batch and dead before it
    revived = ema.usage == 1 / 8
    for code in ema.codebook[revived]:
        assert torch.isclose(z @ code, torch.ones(())).any()  # a batch vector, unit length
    assert ema.entropy() > 0


def test_entropy_threshold_and_codebook_size() -> None:
    # (the revival window: test_revival_threshold_usage_reset_and_window; a check here at N = 8
    # could not fail, the EMA lifting a 1-bit usage above its threshold whatever the window)
    assert _ema(num=8).entropy_threshold == math.log2(8) - 2
    with pytest.raises(SpecError, match="power of 2"):
        CosineEMAQuantizer(12, 4, 6)


def test_tokenizer_loads_checkpoints_that_named_the_codebook_embedding() -> None:
    # Catches: REM/IRIS checkpoints written before the quantiser module existed failing to load.
    spec = TokenizerSpec(vocab_size=16, embed_dim=8, tokens_per_side=2, channels=4, ch_mult=(1,))
    tok = Tokenizer(spec, (3, 8, 8))
    state = tok.state_dict()
    state["embedding.weight"] = state.pop("quantizer.embedding.weight") + 1.0
    fresh = Tokenizer(spec, (3, 8, 8))
    fresh.load_state_dict(state)
    torch.testing.assert_close(fresh.codebook, tok.codebook + 1.0)


def test_codebook_gradient_comes_from_the_codebook_term_only_and_metrics_count_codes() -> None:
    # catches: the commitment term without sg(e) (it would train the codes β times more), codes_used
    # counting tokens instead of distinct codes, an initialisation outside U(−1/N, 1/N)
    torch.manual_seed(0)
    vq = VectorQuantizer(4, 2, beta=0.25)
    assert vq.codebook.abs().max() <= 1 / 4
    with torch.no_grad():
        vq.codebook.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]]))
    h = torch.tensor([[0.9, 0.1], [0.8, -0.1], [0.1, 1.2]], requires_grad=True)  # codes 0, 0, 1
    q = vq(h)
    assert q.tokens.tolist() == [0, 0, 1] and q.metrics["codes_used"] == 2.0
    q.loss.backward()
    e = vq.codebook.detach()[q.tokens]
    expected = torch.zeros(4, 2).index_add_(0, q.tokens, 2 * (e - h.detach()) / h.numel())
    torch.testing.assert_close(vq.codebook.grad, expected)


def test_cosine_vectors_pass_the_straight_through_gradient_to_the_encoder() -> None:
    # catches: post(e) without the straight-through z + sg(e − z) (no gradient reaches pre or h)
    ema = _ema().eval()
    h = torch.randn(5, 6, requires_grad=True)
    q = ema(h)
    w = torch.randn(6)
    (grad,) = torch.autograd.grad((q.vectors * w).sum(), h)
    h2 = h.detach().clone().requires_grad_()
    z = F.normalize(ema.pre(h2), dim=-1)
    (ema.post(z) * w).sum().backward()  # straight-through: the gradient of post(z)
    torch.testing.assert_close(grad, h2.grad)


def test_revival_threshold_usage_reset_and_window() -> None:
    # catches: dead codes taken below 1/N instead of 1/(10N), revived codes' usage not reset to 1/N,
    # the revival window one update too long, revival stopped by the window although the entropy
    # has collapsed below 1 bit
    ema = _ema(num=8)
    usage = torch.tensor([0.9, 0.05, 0.04, 0.004, 0.003, 0.002, 0.0005, 0.0005])  # < 1/80: codes 3..7
    ema.usage.copy_(usage)
    ema.codebook.copy_(F.normalize(torch.randn(8, 4), dim=-1))
    h = torch.randn(16, 6)
    z = F.normalize(ema.pre(h), dim=-1).detach()
    counts = torch.bincount((z @ ema.codebook.t()).argmax(-1), minlength=8)
    after = 0.98 * usage + 0.02 * counts / 16  # the usage EMA comes first
    q = ema(h)
    dead = [c for c in range(8) if after[c] < 1 / 80]
    assert q.metrics["codes_revived"] == len(dead) > 0
    assert torch.equal(ema.usage[dead], torch.full((len(dead),), 1 / 8))
    assert (ema.usage[[c for c in range(1, 3)]] != 1 / 8).all()  # above 1/(10N): kept

    once = _ema(num=16, revival_updates=1)  # threshold log2 16 − 2 = 2 bits
    once.usage.copy_(torch.tensor([0.5, 0.5] + [0.0] * 14))  # about 1 bit: revival only inside the window
    assert once(torch.randn(16, 6)).metrics["codes_revived"] > 0  # update 0 < 1
    once.usage.copy_(torch.tensor([0.5, 0.5] + [0.0] * 14))
    assert once(torch.randn(16, 6)).metrics["codes_revived"] == 0.0  # update 1: closed

    never = _ema(num=8, revival_updates=0)
    never.usage.copy_(torch.tensor([1.0] + [0.0] * 7))  # collapsed (0 bits < 1): revived anyway
    assert never(torch.randn(16, 6)).metrics["codes_revived"] > 0
