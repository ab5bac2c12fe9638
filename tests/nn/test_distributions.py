"""symlog/symexp, two-hot regression, unimix and straight-through categoricals (wmzoo.nn.distributions)."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from wmzoo.nn import OneHotCategoricalST, TwoHot, symexp, symlog, unimix_logits

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, width=32)


@given(st.lists(finite, min_size=1, max_size=16))
@settings(max_examples=50, deadline=None)
def test_symexp_inverts_symlog(values: list[float]) -> None:
    x = torch.tensor(values, dtype=torch.float64)
    torch.testing.assert_close(symexp(symlog(x)), x, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(symlog(symexp(symlog(x))), symlog(x))


def test_symlog_values() -> None:
    x = torch.tensor([0.0, math.e - 1, -(math.e - 1), 1e3], dtype=torch.float64)
    expected = torch.tensor([0.0, 1.0, -1.0, math.log(1001.0)], dtype=torch.float64)
    torch.testing.assert_close(symlog(x), expected)


@given(st.lists(st.floats(min_value=-1e4, max_value=1e4, allow_nan=False), min_size=1, max_size=8))
@settings(max_examples=60, deadline=None)
def test_two_hot_round_trip(values: list[float]) -> None:
    target = torch.tensor(values, dtype=torch.float32)
    dist = TwoHot(torch.zeros(len(values), 255))
    weights = dist.encode(target)
    # A proper two-hot: non-negative, sums to one, at most two adjacent bins.
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(len(values)))
    nonzero = weights > 0
    assert (nonzero.sum(-1) <= 2).all()
    for row in nonzero:
        idx = row.nonzero().flatten()
        assert len(idx) == 1 or idx[1] - idx[0] == 1
    # Its expected bin value is symlog(target), so decoding the encoding gives the target back.
    torch.testing.assert_close((weights * dist.bins).sum(-1), symlog(target), rtol=1e-5, atol=1e-5)
    decoded = TwoHot(weights.log()).mean()
    torch.testing.assert_close(decoded, target, rtol=2e-4, atol=1e-4)


def test_two_hot_targets_beyond_the_bins_go_to_the_end_bins() -> None:
    """symlog(target) outside [-20, 20] (|target| > 4.85e8) is all on the nearest end bin, its edges
    too. Catches: the bucket clamped from 0 (a target at or below the lowest bin indexes bin -1)."""
    dist = TwoHot(torch.zeros(5, 255))
    edge = float(symexp(torch.tensor(20.0, dtype=torch.float64)))
    weights = dist.encode(torch.tensor([-1e12, -edge, -1e9, edge, 1e12]))
    expected = torch.zeros(5, 255)
    expected[:3, 0] = 1.0
    expected[3:, -1] = 1.0
    torch.testing.assert_close(weights, expected)


def test_two_hot_loss_gradient_is_softmax_minus_encoding() -> None:
    # -log_prob is the cross-entropy against the two-hot target: d/dlogits = softmax - two-hot.
    target = torch.tensor([3.0, -0.2, 150.0])
    logits = torch.randn(3, 255, requires_grad=True)
    dist = TwoHot(logits)
    (-dist.log_prob(target)).sum().backward()
    torch.testing.assert_close(logits.grad, logits.detach().softmax(-1) - dist.encode(target))


def test_two_hot_zero_logits_predict_zero() -> None:
    assert TwoHot(torch.zeros(3, 255)).mean().abs().max() < 1e-6


def test_unimix_mixes_probabilities() -> None:
    logits = torch.randn(5, 7) * 5
    probs = unimix_logits(logits, 0.01).softmax(-1)
    torch.testing.assert_close(probs, 0.99 * logits.softmax(-1) + 0.01 / 7)
    assert probs.min() >= 0.01 / 7 - 1e-7
    assert unimix_logits(logits, 0.0) is logits


def test_one_hot_st_samples_follow_probs_with_straight_through_grad() -> None:
    torch.manual_seed(0)
    logits = torch.tensor([[2.0, 0.0, -1.0, 0.5]]).repeat(20000, 1).requires_grad_()
    dist = OneHotCategoricalST(logits)
    sample = dist.sample()
    # one-hot up to float rounding of `onehot + probs - sg(probs)`
    torch.testing.assert_close(sample.detach(), sample.detach().round(), atol=1e-6, rtol=0)
    torch.testing.assert_close(sample.detach().sum(-1), torch.ones(20000))
    torch.testing.assert_close(sample.detach().mean(0), dist.probs[0].detach(), atol=0.015, rtol=0)
    # Straight-through: the gradient of f(sample) is the gradient of f(probs).
    w = torch.randn(4)
    (grad_sample,) = torch.autograd.grad((sample * w).sum(), logits, retain_graph=True)
    (grad_probs,) = torch.autograd.grad((dist.probs * w).sum(), logits)
    torch.testing.assert_close(grad_sample, grad_probs)
    torch.testing.assert_close(dist.mode()[0].detach(), torch.tensor([1.0, 0.0, 0.0, 0.0]))


def test_one_hot_st_kl_and_entropy_match_torch() -> None:
    p, q = torch.randn(6, 5), torch.randn(6, 5)
    ref_p, ref_q = torch.distributions.Categorical(logits=p), torch.distributions.Categorical(logits=q)
    torch.testing.assert_close(
        OneHotCategoricalST(p).kl(OneHotCategoricalST(q)), torch.distributions.kl_divergence(ref_p, ref_q)
    )
    torch.testing.assert_close(OneHotCategoricalST(p).entropy(), ref_p.entropy())


def test_two_hot_keeps_float32_bins_and_loss_under_bf16_logits():
    # Catches: bins built in the logits' dtype. In bfloat16, 255 bins over [-20, 20] (0.157 apart)
    # collapse near ±20 (bf16 steps of 0.125 there), and on CUDA autocast computes symlog in float32
    # while the bins were bf16: `scatter(): Expected self.dtype to be equal to src.dtype`, found by
    # benchmarks/gpu_check.sh on an H200 (RSSM's reward head under --precision bf16).
    torch.manual_seed(0)
    logits = torch.randn(6, 255)
    target = torch.tensor([0.0, 0.3, -5.0, 100.0, 1e6, -1e6])
    half = TwoHot(logits.bfloat16())
    assert half.bins.dtype == torch.float32 and half.bins.unique().numel() == 255
    assert half.encode(target).dtype == torch.float32
    assert half.encode(target.bfloat16()).dtype == torch.float32  # a bf16 target too (CUDA's case, reversed)
    torch.testing.assert_close(half.encode(target), TwoHot(logits).encode(target))
    torch.testing.assert_close(half.log_prob(target), TwoHot(logits).log_prob(target), atol=0.02, rtol=0.01)


def test_mode_passes_the_straight_through_gradient_and_log_prob_matches_torch() -> None:
    # catches: mode() returning a bare one-hot (no gradient to the logits), log_prob reading the
    # probabilities instead of the log-probabilities
    logits = torch.tensor([[0.3, 2.0, -1.0], [1.0, 0.0, 0.5]], requires_grad=True)
    dist = OneHotCategoricalST(logits)
    w = torch.tensor([1.0, -2.0, 0.5])
    (grad_mode,) = torch.autograd.grad((dist.mode() * w).sum(), logits, retain_graph=True)
    (grad_probs,) = torch.autograd.grad((dist.probs * w).sum(), logits)
    torch.testing.assert_close(grad_mode, grad_probs)
    assert grad_mode.abs().sum() > 0
    onehot = torch.nn.functional.one_hot(torch.tensor([2, 0]), 3).float()
    ref = torch.distributions.Categorical(logits=logits.detach()).log_prob(torch.tensor([2, 0]))
    torch.testing.assert_close(dist.log_prob(onehot).detach(), ref)


def test_modes_makes_every_draw_its_mode_and_forced_gaussians_replace_draws() -> None:
    # catches: modes() ignored by OneHotCategoricalST.sample, gaussian_sample or sample_class (a
    # deterministic comparison of a model's forms would then sample), forced draws ignored
    from wmzoo.nn.distributions import forced_gaussians, gaussian_sample, modes
    from wmzoo.nn.heads import sample_class

    torch.manual_seed(0)
    logits = torch.zeros(200, 4)
    logits[:, 1] = 0.1  # nearly uniform: a draw is not the mode three times in four
    mean, std = torch.full((200,), 2.0), torch.ones(200)
    assert not torch.equal(OneHotCategoricalST(logits).sample().argmax(-1), torch.ones(200, dtype=torch.long))
    assert not torch.equal(sample_class(logits), torch.ones(200, dtype=torch.long))
    assert not torch.equal(gaussian_sample(mean, std), mean)
    with modes():
        assert torch.equal(OneHotCategoricalST(logits).sample().argmax(-1), torch.ones(200, dtype=torch.long))
        assert torch.equal(sample_class(logits), torch.ones(200, dtype=torch.long))
        assert torch.equal(gaussian_sample(mean, std), mean)
    with forced_gaussians(lambda m, s: m - 3 * s):
        assert torch.equal(gaussian_sample(mean, std), torch.full((200,), -1.0))
    assert not torch.equal(gaussian_sample(mean, std), torch.full((200,), -1.0))  # restored after
