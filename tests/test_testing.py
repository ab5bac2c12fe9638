"""The published checks of ``wmzoo.testing`` catch what they promise: each is run on a model with
the bug it names put in, and must fail, and on the correct model, and must pass."""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
import torch
from torch import Tensor, nn

import wmzoo.testing
from wmzoo.interfaces import Batch, EnvInfo
from wmzoo.nn import gaussian_sample, modes
from wmzoo.nn.heads import sample_class
from wmzoo.registry import build_world_model, list_backbones, world_model_spec
from wmzoo.testing import CHECK_ENV, check_parallel_equals_recurrent, check_stochastic_features, synthetic_batch


def _tiny(name: str) -> nn.Module:
    torch.manual_seed(0)
    return build_world_model(name, world_model_spec(name, "tiny"), CHECK_ENV)


@pytest.mark.parametrize("name", list_backbones())
def test_every_backbone_training_form_equals_its_recurrent_form(name: str) -> None:
    """Bundled and installed backbones alike: observe() = observe_step() row by row and the two
    forms of observe_sequence() predict the same rewards, with an episode start inside the window."""
    check_parallel_equals_recurrent(_tiny(name))


def _shift_actions(batch: Batch) -> Batch:
    """The parallel form reads action[t] where the recurrent form reads action[t − 1]."""
    return dataclasses.replace(batch, action=torch.roll(batch.action, 1, 1))


def _drop_resets(batch: Batch) -> Batch:
    """The parallel form misses every episode start after column 0."""
    is_first = torch.zeros_like(batch.is_first)
    is_first[:, 0] = batch.is_first[:, 0]
    return dataclasses.replace(batch, is_first=is_first)


@pytest.mark.parametrize("name", ["s4wm", "rssm"])
@pytest.mark.parametrize("bug", [_shift_actions, _drop_resets], ids=["action-shifted", "reset-missed"])
def test_parallel_check_fails_for_a_parallel_form_with_a_wiring_bug(name: str, bug) -> None:
    wm = _tiny(name)
    observe = wm.observe
    wm.observe = lambda batch, state=None: observe(bug(batch), state)  # type: ignore[method-assign]
    with pytest.raises(AssertionError, match="observe_step"):
        check_parallel_equals_recurrent(wm)


def test_parallel_check_needs_modes_for_a_stochastic_model(monkeypatch) -> None:
    """Without modes() a sampling model's two forms draw different latents: the check would fail
    for a correct RSSM (so modes() is what makes it usable, and it is in force)."""
    monkeypatch.setattr(wmzoo.testing, "modes", contextlib.nullcontext)
    # the check says why (a draw outside wmzoo.nn's samplers), not only that the forms differ
    with pytest.raises(AssertionError, match="when run twice inside wmzoo.nn.modes.*drawn outside wmzoo.nn"):
        check_parallel_equals_recurrent(_tiny("rssm"))


def test_modes_makes_every_shared_draw_its_mode_and_restores_sampling() -> None:
    logits = torch.tensor([[0.0, 3.0, 1.0]]).expand(200, 3)
    mean, std = torch.zeros(200, 4), torch.ones(200, 4)
    with modes():
        assert (sample_class(logits) == 1).all()
        assert torch.equal(gaussian_sample(mean, std), mean)
        from wmzoo.nn import OneHotCategoricalST
        assert (OneHotCategoricalST(logits).sample().argmax(-1) == 1).all()
    torch.manual_seed(0)
    assert (sample_class(logits) != 1).any()
    assert not torch.equal(gaussian_sample(mean, std), mean)


class GaussianLatentModel(nn.Module):
    """A minimal world model with a Gaussian latent ``z`` beside ``deter``; ``bug`` names one way
    to drop it."""

    def __init__(self, bug: str | None = None) -> None:
        super().__init__()
        self.bug = bug
        self.decoder = nn.Linear(8 + 6, 12)

    def features(self, state: dict[str, Tensor]) -> Tensor:
        z = state["z"]
        if self.bug == "detached":
            z = z.detach()
        elif self.bug == "half-dropped":
            z = torch.cat([z[:, :3], torch.zeros_like(z[:, 3:])], -1)
        elif self.bug == "mean-instead":
            z = state["mean"]
        return torch.cat([state["deter"], z], -1)


def _gaussian_state() -> dict[str, Tensor]:
    mean = torch.randn(4, 6)
    return {"deter": torch.randn(4, 8), "mean": mean, "z": gaussian_sample(mean, torch.ones(4, 6))}


def test_stochastic_features_check_passes_a_gaussian_latent_that_is_read() -> None:
    check_stochastic_features(GaussianLatentModel(), _gaussian_state(), key="z")


@pytest.mark.parametrize("bug", ["detached", "half-dropped", "mean-instead"])
def test_stochastic_features_check_catches_a_dropped_gaussian_latent(bug: str) -> None:
    with pytest.raises(AssertionError):
        check_stochastic_features(GaussianLatentModel(bug), _gaussian_state(), key="z")


def test_stochastic_features_check_catches_a_decoder_that_reads_the_deterministic_part_only() -> None:
    model = GaussianLatentModel()
    with torch.no_grad():
        model.decoder.weight[:, 8:] = 0
    with pytest.raises(AssertionError, match="decoder does not read"):
        check_stochastic_features(model, _gaussian_state(), key="z")


def test_synthetic_batch_puts_episode_starts_where_asked() -> None:
    batch = synthetic_batch(CHECK_ENV, 2, 9, torch.device("cpu"), firsts=(0, 5))
    assert batch.is_first.nonzero()[:, 1].tolist() == [0, 5, 0, 5]


def test_contributing_lists_every_published_check() -> None:
    """Catches a check added to wmzoo.testing that plugin authors are never told about."""
    import inspect
    from pathlib import Path

    text = (Path(__file__).parents[1] / "CONTRIBUTING.md").read_text()
    published = [
        name for name, fn in vars(wmzoo.testing).items()
        if inspect.isfunction(fn) and fn.__module__ == "wmzoo.testing" and not name.startswith("_")
    ]
    missing = [name for name in published if f"`{name}" not in text and f"/ `{name}" not in text]
    assert "check_parallel_equals_recurrent" in published and not missing, missing


def test_check_backbone_checks_the_dict_and_vector_paths_of_a_backbone_that_observes_any(monkeypatch) -> None:
    # Catches: an observations="any" backbone checked on pixels only (its vector encoder and
    # decoder never built), an image-only backbone built for a spec it refuses, or an explicit
    # env= ignored or joined by the defaults.
    checked: list[tuple[str, str]] = []
    monkeypatch.setattr(wmzoo.testing, "check_world_model", lambda wm, env: checked.append((type(wm).__name__, env.name)))
    wmzoo.testing.check_backbone("rssm")  # observations="any"
    assert [env for _, env in checked] == ["check-32x32", "check-dict-32x32"]
    checked.clear()
    wmzoo.testing.check_backbone("iris")  # observations="image"
    assert [env for _, env in checked] == ["check-32x32"]
    checked.clear()
    continuous = EnvInfo("check-c", (3, 32, 32), 2, discrete=False)
    wmzoo.testing.check_backbone("rssm", env=continuous)
    assert [env for _, env in checked] == ["check-c"]
    assert wmzoo.testing.CHECK_DICT_ENV.obs_spec["state"].kind == "vector" and not wmzoo.testing.CHECK_DICT_ENV.pixel

