"""A testing kit for backbone authors (as TorchRL's ``check_env_specs``): one call checks a
backbone against the contract the trainer, imagination engine and bench rely on::

    from wmzoo.testing import check_backbone
    check_backbone("mybackbone")              # its tiny preset on a 3x32x32, 4-action env

Every registered backbone goes through it in wmzoo's own test suite.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from wmzoo.imagination import imagine, random_actions
from wmzoo.interfaces import (
    Batch, EnvInfo, ObsEntry, State, TrainOutput, WorldModel, filter_rows, map_obs, obs_entries, pack_obs,
)
from wmzoo.config import run_presets
from wmzoo.nn.distributions import modes
from wmzoo.optim import step_components, world_model_optimizers
from wmzoo.registry import build_world_model, default_registry, world_model_spec
from wmzoo.specs import TRAIN_PRESETS, TrainSpec, merge

CHECK_ENV = EnvInfo(name="check-32x32", obs_shape=(3, 32, 32), num_actions=4)
# the second env check_backbone uses for a backbone that declares observations="any": an image and
# a vector entry, so the dict and vector paths (ObsEncoder's MLP, the vector decoder) are checked too
CHECK_DICT_ENV = EnvInfo(
    name="check-dict-32x32", obs_shape=None, num_actions=4,
    obs_space={"image": ObsEntry((3, 32, 32), "uint8"), "state": ObsEntry((5,), "float32")},
)


def _check_state(state: State, batch: int, where: str) -> None:
    assert isinstance(state, dict) and state, f"{where}: a state is a non-empty dict of tensors"
    for key, value in state.items():
        assert isinstance(value, torch.Tensor), f"{where}: state[{key!r}] is not a tensor"
        assert value.shape[0] == batch, f"{where}: state[{key!r}] has batch {value.shape[0]}, expected {batch}"


def synthetic_batch(
    env: EnvInfo, batch: int, seq_len: int, device: torch.device, seed: int = 0, firsts: Sequence[int] = (0,)
) -> Batch:
    """Random observations (every entry of ``env``'s spec: uint8 frames, normal float32 vectors
    scaled by 3), actions and rewards of ``env``'s shape; episodes start at the columns ``firsts``
    (0 by default: one episode per row; add a later column to put an episode start inside the
    window, where resets and masks act)."""
    g = torch.Generator().manual_seed(seed)
    obs = pack_obs({
        key: torch.randint(0, 256, (batch, seq_len, *entry.shape), dtype=torch.uint8, generator=g)
        if entry.kind == "image" else 3 * torch.randn(batch, seq_len, *entry.shape, generator=g)
        for key, entry in env.obs_space
    })
    if env.discrete:
        action = torch.randint(env.num_actions, (batch, seq_len), generator=g)
    else:
        action = torch.rand(batch, seq_len, env.num_actions, generator=g) * 2 - 1
    is_first = torch.zeros(batch, seq_len, dtype=torch.bool)
    is_first[:, list(firsts)] = True
    return Batch(
        obs=obs,
        action=action,
        reward=torch.randn(batch, seq_len, generator=g),
        terminal=torch.rand(batch, seq_len, generator=g) < 0.001,
        is_first=is_first,
    ).to(device)


def check_world_model(wm: WorldModel, env: EnvInfo, batch: int = 3, seq_len: int = 6, horizon: int = 4) -> TrainOutput:
    """Shape and behaviour contract of one built world model; returns the last TrainOutput."""
    torch.manual_seed(0)
    data = synthetic_batch(env, batch, seq_len, torch.device("cpu"))
    components = wm.components()
    assert components, "components() must name at least one parameter group"
    owned = {id(p) for params, _ in components.values() for p in params}
    assert owned == {id(p) for p in wm.parameters() if p.requires_grad}, \
        "components() must cover every trainable parameter exactly"

    out = wm.loss(data)
    assert set(out.losses) == set(components), "loss() must return one loss per component"
    for name, loss in out.losses.items():
        assert loss.dim() == 0 and torch.isfinite(loss), f"loss {name!r} must be a finite scalar"
    assert all(isinstance(v, float) for v in out.metrics.values()), "metrics must be floats"
    start, start_cont, _ = out.imagination_start()
    n = start_cont.shape[0]
    _check_state(start, n, "TrainOutput.start")
    assert all(not v.requires_grad for v in start.values()), "start states must be detached"
    if wm.stateful_training:
        assert out.carry is not None, "stateful_training backbones must return a carry"
        _check_state(out.carry, batch, "TrainOutput.carry")
        assert all(not v.requires_grad for v in out.carry.values()), "carry must be detached"

    # a few optimiser steps on one batch reduce the loss
    optimizers = world_model_optimizers(components)
    first = float(sum(out.losses.values()).detach())
    for _ in range(8):
        step_components(optimizers, wm.loss(data).losses)
    with torch.no_grad():
        last = float(sum(wm.loss(data).losses.values()))
    assert last < first, f"8 optimiser steps on one batch did not reduce the loss ({first:.3f} -> {last:.3f})"

    with torch.no_grad():
        wm.eval()
        state = wm.observe(data)
        _check_state(state, batch, "observe()")
        feats = wm.features(state)
        assert tuple(feats.shape) == (batch, *wm.feature_shape), "features() shape != feature_shape"
        decoded = wm.decode(state)
        assert not (env.pixel and isinstance(decoded, dict)), \
            "decode() must return one uint8 [B, C, H, W] tensor for a pixel env"
        for key, value in obs_entries(decoded).items():
            entry = env.obs_spec.get(key)
            assert entry is not None and tuple(value.shape) == (batch, *entry.shape) and value.dtype == (
                torch.uint8 if entry.kind == "image" else torch.float32), \
                f"decode()[{key!r}] must be {entry.describe() if entry else 'an entry of the spec'} per row"
        traj = imagine(wm, random_actions(env.num_actions, env.discrete), state, horizon, decode=True)
        assert traj.features.shape == (horizon + 1, batch, *wm.feature_shape)
        assert traj.rewards.shape == (horizon, batch) and traj.conts.shape == (horizon, batch)
        assert ((traj.conts >= 0) & (traj.conts <= 1)).all(), "cont must be a probability"
        step_state = wm.observe_step(wm.initial_state(batch), map_obs(lambda x: x[:, 0], data.obs), data.action[:, 0],
                                     data.is_first[:, 0])
        _check_state(step_state, batch, "observe_step()")
        for step in (False, True):
            seen = wm.observe_sequence(data, step=step)
            where = f"observe_sequence(step={step})"
            _check_state(seen.state, batch, where)
            assert tuple(seen.rewards.shape) == (batch, data.shape[1] - 1), f"{where}.rewards must be [B, T - 1]"
            assert torch.isfinite(seen.rewards).all(), f"{where}.rewards must be finite"

    # weights survive a state_dict round trip
    buffer = io.BytesIO()
    torch.save(wm.state_dict(), buffer)
    buffer.seek(0)
    state_dict = torch.load(buffer, weights_only=True)
    wm.load_state_dict(state_dict)
    return out


SIGN_ENV = EnvInfo(name="check-reward-sign", obs_shape=(3, 16, 16), num_actions=3)


def reward_sign_batch(env: EnvInfo, batch: int, seq_len: int, seed: int) -> Batch:
    """A batch of the reward-sign task: fixed frames with a little noise, uniform random actions,
    ``reward[t] = +1`` after action 0, ``−1`` after action 1, ``0`` after any other; one episode
    per row."""
    g = torch.Generator().manual_seed(seed)
    action = torch.randint(env.num_actions, (batch, seq_len), generator=g)
    base = torch.linspace(40, 200, env.obs_shape[-1]).expand(*env.obs_shape)
    noise = torch.randint(-8, 9, (batch, seq_len, *env.obs_shape), generator=g)
    reward = (action == 0).float() - (action == 1).float()
    is_first = torch.zeros(batch, seq_len, dtype=torch.bool)
    is_first[:, 0] = True
    return Batch(
        obs=(base + noise).clamp(0, 255).to(torch.uint8), action=action, reward=reward,
        terminal=torch.zeros(batch, seq_len, dtype=torch.bool), is_first=is_first,
    )


def check_reward_sign(
    wm: WorldModel, env: EnvInfo = SIGN_ENV, updates: int = 800, batch: int = 8, seq_len: int = 8
) -> tuple[float, float]:
    """Behaviour contract, end to end: trained ``updates`` times on :func:`reward_sign_batch`, the
    model imagines a higher reward for the action that paid +1 than for the one that paid −1.

    Returns the mean imagined reward of one step under action 0 and under action 1 from the
    states after observed segments. Catches what shape checks cannot: a reward target read one
    step late (it is then uncorrelated with the action that earned it), a sign flipped anywhere
    between the data and the imagined reward, imagination reading the state before the action.
    """
    assert env.discrete and env.num_actions >= 2, "the reward-sign task needs two discrete actions"
    torch.manual_seed(0)
    optimizers = world_model_optimizers(wm.components())
    carry = None
    wm.train()
    for i in range(updates):
        out = wm.loss(reward_sign_batch(env, batch, seq_len, seed=i), carry)
        step_components(optimizers, out.losses)
        carry = None  # every batch starts its episodes
    wm.eval()
    with torch.no_grad():
        state = wm.observe(reward_sign_batch(env, 16, seq_len, seed=updates + 1))
        rewards = []
        for action in (0, 1):
            start = {k: v.clone() for k, v in state.items()}
            step = wm.imagine_step(start, torch.full((16,), action, dtype=torch.long))
            rewards.append(float(step.reward.mean()))
    plus, minus = rewards
    assert plus > minus + 0.5, (
        f"after {updates} updates on the reward-sign task the imagined reward of the +1 action "
        f"({plus:.3f}) is not above the -1 action's ({minus:.3f}): "
        + ("the two are equal, so the reward head has not learnt yet: more updates or a higher rate "
           "(the backbone entry's behaviour_check) may be all it needs, else check that the reward head "
           "reads the state after the action" if abs(plus - minus) < 0.05 else
           "check the reward target's alignment (reward[t] follows action[t]) and its sign")
    )
    return plus, minus


def check_behaviour(name: str) -> tuple[float, float]:
    """:func:`check_reward_sign` of the registered backbone ``name`` at its ``tiny`` preset, with
    the budget its entry declares (:class:`~wmzoo.hookspecs.BehaviourCheck`: updates and spec
    overrides); returns the imagined rewards under the +1 and the −1 action."""
    check = default_registry().backbone(name).behaviour_check
    wm = build_world_model(name, world_model_spec(name, "tiny", dict(check.overrides)), SIGN_ENV)
    return check_reward_sign(wm, updates=check.updates)


def check_backbone(
    name: str, preset: str = "tiny", overrides: Mapping[str, Any] | None = None, env: EnvInfo | None = None
) -> None:
    """Build the registered backbone ``name`` at ``preset`` and run :func:`check_world_model`.

    ``env``: the :class:`~wmzoo.interfaces.EnvInfo` to build it for. By default
    :data:`CHECK_ENV` (3×32×32 pixels, 4 discrete actions) and, for a backbone whose entry declares
    ``observations="any"``, also :data:`CHECK_DICT_ENV` (a 3×32×32 ``image`` and a 5-float
    ``state`` vector), so its dict and vector paths are checked too. Given, only that env (e.g.
    continuous actions: ``EnvInfo("c", (3, 32, 32), 2, discrete=False)``; a vector-only spec:
    ``EnvInfo("v", None, 3, obs_space={"state": ObsEntry((5,), "float32")})``).

    The registry has already checked the entry itself (the three standard presets, each a valid
    instance of its spec; each run preset naming one of them, a trainer preset and a valid
    schedule: :func:`wmzoo.registry.entry_problems`); this also checks that each run preset names
    a preset of the backbone's default policy, and that every run preset resolves to a run.
    """
    registry = default_registry()
    entry = registry.backbone(name)  # a malformed entry raises here, with its reason
    policy = registry.policy(entry.default_policy)
    for preset_name, combo in run_presets(entry).items():
        where = f"run preset {preset_name!r} of {name!r}"
        assert combo.policy in policy.presets, f"{where} names policy preset {combo.policy!r}, which {policy.name!r} lacks"
        TrainSpec.model_validate(merge(TRAIN_PRESETS[combo.train].model_dump(), dict(combo.schedule)))
    spec = world_model_spec(name, preset, overrides)
    envs = [env] if env is not None else [CHECK_ENV, *([CHECK_DICT_ENV] if entry.observations == "any" else [])]
    for info in envs:
        check_world_model(build_world_model(name, spec, info), info)


def check_stochastic_features(wm: WorldModel, state: State, seed: int = 0, key: str = "stoch") -> None:
    """The stochastic latent ``state[key]`` reaches the features with its gradient and the decoder
    reads it. Catches the latent silently dropped from the features (zeros, detached, the logits
    or the mean instead of the draw), so that the decoder, heads and policy see the deterministic
    part only.

    A one-hot latent ``[B, stoch, classes]`` beside a ``deter`` (RSSM, S4WM, TSSM-XL) is held to
    the exact DreamerV3 form: features ``[deter, flat stoch]`` with ``stoch``'s straight-through
    gradient, and a different class changes the decoded frame. Any other float latent (a Gaussian
    ``z``, any shape) is held to what every form must do: each of its elements moves the features
    (the gradient of a random projection of the features is non-zero at every element) and a
    changed latent (``z + 1``) changes the decoded frame."""
    import torch.nn.functional as F

    latent = state[key]
    assert latent.is_floating_point(), f"state[{key!r}] must be a float tensor (a one-hot or a continuous latent)"
    one_hot = latent.dim() >= 3 and bool(((latent == 0) | (latent == 1)).all()) and bool((latent.sum(-1) == 1).all())
    g = torch.Generator().manual_seed(seed)
    if one_hot and "deter" in state:
        B, stoch_dim, classes = latent.shape
        index = torch.randint(0, classes, (B, stoch_dim), generator=g)
        z = F.one_hot(index, classes).float().requires_grad_()
        feat = wm.features({**state, key: z})
        torch.testing.assert_close(feat, torch.cat([state["deter"], z.detach().flatten(-2)], -1))
        (grad,) = torch.autograd.grad(feat.sum(), z)
        torch.testing.assert_close(grad, torch.ones_like(z))
        other = F.one_hot((index + 1) % classes, classes).float()
    else:
        z = (latent.detach() + torch.randn(latent.shape, generator=g)).requires_grad_()
        feat = wm.features({**state, key: z})
        projection = torch.randn(feat.shape, generator=g)
        unused = f"features() does not depend on state[{key!r}] (or it is detached)"
        assert feat.requires_grad, unused
        (grad,) = torch.autograd.grad((feat * projection).sum(), z, allow_unused=True)
        assert grad is not None, unused
        unread = int((grad == 0).sum())
        assert unread == 0, f"{unread} of {grad.numel()} elements of state[{key!r}] do not reach features()"
        other = z.detach() + 1.0
    with torch.no_grad():
        same = torch.equal(wm.decoder(feat.detach()), wm.decoder(wm.features({**state, key: other})))  # type: ignore[operator]
    assert not same, f"the decoder does not read state[{key!r}]: a different latent decodes to the same frame"


def check_parallel_equals_recurrent(
    wm: WorldModel,
    env: EnvInfo = CHECK_ENV,
    batch: Batch | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-4,
) -> None:
    """The backbone's training form (:meth:`~wmzoo.interfaces.WorldModel.observe`, and
    :meth:`~wmzoo.interfaces.WorldModel.observe_sequence`'s reward reading) agrees with its
    recurrent form (:meth:`~wmzoo.interfaces.WorldModel.observe_step` row by row), for a
    *stochastic* model: inside :func:`wmzoo.nn.modes` every draw made through ``wmzoo.nn``
    (``OneHotCategoricalST.sample``, ``sample_class``, ``gaussian_sample``) is its mode, so both
    forms are deterministic and must give the same features after every prefix and the same
    predicted rewards. A model that draws its latents some other way must take a ``sample``
    flag and be compared with it off.

    ``batch`` (default: 2 rows of 9 with an episode start at column 5, so the reset inside the
    window is exercised) may be drawn by hypothesis in the plugin's own tests, for random sizes
    and seeds (``synthetic_batch(env, B, T, cpu, seed, firsts=...)``). Catches a parallel form
    that shifts the action a step, misses a reset, or leaks a later row into an earlier one."""
    data = synthetic_batch(env, 2, 9, torch.device("cpu"), seed=1, firsts=(0, 5)) if batch is None else batch
    T = data.shape[1]
    training = wm.training
    wm.eval()
    try:
        with modes(), torch.no_grad():
            steps = [wm.features(state) for state in filter_rows(wm, data)]
            again = [wm.features(state) for state in filter_rows(wm, data)]
            for t, (first, second) in enumerate(zip(steps, again)):
                torch.testing.assert_close(
                    first, second, rtol=rtol, atol=atol,
                    msg=lambda m, t=t: f"observe_step() row by row gives other features at row {t} when run twice "
                    "inside wmzoo.nn.modes(): a latent drawn outside wmzoo.nn's samplers (e.g. torch.randn_like; "
                    f"use wmzoo.nn.gaussian_sample or sample_class), or dropout left on in eval(): {m}",
                )
            for t in sorted({0, T // 2, T - 1}):
                parallel = wm.features(wm.observe(data.slice(0, t + 1)))
                torch.testing.assert_close(
                    parallel, steps[t], rtol=rtol, atol=atol,
                    msg=lambda m, t=t: f"observe() of rows 0..{t} != observe_step() row by row: {m}",
                )
            trained = wm.observe_sequence(data).rewards
            stepped = wm.observe_sequence(data, step=True).rewards
            torch.testing.assert_close(
                trained, stepped, rtol=rtol, atol=atol,
                msg=lambda m: f"observe_sequence(): the training form's rewards != the step form's: {m}",
            )
    finally:
        wm.train(training)
