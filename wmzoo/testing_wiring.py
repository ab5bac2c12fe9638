"""Wiring checks for backbone authors: which output a head reads, which step a reward belongs to,
what an end flag means, which transitions a loss leaves out. Shape checks and a loss computed by
hand on an untrained model cannot see these: its heads are nearly flat (every logit about equal),
so a head read one position off its target, or a term that should be masked, changes the loss by
less than float tolerance. Here the heads are made sharp first (:func:`sharpen`), and what
imagination predicts is compared with what the loss scores, through the generic engine::

    from wmzoo.nn import modes
    from wmzoo.testing_wiring import check_episode_masks, check_imagined_rewards_and_ends, sharpen, sharpen_two_hot

    sharpen(wm.heads.cont)
    sharpen_two_hot(wm.heads.reward)
    with modes():                                         # the check does not enter it itself
        check_imagined_rewards_and_ends(wm, batch, forcing)
        check_episode_masks(wm, batch_with_an_episode_start_inside)

``forcing`` (a :class:`Forcing`) is a function of no argument returning a context manager;
within it, the k-th call of ``wm.imagine_step`` (k = 0, 1, ...) reproduces the recorded
transition ``k → k + 1`` of ``batch``: whatever imagination samples (tokens, a stochastic latent)
is replaced by what the training forward computes from the recorded rows. Ready-made ones:

- :func:`latent_teacher_forcing` for a state of a ``deter`` and a one-hot ``stoch`` drawn from a
  prior module's logits (RSSM, S4WM, TSSM-XL);
- :func:`gaussian_teacher_forcing` for a float latent (a Gaussian ``z``) that ``imagine_step``
  draws once per call through :func:`wmzoo.nn.gaussian_sample`;
- a token backbone writes its own (a sampler patched to return the recorded tokens:
  ``tests/plugins/iris/test_wiring.py``).

:func:`check_imagined_rewards_and_ends` calls ``forcing()`` around imagination only and computes
the loss outside it, without entering :func:`wmzoo.nn.modes`: a backbone that samples in its loss
is checked inside ``with modes():`` (as above), so the loss's posterior is the one forced.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import Protocol

import torch
from torch import Tensor, nn

from wmzoo.imagination import imagine, replay_actions
from wmzoo.interfaces import Batch, State, Trajectory, WorldModel, filter_rows
from wmzoo.nn.distributions import forced_gaussians, modes, symlog


class Forcing(Protocol):
    """A function of no argument returning a context manager within which the k-th call of the
    backbone's ``imagine_step`` (k = 0, 1, ...) reproduces the recorded transition ``k → k + 1`` of
    the batch: whatever it samples (tokens, a stochastic latent, an observation's correction) is
    replaced by what the training forward computes from the recorded data, and any other sampling
    (a sampled reward or end) takes the mode. :func:`check_imagined_rewards_and_ends` calls it
    once, after filtering row 0 and before imagining ``T − 1`` steps; build the recorded values
    inside the call (the weights are final then). :func:`latent_teacher_forcing` and
    :func:`gaussian_teacher_forcing` return one; a plain ``@contextmanager`` function of no
    argument is one too."""

    def __call__(self) -> AbstractContextManager: ...


def _redraw(module: nn.Module, g: torch.Generator) -> nn.Linear:
    """Re-draw every ``nn.Linear`` of ``module`` variance-preserving (weights ``N(0, 1/fan_in)``,
    biases ``N(0, 0.01)``); return the last one."""
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
    assert linears, f"{type(module).__name__} has no nn.Linear to sharpen"
    with torch.no_grad():
        for linear in linears:
            linear.weight.copy_(torch.randn(linear.weight.shape, generator=g) / math.sqrt(linear.in_features))
            if linear.bias is not None:
                linear.bias.copy_(torch.randn(linear.bias.shape, generator=g) * 0.1)
    return linears[-1]


def sharpen(*modules: nn.Module, scale: float = 1000.0, seed: int = 0) -> None:
    """Make each module's output depend sharply on its input: its ``nn.Linear`` layers are
    re-drawn variance-preserving and the last one's weights multiplied by ``scale``. A head's
    logits then differ by hundreds between positions, so a loss that reads it one position off its
    target, or counts a term its mask should drop, changes by far more than float tolerance, and
    its prediction is the mode of a peaked distribution (a probability near 0 or 1). For a two-hot
    head use :func:`sharpen_two_hot` (its prediction is a mean over bins, not a mode)."""
    g = torch.Generator().manual_seed(seed)
    for module in modules:
        last = _redraw(module, g)
        with torch.no_grad():
            last.weight.mul_(scale)


def sharpen_two_hot(*modules: nn.Module, low: float = -20.0, high: float = 20.0, spread: float = 2.0,
                    seed: int = 0) -> None:
    """:func:`sharpen` for a two-hot head over bins evenly spaced on ``[low, high]`` (symlog
    space, :class:`~wmzoo.nn.distributions.TwoHot`): the last layer's logits become a narrow bump
    ``−(b_i − μ)² / (2 σ²)``, ``σ`` half a bin, around a centre ``μ = u · h`` linear in the layer's
    input (``u`` drawn so that ``μ`` varies by about ``spread``). Its mean is then within a bin of
    ``μ`` and its loss at that mean small, while a target ``Δ`` away costs ``≈ Δ² / (2 σ²)``
    (random logits would leave the mean between far-apart bins, where the loss is large)."""
    g = torch.Generator().manual_seed(seed)
    for module in modules:
        last = _redraw(module, g)
        bins = torch.linspace(low, high, last.out_features)
        var = (0.5 * float(bins[1] - bins[0])) ** 2
        u = torch.randn(last.in_features, generator=g) * spread / math.sqrt(last.in_features)
        assert last.bias is not None, "a two-hot head's last layer needs a bias to make a bump"
        with torch.no_grad():
            last.weight.copy_(bins[:, None] * u[None, :] / var)
            last.bias.copy_(-bins.square() / (2 * var))


def _one_episode_per_row(batch: Batch) -> None:
    assert bool(batch.is_first[:, 0].all()) and not bool(batch.is_first[:, 1:].any()), \
        "teacher-forced imagination replays one episode per row: is_first at column 0 only"


def teacher_forced_imagination(wm: WorldModel, batch: Batch, forcing: Forcing) -> Trajectory:
    """The generic engine (:func:`wmzoo.imagination.imagine`) from the state after ``obs[:, 0]``,
    replaying ``action[:, :-1]`` for ``T − 1`` steps within ``forcing()``: ``rewards[t]`` and
    ``conts[t]`` are then the predictions for transition ``t`` (``reward[:, t]``, ``terminal[:, t]``)
    and ``features[t]`` the features after ``obs[:, t]``, as the training forward makes them."""
    _one_episode_per_row(batch)
    T = batch.shape[1]
    with torch.no_grad():
        start = wm.observe(batch.slice(0, 1))
        with forcing():
            return imagine(wm, replay_actions(batch.action[:, :-1].transpose(0, 1)), start, T - 1)


def _losses(wm: WorldModel, batch: Batch) -> dict[str, float]:
    """Each component's loss, the same draws each call (a loss may sample tokenizer frames or latents)."""
    torch.manual_seed(0)
    with torch.no_grad():
        return {k: float(v) for k, v in wm.loss(batch).losses.items()}


def _loss(wm: WorldModel, batch: Batch) -> float:
    """The total of :func:`_losses`."""
    return sum(_losses(wm, batch).values())


def check_imagined_rewards_and_ends(
    wm: WorldModel, batch: Batch, forcing: Forcing, features: bool = True, observed: bool = True
) -> Trajectory:
    """Teacher-forced imagination predicts, for every transition, the reward and end the loss
    trains: its targets are what the loss scores best. Returns the imagined trajectory.

    ``forcing`` (:class:`Forcing`): a function of no argument returning a context manager within
    which the k-th ``imagine_step`` reproduces the recorded transition ``k → k + 1``
    (:func:`latent_teacher_forcing`, :func:`gaussian_teacher_forcing`, or your own). Only
    imagination runs inside it; the loss runs outside, and this check does not enter
    :func:`wmzoo.nn.modes`: call it inside ``with modes():`` when the loss samples.

    The heads must be sharp (:func:`sharpen`) and ``batch`` one episode per row (``T ≥ 4``). The
    batch's reward and terminal are set to imagination's predictions for transitions ``0..T−3``
    (the last transition keeps its data: a terminal there would also drop the last row's action
    from a loss that reads it); then, one ``(row, step)`` at a time, that end flag inverted must
    raise the loss, and that reward replaced by the row's imagined reward of the step before or
    after, or negated (where either is more than 0.3 from it in symlog), must not lower it.
    Reward and terminal are no model input, so only the reward and end terms of the loss move.
    ``features``: also compare the imagined features with the loss's ``TrainOutput.features``
    (posterior features), where it returns them. ``observed``: also, ``observe_sequence``
    (training form and ``step=True``: the memory metrics' inference reading) must give the
    imagined rewards of every transition, which the loss is shown to train. Leave it on for a
    backbone whose filtering keeps what its loss sees (every latent one); IRIS, REM, Δ-IRIS and TokenWM filter from a shorter context than a training window by
    design (IRIS's observed state is the current frame alone), so their readings differ.

    Catches: the end flag's meaning inverted in imagination or in the loss; a reward or end read
    from the state before the action (or one step late) on either side; imagination and training
    reading the heads at different outputs; ``observe_sequence`` reading the reward head on
    another state than the loss (e.g. the default's reading where the loss reads the posterior).
    """
    B, T = batch.shape
    assert T >= 4, "the check needs T >= 4 (transitions 0..T-3 are compared)"
    traj = teacher_forced_imagination(wm, batch, forcing)
    steps = T - 2
    reward, end = traj.rewards[:steps].T.float(), traj.conts[:steps].T < 0.5  # [B, steps]
    assert not bool(((traj.conts[:steps] > 0.1) & (traj.conts[:steps] < 0.9)).any()), \
        "imagined continue probabilities are not near 0 or 1: sharpen the heads first"
    base = replace(batch, reward=torch.cat([reward, batch.reward[:, steps:]], 1),
                 terminal=torch.cat([end, batch.terminal[:, steps:]], 1))
    loss = _loss(wm, base)
    tol = 1e-5 * max(1.0, abs(loss))
    scored = 0
    for b in range(B):
        for t in range(steps):
            flipped = base.terminal.clone()
            flipped[b, t] = ~flipped[b, t]
            delta = _loss(wm, replace(base, terminal=flipped)) - loss
            if abs(delta) <= tol:
                continue  # no loss term reads this transition's end (masked)
            scored += 1
            assert delta > 0, (
                f"row {b}, transition {t}: imagination predicts {'an end' if end[b, t] else 'no end'} "
                f"(continue {float(traj.conts[t, b]):.3f}) but the loss prefers the opposite target "
                f"(by {-delta:.4g}): the end flag's meaning differs between imagination and the loss, "
                "or one side reads it at another step")
            others = [reward[b, s] for s in (t - 1, t + 1) if 0 <= s < steps] + [-reward[b, t]]
            for other in others:
                if abs(float(symlog(other) - symlog(reward[b, t]))) < 0.3:
                    continue  # about as good a target (two-hot bins are 0.16 apart in symlog)
                target = base.reward.clone()
                target[b, t] = other
                worse = _loss(wm, replace(base, reward=target)) - loss
                assert worse >= -tol, (
                    f"row {b}, transition {t}: the loss scores reward {float(other):.4g} better than "
                    f"imagination's {float(reward[b, t]):.4g} (by {-worse:.4g}): the imagined reward "
                    "belongs to another step (read before the action, or a step late) or the loss "
                    "reads its target at another step")
    assert scored >= 2, f"only {scored} transitions' ends are scored by the loss: use a longer batch"
    if features:
        torch.manual_seed(0)
        with torch.no_grad():
            trained = wm.loss(base).features
        if trained is not None:
            torch.testing.assert_close(traj.features[1:].transpose(0, 1), trained[:, 1:], atol=1e-4, rtol=1e-4,
                                       msg="teacher-forced imagined features differ from the training forward's")
    for step in (False, True) if observed else ():
        torch.manual_seed(0)
        with torch.no_grad():  # outside forcing(): filtering draws its own posterior (modes() fixes it)
            seen = wm.observe_sequence(batch, step=step).rewards  # [B, T - 1]
            torch.testing.assert_close(
                seen.float(), traj.rewards.T.float(), atol=1e-3, rtol=1e-4,
                msg=lambda m, step=step: f"observe_sequence(step={step})'s rewards are not the ones teacher-forced "
                "imagination predicts, which the loss trains: it reads the reward head on another state than "
                f"the loss (override observe_sequence; CONTRIBUTING's table of the world model's methods): {m}")
    return traj


def check_episode_masks(wm: WorldModel, batch: Batch) -> None:
    """No loss term reads a transition into a new episode. For every row ``t − 1`` followed by an
    episode start (``is_first[b, t]``, ``t ≥ 1``): its action, reward and terminal flag are
    changed (they belong to the transition ``t − 1 → t``, which no model should learn: the next
    observation starts another episode) and no component's loss may change. The same change
    inside an episode must change the loss (else the check compares nothing).

    Use sharp heads (:func:`sharpen`): an untrained two-hot reward head's logits are all equal,
    so its loss does not depend on the target at all. Catches a mask removed from any loss term
    (reward, end, next-token or next-frame prediction, the tokenizer's transitions) and a model
    that reads the last action of the previous episode (the core gives a zero one at an
    episode start: :meth:`~wmzoo.interfaces.WorldModel.observe_step`).
    """
    B, T = batch.shape
    boundaries = [(b, t) for b in range(B) for t in range(1, T) if batch.is_first[b, t]]
    assert boundaries, "the batch needs an episode start inside a row (is_first[b, t] for some t >= 1)"

    def changed(b: int, t: int) -> Batch:
        actions = batch.action.clone()
        if wm.env.discrete:
            actions[b, t] = (actions[b, t] + 1) % wm.env.num_actions
        else:
            actions[b, t] = -actions[b, t] + 0.5
        reward, terminal = batch.reward.clone(), batch.terminal.clone()
        reward[b, t] = reward[b, t] + 3.0
        terminal[b, t] = ~terminal[b, t]
        return replace(batch, action=actions, reward=reward, terminal=terminal)

    base = _losses(wm, batch)
    for b, t in boundaries:
        after = _losses(wm, changed(b, t - 1))
        for name, value in base.items():
            assert math.isclose(after[name], value, rel_tol=1e-6, abs_tol=1e-6), (
                f"loss {name!r} changed ({value:.6g} -> {after[name]:.6g}) with the action, reward or "
                f"terminal of row {b}, step {t - 1}, whose next observation starts a new episode: a "
                "loss term reads the transition across the episode start (a mask is missing)")
    inside = [(b, t) for b in range(B) for t in range(T - 2) if not batch.is_first[b, t + 1]]
    assert any(_losses(wm, changed(b, t)) != base for b, t in inside), \
        "no change of an action, reward or terminal inside an episode changes the loss: the check sees nothing"


def latent_teacher_forcing(wm: WorldModel, batch: Batch, prior: nn.Module) -> Forcing:
    """The :class:`Forcing` of a backbone whose state is a ``deter`` and a one-hot ``stoch`` drawn
    from the logits of its ``prior`` module (RSSM, S4WM, TSSM-XL): within it, the k-th call of
    ``prior`` returns logits whose mode is the ``stoch`` of the posterior after recorded row
    ``k + 1`` (filtered with ``observe_step``), so each imagined step keeps the ``deter`` its
    dynamics computed and takes the observed ``stoch``. Use it, and the loss, inside
    :func:`wmzoo.nn.modes`, so that every categorical is its mode (the posterior the loss computes is then
    the one forced here)."""

    @contextmanager
    def forcing() -> Iterator[None]:
        with modes(), torch.no_grad():
            posts: list[State] = list(filter_rows(wm, batch))
        step = iter(range(1, len(posts)))

        def observed(module: nn.Module, args: object, logits: Tensor) -> Tensor:
            return posts[next(step)]["stoch"].to(logits.dtype).reshape(logits.shape) * 1e4

        hook = prior.register_forward_hook(observed)
        try:
            with modes():
                yield
        finally:
            hook.remove()

    return forcing


def gaussian_teacher_forcing(wm: WorldModel, batch: Batch, key: str = "z") -> Forcing:
    """The :class:`Forcing` of a backbone with a float latent ``state[key]`` (a Gaussian ``z``)
    that :meth:`~wmzoo.interfaces.WorldModel.imagine_step` draws once per call through
    :func:`wmzoo.nn.gaussian_sample`: within it, the k-th draw returns ``state[key]`` of the
    posterior after recorded row ``k + 1`` (filtered with ``observe_step`` inside
    :func:`wmzoo.nn.modes`, so the posterior's mean), whatever mean and std the prior gave; each
    imagined step keeps the deterministic state its dynamics computed and takes the observed latent.
    Use it, and the loss, inside :func:`wmzoo.nn.modes`, so that the loss's posterior is the mean
    forced here. A draw of another shape than ``state[key]``, or more draws than transitions,
    fails with a message (a backbone that draws more than once per step writes its own forcing)."""

    @contextmanager
    def forcing() -> Iterator[None]:
        with modes(), torch.no_grad():
            posts = [state[key] for state in filter_rows(wm, batch)]
        step = iter(range(1, len(posts)))

        def observed(mean: Tensor, std: Tensor) -> Tensor:
            k = next(step, None)
            assert k is not None, (
                f"imagine_step drew more gaussian_sample latents than the batch has transitions "
                f"({len(posts) - 1}): gaussian_teacher_forcing needs one draw of state[{key!r}] per step")
            latent = posts[k]
            assert latent.shape == mean.shape, (
                f"a gaussian_sample draw of shape {list(mean.shape)} is not state[{key!r}] "
                f"{list(latent.shape)}: gaussian_teacher_forcing needs imagine_step to draw state[{key!r}] "
                "through gaussian_sample, once per step")
            return latent.to(mean.dtype)

        with modes(), forced_gaussians(observed):
            yield

    return forcing
