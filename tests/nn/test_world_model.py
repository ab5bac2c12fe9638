"""``observe_sequence`` of the latent backbones (RSSM, S4WM, TSSM-XL): the reading behind the
s4wm paper's inference accuracy (section 5.5), in the training form and one row at a time.

Latents take their mode (no sampling noise), and the reward head's zero-initialised output layer
is randomised, so predictions depend on the features.
"""

from __future__ import annotations

import pytest
import torch

from wmzoo.interfaces import Batch, EnvInfo
from wmzoo.nn.distributions import OneHotCategoricalST
from wmzoo.registry import create_world_model

ENV = EnvInfo("test", (3, 32, 32), 3)


@pytest.fixture(autouse=True)
def modes(monkeypatch):
    monkeypatch.setattr(OneHotCategoricalST, "sample", OneHotCategoricalST.mode)


def model(backbone: str, **overrides):
    torch.manual_seed(0)
    wm = create_world_model(backbone, ENV, "tiny", overrides).eval()
    torch.nn.init.normal_(wm.heads.reward.out.weight, std=0.3)
    return wm


def episode(T: int, B: int = 2, seed: int = 1) -> Batch:
    g = torch.Generator().manual_seed(seed)
    is_first = torch.zeros(B, T, dtype=torch.bool)
    is_first[:, 0] = True
    return Batch(obs=torch.randint(0, 256, (B, T, *ENV.obs_shape), dtype=torch.uint8, generator=g),
                 action=torch.randint(0, 3, (B, T), generator=g), reward=torch.zeros(B, T),
                 terminal=torch.zeros(B, T, dtype=torch.bool), is_first=is_first)


def with_frame(batch: Batch, row: int, value: int) -> Batch:
    obs = batch.obs.clone()
    obs[:, row] = value
    return Batch(obs, batch.action, batch.reward, batch.terminal, batch.is_first)


@pytest.mark.parametrize("backbone", ["rssm", "s4wm", "tssm-xl"])
@pytest.mark.parametrize("step", [False, True])
@torch.no_grad()
def test_inference_reads_the_head_on_the_posterior_after_the_ending_frame(backbone, step):
    """Catches: "inference" as a one-step *prior* prediction ``imagine_step(state at t, action[t])``
    that never observes the episode's last frame, while training reads the reward head on the
    posterior features of row ``t + 1`` (``heads.loss`` on ``features[:, 1:]``); the paper's
    inference accuracy takes "the full sequence of observations as input" (s4wm section 5.5)."""
    wm = model(backbone)
    batch = episode(20)
    out = wm.observe_sequence(batch, step=step)
    assert out.rewards.shape == (2, 19)
    # the ending transition's reward is the head on the posterior after the last frame
    torch.testing.assert_close(out.rewards[:, -1], wm.heads.predict(wm.features(out.state))[0])
    # so the last frame moves it, and nothing before it
    other = wm.observe_sequence(with_frame(batch, 19, 255), step=step)
    torch.testing.assert_close(other.rewards[:, :-1], out.rewards[:, :-1])
    assert (other.rewards[:, -1] - out.rewards[:, -1]).abs().max() > 1e-4


@torch.no_grad()
def test_tssm_xl_training_form_attends_past_the_step_forms_cache():
    """Catches: TSSM-XL scored one row at a time only, where each layer sees its ``m``-step cache,
    while it trains on segments in which query ``i`` sees ``m + i`` steps (the evaluation
    context then is not the trained one). One layer, m = 16, segments of 16 over 40 rows: the
    ending transition (read at row 39) sees rows 16..39 in the training form, rows 23..39
    one row at a time; a change of row 17 reaches only the training form."""
    wm = model("tssm-xl", n_layers=1, cache_len=16, seq_len=16)
    batch, changed = episode(40), with_frame(episode(40), 17, 0)
    train, train_changed = (wm.observe_sequence(b).rewards for b in (batch, changed))
    step, step_changed = (wm.observe_sequence(b, step=True).rewards for b in (batch, changed))
    assert (train_changed[:, -1] - train[:, -1]).abs().max() > 1e-4
    torch.testing.assert_close(step_changed[:, -1], step[:, -1])
    # the forms agree while the history fits into the cache (README: "Two faces")
    torch.testing.assert_close(train[:, :16], step[:, :16], atol=1e-4, rtol=1e-4)


@torch.no_grad()
def test_s4wm_training_form_equals_its_recurrence():
    """Catches: S4WM's training-form windows not continuing each other's S4 states (each window
    from zeros), which its recurrence (the step form) would not match."""
    wm = model("s4wm", seq_len=8)
    batch = episode(20)
    torch.testing.assert_close(wm.observe_sequence(batch).rewards, wm.observe_sequence(batch, step=True).rewards,
                               atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("backbone", ["rssm", "s4wm", "tssm-xl"])
def test_the_objective_weights_each_term_by_its_own_scale(backbone):
    """``model = recon_scale·recon + reward_scale·reward + cont_scale·cont + kl_loss`` (DreamerV3
    eq. 4), with three different scales. Catches one term weighted by another's scale (with the
    defaults all 1 a swapped ``cont_scale``/``reward_scale`` changes nothing) or a term dropped."""
    wm = model(backbone, recon_scale=2.0, reward_scale=3.0, cont_scale=5.0).train()
    batch = episode(6)
    batch = Batch(batch.obs, batch.action, torch.rand(2, 6, generator=torch.Generator().manual_seed(2)),
                  batch.terminal, batch.is_first)
    m = wm.loss(batch).metrics
    assert min(m["recon"], m["reward"], m["cont"], m["kl_loss"]) > 0
    assert m["model"] == pytest.approx(2 * m["recon"] + 3 * m["reward"] + 5 * m["cont"] + m["kl_loss"], rel=1e-5)


@torch.no_grad()
def test_imagine_step_reads_the_heads_on_the_new_prior_features():
    # catches: the imagined reward and continue read from the state before the step (one step late)
    wm = model("rssm")
    torch.nn.init.normal_(wm.heads.cont.out.weight, std=0.3)
    state = wm.observe_step(wm.initial_state(2), episode(1).obs[:, 0], torch.zeros(2, dtype=torch.long),
                            torch.ones(2, dtype=torch.bool))
    step = wm.imagine_step(state, torch.tensor([1, 2]))
    reward, cont = wm.heads.predict(wm.features(step.state))
    torch.testing.assert_close(step.features, wm.features(step.state))
    torch.testing.assert_close(step.reward, reward)
    torch.testing.assert_close(step.cont, cont)
    assert (reward - wm.heads.predict(wm.features(state))[0]).abs().max() > 1e-4


@torch.no_grad()
def test_latent_objective_reduces_kl_over_the_mask_and_names_its_metrics():
    # catches: kl_mask ignored (every step's KL counted), the "kl" metric showing the rep term,
    # post_entropy computed from the prior logits
    from wmzoo.interfaces import Batch
    from wmzoo.nn.latent import kl_loss
    from wmzoo.nn.world_model import latent_objective

    wm = model("rssm")
    spec = wm.spec.model_copy(update={"kl": wm.spec.kl.model_copy(update={"free": 0.0, "dyn_scale": 0.5, "rep_scale": 0.1})})
    g = torch.Generator().manual_seed(3)
    batch = episode(4)
    feat = torch.randn(2, 4, wm.feature_shape[0], generator=g)
    post = torch.randn(2, 4, 3, 5, generator=g) * 2
    prior = torch.randn(2, 4, 3, 5, generator=g)
    mask = torch.tensor([[False, True, True, True], [False, False, True, True]])
    _, m = latent_objective(spec, wm.decoder, wm.heads, feat, post, prior, batch, mask)
    terms = kl_loss(post, prior, spec.kl)
    assert m["kl_loss"] == pytest.approx(terms.loss[mask].mean().item(), rel=1e-5)
    assert m["kl"] == pytest.approx(terms.dyn[mask].mean().item(), rel=1e-5)
    assert m["kl_rep"] == pytest.approx(terms.rep[mask].mean().item(), rel=1e-5)
    assert m["kl_loss"] != pytest.approx(terms.loss.mean().item(), rel=1e-3)
    entropy = lambda logits: -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1).sum(-1).mean().item()  # noqa: E731
    assert m["post_entropy"] == pytest.approx(entropy(post), rel=1e-5)
    assert m["prior_entropy"] == pytest.approx(entropy(prior), rel=1e-5)
