"""TokenWM wiring through the generic engine (wmzoo.testing_wiring), on sharpened heads: the
rewards, continues and states teacher-forced imagination predicts are the ones the loss trains,
and no loss term reads a transition into a new episode."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from wmzoo.testing_wiring import (
    check_episode_masks,
    check_imagined_rewards_and_ends,
    sharpen,
    sharpen_two_hot,
)

from .test_model import _batch, _model


def _sharp(**overrides):
    wm = _model(**overrides)
    sharpen(wm.heads.cont)
    sharpen_two_hot(wm.heads.reward)
    return wm


def _forcing(wm, batch, monkeypatch):
    """Each imagined prior h^p_{t+1} corrected by the recorded frame: h^q = f^q(h^p, z_{t+1})."""
    z = wm.encoder(batch.obs).detach()

    @contextmanager
    def forcing():
        step = iter(range(1, batch.shape[1]))
        prior = wm.prior
        with monkeypatch.context() as m:
            m.setattr(wm, "prior", lambda hstar, action: wm.posterior(prior(hstar, action), z[:, next(step)]))
            yield

    return forcing


@pytest.mark.parametrize("memory", [0, 2])
def test_imagined_rewards_continues_and_states_are_what_the_loss_trains(memory: int, monkeypatch) -> None:
    # Catches: the continue probability inverted (RewardContinueHeads.predict), the reward and
    # continue read from h* before the action (the state imagine_step starts from) or in the loss
    # from features[:, :-1], the heads read from h instead of h* on one side.
    wm = _sharp(memory=memory)
    batch = _batch(2, 5, seed=21)
    # observed=False: its filtering starts from a shorter context than a training window, by design
    check_imagined_rewards_and_ends(wm, batch, _forcing(wm, batch, monkeypatch), observed=False)


def test_no_loss_term_reads_a_transition_into_a_new_episode() -> None:
    # Catches: the reward/continue mask removed (reward_cont_targets), and the prior at an
    # episode start inside a window reading the previous episode's last action (the training
    # rollout must zero it, as observe_step is given zeros and RSSM, S4WM and TSSM-XL do).
    wm = _sharp()
    batch = _batch(2, 6, seed=22, boundary=3)
    batch.is_first[1, 2] = True
    check_episode_masks(wm, batch)
