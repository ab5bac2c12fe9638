"""Wiring of the latent-state backbones (RSSM, S4WM, TSSM-XL: a ``deter`` and a one-hot ``stoch``
on wmzoo.nn.LatentWorldModel) through the generic engine (wmzoo.testing_wiring), on sharpened
heads: teacher-forced imagination (each prior's ``stoch`` the posterior's) predicts the
features, rewards and continues the loss trains, and no loss term reads a transition into a new
episode. One test for the three: their heads, imagine_step and targets are shared code."""

from __future__ import annotations

import pytest
import torch

from wmzoo.nn import modes
from wmzoo.registry import build_world_model, world_model_spec
from wmzoo.testing import CHECK_ENV, synthetic_batch
from wmzoo.testing_wiring import (
    check_episode_masks,
    check_imagined_rewards_and_ends,
    latent_teacher_forcing,
    sharpen,
    sharpen_two_hot,
)

LATENT = ["rssm", "s4wm", "tssm-xl"]


def _sharp(name: str):
    torch.manual_seed(0)
    wm = build_world_model(name, world_model_spec(name, "tiny"), CHECK_ENV).eval()
    sharpen(wm.heads.cont)
    sharpen_two_hot(wm.heads.reward)
    return wm


def _prior(wm):
    """The module whose logits the imagined ``stoch`` is drawn from."""
    return getattr(wm, "dynamics", wm).prior


@pytest.mark.parametrize("name", LATENT)
def test_imagined_features_rewards_and_continues_are_what_the_loss_trains(name: str) -> None:
    # Catches: the continue probability inverted (RewardContinueHeads.predict or imagine_step),
    # the reward or continue read from the state before the action in imagine_step, the loss's
    # heads reading features[:, :-1] or targets a step off, a prior whose deter differs from the
    # training forward's (an action read a step late).
    wm = _sharp(name)
    batch = synthetic_batch(CHECK_ENV, 2, 5, torch.device("cpu"), seed=41)
    with modes():
        check_imagined_rewards_and_ends(wm, batch, latent_teacher_forcing(wm, batch, _prior(wm)))


@pytest.mark.parametrize("name", LATENT)
def test_no_loss_term_reads_a_transition_into_a_new_episode(name: str) -> None:
    # Catches: the reward or continue mask removed (reward_cont_targets, RewardContinueHeads.loss),
    # the previous action not zeroed at an episode start.
    wm = _sharp(name)
    batch = synthetic_batch(CHECK_ENV, 2, 6, torch.device("cpu"), seed=42)
    batch.is_first[0, 3] = batch.is_first[1, 2] = True
    with modes():
        check_episode_masks(wm, batch)
