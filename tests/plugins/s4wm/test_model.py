"""The S4WM backbone: contract, parallel = recurrent (imagination and filtering), resets,
carried segments, causality, the KL balancing of eq. 9, presets and parameter counts."""

from __future__ import annotations

from functools import cache

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import wmzoo_plugins.s4wm
from wmzoo.errors import WmzooError
from wmzoo.interfaces import Batch, EnvInfo, State
from wmzoo.nn import OneHotCategoricalST
from wmzoo.nn.heads import masked_mean
from wmzoo.optim import step_components, world_model_optimizers
from wmzoo.registry import default_registry
from wmzoo.testing import check_backbone, check_stochastic_features
from wmzoo_plugins.s4wm import PRESETS, S4WMSpec, S4WMWorldModel, wmzoo_backbones
from wmzoo_plugins.s4wm.s4 import S4DLayer

ACTIONS = 5
LATENT_KEYS = ("deter", "stoch", "logits", "ssm")
VARIANTS = [{}, {"posterior": "full"}, {"mlp": False}]


def env_info(size: int = 32) -> EnvInfo:
    return EnvInfo("test", (3, size, size), ACTIONS)


@cache
def tiny_model(posterior: str = "factorised", mlp: bool = True) -> S4WMWorldModel:
    torch.manual_seed(0)
    spec = PRESETS["tiny"].model_copy(update={"posterior": posterior, "mlp": mlp})
    return S4WMWorldModel(spec, env_info()).eval()


def variant(overrides: dict) -> S4WMWorldModel:
    return tiny_model(overrides.get("posterior", "factorised"), overrides.get("mlp", True))


def make_batch(B: int, T: int, seed: int = 0, firsts: tuple[int, ...] = ()) -> Batch:
    g = torch.Generator().manual_seed(seed)
    is_first = torch.zeros(B, T, dtype=torch.bool)
    for t in firsts:
        is_first[:, t] = True
    return Batch(
        obs=torch.randint(0, 256, (B, T, 3, 32, 32), generator=g, dtype=torch.uint8),
        action=torch.randint(0, ACTIONS, (B, T), generator=g),
        reward=torch.randn(B, T, generator=g),
        terminal=torch.zeros(B, T, dtype=torch.bool),
        is_first=is_first,
    )


def assert_states_close(a: State, b: State, keys=LATENT_KEYS, t: int | None = None) -> None:
    for key in keys:
        x = a[key] if t is None else a[key][:, t]
        torch.testing.assert_close(x, b[key], rtol=1e-4, atol=1e-4, msg=key)


# --------------------------------------------------------------------------- registration


def test_entry_and_presets() -> None:
    (entry,) = wmzoo_backbones()
    assert entry.name == "s4wm" and entry.spec is S4WMSpec and entry.build is S4WMWorldModel
    assert set(entry.presets) == {"tiny", "small", "paper", "paper-2d", "no-mlp", "full-posterior"}
    paper = PRESETS["paper"]  # s4wm table 7, S4WM column
    assert (paper.batch_size, paper.n_layers, paper.d_model, paper.d_ff) == (8, 6, 512, 2048)
    assert (paper.stoch, paper.classes, paper.cnn_depth, paper.cnn_stages, paper.hidden) == (32, 32, 48, 4, 1000)
    assert (paper.optim.lr, paper.optim.weight_decay, paper.optim.clip, paper.optim.warmup) == (1e-3, 1e-2, 1000, 1000)
    assert paper.kl.weights == (0.8, pytest.approx(0.2)) and paper.kl.free == 0
    p2d = PRESETS["paper-2d"]  # table 8
    assert (p2d.cnn_depth, p2d.cnn_stages, p2d.hidden, p2d.n_layers, p2d.d_model) == (32, 3, 512, 6, 512)
    assert not PRESETS["no-mlp"].mlp and PRESETS["full-posterior"].posterior == "full"
    for spec in PRESETS.values():
        assert S4WMSpec.model_validate(spec.model_dump()) == spec
    with pytest.raises(ValueError, match="even"):
        S4WMSpec(state_size=33)
    with pytest.raises(ValueError, match="dt_min"):
        S4WMSpec(dt_min=0.5, dt_max=0.1)


@pytest.mark.parametrize("overrides", VARIANTS, ids=["factorised", "full-posterior", "no-mlp"])
def test_check_backbone(overrides: dict) -> None:
    registry = default_registry()
    if "s4wm" not in registry.tables["backbone"]:
        registry.register(wmzoo_plugins.s4wm)
    check_backbone("s4wm", overrides=overrides)


# --------------------------------------------------------------------------- shapes


@given(B=st.integers(1, 3), T=st.integers(2, 6), v=st.sampled_from(VARIANTS))
@settings(max_examples=8, deadline=None)
def test_shape_contract(B: int, T: int, v: dict) -> None:
    model = variant(v)
    spec = model.spec
    ssm = (spec.n_layers, 2, spec.d_model, spec.state_size // 2, 2)
    shapes = {
        "deter": (spec.d_model,),
        "stoch": (spec.stoch, spec.classes),
        "logits": (spec.stoch, spec.classes),
        "action": (ACTIONS,),
        "ssm": ssm,
        **({"post_ssm": ssm} if spec.posterior == "full" else {}),
    }
    assert model.feature_shape == (spec.d_model + spec.stoch * spec.classes,)
    assert {k: tuple(v.shape) for k, v in model.initial_state(B).items()} == {k: (B, *s) for k, s in shapes.items()}
    out = model.loss(make_batch(B, T))
    out.imagination_start()
    assert {k: tuple(v.shape) for k, v in out.start.items()} == {k: (B * T, *s) for k, s in shapes.items()}
    assert {k: tuple(v.shape) for k, v in out.carry.items()} == {k: (B, *s) for k, s in shapes.items()}
    assert out.start_cont.shape == (B * T,)
    step = model.imagine_step(out.carry, torch.zeros(B, dtype=torch.long))
    assert {k: tuple(v.shape) for k, v in step.state.items()} == {k: (B, *s) for k, s in shapes.items()}
    assert step.reward.shape == step.cont.shape == (B,)


# --------------------------------------------------------------------------- parallel = recurrent


@pytest.mark.parametrize("overrides", VARIANTS, ids=["factorised", "full-posterior", "no-mlp"])
@torch.no_grad()
def test_imagination_from_context_equals_parallel_prior(overrides: dict) -> None:
    """Algorithm 2 = algorithm 1: the recurrent form from the state after the context, fed the
    parallel pass's posterior z and the same actions, gives the parallel prior logits."""
    model = variant(overrides)
    C, T = 7, 13
    batch = make_batch(2, T, seed=3, firsts=(0,))
    post, prior_logits, _, _ = model.sequence(batch, sample=False)
    state = model.observe(batch.slice(0, C), sample=False)
    assert_states_close(post, state, ("deter", "stoch", "logits"), t=C - 1)
    for t in range(C, T):
        step = model.imagine_step(state, batch.action[:, t - 1], sample=False)
        torch.testing.assert_close(step.state["logits"], prior_logits[:, t], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(step.state["deter"], post["deter"][:, t], rtol=1e-4, atol=1e-4)
        state = {**step.state, "stoch": post["stoch"][:, t]}


@pytest.mark.parametrize("overrides", VARIANTS, ids=["factorised", "full-posterior", "no-mlp"])
@torch.no_grad()
def test_observe_parallel_equals_observe_steps_with_resets(overrides: dict) -> None:
    model = variant(overrides)
    batch = make_batch(2, 11, seed=4, firsts=(0, 6))
    batch.is_first[1, 6] = False
    batch.is_first[1, 9] = True
    B, T = batch.shape
    parallel = model.observe(batch, sample=False)
    _, _, _, every = model.sequence(batch, sample=False, all_states=True)
    state, prev = model.initial_state(B), torch.zeros(B, dtype=torch.long)
    for t in range(T):
        state = model.observe_step(state, batch.obs[:, t], prev, batch.is_first[:, t], sample=False)
        prev = batch.action[:, t]
        for key in every:  # the start states of imagination are the filtered states
            torch.testing.assert_close(every[key][:, t], state[key], rtol=1e-4, atol=1e-4)
    keys = LATENT_KEYS + (("post_ssm",) if model.full_posterior else ())
    assert_states_close(parallel, state, keys)
    # after the reset at 6, row 0 no longer depends on what came before
    fresh = model.observe(batch.slice(6, T), sample=False)
    torch.testing.assert_close(fresh["logits"][0], parallel["logits"][0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(fresh["deter"][0], parallel["deter"][0], rtol=1e-4, atol=1e-4)


@torch.no_grad()
def test_carried_segments_equal_one_pass() -> None:
    """Stateful training: a window split in two with the carry = one long parallel pass."""
    model = tiny_model()
    batch = make_batch(3, 14, seed=5, firsts=(0,))
    post, prior, last, _ = model.sequence(batch, sample=False)
    post_1, prior_1, carry, _ = model.sequence(batch.slice(0, 5), sample=False)
    post_2, prior_2, last_2, _ = model.sequence(batch.slice(5, 14), carry, sample=False)
    torch.testing.assert_close(torch.cat([prior_1, prior_2], 1), prior, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.cat([post_1["deter"], post_2["deter"]], 1), post["deter"], rtol=1e-4, atol=1e-4)
    assert_states_close(last_2, last)
    assert model.stateful_training and torch.equal(carry["action"], torch.eye(ACTIONS)[batch.action[:, 4]])
    # the trainer's reset of a re-assigned row (is_first[:, 0]) drops the carried state
    reset = batch.slice(5, 14)
    reset.is_first[:, 0] = True
    _, prior_r, _, _ = model.sequence(reset, carry, sample=False)
    _, prior_f, _, _ = model.sequence(reset, sample=False)
    torch.testing.assert_close(prior_r, prior_f)


@pytest.mark.parametrize("overrides", VARIANTS, ids=["factorised", "full-posterior", "no-mlp"])
@pytest.mark.parametrize("change", ["obs", "action", "both"])
@torch.no_grad()
def test_causality(overrides: dict, change: str) -> None:
    """Changing x_t or a_t for t > t0 changes nothing up to t0 and, one step on, neither h_{t0+1}
    nor the prior at t0 + 1: h_t = S4(g_{≤t}) with g_t = MLP([z_{t−1}, a_{t−1}]) reads z and a
    only up to t − 1. Bugs caught: any future leak, and the one-step leaks (h_t reading a_t or
    z_t, or the S4 convolution shifted by one step), in every variant (the default included)."""
    model = variant(overrides)
    batch = make_batch(2, 12, seed=6, firsts=(0,))
    t0 = 5
    changed = make_batch(2, 12, seed=7)
    obs, action = batch.obs.clone(), batch.action.clone()
    if change in ("obs", "both"):
        obs[:, t0 + 1 :] = changed.obs[:, t0 + 1 :]
    if change in ("action", "both"):
        action[:, t0 + 1 :] = (batch.action[:, t0 + 1 :] + 1) % ACTIONS
    other = Batch(obs=obs, action=action, reward=batch.reward, terminal=batch.terminal, is_first=batch.is_first)
    post_a, prior_a, _, _ = model.sequence(batch, sample=False)
    post_b, prior_b, _, _ = model.sequence(other, sample=False)
    # h and the prior at t0 + 1 read z_{≤t0} and a_{≤t0} only; the posterior at t0 + 1 reads x_{t0+1}
    for a, b in [(post_a["deter"], post_b["deter"]), (prior_a, prior_b)]:
        torch.testing.assert_close(a[:, : t0 + 2], b[:, : t0 + 2], rtol=1e-5, atol=1e-5)
        assert (a[:, t0 + 2 :] - b[:, t0 + 2 :]).abs().max() > 1e-3  # the future did change
    logits_a, logits_b = post_a["logits"], post_b["logits"]
    torch.testing.assert_close(logits_a[:, : t0 + 1], logits_b[:, : t0 + 1], rtol=1e-5, atol=1e-5)
    if change == "action":  # the posterior reads x_t (and a_{t−1} when full) only
        torch.testing.assert_close(logits_a[:, t0 + 1], logits_b[:, t0 + 1], rtol=1e-5, atol=1e-5)
    else:
        assert (logits_a[:, t0 + 1] - logits_b[:, t0 + 1]).abs().max() > 1e-3
        assert not torch.equal(post_a["stoch"][:, t0 + 1], post_b["stoch"][:, t0 + 1])  # z_{t0+1} moved


@given(seed=st.integers(0, 10_000), v=st.sampled_from(VARIANTS))
@settings(max_examples=6, deadline=None)
def test_features_carry_the_stochastic_latent(seed: int, v: dict) -> None:
    """features = [h_t, flat z_t], with z_t's straight-through gradient, and the decoder reads z_t.
    Bug caught: the stochastic latent silently dropped from the features (zeros, detached, the
    logits instead), so the decoder, heads and policy see the deterministic h_t only."""
    model = variant(v)
    with torch.no_grad():
        state = model.observe(make_batch(2, 3, seed=seed), sample=False)
    check_stochastic_features(model, state, seed)


@pytest.mark.parametrize("overrides", VARIANTS, ids=["factorised", "full-posterior", "no-mlp"])
def test_every_s4_parameter_learns_from_the_world_model_loss(overrides: dict) -> None:
    """Every parameter of every S4 layer (log Δ, Λ as log(−Re Λ) and Im Λ, B, C, D; the prior's
    stack and the full posterior's) gets a finite gradient, non-zero in (almost) every entry, from
    the world-model loss, is in the optimizer's groups and moves in one step. Bug caught: an S4
    parameter frozen (requires_grad off, detached in the kernel or the recurrence, or left out of
    the optimizer), which training would never notice."""
    torch.manual_seed(0)
    model = S4WMWorldModel(variant(overrides).spec, env_info())
    layers = [m for m in model.modules() if isinstance(m, S4DLayer)]
    assert len(layers) == 2 * model.spec.n_layers * (2 if model.full_posterior else 1)
    s4 = [(f"{i}.{name}", p) for i, layer in enumerate(layers) for name, p in layer.named_parameters()]
    assert {name.split(".")[1] for name, _ in s4} == {"log_dt", "log_neg_re", "imag", "B", "C", "D"}
    optimizers = world_model_optimizers(model.components())
    optimized = {id(p) for opt in optimizers.values() for group in opt.opt.param_groups for p in group["params"]}
    before = {name: p.detach().clone() for name, p in s4}
    step_components(optimizers, model.loss(make_batch(2, 8, seed=1, firsts=(0,))).losses)
    for name, p in s4:
        assert p.requires_grad and id(p) in optimized, name
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        # non-zero almost everywhere (Im C of the real mode Λ_0 = −1/2 has none while B is real)
        assert (p.grad != 0).float().mean() > 0.9, name
        assert not torch.equal(p.detach(), before[name]), name


# --------------------------------------------------------------------------- loss


def test_kl_balancing_and_no_kl_at_episode_starts() -> None:
    """Eq. 9 with α = 0.8: the prior gets 0.8 of the KL gradient; eq. 7: no KL where is_first."""
    torch.manual_seed(0)
    spec = PRESETS["tiny"].model_copy(update={"recon_scale": 0.0, "reward_scale": 0.0, "cont_scale": 0.0})
    model = S4WMWorldModel(spec, env_info())
    assert spec.kl.weights == (0.8, pytest.approx(0.2)) and spec.kl.free == 0
    batch = make_batch(2, 8, seed=8, firsts=(0, 4))
    torch.manual_seed(1)
    out = model.loss(batch)
    prior_params = list(model.prior.parameters())
    grads = torch.autograd.grad(out.losses["model"], prior_params)

    torch.manual_seed(1)  # same samples
    post, prior_logits, _, _ = model.sequence(batch)
    kl = OneHotCategoricalST(post["logits"].detach()).kl(OneHotCategoricalST(prior_logits)).sum(-1)
    plain = masked_mean(kl, ~batch.is_first)
    assert out.metrics["kl"] == pytest.approx(plain.item(), rel=1e-5)
    assert out.losses["model"].item() == pytest.approx(plain.item(), rel=1e-5)  # α + (1 − α) = 1, free 0
    expected = torch.autograd.grad(0.8 * plain, prior_params)
    for g, e in zip(grads, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-7)
    assert abs(kl.mean().item() - plain.item()) > 1e-3  # the mask matters on this batch


def test_the_kl_trains_the_s4_blocks_through_the_prior() -> None:
    # catches: the prior reading a detached h_t (the KL then trains the prior's head but not the
    # S4 blocks that make h_t: with the other terms off, they would get no gradient at all)
    torch.manual_seed(0)
    spec = PRESETS["tiny"].model_copy(update={"recon_scale": 0.0, "reward_scale": 0.0, "cont_scale": 0.0})
    model = S4WMWorldModel(spec, env_info())
    out = model.loss(make_batch(2, 5, seed=9, firsts=(0,)))
    grads = torch.autograd.grad(out.losses["model"], list(model.blocks.parameters()), allow_unused=True)
    assert all(g is not None for g in grads) and sum(float(g.abs().sum()) for g in grads) > 0


def test_carry_only_where_the_spec_streams_episodes() -> None:
    # catches: a carry returned with carry_state false (the trainer would then start an unrelated
    # random window from the last one's S4 states)
    torch.manual_seed(0)
    model = S4WMWorldModel(PRESETS["tiny"].model_copy(update={"carry_state": False}), env_info())
    assert not model.stateful_training
    with torch.no_grad():
        assert model.loss(make_batch(2, 3, seed=1, firsts=(0,))).carry is None


@pytest.mark.parametrize("overrides", VARIANTS, ids=["factorised", "full-posterior", "no-mlp"])
def test_recurrent_states_do_not_know_the_next_action_and_imagining_leaves_the_posterior_stack(
    overrides: dict,
) -> None:
    # catches: observe_step or imagine_step storing the action that led *into* the state as the
    # action taken *in* it (a parallel pass continuing the state would read it a step late), and
    # imagination moving the full posterior's own S4 states (no observation to filter)
    model = variant(overrides)
    batch = make_batch(2, 2, seed=2, firsts=(0,))
    with torch.no_grad():
        state = model.observe_step(model.initial_state(2), batch.obs[:, 0], batch.action[:, 0], batch.is_first[:, 0])
        state = model.observe_step(state, batch.obs[:, 1], batch.action[:, 0], batch.is_first[:, 1])
        step = model.imagine_step(state, batch.action[:, 1])
    assert not state["action"].any() and not step.state["action"].any()
    if "post_ssm" in state:
        assert torch.equal(step.state["post_ssm"], state["post_ssm"])


# --------------------------------------------------------------------------- sizes

PARAMS = {  # EnvInfo((3, 64, 64), 6 actions); paper-2d at 40×40
    "tiny": 317_955,
    "small": 1_522_659,
    "paper": 45_098_979,  # table 7: 41.1M (+9.7 %, README)
    "paper-2d": 28_188_163,  # table 8: 28.1M (+0.3 %)
    "no-mlp": 32_494_563,
    "full-posterior": 63_093_027,
}


@pytest.mark.parametrize("name", PARAMS)
def test_parameter_counts(name: str) -> None:
    env = EnvInfo("count", (3, 40, 40) if name == "paper-2d" else (3, 64, 64), 6)
    with torch.device("meta"):
        model = S4WMWorldModel(PRESETS[name], env)
    count = sum(p.numel() for p in model.parameters())
    assert count == PARAMS[name]
    if name == "paper":
        assert abs(count / 41.1e6 - 1) < 0.10
    if name == "paper-2d":
        assert abs(count / 28.1e6 - 1) < 0.01


@pytest.mark.parametrize("overrides", VARIANTS, ids=["factorised", "full-posterior", "no-mlp"])
@pytest.mark.parametrize("k", [2, 4, 5])
def test_start_stride_takes_every_kth_start(overrides: dict, k: int) -> None:
    """``start_stride = k``: the start states and ``start_cont`` are those of ``k = 1`` at steps
    0, k, 2k, … (resets inside chunks and on a start, a terminal, a carried state), detached."""
    model = variant(overrides)
    strided = S4WMWorldModel(model.spec.model_copy(update={"start_stride": k}), model.env).eval()
    strided.load_state_dict(model.state_dict())
    B, T = 2, 11
    batch = make_batch(B, T, seed=6, firsts=(0, 4))
    batch.is_first[1, 4], batch.is_first[1, 5] = False, True
    batch.terminal[0, 2] = batch.terminal[1, 7] = True  # obs 3 (row 0) and 8 (row 1) are terminal
    carry = model.loss(make_batch(B, 5, seed=7)).carry
    torch.manual_seed(1)
    every = model.loss(batch, carry)
    every.imagination_start()
    torch.manual_seed(1)
    out = strided.loss(batch, carry)
    out.imagination_start()  # deferred: built only when a policy imagines
    steps = list(range(0, T, k))
    assert out.start_cont.shape == (B * len(steps),)
    torch.testing.assert_close(out.start_cont, every.start_cont.reshape(B, T)[:, steps].reshape(-1))
    assert set(out.start) == set(every.start)
    for key, value in out.start.items():
        assert not value.requires_grad
        ref = every.start[key].reshape(B, T, *value.shape[1:])[:, steps].reshape(value.shape)
        torch.testing.assert_close(value, ref, rtol=1e-4, atol=1e-4, msg=key)
    torch.testing.assert_close(out.losses["model"], every.losses["model"])
    assert 0.0 in every.start_cont.tolist()


@pytest.mark.parametrize("overrides", VARIANTS, ids=["factorised", "full-posterior", "no-mlp"])
def test_start_states_are_built_only_when_a_policy_imagines_and_equal_the_eager_ones(overrides: dict) -> None:
    # Catches: deferred start states computed from the stepped parameters or from a graph-carrying
    # input (a start state that differs from the one the loss saw, or holds a graph), and a loss
    # that still computes them when no policy reads them (the offline studies' wasted third).
    model = variant(overrides)
    batch = make_batch(2, 9, seed=3, firsts=(0, 5))
    torch.manual_seed(2)
    out = model.loss(batch)
    assert out.start is None and out.starts is not None
    calls = []
    strided = S4DLayer._strided_states
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(S4DLayer, "_strided_states", staticmethod(lambda *a: calls.append(1) or strided(*a)))
        torch.manual_seed(2)
        skipped = model.loss(batch)
        skipped.discard_starts()
        assert calls == []  # never computed
        start, cont, _ = out.imagination_start()
        assert calls  # computed now
    torch.manual_seed(2)
    _, _, _, every = model.sequence(batch, all_states=model.spec.start_stride)  # the eager form
    for key in every:
        torch.testing.assert_close(start[key], every[key].flatten(0, 1), msg=key)
        assert not start[key].requires_grad
    out.losses["model"].backward()  # the loss's graph is untouched by building the starts


def test_paper_presets_stride_starts() -> None:
    assert all(PRESETS[name].start_stride == 8 for name in ("paper", "paper-2d", "no-mlp", "full-posterior"))
    assert all(PRESETS[name].start_stride == 1 for name in ("tiny", "small"))


def ssm_groups(spec: S4WMSpec) -> tuple[dict, dict, S4WMWorldModel]:
    """The optimizer groups of the S4 parameters Δ, Λ, B and of every other weight."""
    from wmzoo.optim import world_model_optimizers

    wm = S4WMWorldModel(spec, env_info())
    (opt,) = world_model_optimizers(wm.components()).values()
    ssm = {id(p) for n, p in wm.named_parameters() if n.rsplit(".", 1)[-1] in ("log_dt", "log_neg_re", "imag", "B")}
    (own,) = [g for g in opt.opt.param_groups if {id(p) for p in g["params"]} == ssm]
    (rest,) = [g for g in opt.opt.param_groups if g is not own]
    return own, rest, wm


@pytest.mark.parametrize("lr, expected", [(1e-3, 1e-3), (3e-3, 1e-3), (3e-4, 3e-4)])
def test_s4_parameters_train_at_s4s_rate_without_weight_decay(lr: float, expected: float) -> None:
    """Catches: Δ, Λ and B at 0.1 × the model's rate (1e-4 at S4WM's 1e-3), which the README
    called "as in S4's code"; S4's code registers them with ``lr = min(0.001, lr)`` and no weight
    decay (its ``register`` / example), so at S4WM's 1e-3 they train at the model's rate. Also:
    C, D or another weight moved into their group, or their weight decay left on."""
    optim = PRESETS["tiny"].optim.model_copy(update={"lr": lr})
    own, rest, wm = ssm_groups(PRESETS["tiny"].model_copy(update={"optim": optim}))
    assert own["lr"] == pytest.approx(expected) and own["weight_decay"] == 0.0
    assert rest["lr"] == pytest.approx(lr) and rest["weight_decay"] == wm.spec.optim.weight_decay
    assert len(own["params"]) == 4 * 2 * wm.spec.n_layers  # 4 per S4 layer, 2 layers a block


def test_a_saved_relative_ssm_rate_loads_as_the_same_rate() -> None:
    """Catches: a run or checkpoint saved with the former ``ssm_lr_scale`` refused on resume, or
    read at a different rate than it trained with."""
    saved = {**PRESETS["tiny"].model_dump(exclude={"ssm_lr"}), "ssm_lr_scale": 0.25}
    spec = S4WMSpec.model_validate(saved)
    assert spec.ssm_lr == pytest.approx(0.25 * PRESETS["tiny"].optim.lr)
    own, _, _ = ssm_groups(spec)
    assert own["lr"] == pytest.approx(0.25 * PRESETS["tiny"].optim.lr)


def test_the_policy_can_read_the_s4_hidden_state_and_nothing_else_changes() -> None:
    """``policy_reads='output+hidden'``: the policy's features are ``[h_t, z_t]`` followed by the S4
    state of the same step, in training starts, filtering and imagination alike; the losses,
    rewards, continues and decoded frames are those of the same weights with ``'output'``.
    Catches: the state of another step (the one before or after an update) appended, the heads or
    the decoder handed the longer features, a feature_shape the policy is built with that the
    features do not have."""
    torch.manual_seed(0)
    spec = PRESETS["tiny"].model_copy(update={"policy_reads": "output+hidden"})
    wm = S4WMWorldModel(spec, env_info()).eval()
    plain = tiny_model()
    wm.load_state_dict(plain.state_dict())  # the option adds no parameter
    batch = make_batch(2, 6, firsts=(3,))
    torch.manual_seed(1)
    out = wm.loss(batch)
    torch.manual_seed(1)
    ref = plain.loss(batch)
    torch.testing.assert_close(out.losses["model"], ref.losses["model"])
    assert out.features is None and ref.features is not None
    start, _, _ = out.imagination_start()
    feat = wm.features(start)
    hidden = feat.shape[-1] - plain.feature_shape[0]
    assert wm.feature_shape == (feat.shape[-1],) and hidden == start["ssm"][0].numel() > 0
    torch.testing.assert_close(feat[:, :-hidden], plain.features(start))
    torch.testing.assert_close(feat[:, -hidden:], start["ssm"].flatten(1))
    action = torch.zeros(feat.shape[0], dtype=torch.long)
    torch.manual_seed(2)
    step = wm.imagine_step(start, action)
    torch.manual_seed(2)
    ref_step = plain.imagine_step(start, action)
    torch.testing.assert_close(step.reward, ref_step.reward)
    torch.testing.assert_close(step.features[:, -hidden:], step.state["ssm"].flatten(1))  # the new step's
    assert not torch.equal(step.state["ssm"], start["ssm"])
    torch.testing.assert_close(wm.decode(step.state), plain.decode(step.state))
    state = wm.observe_step(wm.initial_state(2), batch.obs[:, 0], batch.action[:, 0], batch.is_first[:, 0])
    torch.testing.assert_close(wm.features(state)[:, -hidden:], state["ssm"].flatten(1))
    torch.manual_seed(3)
    rewards = wm.observe_sequence(batch).rewards
    torch.manual_seed(3)
    torch.testing.assert_close(rewards, plain.observe_sequence(batch).rewards)
    with pytest.raises(WmzooError, match="parallel form only"):
        wm.observe_sequence(batch, step=True)
