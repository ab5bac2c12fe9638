"""The RSSM backbone: interface contract, filtering, resets, TBTT, causality, alignment, learning."""

from __future__ import annotations

import math
from functools import cache

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from wmzoo.testing import check_stochastic_features
from wmzoo.interfaces import Batch, EnvInfo, State, stack_states
from wmzoo.nn import TwoHot
from wmzoo.nn.heads import encode_action
from wmzoo.nn.latent import KLSpec
from wmzoo_plugins.rssm import (
    PRESETS,
    LayerNormGRUCell,
    RSSMSpec,
    RSSMWorldModel,
    wmzoo_backbones,
)

ACTIONS = 5
LATENT_KEYS = ("deter", "stoch", "logits")


def env_info(size: int = 32, discrete: bool = True) -> EnvInfo:
    return EnvInfo("test", (3, size, size), ACTIONS, discrete)


@cache
def tiny_model(size: int = 32, tbtt: bool = True) -> RSSMWorldModel:
    torch.manual_seed(0)
    return RSSMWorldModel(PRESETS["tiny"].model_copy(update={"tbtt": tbtt}), env_info(size)).eval()


def make_batch(B: int, T: int, size: int = 32, seed: int = 0, discrete: bool = True) -> Batch:
    g = torch.Generator().manual_seed(seed)
    action = (
        torch.randint(0, ACTIONS, (B, T), generator=g)
        if discrete
        else torch.rand(B, T, ACTIONS, generator=g) * 2 - 1
    )
    return Batch(
        obs=torch.randint(0, 256, (B, T, 3, size, size), generator=g, dtype=torch.uint8),
        action=action,
        reward=torch.randn(B, T, generator=g),
        terminal=torch.zeros(B, T, dtype=torch.bool),
        is_first=torch.zeros(B, T, dtype=torch.bool),
    )


def sequence(model: RSSMWorldModel, batch: Batch, state: State | None = None) -> tuple[State, State]:
    """Posterior and prior ``[B, T, ...]`` with modes instead of samples (deterministic)."""
    embed = model.encoder(batch.obs)
    return model.dynamics.observe(
        embed, encode_action(batch.action, model.env), batch.is_first, state, sample=False
    )


def assert_states_close(a: State, b: State, keys: tuple[str, ...] = LATENT_KEYS) -> None:
    for key in keys:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-5, msg=key)


# --------------------------------------------------------------------------- registration


def test_entry_and_presets() -> None:
    (entry,) = wmzoo_backbones()
    assert entry.name == "rssm" and entry.spec is RSSMSpec and entry.build is RSSMWorldModel
    assert entry.default_policy == "dreamer"
    assert set(entry.presets) == {"tiny", "small", "paper", "paper-2d"}
    assert all(isinstance(spec, RSSMSpec) for spec in entry.presets.values())
    paper = entry.presets["paper"]
    # s4wm table 7, RSSM-TBTT column.
    assert (paper.batch_size, paper.seq_len, paper.deter, paper.hidden) == (32, 48, 2048, 1000)
    assert (paper.stoch, paper.classes, paper.cnn_depth, paper.cnn_stages) == (32, 32, 48, 4)
    assert paper.optim.lr == 3e-4 and paper.optim.weight_decay == 1e-2 and paper.optim.clip == 200
    assert paper.kl.weights == (0.8, pytest.approx(0.2)) and paper.tbtt
    # catches: free nats in the paper's KL (pydreamer has none), Adam's eps not pydreamer's 1e-5
    assert paper.kl.free == 0 and paper.optim.eps == 1e-5
    paper_2d = entry.presets["paper-2d"]  # table 8
    assert (paper_2d.seq_len, paper_2d.hidden, paper_2d.cnn_depth, paper_2d.cnn_stages) == (50, 512, 32, 3)
    assert PRESETS["tiny"].kl == KLSpec()  # DreamerV3: free 1, 0.5 / 0.1
    # Presets survive the dump → validate round trip the CLI overrides go through.
    for spec in entry.presets.values():
        assert RSSMSpec.model_validate(spec.model_dump()) == spec


# --------------------------------------------------------------------------- shapes


@given(B=st.integers(1, 3), T=st.integers(2, 5), size=st.sampled_from([32, 64]))
@settings(max_examples=8, deadline=None)
def test_shape_contract(B: int, T: int, size: int) -> None:
    model = tiny_model(size)
    spec, env = model.spec, model.env
    feat_dim = spec.deter + spec.stoch * spec.classes
    assert model.feature_shape == (feat_dim,)
    batch = make_batch(B, T, size)
    batch.validate(env)
    initial = model.initial_state(B)
    shapes = {
        "deter": (spec.deter,),
        "stoch": (spec.stoch, spec.classes),
        "logits": (spec.stoch, spec.classes),
        "action": (ACTIONS,),
    }
    assert {k: tuple(v.shape) for k, v in initial.items()} == {k: (B, *s) for k, s in shapes.items()}

    out = model.loss(batch)
    assert set(out.losses) == set(model.components()) == {"model"}
    assert out.losses["model"].shape == () and torch.isfinite(out.losses["model"])
    assert all(isinstance(v, float) for v in out.metrics.values())
    assert {k: tuple(v.shape) for k, v in out.start.items()} == {k: (B * T, *s) for k, s in shapes.items()}
    assert not any(v.requires_grad for v in out.start.values())
    assert out.start_cont.shape == (B * T,)
    assert {k: tuple(v.shape) for k, v in out.carry.items()} == {k: (B, *s) for k, s in shapes.items()}

    state = model.observe_step(initial, batch.obs[:, 0], batch.action[:, 0], batch.is_first[:, 0])
    assert set(state) == set(initial) and state["deter"].shape == (B, spec.deter)
    assert model.observe(batch)["stoch"].shape == (B, spec.stoch, spec.classes)
    step = model.imagine_step(out.start, torch.randint(0, ACTIONS, (B * T,)))
    assert set(step.state) == set(initial)
    assert step.features.shape == (B * T, feat_dim) and step.reward.shape == (B * T,)
    assert step.cont.shape == (B * T,) and ((step.cont > 0) & (step.cont < 1)).all()
    assert model.features(state).shape == (B, feat_dim)
    image = model.decode(state)
    assert image.shape == (B, 3, size, size) and image.dtype == torch.uint8


def test_components_hold_every_parameter_once() -> None:
    model = tiny_model()
    params, optim = model.components()["model"]
    assert len({id(p) for p in params}) == len(list(model.parameters())) == len(params)
    assert optim == model.spec.optim


def test_continuous_actions() -> None:
    torch.manual_seed(0)
    env = env_info(32, discrete=False)
    model = RSSMWorldModel(PRESETS["tiny"], env)
    batch = make_batch(2, 4, discrete=False)
    batch.validate(env)
    out = model.loss(batch)
    assert torch.isfinite(out.losses["model"])
    torch.testing.assert_close(out.carry["action"], batch.action[:, -1])


def test_layer_norm_gru_cell_keeps_state_by_default() -> None:
    # With a zero linear map the normalised gates are 0: reset 1/2, candidate tanh(0) = 0 and
    # update sigmoid(0 - 1), so h' = (1 - sigmoid(-1)) h: the -1 update bias keeps ~73 % of h.
    cell = LayerNormGRUCell(3, 4)
    torch.nn.init.zeros_(cell.linear.weight)
    h = torch.randn(2, 4)
    torch.testing.assert_close(cell(torch.randn(2, 3), h), (1 - torch.sigmoid(torch.tensor(-1.0))) * h)
    assert cell.linear.in_features == 7 and cell.linear.out_features == 12


def test_layer_norm_gru_cell_by_hand() -> None:
    # catches: [h, x] fed to the linear map in place of [x, h], the candidate not gated by the
    # reset gate, a bias on the reset gate, LayerNorm's eps not DreamerV3's 1e-3
    torch.manual_seed(0)
    cell = LayerNormGRUCell(3, 4)
    with torch.no_grad():
        cell.norm.weight.normal_(1.0, 0.5)
        cell.norm.bias.normal_(0.0, 0.5)
    x, h = torch.randn(2, 3), torch.randn(2, 4)
    gates = F.layer_norm(x @ cell.linear.weight[:, :3].T + h @ cell.linear.weight[:, 3:].T, (12,),
                         cell.norm.weight, cell.norm.bias, eps=1e-3)
    reset, cand, update = torch.sigmoid(gates[:, :4]), gates[:, 4:8], torch.sigmoid(gates[:, 8:] - 1)
    expected = update * torch.tanh(reset * cand) + (1 - update) * h
    torch.testing.assert_close(cell(x, h), expected)
    assert cell.norm.eps == 1e-3


# --------------------------------------------------------------------------- filtering


def test_sequence_observe_equals_observe_steps() -> None:
    model = tiny_model()
    batch = make_batch(3, 7, seed=1)
    batch.is_first[0, 0] = True
    batch.is_first[1, 4] = True
    with torch.no_grad():
        start = model.observe(make_batch(3, 3, seed=2))  # a non-trivial carried state
        post, prior = sequence(model, batch, start)
        state, posts, priors = start, [], []
        for t in range(7):
            # at t = 0 the previous action is the one the carried state holds
            prev = start["action"] if t == 0 else encode_action(batch.action[:, t - 1], model.env)
            embed = model.encoder(batch.obs[:, t])
            state, prior_t = model.dynamics.observe_step(
                state, embed, prev, batch.is_first[:, t], sample=False
            )
            posts.append(state)
            priors.append(prior_t)
    assert_states_close(post, stack_states(posts))
    assert_states_close(prior, stack_states(priors))
    # The world model's observe_step is the same step from raw observations (an actor's loop:
    # the first step is_first, so its placeholder previous action 0 is masked).
    batch.is_first[:, 0] = True
    with torch.no_grad():
        state = model.initial_state(3)
        prev = batch.action.new_zeros(3)
        for t in range(7):
            state = model.observe_step(state, batch.obs[:, t], prev, batch.is_first[:, t], sample=False)
            prev = batch.action[:, t]
        ref, _ = sequence(model, batch)
    assert_states_close(state, {k: v[:, -1] for k, v in ref.items()})


def test_is_first_resets_state_and_previous_action() -> None:
    model = tiny_model()
    batch = make_batch(2, 6, seed=3)
    batch.is_first[:, 3] = True
    with torch.no_grad():
        carried = model.observe(make_batch(2, 4, seed=4))
        assert carried["deter"].abs().max() > 0 and carried["action"].abs().max() > 0
        post, _ = sequence(model, batch, carried)
        fresh, _ = sequence(model, batch.slice(3, 6))  # from the initial state
        assert_states_close({k: v[:, 3:] for k, v in post.items()}, fresh)
        # Before the reset the carried state mattered.
        no_carry, _ = sequence(model, batch)
        assert not torch.allclose(post["deter"][:, 0], no_carry["deter"][:, 0])
        # One step: a nonzero state and action at an is_first row give the fresh-state result.
        obs, action = batch.obs[:, 0], batch.action[:, 0]
        first = torch.ones(2, dtype=torch.bool)
        a = model.observe_step(carried, obs, action, first, sample=False)
        b = model.observe_step(model.initial_state(2), obs, torch.zeros_like(action), first, sample=False)
        assert_states_close(a, b)


def test_causality() -> None:
    """Features at step t depend on nothing after t (obs after t, actions from t on)."""
    model = tiny_model()
    a = make_batch(2, 8, seed=5)
    b = make_batch(2, 8, seed=6)
    k = 4
    b.obs[:, : k + 1] = a.obs[:, : k + 1]
    b.action[:, :k] = a.action[:, :k]
    with torch.no_grad():
        post_a, prior_a = sequence(model, a)
        post_b, prior_b = sequence(model, b)
    feat_a, feat_b = model.features(post_a), model.features(post_b)
    torch.testing.assert_close(feat_a[:, : k + 1], feat_b[:, : k + 1])
    torch.testing.assert_close(prior_a["logits"][:, : k + 1], prior_b["logits"][:, : k + 1])
    assert not torch.allclose(feat_a[:, k + 1], feat_b[:, k + 1])


@given(seed=st.integers(0, 10_000))
@settings(max_examples=5, deadline=None)
def test_features_carry_the_stochastic_latent(seed: int) -> None:
    """features = [h_t, flat z_t], with z_t's straight-through gradient, and the decoder reads z_t.
    Bug caught: the stochastic latent silently dropped from the features (zeros, detached, the
    logits instead), so the decoder, heads and policy see the deterministic h_t only."""
    model = tiny_model()
    with torch.no_grad():
        state = model.observe(make_batch(2, 3, seed=seed), sample=False)
    check_stochastic_features(model, state, seed)


# --------------------------------------------------------------------------- TBTT


def test_tbtt_carry_is_the_last_posterior_detached() -> None:
    model = tiny_model(tbtt=True)
    assert model.stateful_training
    batch = make_batch(2, 5, seed=7)
    torch.manual_seed(11)
    out = model.loss(batch)
    torch.manual_seed(11)
    last = model.observe(batch)  # same draws: the same last posterior
    assert set(out.carry) == set(model.initial_state(1))
    for key in out.carry:
        torch.testing.assert_close(out.carry[key], last[key].detach(), msg=key)
        assert not out.carry[key].requires_grad
    torch.testing.assert_close(out.carry["action"], F.one_hot(batch.action[:, -1], ACTIONS).float())

    # Feeding the carry back changes the next segment's first step ...
    nxt = make_batch(2, 5, seed=8)
    with torch.no_grad():
        with_carry, _ = sequence(model, nxt, out.carry)
        without, _ = sequence(model, nxt)
    assert not torch.allclose(with_carry["deter"][:, 0], without["deter"][:, 0])
    # ... through h, z and the carried action separately.
    for key in ("deter", "stoch", "action"):
        changed = dict(out.carry)
        changed[key] = torch.zeros_like(changed[key])
        with torch.no_grad():
            other, _ = sequence(model, nxt, changed)
        assert not torch.allclose(other["deter"][:, 0], with_carry["deter"][:, 0]), key
    # ... unless the segment starts an episode.
    nxt.is_first[:, 0] = True
    with torch.no_grad():
        with_carry, _ = sequence(model, nxt, out.carry)
        without, _ = sequence(model, nxt)
    assert_states_close(with_carry, without)
    # The loss on the next segment backpropagates without reaching into the previous one.
    model.loss(nxt, out.carry).losses["model"].backward()
    model.zero_grad()


def test_no_carry_without_tbtt() -> None:
    model = tiny_model(tbtt=False)
    assert not model.stateful_training
    assert model.loss(make_batch(2, 3)).carry is None


# --------------------------------------------------------------------------- alignment


def test_heads_read_next_step_features() -> None:
    model = tiny_model()
    batch = make_batch(2, 6, seed=9)
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        model.get_submodule(name).register_forward_pre_hook(
            lambda mod, args, name=name: seen.update({name: args[0]})
        )
        for name in ("decoder", "heads.reward", "heads.cont")
    ]
    try:
        out = model.loss(batch)
    finally:
        for hook in hooks:
            hook.remove()
    assert seen["decoder"].shape[:2] == (2, 6)
    torch.testing.assert_close(seen["heads.reward"], seen["decoder"][:, 1:])
    torch.testing.assert_close(seen["heads.cont"], seen["decoder"][:, 1:])
    # start states are the posteriors at every step, flattened batch-major
    torch.testing.assert_close(model.features(out.start), seen["decoder"].reshape(12, -1).detach())


def test_zero_initialised_reward_head_predicts_zero() -> None:
    model = tiny_model()
    batch = make_batch(3, 4, seed=10)
    with torch.no_grad():
        step = model.imagine_step(model.observe(batch), torch.randint(0, ACTIONS, (3,)))
    assert step.reward.abs().max() < 1e-6
    out = model.loss(batch)
    # predicting 0 everywhere: the MAE is the mean |reward| of the targets
    assert out.metrics["reward_mae"] == pytest.approx(batch.reward[:, :-1].abs().mean().item(), rel=1e-4)
    # and the reward loss is the cross-entropy of the uniform two-hot prediction, log(255)
    assert out.metrics["reward"] == pytest.approx(math.log(255), rel=1e-5)


def test_imagine_step_reward_and_cont_come_from_the_heads() -> None:
    model = tiny_model()
    with torch.no_grad():
        start = model.observe(make_batch(2, 3, seed=12))
        torch.manual_seed(0)
        step = model.imagine_step(start, torch.tensor([1, 3]))
        torch.manual_seed(0)
        prior = model.dynamics.imagine_step(start, F.one_hot(torch.tensor([1, 3]), ACTIONS).float())
        feat = model.features(prior)
        torch.testing.assert_close(step.features, feat)
        torch.testing.assert_close(step.reward, TwoHot(model.heads.reward(feat)).mean())
        torch.testing.assert_close(step.cont, torch.sigmoid(model.heads.cont(feat)[:, 0]))


# --------------------------------------------------------------------------- learning


def test_loss_decreases_on_a_fixed_batch() -> None:
    torch.manual_seed(0)
    model = RSSMWorldModel(PRESETS["tiny"].model_copy(update={"tbtt": False}), env_info(32))
    batch = make_batch(4, 8, seed=13)
    # Structured frames: a bright square moving with the time step.
    batch.obs.zero_()
    for t in range(8):
        batch.obs[:, t, t % 3, 2 + 3 * t : 8 + 3 * t, 4:12] = 255
    batch.reward = (batch.action == 2).float()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses, rewards = [], []
    for _ in range(30):
        out = model.loss(batch)
        opt.zero_grad()
        out.losses["model"].backward()
        opt.step()
        losses.append(out.metrics["model"])
        rewards.append(out.metrics["reward"])
    assert sum(losses[-3:]) < 0.5 * sum(losses[:3])
    assert sum(rewards[-3:]) < 0.8 * sum(rewards[:3])


# --------------------------------------------------------------------------- sizes


def count(name: str, obs_shape: tuple[int, int, int], actions: int = 6) -> int:
    with torch.device("meta"):
        model = RSSMWorldModel(PRESETS[name], EnvInfo("x", obs_shape, actions))
    return sum(p.numel() for p in model.parameters())


def test_parameter_counts() -> None:
    # Deterministic functions of the spec and env (64×64×3 / 40×40×3, 6 actions).
    assert count("tiny", (3, 64, 64)) == 364_387
    assert count("small", (3, 64, 64)) == 1_929_571
    paper, paper_2d = count("paper", (3, 64, 64)), count("paper-2d", (3, 40, 40))
    assert paper == 66_465_315
    assert paper_2d == 35_027_971
    # s4wm tables 7/8 report 54.1M / 31.2M. The gap is DreamerV3's CNN bottleneck
    # (4×4×384 = 6144 features vs pydreamer's 1536; see the README): within +25 % / +15 %.
    assert 1.0 < paper / 54.1e6 < 1.25
    assert 1.0 < paper_2d / 31.2e6 < 1.15


@pytest.mark.parametrize("k", [2, 3])
def test_start_stride_takes_every_kth_start(k: int) -> None:
    """``start_stride = k``: the start states and ``start_cont`` are those of ``k = 1`` at steps
    0, k, 2k, … (as TSSM-XL and S4WM)."""
    model = tiny_model()
    strided = RSSMWorldModel(model.spec.model_copy(update={"start_stride": k}), model.env).eval()
    strided.load_state_dict(model.state_dict())
    B, T = 2, 7
    batch = make_batch(B, T, seed=3)
    batch.is_first[:, 0] = batch.is_first[1, 3] = True
    batch.terminal[0, 1] = batch.terminal[1, 5] = True
    torch.manual_seed(1)
    every = model.loss(batch)
    torch.manual_seed(1)
    out = strided.loss(batch)
    steps = list(range(0, T, k))
    assert out.start_cont.shape == (B * len(steps),)
    torch.testing.assert_close(out.start_cont, every.start_cont.reshape(B, T)[:, steps].reshape(-1))
    assert set(out.start) == set(every.start)
    for key, value in out.start.items():
        assert not value.requires_grad
        ref = every.start[key].reshape(B, T, *value.shape[1:])[:, steps].reshape(value.shape)
        torch.testing.assert_close(value, ref, msg=key)
    assert all(spec.start_stride == 1 for spec in PRESETS.values())


def test_states_hold_no_next_action_and_the_prior_and_posterior_sample_keep_their_graphs() -> None:
    # catches: observe_step or imagine_step storing the action that led into the state as the one
    # taken in it; the prior reading a detached h_t in observe (the KL would not train the GRU
    # through it); z_t sampled from detached posterior logits (no straight-through gradient from
    # the decoder and heads into the posterior)
    torch.manual_seed(0)
    model = RSSMWorldModel(PRESETS["tiny"], env_info())
    dyn = model.dynamics
    batch = make_batch(2, 3, seed=4)
    embed, action = model.encoder(batch.obs), encode_action(batch.action, model.env)
    with torch.no_grad():
        post, prior = dyn.observe_step(dyn.initial_state(2), embed[:, 0], action[:, 0], batch.is_first[:, 0])
        imagined = dyn.imagine_step(post, action[:, 1])
    assert not post["action"].any() and not prior["action"].any() and not imagined["action"].any()
    inputs = []
    hook = dyn.prior.register_forward_hook(lambda module, args, out: inputs.append(args[0]))
    try:
        post, _ = dyn.observe(embed, action, batch.is_first)
    finally:
        hook.remove()
    assert inputs and all(x.requires_grad for x in inputs)
    weights = torch.randn(post["stoch"].shape)
    grads = torch.autograd.grad((post["stoch"] * weights).sum(), list(dyn.posterior.parameters()), allow_unused=True)
    assert all(g is not None for g in grads) and sum(float(g.abs().sum()) for g in grads) > 0
