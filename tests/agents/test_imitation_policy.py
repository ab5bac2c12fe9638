"""The imitation policy ``bc``: eq. 1's −log π(a_t | features_t, c), its mask, its condition, bins."""

from __future__ import annotations

import pytest
import torch

from wmzoo.agents.imitation import ImitationPolicy, ImitationSpec
from wmzoo.errors import WmzooError
from wmzoo.interfaces import EnvInfo
from wmzoo.registry import create_policy

ENV = EnvInfo("test", (3, 16, 16), 5)
VOCAB = ["ball", "go", "key", "the", "to"]


def policy(**fields) -> ImitationPolicy:
    return create_policy("bc", (6,), ENV, overrides={"vocabulary": VOCAB, "max_words": 4, **fields})


def test_the_loss_is_the_nll_of_the_demonstrated_actions_on_acted_rows_only():
    # catches: the episode's last row (no action: acted false) in the average, the action of
    # another row compared with a row's logits, a sign flip of the log-likelihood
    torch.manual_seed(0)
    pi = policy()
    features, condition = torch.randn(2, 3, 6), torch.randint(0, 7, (2, 3, 4))
    action = torch.randint(0, 5, (2, 3))
    acted = torch.tensor([[True, True, False], [True, False, True]])
    loss, metrics = pi.imitation_loss(features, condition, action, acted)
    logp = pi.logits(features, condition)[..., 0, :].log_softmax(-1)
    nll = -logp.gather(-1, action.unsqueeze(-1)).squeeze(-1)
    assert loss.item() == pytest.approx(nll[acted].mean().item(), rel=1e-5)
    changed = action.clone()
    changed[0, 2] = (changed[0, 2] + 1) % 5  # the action of a row without a demonstration
    assert pi.imitation_loss(features, condition, changed, acted)[0].item() == pytest.approx(loss.item())
    assert metrics["bc_nll"] == pytest.approx(loss.item(), rel=1e-5)


def test_detach_decides_whether_the_world_model_gets_the_gradient():
    # catches: `bc` training an RSSM's state (appendix B's "policy cheating"), or a joint policy
    # (tokenwm-bc, detach false) cut from the world model
    for detach, reaches in ((True, False), (False, True)):
        features = torch.randn(2, 3, 6, requires_grad=True)
        loss, _ = policy(detach=detach).imitation_loss(
            features, torch.zeros(2, 3, 4, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long),
            torch.ones(2, 3, dtype=torch.bool))
        loss.backward()
        assert (features.grad is not None) == reaches


def test_it_learns_the_action_of_the_same_row_and_of_the_instruction():
    # catches: the action of row t + 1 (or t - 1) taught at row t, the instruction ignored: the
    # demonstrated action is the feature's one-hot of row t plus the instruction's shift, so only
    # a policy that reads both at the same row reaches full accuracy
    torch.manual_seed(0)
    pi = policy(optim={"lr": 3e-3})
    opt = pi.optimizers()["policy"]
    go, key = torch.tensor([3, 0, 0, 0]), torch.tensor([4, 0, 0, 0])  # the instructions "go" and "key"
    for _ in range(300):
        base = torch.randint(0, 5, (16, 4))
        shift = torch.randint(0, 2, (16, 1)).expand(16, 4)
        features = torch.nn.functional.one_hot(base, 6).float()
        condition = torch.where(shift[..., None].bool(), key, go)
        action = (base + shift) % 5
        loss, metrics = pi.imitation_loss(features, condition, action, torch.ones(16, 4, dtype=torch.bool))
        opt.zero_grad()
        opt.step(loss)
    assert metrics["bc_accuracy"] > 0.95
    act, _ = pi.act(torch.nn.functional.one_hot(torch.tensor([1, 1]), 6).float(),
                    {"condition": torch.stack([go, key])}, sample=False)
    assert act.tolist() == [1, 2]


def test_the_condition_of_an_episode_comes_from_its_mission():
    # catches: the mission read from another info key, unknown words dropped instead of marked
    pi = policy()
    assert pi.condition({"mission": "go to the box"}).tolist() == [[3, 6, 5, 1]]
    assert pi.condition({}).tolist() == [[0, 0, 0, 0]]


def test_continuous_actions_are_binned_between_the_percentiles():
    # catches: a bin index off by one (the top of the range in bin `bins`), bins not scaled per
    # dimension, an action decoded from another dimension's range
    env = EnvInfo("c", (3, 16, 16), 2, discrete=False)
    pi = create_policy("bc", (6,), env, overrides={"bins": 5, "action_low": [-1.0, 0.0], "action_high": [1.0, 10.0]})
    action = torch.tensor([[-1.0, 10.0], [0.5, 6.0], [3.0, -4.0]])
    assert pi.to_bins(action).tolist() == [[0, 4], [3, 2], [4, 0]]
    assert pi.from_bins(pi.to_bins(action)).tolist() == [[-1.0, 10.0], [0.5, 5.0], [1.0, 0.0]]
    out, _ = pi.act(torch.randn(3, 6), {}, sample=False)
    assert out.shape == (3, 2) and (out[:, 1] >= 0).all() and (out[:, 1] <= 10).all()
    with pytest.raises(WmzooError, match="action_low"):
        create_policy("bc", (6,), env)


def test_imagination_fields_are_refused():
    with pytest.raises(WmzooError, match="horizon: an imitation policy never imagines"):
        policy(horizon=20)
    with pytest.raises(WmzooError, match="learns from demonstrations"):
        policy().learn(None)  # type: ignore[arg-type]


def test_spec_defaults_follow_table_2():
    spec = ImitationSpec()
    assert (spec.layers, spec.optim.lr, spec.optim.clip, spec.weight, spec.bins) == (2, 1e-4, 100.0, 1.0, 256)
