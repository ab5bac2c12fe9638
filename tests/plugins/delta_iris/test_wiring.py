"""Δ-IRIS wiring through the generic engine (wmzoo.testing_wiring), on sharpened heads: the
rewards and ends teacher-forced imagination predicts are the ones the loss trains, and no loss
term reads a transition into a new episode."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

import wmzoo.nn.heads as heads
from wmzoo.testing_wiring import check_episode_masks, check_imagined_rewards_and_ends, sharpen, sharpen_two_hot

from .test_model import _batch, _model


def _sharp(i_tokens: bool = True, **kw):
    wm = _model(i_tokens=i_tokens, max_blocks=8, **kw)
    sharpen(wm.head_latents, wm.head_end)
    (sharpen_two_hot if isinstance(wm.head_reward, heads.TwoHotRewardHead) else sharpen)(wm.head_reward)
    return wm


def _forcing(wm, batch, monkeypatch):
    """imagine_step's K calls fed the recorded Δ-tokens of each transition (``_predict``'s teacher
    forcing); the sampled end (and sign reward) takes the mode."""
    tokens = wm.encode_transitions(batch)

    @contextmanager
    def forcing():
        step = iter(range(tokens.shape[1]))
        original = wm._predict
        with monkeypatch.context() as m:
            m.setattr(wm, "_predict", lambda state, action: original(state, action, tokens[:, next(step)]))
            m.setattr(heads, "sample_class", lambda logits: logits.argmax(-1))
            yield

    return forcing


@pytest.mark.parametrize("i_tokens,reward", [(True, "two-hot"), (False, "sign")])
def test_imagined_rewards_and_ends_are_what_the_loss_trains(i_tokens: bool, reward: str, monkeypatch) -> None:
    # Catches: the imagined end flag inverted (EndHead.sample / imagine_step), the reward or end
    # read from the output before a_t (e(x_t), the pending z^K) in imagination or in the loss,
    # the loss's reward/end targets one step off.
    wm = _sharp(i_tokens, reward=reward)
    batch = _batch(2, 5, seed=11)
    # observed=False: its filtering starts from a shorter context than a training window, by design
    check_imagined_rewards_and_ends(wm, batch, _forcing(wm, batch, monkeypatch), observed=False)


def test_no_loss_term_reads_a_transition_into_a_new_episode() -> None:
    # Catches: the episode mask removed from the Δ-token, reward or end loss, or from the
    # tokenizer's loss (valid), on a batch with an episode start inside a row.
    wm = _sharp()
    check_episode_masks(wm, _batch(2, 6, seed=12, boundary=3))
