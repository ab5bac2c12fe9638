"""IRIS wiring through the generic engine (wmzoo.testing_wiring), on sharpened heads: the
rewards and ends teacher-forced imagination predicts are the ones the loss trains, and no loss
term reads a transition into a new episode."""

from __future__ import annotations

from contextlib import contextmanager

import torch

import wmzoo.nn.heads as heads
import wmzoo_plugins.iris.model as iris_model
from wmzoo.bench.harness import synthetic_batch
from wmzoo.testing_wiring import check_episode_masks, check_imagined_rewards_and_ends, sharpen

from .test_model import ENV, _model


def _sharp():
    wm = _model(side=2, max_blocks=6, seed=3)
    sharpen(wm.head_obs, wm.head_reward, wm.head_end)
    return wm


def _batch(B: int, T: int, seed: int):
    torch.manual_seed(seed)
    return synthetic_batch(ENV, B, T, torch.device("cpu"))


def _forcing(wm, batch, monkeypatch):
    """The token sampler returns the recorded tokens of each next frame, in order; the sampled
    reward sign and end take the mode."""
    tokens = wm.tokenizer.encode(batch.obs)  # [B, T, K]

    @contextmanager
    def forcing():
        recorded = iter(tokens[:, 1:].flatten(1).unbind(1))
        with monkeypatch.context() as m:
            m.setattr(iris_model, "sample_class", lambda logits: next(recorded))
            m.setattr(heads, "sample_class", lambda logits: logits.argmax(-1))
            yield

    return forcing


def test_imagined_rewards_and_ends_are_what_the_loss_trains(monkeypatch) -> None:
    # Catches: the imagined end flag inverted, the reward or end read before the action is fed
    # (at the frame's last token) in imagination or in the loss, the loss's targets a step off.
    wm = _sharp()
    batch = _batch(3, 5, seed=31)
    # observed=False: its filtering starts from a shorter context than a training window, by design
    check_imagined_rewards_and_ends(wm, batch, _forcing(wm, batch, monkeypatch), observed=False)


def test_no_loss_term_reads_a_transition_into_a_new_episode() -> None:
    # Catches: the mask removed from the next-frame (across) term, the reward or the end loss.
    wm = _sharp()
    batch = _batch(2, 6, seed=32)
    batch.is_first[0, 3] = batch.is_first[1, 2] = True
    check_episode_masks(wm, batch)
