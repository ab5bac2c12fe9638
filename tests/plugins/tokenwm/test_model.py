"""TokenWM world model (wmzoo_plugins.tokenwm): block shapes, post-norm, the memory bank's FIFO
and its reset at episode starts, causality, observe-then-imagine = the training forward's prior,
eq. 1's terms by hand, the table 2 preset."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from wmzoo.errors import SpecError
from wmzoo.interfaces import Batch, EnvInfo
from wmzoo.testing import check_backbone
from wmzoo_plugins.tokenwm import (
    PRESETS,
    CrossBlock,
    FeedForward,
    FiLMBlock,
    PerceiverReadout,
    TokenWMSpec,
    TokenWMWorldModel,
    ViTEncoder,
    push,
)

ENV = EnvInfo(name="t", obs_shape=(3, 16, 16), num_actions=4)


def _model(seed: int = 0, **overrides) -> TokenWMWorldModel:
    torch.manual_seed(seed)
    spec = TokenWMSpec.model_validate({**PRESETS["tiny"].model_dump(), "patch": 4, **overrides})
    return TokenWMWorldModel(spec, ENV).eval()


def _batch(B: int, T: int, seed: int, boundary: int | None = None) -> Batch:
    g = torch.Generator().manual_seed(seed)
    is_first = torch.zeros(B, T, dtype=torch.bool)
    is_first[:, 0] = True
    if boundary is not None:
        is_first[0, boundary] = True
    return Batch(
        obs=torch.randint(0, 256, (B, T, *ENV.obs_shape), generator=g, dtype=torch.uint8),
        action=torch.randint(ENV.num_actions, (B, T), generator=g),
        reward=torch.randn(B, T, generator=g),
        terminal=torch.zeros(B, T, dtype=torch.bool),
        is_first=is_first,
    )


def test_every_block_has_the_shapes_of_section_3():
    # catches: a transposed patch grid, a block that changes the token count or width
    torch.manual_seed(0)
    B, N, D = 2, 5, 16
    x, a = torch.randn(B, N, D), torch.randn(B, 3)
    assert ViTEncoder((3, 16, 16), 4, 24, 1, 4, 2)(torch.zeros(B, 7, 3, 16, 16, dtype=torch.uint8)).shape == (B, 7, 16, 24)
    assert FiLMBlock(D, 4, 2, True, 3)(x, a).shape == (B, N, D)
    assert CrossBlock(D, 4, 2, True, kv_dim=24)(x, torch.randn(B, 9, 24)).shape == (B, N, D)
    assert PerceiverReadout(D, 4, 3, True)(torch.randn(4, B, N, D)).shape == (4, B, 3, D)
    wm = _model()
    state = wm.initial_state(B)
    assert {k: tuple(v.shape) for k, v in state.items()} == {
        "h": (B, 8, 32), "hstar": (B, 8, 32), "bank": (B, 2, 8, 32), "valid": (B, 2)}
    assert wm.feature_shape == (8, 32) and wm.num_patches == 16
    assert wm.reconstruct(state["h"]).shape == (B, 16, 4 * 4 * 3)
    assert wm.decode(state).shape == (B, *ENV.obs_shape)
    assert set(_model(memory=0).initial_state(B)) == {"h", "hstar"}


@given(seed=st.integers(0, 2**16), side=st.sampled_from([4, 8, 16]))
@settings(max_examples=10, deadline=None)
def test_patches_are_the_frame_cut_in_p_by_p_squares(seed: int, side: int):
    # catches: a patch that mixes pixels of two squares (rows and columns swapped in the reshape)
    wm = _model(patch=side)
    frames = torch.randint(0, 256, (2, *ENV.obs_shape), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)
    patches = wm.patches(frames)
    assert torch.equal(wm.unpatch(patches), frames.float() / 255)
    per_row = 16 // side  # patch 1 is the square right of patch 0: rows 0..p-1, columns p..2p-1 when it exists
    k = 1 if per_row > 1 else 0
    square = frames[0, :, :side, k * side : (k + 1) * side].permute(1, 2, 0).reshape(-1).float() / 255
    assert torch.equal(patches[0, k], square)


@pytest.mark.parametrize("post_norm", [True, False])
def test_post_norm_renormalises_every_sub_layer_output(post_norm: bool):
    # catches: the norm placed before the residual (pre-norm) where the paper asks for post-norm
    # (section 3.2), or the other way round
    torch.manual_seed(0)
    x = 10 * torch.randn(2, 5, 16) + 3
    out = FiLMBlock(16, 4, 2, post_norm, 3)(x, torch.randn(2, 3))
    normalised = torch.allclose(out.mean(-1), torch.zeros(2, 5), atol=1e-4) and torch.allclose(
        out.var(-1, correction=0), torch.ones(2, 5), atol=1e-3)
    assert normalised == post_norm
    ff = FeedForward(16, 2, post_norm)(x)
    assert torch.allclose(ff.std(-1, correction=0), torch.ones(2, 5), atol=1e-3) == post_norm


def test_the_bank_is_a_fifo_of_the_last_n_states_reset_at_episode_starts():
    # catches: the newest state pushed at the front, the oldest kept, a bank not emptied at an
    # episode start, an empty slot read by the memory
    bank, valid = torch.zeros(1, 2, 1, 1), torch.zeros(1, 2, dtype=torch.bool)
    for value in (1.0, 2.0, 3.0):
        bank, valid = push(bank, valid, torch.full((1, 1, 1), value))
        if value == 1.0:
            assert valid.tolist() == [[False, True]]
    assert bank.flatten().tolist() == [2.0, 3.0] and valid.tolist() == [[True, True]]

    wm = _model()
    batch = _batch(2, 5, seed=1, boundary=3)
    with torch.no_grad():
        state = wm.initial_state(2)
        hs = []
        for t in range(5):
            state = wm.observe_step(state, batch.obs[:, t], batch.action[:, t - 1] if t else batch.action[:, 0] * 0,
                                    batch.is_first[:, t])
            hs.append(state["h"])
        # after 5 steps (row 0 restarted at t = 3) both banks hold h_3, h_4, oldest first
        assert state["valid"].tolist() == [[True, True], [True, True]]
        for row in (0, 1):
            assert torch.equal(state["bank"][row, 0], hs[3][row]) and torch.equal(state["bank"][row, 1], hs[4][row])
        state = wm.observe_step(state, batch.obs[:, 0], torch.zeros(2, dtype=torch.long), torch.tensor([True, False]))
        assert state["valid"].tolist() == [[False, True], [True, True]]
        # an empty slot is not read: changing it leaves h* unchanged; a full one is
        h, bank, valid = state["h"], state["bank"].clone(), state["valid"]
        base = wm.read_memory(h, bank, valid)
        bank[0, 0] += 5.0
        assert torch.equal(wm.read_memory(h, bank, valid)[0], base[0])
        bank[1, 0] += 5.0
        assert not torch.allclose(wm.read_memory(h, bank, valid)[1], base[1])


def test_h_star_reads_the_bank_before_h_enters_it_and_the_prior_reads_h_star():
    # catches: h pushed before the memory read (h* would read h_t twice and lose h_{t-n}), the
    # prior reading h instead of h* (the memory would not reach the dynamics)
    wm = _model()
    torch.manual_seed(1)
    h, bank = torch.randn(2, 8, 32), torch.randn(2, 2, 8, 32)
    valid = torch.ones(2, 2, dtype=torch.bool)
    with torch.no_grad():
        step = wm.imagine_step({"h": h, "hstar": h, "bank": bank, "valid": valid}, torch.tensor([1, 2]))
        prior = wm.prior(h, torch.eye(4)[[1, 2]])
        torch.testing.assert_close(step.state["h"], prior)
        torch.testing.assert_close(step.state["hstar"], wm.read_memory(prior, bank, valid))
        assert torch.equal(step.state["bank"], torch.stack([bank[:, 1], prior], 1))
        other = wm.imagine_step({"h": h, "hstar": h + 1.0, "bank": bank, "valid": valid}, torch.tensor([1, 2]))
        assert not torch.allclose(other.state["h"], step.state["h"])  # the prior reads h*


@given(k=st.integers(1, 5), seed=st.integers(0, 2**16), memory=st.sampled_from([0, 2]))
@settings(max_examples=10, deadline=None)
def test_outputs_at_t_do_not_depend_on_inputs_after_t(k: int, seed: int, memory: int):
    # catches: attention over the time axis, a bank that holds future states, an encoder batch
    # mixing frames of different steps
    wm = _model(memory=memory)
    batch = _batch(2, 6, seed)
    other = _batch(2, 6, seed + 1)
    changed = Batch(**{f: torch.cat([getattr(batch, f)[:, :k], getattr(other, f)[:, k:]], 1)
                       for f in ("obs", "action", "reward", "terminal", "is_first")})
    with torch.no_grad():
        states, priors = wm.rollout(batch)
        states2, priors2 = wm.rollout(changed)
    for key in states:
        assert torch.equal(states[key][:, :k], states2[key][:, :k]), key
    assert torch.equal(priors[:, : k + 1][:, :k], priors2[:, :k])
    assert not torch.allclose(states["h"][:, k:], states2["h"][:, k:])


@given(T=st.integers(2, 6), boundary=st.one_of(st.none(), st.integers(1, 5)), seed=st.integers(0, 2**16),
       memory=st.sampled_from([0, 1, 3]))
@settings(max_examples=12, deadline=None)
def test_observe_then_imagine_equals_the_training_forwards_prior(T: int, boundary: int | None, seed: int, memory: int):
    # The training forward (rollout) and the recurrent faces (observe_step, imagine_step) agree:
    # the state after observing steps 0..t equals the training state at t, and imagining a_t from
    # it gives the training prior h^p_{t+1}. Catches: a prior reading h instead of h*, an action
    # read one step late, a bank pushed before instead of after the memory read, a missing reset.
    boundary = boundary if boundary is not None and boundary < T else None
    wm = _model(memory=memory, seed=seed % 7)
    batch = _batch(2, T, seed, boundary)
    with torch.no_grad():
        states, priors = wm.rollout(batch)
        state = wm.initial_state(2)
        prev = torch.zeros(2, dtype=torch.long)
        for t in range(T):
            # the contract: where is_first, observe_step is given the zero action
            state = wm.observe_step(state, batch.obs[:, t], prev.masked_fill(batch.is_first[:, t], 0), batch.is_first[:, t])
            for key in state:
                torch.testing.assert_close(state[key], states[key][:, t], atol=1e-5, rtol=1e-5)
            if t + 1 < T:
                step = wm.imagine_step(state, batch.action[:, t])
                keep = ~batch.is_first[:, t + 1]
                torch.testing.assert_close(step.state["h"][keep], priors[:, t + 1][keep], atol=1e-5, rtol=1e-5)
            prev = batch.action[:, t]


def test_eq_1_terms_equal_a_hand_computation():
    # catches: the state and reconstruction weights swapped (eq. 1 vs table 2 labels), the state
    # term counting episode starts or the window's first step, the reconstruction read from the
    # prior instead of the posterior, the heads read from h instead of h*
    wm = _model(state_weight=0.3, recon_weight=7.0, reward_weight=0.5, cont_weight=2.0)
    batch = _batch(3, 6, seed=3, boundary=2)
    batch.is_first[1, 0] = False  # a window that starts inside an episode: its first prior knows nothing either
    out = wm.loss(batch)
    with torch.no_grad():
        states, priors = wm.rollout(batch)
        post = states["h"]
        errors = (post - priors).square().mean((-2, -1))  # [B, T]
        informed = [(b, t) for b in range(3) for t in range(1, 6) if not (b == 0 and t == 2)]
        state = torch.stack([errors[b, t] for b, t in informed]).mean()
        target = batch.obs.float() / 255
        recon = (wm.unpatch(wm.reconstruct(post)) - target).square().mean()
        reward, cont, _ = wm.heads.loss(wm.readout(states["hstar"]).squeeze(-2), batch)
    m = out.metrics
    assert m["state"] == pytest.approx(state.item(), rel=1e-5)
    assert m["recon"] == pytest.approx(recon.item(), rel=1e-5)
    assert m["reward"] == pytest.approx(reward.item(), rel=1e-5) and m["cont"] == pytest.approx(cont.item(), rel=1e-5)
    total = 0.3 * state + 7.0 * recon + 0.5 * reward + 2.0 * cont
    assert out.losses["model"].item() == pytest.approx(total.item(), rel=1e-5)
    assert out.start["h"].shape == (18, 8, 32) and not out.start["h"].requires_grad


def test_paper_preset_is_table_2_and_bad_sizes_are_one_line_errors():
    spec = PRESETS["paper"]
    assert (spec.tokens, spec.dim, spec.prior_layers, spec.posterior_layers, spec.memory_layers) == (64, 512, 2, 4, 2)
    assert (spec.heads, spec.memory, spec.batch_size, spec.seq_len) == (8, 5, 32, 64)
    assert (spec.optim.lr, spec.optim.clip, spec.state_weight, spec.recon_weight) == (1e-4, 100.0, 0.1, 10.0)
    assert spec.post_norm
    with pytest.raises(SpecError, match="model.patch=5 must divide the frame's sides 16x16"):
        TokenWMWorldModel(TokenWMSpec.model_validate({**PRESETS["tiny"].model_dump(), "patch": 5}), ENV)
    with pytest.raises(ValueError, match="dim 30 must be divisible by heads 4"):
        TokenWMSpec.model_validate({**PRESETS["tiny"].model_dump(), "dim": 30})


@pytest.mark.parametrize("overrides", [{}, {"memory": 0}, {"post_norm": False}])
def test_check_backbone(overrides: dict) -> None:
    check_backbone("tokenwm", overrides=overrides)


def test_decode_rounds_the_frame_reconstructed_from_h():
    # catches: decode truncating the pixels to uint8 instead of rounding them, or decoding h*
    wm = _model()
    with torch.no_grad():
        state = wm.observe(_batch(2, 3, seed=4))
        expected = (wm.unpatch(wm.reconstruct(state["h"])).clamp(0, 1) * 255).round().to(torch.uint8)
        assert torch.equal(wm.decode(state), expected)


def test_start_stride_takes_every_kth_start_state_and_its_continue():
    # catches: start_cont not strided like the start states (starts weighted by other steps' ends)
    every, strided = _model(), _model(start_stride=2)
    batch = _batch(2, 5, seed=6)
    batch.terminal[0, 1] = batch.terminal[1, 2] = True
    with torch.no_grad():
        a, b = every.loss(batch), strided.loss(batch)
    steps = [0, 2, 4]
    torch.testing.assert_close(b.start_cont, a.start_cont.view(2, 5)[:, steps].reshape(-1))
    torch.testing.assert_close(b.start["hstar"], a.start["hstar"].view(2, 5, 8, 32)[:, steps].reshape(6, 8, 32))


def test_the_state_term_trains_the_prior():
    # catches: the prior detached in ‖h^q − h^p‖² (the posterior is then pulled to the prior, but
    # nothing pulls the prior, which imagination runs on, to the posterior)
    wm = _model(state_weight=1.0, recon_weight=0.0, reward_weight=0.0, cont_weight=0.0).train()
    batch = _batch(2, 4, seed=5)
    params = list(wm.prior_blocks.parameters())
    got = torch.autograd.grad(wm.loss(batch).losses["model"], params)
    states, priors = wm.rollout(batch)
    hand = (states["h"] - priors).square().mean((-2, -1))[:, 1:].mean()
    for g, e in zip(got, torch.autograd.grad(hand, params)):
        torch.testing.assert_close(g, e, atol=1e-6, rtol=1e-4)


def test_vector_entries_are_encoded_and_reconstructed_in_symlog_space():
    # catches: a vector entry projected (or its reconstruction scored) in raw units instead of
    # symlog (DreamerV3 eq. 10), decode not mapping the reconstruction back through symexp
    from wmzoo.interfaces import obs_entries
    from wmzoo.nn.distributions import symexp, symlog
    from wmzoo.testing import CHECK_DICT_ENV, synthetic_batch

    torch.manual_seed(0)
    wm = TokenWMWorldModel(PRESETS["tiny"], CHECK_DICT_ENV).eval()
    batch = synthetic_batch(CHECK_DICT_ENV, 2, 3, torch.device("cpu"), seed=1)
    state = obs_entries(batch.obs)["state"]
    assert state.abs().max() > 3  # symlog differs from the identity here
    with torch.no_grad():
        torch.testing.assert_close(wm.encode(batch.obs)[..., -1, :], wm.vector_in["state"](symlog(state)))
        out = wm.loss(batch)
        post = wm.rollout(batch)[0]["h"]
        pred = wm.reconstruct_vectors(post)["state"]
        assert out.metrics["recon_state"] == pytest.approx(float((pred - symlog(state)).square().mean()), rel=1e-5)
        last = {k: v[:, -1] for k, v in wm.rollout(batch)[0].items()}
        decoded = obs_entries(wm.decode(last))["state"]
        torch.testing.assert_close(decoded, symexp(wm.reconstruct_vectors(last["h"])["state"]))


def test_a_window_that_starts_inside_an_episode_reads_no_action_at_its_first_step():
    # catches: the rollout's first prior reading action[0], the action taken *after* obs[0] (a
    # window not starting an episode has no previous action: the zero action, as observe_step)
    wm = _model()
    batch = _batch(2, 3, seed=8)
    batch.is_first[:] = False
    other = Batch(**{f: getattr(batch, f).clone() for f in ("obs", "action", "reward", "terminal", "is_first")})
    other.action[:, 0] = (other.action[:, 0] + 1) % ENV.num_actions
    with torch.no_grad():
        (states, priors), (states2, priors2) = wm.rollout(batch), wm.rollout(other)
    torch.testing.assert_close(priors[:, 0], priors2[:, 0])
    torch.testing.assert_close(states["h"][:, 0], states2["h"][:, 0])
    assert not torch.allclose(priors[:, 1], priors2[:, 1])
