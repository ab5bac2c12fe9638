"""wmzoo.testing_wiring, the published wiring checks: each one fails on a model with the bug it
names (a check that cannot fail is a defect), and sharpened heads are sharp."""

from __future__ import annotations

import pytest
import torch

import wmzoo.nn.heads as heads
from wmzoo.nn.distributions import TwoHot, modes, symlog
from wmzoo.nn.mlp import MLP
from wmzoo.registry import build_world_model, world_model_spec
from wmzoo.testing import CHECK_ENV, synthetic_batch
from wmzoo import testing_wiring as wiring


def _rssm():
    torch.manual_seed(0)
    wm = build_world_model("rssm", world_model_spec("rssm", "tiny"), CHECK_ENV).eval()
    wiring.sharpen(wm.heads.cont)
    wiring.sharpen_two_hot(wm.heads.reward)
    return wm


def test_sharpened_heads_are_peaked_and_a_two_hot_mean_is_its_best_target() -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 16)
    head = MLP(16, 255, 32, 1, zero_init=True)
    wiring.sharpen_two_hot(head)
    logits = head(x)
    mean = TwoHot(logits).mean()
    assert symlog(mean).std() > 1.0  # the centre moves with the input
    at_mean = -TwoHot(logits).log_prob(mean)
    assert (at_mean < 3.0).all()  # the loss is small at the head's own prediction ...
    assert (-TwoHot(logits).log_prob(mean.roll(1)) > at_mean + 1.0).float().mean() > 0.8  # ... and not elsewhere
    cont = MLP(16, 1, 32, 1)
    wiring.sharpen(cont)
    p = torch.sigmoid(cont(x))
    assert ((p < 0.01) | (p > 0.99)).float().mean() > 0.9 and 0.1 < (p > 0.5).float().mean() < 0.9


def test_the_imagination_check_fails_on_an_inverted_continue(monkeypatch) -> None:
    wm = _rssm()
    batch = synthetic_batch(CHECK_ENV, 2, 5, torch.device("cpu"), seed=41)
    predict = heads.RewardContinueHeads.predict
    monkeypatch.setattr(wm.heads, "predict", lambda f: (predict(wm.heads, f)[0], 1 - predict(wm.heads, f)[1]))
    with modes(), pytest.raises(AssertionError, match="end flag's meaning differs"):
        wiring.check_imagined_rewards_and_ends(wm, batch, wiring.latent_teacher_forcing(wm, batch, wm.dynamics.prior))


def test_the_mask_check_fails_on_a_loss_that_reads_the_transition_into_a_new_episode(monkeypatch) -> None:
    wm = _rssm()
    batch = synthetic_batch(CHECK_ENV, 2, 6, torch.device("cpu"), seed=42)
    batch.is_first[0, 3] = True
    wiring.check_episode_masks(wm, batch)
    targets = heads.reward_cont_targets
    monkeypatch.setattr(heads, "reward_cont_targets", lambda b: (*targets(b)[:2], torch.ones_like(targets(b)[2])))
    with pytest.raises(AssertionError, match="a mask is missing"):
        wiring.check_episode_masks(wm, batch)
