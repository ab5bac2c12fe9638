"""REM wiring through the generic engine (wmzoo.testing_wiring), on sharpened heads: the rewards
and ends teacher-forced imagination predicts are the ones the loss trains, and no loss term reads
a transition into a new episode."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from wmzoo.testing_wiring import check_episode_masks, check_imagined_rewards_and_ends, sharpen

from .test_model import _batch, _model


def _sharp(**overrides):
    wm = _model(3, **overrides)
    sharpen(wm.obs_head, wm.reward_head, wm.end_head)
    return wm


def _forcing(wm, batch, monkeypatch):
    """POP's sampler returns the recorded tokens of each next frame."""
    tokens = wm.tokenizer.encode(batch.obs)  # [B, T, K]

    class Recorded:
        step = iter(range(1, batch.shape[1]))

        def __init__(self, logits: torch.Tensor) -> None:
            pass

        def sample(self) -> torch.Tensor:
            return tokens[:, next(self.step)]

    @contextmanager
    def forcing():
        with monkeypatch.context() as m:
            m.setattr(torch.distributions, "Categorical", Recorded)
            yield

    return forcing


@pytest.mark.parametrize("reward_loss", ["sign", "mse"])
def test_imagined_rewards_and_ends_are_what_the_loss_trains(reward_loss: str, monkeypatch) -> None:
    # Catches: the imagined continue inverted (EndHead.continue_probability), the reward or end
    # read before the block (z_t, a_t) is absorbed or one block late, in imagination or in the
    # loss, the expected sign written the other way round.
    wm = _sharp(reward_loss=reward_loss)
    batch = _batch(33, 2, 6, False)
    batch.is_first[:, 0] = True
    # observed=False: its filtering starts from a shorter context than a training window, by design
    check_imagined_rewards_and_ends(wm, batch, _forcing(wm, batch, monkeypatch), observed=False)


def test_no_loss_term_reads_a_transition_into_a_new_episode() -> None:
    # Catches: the mask removed from the next-frame (POP), the reward or the end loss.
    wm = _sharp()
    batch = _batch(34, 2, 7, False)
    batch.is_first[:, 0] = batch.is_first[0, 4] = batch.is_first[1, 3] = True
    check_episode_masks(wm, batch)
