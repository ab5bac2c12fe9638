"""The shared 32×32 categorical latent and the DreamerV3 / DreamerV2 KL losses (wmzoo.nn.latent)."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from wmzoo.nn.latent import CategoricalLatent, KLSpec, kl_loss, sample_latent


def hand_kl(q_logits: torch.Tensor, p_logits: torch.Tensor) -> list[float]:
    """KL(q ‖ p) per leading index, summed over stoch and classes, with Python floats."""
    out = []
    for qs, ps in zip(q_logits.tolist(), p_logits.tolist()):
        total = 0.0
        for ql, pl in zip(qs, ps):
            qz = sum(math.exp(v) for v in ql)
            pz = sum(math.exp(v) for v in pl)
            for a, b in zip(ql, pl):
                q, p = math.exp(a) / qz, math.exp(b) / pz
                total += q * math.log(q / p)
        out.append(total)
    return out


def test_latent_head_shapes_and_unimix() -> None:
    head = CategoricalLatent(in_dim=10, stoch=4, classes=6, hidden=16, layers=1, unimix=0.01)
    logits = head(torch.randn(2, 3, 10) * 100)
    assert logits.shape == (2, 3, 4, 6)
    assert head.dim == 24
    probs = logits.softmax(-1)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 3, 4))
    assert probs.min() >= 0.01 / 6 - 1e-6  # the 1 % uniform floor holds even for extreme inputs
    z = sample_latent(logits, sample=False)
    torch.testing.assert_close(z.detach(), torch.nn.functional.one_hot(logits.argmax(-1), 6).float())


def test_dreamerv3_kl_against_hand_computation() -> None:
    torch.manual_seed(0)
    # Row 0: near-identical distributions (KL below 1 nat: the free bits clip it to 1);
    # row 1: very different ones (KL above 1 nat: counted as is).
    post = torch.randn(2, 3, 4)
    prior = post.clone()
    prior[0] += 0.1 * torch.randn(3, 4)
    prior[1] = torch.randn(3, 4) * 4
    kl = hand_kl(post, prior)
    assert kl[0] < 1.0 < kl[1]
    terms = kl_loss(post, prior, KLSpec())
    expected = [0.5 * max(1.0, k) + 0.1 * max(1.0, k) for k in kl]
    torch.testing.assert_close(terms.loss, torch.tensor(expected), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(terms.dyn, torch.tensor(kl), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(terms.rep, torch.tensor(kl), rtol=1e-5, atol=1e-6)


def grads(spec: KLSpec, post: torch.Tensor, prior: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    post, prior = post.clone().requires_grad_(), prior.clone().requires_grad_()
    kl_loss(post, prior, spec).loss.sum().backward()
    return post.grad, prior.grad


def test_kl_gradients_are_routed_by_stop_gradient() -> None:
    torch.manual_seed(1)
    post, prior = torch.randn(3, 5, 4) * 3, torch.randn(3, 5, 4) * 3
    # The dyn term (weight 0.5) trains only the prior; the rep term only the posterior.
    g_post, g_prior = grads(KLSpec(free=0.0, rep_scale=0.0), post, prior)
    assert g_post.abs().max() == 0 and g_prior.abs().max() > 0
    g_post, g_prior = grads(KLSpec(free=0.0, dyn_scale=0.0), post, prior)
    assert g_prior.abs().max() == 0 and g_post.abs().max() > 0
    # Free bits: a KL below `free` passes no gradient at all.
    assert kl_loss(post, prior, KLSpec()).dyn.max() < 100
    g_post, g_prior = grads(KLSpec(free=100.0), post, prior)
    assert g_post.abs().max() == 0 and g_prior.abs().max() == 0


def test_kl_balancing_is_alpha_times_prior_grad_plus_one_minus_alpha_posterior_grad() -> None:
    torch.manual_seed(2)
    post, prior = torch.randn(3, 5, 4), torch.randn(3, 5, 4)
    spec = KLSpec(free=0.0, balance=0.8)
    assert spec.weights == (0.8, pytest.approx(0.2))
    torch.testing.assert_close(kl_loss(post, prior, spec).loss, torch.tensor(hand_kl(post, prior)))
    g_post, g_prior = grads(spec, post, prior)
    # Reference: the plain KL(q ‖ p) with full gradients.
    q, p = post.clone().requires_grad_(), prior.clone().requires_grad_()
    (q.softmax(-1) * (q.log_softmax(-1) - p.log_softmax(-1))).sum().backward()
    torch.testing.assert_close(g_prior, 0.8 * p.grad)
    torch.testing.assert_close(g_post, 0.2 * q.grad)


def test_kl_spec_forms_are_exclusive_and_round_trip() -> None:
    with pytest.raises(ValidationError, match="balance"):
        KLSpec(balance=0.8, dyn_scale=0.3)
    paper = KLSpec(free=0.0, balance=0.8)
    assert KLSpec.model_validate(paper.model_dump()) == paper
    with pytest.raises(ValidationError):
        KLSpec(balance=1.5)


def test_latent_head_mixes_in_one_percent_uniform_over_its_mlp_logits() -> None:
    # catches: the unimix mixture left out of CategoricalLatent, the MLP's layer count ignored
    torch.manual_seed(0)
    head = CategoricalLatent(in_dim=5, stoch=2, classes=4, hidden=8, layers=2, unimix=0.01)
    assert len(head.mlp.hidden) == 2
    with torch.no_grad():
        head.mlp.out.bias.copy_(torch.tensor([60.0, 0.0, 0.0, -60.0] * 2))  # an almost one-hot raw softmax
    x = torch.randn(3, 5)
    raw = head.mlp(x).reshape(3, 2, 4).softmax(-1)
    torch.testing.assert_close(head(x).softmax(-1), 0.99 * raw + 0.01 / 4)


def test_sample_latent_draws_when_asked_and_passes_straight_through_gradients() -> None:
    # catches: sample_latent returning the mode even when asked for a sample
    torch.manual_seed(0)
    logits = torch.zeros(500, 1, 3, requires_grad=True)  # uniform: the mode is always class 0
    z = sample_latent(logits, sample=True)
    counts = z.detach().sum((0, 1))
    assert (counts > 100).all()  # every class is drawn about 1/3 of the time
    (grad,) = torch.autograd.grad((z * torch.tensor([1.0, 2.0, 3.0])).sum(), logits)
    assert grad.abs().sum() > 0
