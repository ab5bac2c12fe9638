"""Reward/continue targets under wmzoo's alignment, and the shared heads."""

from __future__ import annotations

import pytest
import torch

from wmzoo.interfaces import Batch
from wmzoo.nn.heads import RewardContinueHeads, encode_action, reward_cont_targets, start_conts
from wmzoo.interfaces import EnvInfo


def make_batch(B: int, T: int) -> Batch:
    g = torch.Generator().manual_seed(0)
    return Batch(
        obs=torch.zeros(B, T, 3, 8, 8, dtype=torch.uint8),
        action=torch.randint(0, 4, (B, T), generator=g),
        reward=torch.randn(B, T, generator=g),
        terminal=torch.zeros(B, T, dtype=torch.bool),
        is_first=torch.zeros(B, T, dtype=torch.bool),
    )


def test_reward_and_cont_targets_are_shifted_by_one() -> None:
    batch = make_batch(2, 6)
    batch.reward.zero_()
    batch.reward[0, 2] = 1.0  # action[0, 2] earns it: predicted on arriving in step 3
    batch.terminal[1, 3] = True  # action[1, 3] ends the episode: obs[1, 4] is terminal
    batch.is_first[1, 5] = True  # a new episode starts at row 5
    reward, cont, mask = reward_cont_targets(batch)
    assert reward.shape == cont.shape == mask.shape == (2, 5)
    # target index j is read at features index j + 1
    assert reward[0].tolist() == [0, 0, 1, 0, 0]
    assert cont[1].tolist() == [1, 1, 1, 0, 1]
    assert mask[0].all() and mask[1].tolist() == [True, True, True, True, False]
    assert start_conts(batch)[1].tolist() == [1, 1, 1, 1, 0, 1]
    assert start_conts(batch)[0].tolist() == [1] * 6
    # A terminal row right before an is_first row is not a terminal observation.
    batch.terminal[1, 4] = True
    assert start_conts(batch)[1, 5] == 1


def test_heads_start_at_zero_reward_and_mask_crossings() -> None:
    heads = RewardContinueHeads(features=6, hidden=8, layers=1)
    feat = torch.randn(2, 5, 6)
    reward, cont = heads.predict(feat)
    torch.testing.assert_close(reward, torch.zeros(2, 5), atol=1e-6, rtol=0)  # zero-initialised output
    assert ((cont > 0) & (cont < 1)).all()
    batch = make_batch(2, 5)
    batch.is_first[:, 1:] = True  # every transition crosses an episode boundary
    r, c, _ = heads.loss(feat, batch)
    assert r.item() == 0.0 and c.item() == 0.0  # all targets masked


def test_encode_action() -> None:
    env = EnvInfo("e", (3, 8, 8), 4)
    assert encode_action(torch.tensor([2]), env).tolist() == [[0.0, 0.0, 1.0, 0.0]]
    cont = EnvInfo("c", (3, 8, 8), 2, discrete=False)
    assert encode_action(torch.tensor([[0.5, -1.0]]), cont).tolist() == [[0.5, -1.0]]


def test_token_heads_classes_and_losses() -> None:
    # Catches: the sign classes out of order (class 0 must be −1), the end class inverted
    # (class 1 is an end), the mask ignored, the expectation's sign flipped.
    import torch.nn.functional as F

    from wmzoo.nn.heads import EndHead, SignRewardHead

    torch.manual_seed(0)
    reward_head, end_head = SignRewardHead(4), EndHead(4)
    x = torch.randn(2, 3, 4)
    reward = torch.tensor([[-2.0, 0.0, 0.5], [1.0, -0.1, 0.0]])
    terminal = torch.tensor([[False, True, False], [False, False, True]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    logits = reward_head(x)
    ce = F.cross_entropy(logits.reshape(6, 3), torch.tensor([0, 1, 2, 2, 0, 1]), reduction="none").view(2, 3)
    assert reward_head.loss(x, reward, mask).item() == pytest.approx(ce[mask].mean().item(), rel=1e-6)
    end_ce = F.cross_entropy(end_head(x).reshape(6, 2), terminal.long().flatten(), reduction="none").view(2, 3)
    assert end_head.loss(x, terminal, mask).item() == pytest.approx(end_ce[mask].mean().item(), rel=1e-6)
    with torch.no_grad():
        reward_head[-1].weight.zero_()
        reward_head[-1].bias.copy_(torch.tensor([0.0, 0.0, 9.0]))  # class 2: +1
        end_head[-1].weight.zero_()
        end_head[-1].bias.copy_(torch.tensor([0.0, 9.0]))  # class 1: an end
    assert (reward_head.expected(x) > 0.99).all() and (reward_head.sample(x) == 1).all()
    assert (end_head.continue_probability(x) < 0.01).all() and (end_head.sample(x) == 0).all()


def test_heads_loss_and_metrics_read_features_one_step_later_by_hand() -> None:
    # catches: the reward or continue head read at features[:, :-1] (targets one step late), the
    # continue accuracy's threshold flipped, the reward error not taken absolute
    import torch.nn.functional as F

    from wmzoo.nn.distributions import TwoHot

    torch.manual_seed(0)
    heads = RewardContinueHeads(features=6, hidden=8, layers=1)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape))
    feat = torch.randn(2, 5, 6)
    batch = make_batch(2, 5)
    batch.terminal[0, 1] = batch.terminal[1, 2] = True
    batch.is_first[1, 4] = True
    reward_t, cont_t, mask = reward_cont_targets(batch)
    dist = TwoHot(heads.reward(feat[:, 1:]))
    logit = heads.cont(feat[:, 1:]).squeeze(-1)
    r, c, metrics = heads.loss(feat, batch)
    torch.testing.assert_close(r, (-dist.log_prob(reward_t))[mask].mean())
    torch.testing.assert_close(c, F.binary_cross_entropy_with_logits(logit, cont_t, reduction="none")[mask].mean())
    torch.testing.assert_close(metrics["reward_mae"], (dist.mean() - reward_t).abs()[mask].mean())
    torch.testing.assert_close(metrics["cont_acc"], ((logit > 0).float() == cont_t).float()[mask].mean())
    assert 0 < metrics["cont_acc"] < 1  # a threshold flipped would give 1 − accuracy


def test_two_hot_reward_head_loss_is_the_masked_negative_log_likelihood() -> None:
    # catches: the two-hot reward loss's sign flipped (it would push the likelihood down)
    from wmzoo.nn.distributions import TwoHot
    from wmzoo.nn.heads import TwoHotRewardHead

    torch.manual_seed(0)
    head = TwoHotRewardHead(4, bins=15)
    x = torch.randn(2, 3, 4)
    reward = torch.tensor([[0.5, -2.0, 0.0], [3.0, 0.1, -0.4]])
    mask = torch.tensor([[True, False, True], [True, True, True]])
    nll = -TwoHot(head(x)).log_prob(reward)
    loss = head.loss(x, reward, mask)
    assert loss.item() > 0
    torch.testing.assert_close(loss, nll[mask].mean())
    torch.testing.assert_close(head.sample(x), TwoHot(head(x)).mean())
