"""wmzoo.testing_wiring, the published wiring checks: each one fails on a model with the bug it
names (a check that cannot fail is a defect), and sharpened heads are sharp."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import wmzoo.nn.heads as heads
from wmzoo.interfaces import Batch, EnvInfo, Filtered, State, Step, TrainOutput, WorldModel, filter_rows
from wmzoo.nn.distributions import TwoHot, gaussian_sample, modes, symlog
from wmzoo.nn.heads import RewardContinueHeads, encode_action
from wmzoo.nn.world_model import posterior_rewards
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


class GaussianWM(WorldModel):
    """A minimal world model with a Gaussian latent: ``h_t = GRU(h_{t-1}, [z_{t-1}, a_{t-1}])``,
    posterior ``q(z_t | h_t, x_t)``, prior ``p(z_t | h_t)``, both drawn with ``gaussian_sample``,
    heads on ``[h_t, z_t]``. ``bug``: ``"reward_before_action"`` (imagination reads the reward
    from the state before the action), ``"target_late"`` (the loss trains the reward head at
    ``t + 1`` on ``reward[t + 1]``, a step late) or ``"default_observe_sequence"`` (not overriding
    ``observe_sequence``, whose default reads the prior's reward where the loss reads the
    posterior's: CONTRIBUTING's warning)."""

    def __init__(self, env: EnvInfo, bug: str = "") -> None:
        super().__init__()
        self.env, self.spec, self.bug = env, None, bug
        self.deter, self.latent = 16, 4
        self.embed = nn.Linear(3 * 32 * 32, 16)
        self.gru = nn.GRUCell(self.latent + env.num_actions, self.deter)
        self.prior = nn.Linear(self.deter, 2 * self.latent)
        self.post = nn.Linear(self.deter + 16, 2 * self.latent)
        self.feature_shape = (self.deter + self.latent,)
        self.heads = RewardContinueHeads(self.deter + self.latent, 16, 1)

    def _gauss(self, out: Tensor) -> Tensor:
        mean, std = out.chunk(2, -1)
        return gaussian_sample(mean, F.softplus(std) + 0.1)

    def components(self):
        return {"model": (list(self.parameters()), None)}

    def initial_state(self, batch_size: int) -> State:
        return {"h": torch.zeros(batch_size, self.deter), "z": torch.zeros(batch_size, self.latent)}

    def features(self, state: State) -> Tensor:
        return torch.cat([state["h"], state["z"]], -1)

    def decode(self, state: State) -> Tensor:
        raise NotImplementedError

    def observe_step(self, state, obs, prev_action, is_first) -> State:
        keep = (~is_first).float().unsqueeze(-1)
        h = self.gru(torch.cat([state["z"] * keep, encode_action(prev_action, self.env) * keep], -1), state["h"] * keep)
        e = self.embed(obs.flatten(1).float() / 255)
        return {"h": h, "z": self._gauss(self.post(torch.cat([h, e], -1)))}

    def imagine_step(self, state: State, action: Tensor) -> Step:
        h = self.gru(torch.cat([state["z"], encode_action(action, self.env)], -1), state["h"])
        new = {"h": h, "z": self._gauss(self.prior(h))}
        reward, cont = self.heads.predict(self.features(new))
        if self.bug == "reward_before_action":
            reward = self.heads.predict(self.features(state))[0]
        return Step(new, reward, cont, self.features(new))

    def observe_sequence(self, batch: Batch, state: State | None = None, *, step: bool = False) -> Filtered:
        if self.bug == "default_observe_sequence":
            return super().observe_sequence(batch, state, step=step)
        return posterior_rewards(self, self.heads, batch, state, None)

    def loss(self, batch: Batch, carry: State | None = None) -> TrainOutput:
        feat = torch.stack([self.features(s) for s in filter_rows(self, batch)], 1)
        if self.bug == "target_late":
            batch = Batch(batch.obs, batch.action, torch.cat([batch.reward[:, 1:], batch.reward[:, -1:]], 1),
                          batch.terminal, batch.is_first)
        reward, cont, _ = self.heads.loss(feat, batch)
        return TrainOutput(losses={"model": reward + cont}, metrics={}, features=feat)


def _gaussian(bug: str = "") -> GaussianWM:
    torch.manual_seed(0)
    wm = GaussianWM(CHECK_ENV, bug).eval()
    wiring.sharpen(wm.heads.cont)
    wiring.sharpen_two_hot(wm.heads.reward)
    return wm


def test_gaussian_teacher_forcing_passes_a_gaussian_latent_read_where_the_loss_reads_it() -> None:
    wm = _gaussian()
    batch = synthetic_batch(CHECK_ENV, 2, 6, torch.device("cpu"), seed=43)
    with modes():
        traj = wiring.check_imagined_rewards_and_ends(wm, batch, wiring.gaussian_teacher_forcing(wm, batch))
        trained = wm.loss(batch).features
    # every imagined step took the posterior latent after the recorded row it replays
    torch.testing.assert_close(traj.features[1:].transpose(0, 1), trained[:, 1:])
    # without the forcing imagination takes the prior's own mean, and the check sees the mismatch
    with modes(), pytest.raises(AssertionError, match="differ"):
        wiring.check_imagined_rewards_and_ends(wm, batch, contextlib.nullcontext)


@pytest.mark.parametrize("bug", ["reward_before_action", "target_late"])
def test_gaussian_teacher_forcing_catches_a_reward_read_a_step_off(bug: str) -> None:
    wm = _gaussian(bug)
    batch = synthetic_batch(CHECK_ENV, 2, 6, torch.device("cpu"), seed=43)
    with modes(), pytest.raises(AssertionError, match="the imagined reward belongs to another step"):
        wiring.check_imagined_rewards_and_ends(wm, batch, wiring.gaussian_teacher_forcing(wm, batch))


def test_the_imagination_check_catches_observe_sequence_reading_another_state_than_the_loss() -> None:
    # Catches: a plugin with a posterior reward head that keeps observe_sequence's default (the
    # memory metrics' inference accuracy then scores the prior's reward, not the trained one)
    wm = _gaussian("default_observe_sequence")
    batch = synthetic_batch(CHECK_ENV, 2, 6, torch.device("cpu"), seed=43)
    with modes(), pytest.raises(AssertionError, match=r"observe_sequence\(step=False\)'s rewards are not the ones"):
        wiring.check_imagined_rewards_and_ends(wm, batch, wiring.gaussian_teacher_forcing(wm, batch))
    with modes():  # not asked: the rest of the check passes
        wiring.check_imagined_rewards_and_ends(wm, batch, wiring.gaussian_teacher_forcing(wm, batch), observed=False)


def test_gaussian_teacher_forcing_refuses_a_draw_that_is_not_the_latent() -> None:
    wm = _gaussian()
    batch = synthetic_batch(CHECK_ENV, 2, 6, torch.device("cpu"), seed=43)
    with modes(), pytest.raises(AssertionError, match=r"is not state\['h'\]"):
        wiring.check_imagined_rewards_and_ends(wm, batch, wiring.gaussian_teacher_forcing(wm, batch, key="h"))
