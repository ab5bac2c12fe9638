"""Δ-IRIS world model (wmzoo_plugins.delta_iris.model): the parallel training forward = the cached
filtering and teacher-forced imagination (with I-tokens and episode masks), K calls per imagined
step, the loss targets by hand, the presets against the official configs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st

from wmzoo.bench.harness import synthetic_batch
from wmzoo.interfaces import Batch, EnvInfo
from wmzoo.nn.distributions import TwoHot
from wmzoo.testing_wiring import sharpen
from wmzoo_plugins.delta_iris import PRESETS, DeltaIrisSpec, DeltaIrisWorldModel

from .test_tokenizer import official_encoder_count

ENV = EnvInfo(name="t", obs_shape=(3, 16, 16), num_actions=3)


def _model(i_tokens: bool = True, max_blocks: int = 6, seed: int = 0, **kw) -> DeltaIrisWorldModel:
    torch.manual_seed(seed)
    tiny = PRESETS["tiny"].model_dump()
    tiny.update(seq_len=4, max_blocks=max_blocks, i_tokens=i_tokens, **kw)
    tiny["tokenizer"]["codebook_size"] = 16
    return DeltaIrisWorldModel(DeltaIrisSpec.model_validate(tiny), ENV).eval()


def _batch(B: int, T: int, seed: int, boundary: int | None = None) -> Batch:
    batch = synthetic_batch(ENV, B, T, torch.device("cpu"))
    g = torch.Generator().manual_seed(seed)
    batch.obs = torch.randint(0, 256, batch.obs.shape, generator=g, dtype=torch.uint8)
    batch.action = torch.randint(ENV.num_actions, (B, T), generator=g)
    batch.is_first = torch.zeros(B, T, dtype=torch.bool)
    batch.is_first[:, 0] = True
    if boundary is not None:
        batch.is_first[0, boundary] = True
    return batch


def _train_forward(wm: DeltaIrisWorldModel, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = wm.encode_transitions(batch)
    T = batch.shape[1] - 1
    with torch.no_grad():
        out = wm._forward(wm._blocks(batch.obs[:, :T], batch.action[:, :T], tokens), batch.is_first[:, :T])
    return out, tokens


@given(
    i_tokens=st.booleans(), T=st.integers(2, 5), boundary=st.one_of(st.none(), st.integers(1, 4)),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=12, deadline=None)
# catches: without I-tokens, the action after an episode's first frame attending to the previous
# episode (the state's "begin" flag not applied); the burn-in's last I-token not starting the
# episode when the last frame is a first (12 random examples rarely reach either)
@example(i_tokens=False, T=4, boundary=2, seed=0)
@example(i_tokens=True, T=4, boundary=2, seed=0)
def test_cached_filtering_and_teacher_forced_imagination_equal_the_training_forward(
    i_tokens: bool, T: int, boundary: int | None, seed: int
) -> None:
    # For every step t of a batch (an episode start inside row 0 when `boundary`): the state after
    # x_0..x_t — G burnt in on the prefix in one call (observe) or filtered step by step
    # (observe_step, the KV cache) — then a_t and the true Δ-tokens z_{t+1} fed one call at a
    # time (imagination's K calls) give G's training outputs at a_t (reward, end, z¹) and z^k
    # (z^{k+1}). Catches: the cache or positions off by one, an episode mask missing (cached or
    # not), the I-token of the wrong frame, a_t and z in another order, a pending token dropped.
    if boundary is not None and boundary >= T:
        boundary = T - 1
    wm = _model(i_tokens=i_tokens, seed=seed)
    batch = _batch(2, T, seed, boundary)
    out, tokens = _train_forward(wm, batch)
    a, K = wm.a_pos, wm.K
    with torch.no_grad():
        stepped = wm.observe_step(wm.initial_state(2), batch.obs[:, 0], torch.zeros(2, dtype=torch.long),
                                  batch.is_first[:, 0])
        for t in range(T - 1):
            if t:
                stepped = wm.observe_step(stepped, batch.obs[:, t], batch.action[:, t - 1], batch.is_first[:, t])
            burnt = wm.observe(batch.slice(0, t + 1))
            for state in (burnt, stepped):
                _, action_out, logits, chosen = wm._predict(state, batch.action[:, t], tokens[:, t])
                torch.testing.assert_close(action_out, out[:, t, a], atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(logits, wm.head_latents(out[:, t, a : a + K]), atol=1e-5, rtol=1e-5)
                assert torch.equal(chosen, tokens[:, t])


@pytest.mark.parametrize("boundary", [1, 2, 3])
def test_a_new_episode_sees_nothing_of_the_previous_one(boundary: int) -> None:
    # Catches: G attending across an episode start (mask missing or on the wrong token of the
    # block) or positions that keep counting across it.
    wm = _model()
    batch = _batch(2, 5, seed=1, boundary=boundary)
    out, _ = _train_forward(wm, batch)
    alone, _ = _train_forward(wm, batch.slice(boundary, 5))
    torch.testing.assert_close(out[0, boundary:], alone[0], atol=1e-5, rtol=1e-5)
    other = Batch(**{k: v.clone() for k, v in vars(batch).items()})
    other.obs[0, :boundary] = 255 - other.obs[0, :boundary]
    other.action[0, : boundary - 1] = (other.action[0, : boundary - 1] + 1) % 3
    changed, _ = _train_forward(wm, other)
    torch.testing.assert_close(changed[0, boundary:], out[0, boundary:], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(changed[0, : boundary - 1], out[0, : boundary - 1]) or boundary == 1


@pytest.mark.parametrize("i_tokens", [True, False])
def test_k_transformer_calls_per_imagined_step_and_a_reset_on_overflow(i_tokens: bool) -> None:
    wm = _model(i_tokens=i_tokens, max_blocks=4)
    calls: list[int] = []
    wm.transformer.register_forward_hook(lambda _m, args, _o: calls.append(args[0].shape[1]))
    state = wm.observe(_batch(3, 3, seed=2))  # [e(x_0), a_0, z_1, e(x_1), a_1, z_2, e(x_2)]: one call
    assert calls == [2 * wm.block + int(i_tokens)]
    lengths = []
    for step in range(3):
        calls.clear()
        out = wm.imagine_step(state, torch.randint(3, (3,)))
        state = out.state
        assert len(calls) == wm.K, f"step {step}: {calls}"
        lengths.append(int(state["length"][0]))
        assert out.features.shape == (3, *ENV.obs_shape)
        assert torch.equal(out.features * 255, (out.features * 255).round())  # decoded frames are uint8 values
    block = wm.block
    # step 0: a + K-1 tokens; then [z^K, e(x), a] + K-1 each; step 2 overflows 4 blocks and restarts
    assert lengths[0] == 2 * block + int(i_tokens) + wm.K
    assert lengths[1] == lengths[0] + block
    assert lengths[2] == int(i_tokens) + wm.K  # the cache emptied: [e(x_t), a, z¹..z^{K-1}]


def test_imagine_step_decodes_from_the_previous_frame_and_action() -> None:
    # Catches: decoding with the new frame or without the action (the Δ-tokens only describe the
    # change), the pending token or frame of the wrong step.
    wm = _model()
    state = wm.observe(_batch(2, 3, seed=3))
    action = torch.tensor([1, 2])
    step = wm.imagine_step(state, action)
    tokens = step.state["tokens"]
    assert torch.equal(step.state["pending"], tokens[:, -1])
    torch.testing.assert_close(step.features, wm.tokenizer.decode(state["frame"], action, tokens))
    assert torch.equal(wm.decode(step.state), (step.features * 255).round().to(torch.uint8))
    assert torch.equal(wm.features(step.state), step.features)


def test_world_model_loss_targets_by_hand() -> None:
    # The loss equals cross-entropies computed here block by block: z¹ at a_t, z^{k+1} at z^k,
    # reward (two-hot) and end at a_t, the transition into a new episode excluded. Catches: a
    # target shifted by one token or one step, a reward read a step late, a sign flip, the
    # boundary transition counted. The heads are sharpened (an untrained model's logits are
    # nearly flat: about log N wherever they are read), so a shifted read moves the loss by
    # far more than the tolerance.
    wm = _model(latents_weight=0.3, rewards_weight=0.7, ends_weight=1.3)
    sharpen(wm.head_latents, wm.head_reward, wm.head_end)
    batch = _batch(2, 5, seed=4, boundary=2)
    batch.reward = torch.tensor([[1.0, -2.0, 0.5, 3.0, 0.0], [0.0, 1.0, 0.0, -1.0, 0.0]])
    batch.terminal = torch.zeros(2, 5, dtype=torch.bool)
    batch.terminal[1, 2] = True
    batch.terminal[0, 3] = True  # x_4 of row 0 is a terminal observation: no reward or end after it
    tokens = wm.encode_transitions(batch)
    with torch.no_grad():  # the last frame's block too, its Δ-tokens zeros (official)
        out = wm._forward(wm._blocks(batch.obs, batch.action, F.pad(tokens, (0, 0, 0, 1))), batch.is_first)
    a, K = wm.a_pos, wm.K
    z_terms, r_terms, d_terms = [], [], []
    for b in range(2):
        for t in range(5):
            if t < 4 and batch.is_first[b, t + 1] or t == 4 and batch.terminal[b, 3]:
                continue
            for k in range(K if t < 4 else 0):
                logit = wm.head_latents(out[b, t, a + k])
                z_terms.append(F.cross_entropy(logit[None], tokens[b, t, k][None]))
            r_terms.append(-TwoHot(wm.head_reward(out[b, t, a])).log_prob(batch.reward[b, t]))
            d_terms.append(F.cross_entropy(wm.head_end(out[b, t, a])[None], batch.terminal[b, t].long()[None]))
    assert len(r_terms) == 8 and len(z_terms) == 7 * K  # U4: the last action's reward and end too
    expected = (0.3 * torch.stack(z_terms).mean() + 0.7 * torch.stack(r_terms).mean()
                + 1.3 * torch.stack(d_terms).mean())
    with torch.no_grad():
        loss, metrics = wm._world_model_loss(batch, tokens)
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-5)
    assert 0 <= metrics["world_model/token_accuracy"] <= 1


def test_loss_returns_both_components_and_burnt_in_starts() -> None:
    wm = _model()
    wm.train()
    batch = _batch(3, 4, seed=5)
    out = wm.loss(batch)
    assert set(out.losses) == {"tokenizer", "world_model"}
    out.imagination_start()
    assert out.start["frame"].shape == (3, *ENV.obs_shape)
    torch.testing.assert_close(out.start["frame"], batch.obs[:, -1].float() / 255)
    assert out.burn_in is not None and out.burn_in.features.shape[1] == min(wm.spec.burn_in, 3)
    torch.testing.assert_close(out.burn_in.features[:, -1], batch.obs[:, -2].float() / 255)
    assert int(out.start["length"][0]) == 3 * wm.block + 1  # burn_in 3 transitions and e(x_T-1)


def test_sign_reward_head_for_atari() -> None:
    wm = _model(reward="sign")
    state = wm.observe(_batch(2, 3, seed=6))
    reward = wm.imagine_step(state, torch.tensor([0, 1])).reward
    assert set(reward.tolist()) <= {-1.0, 0.0, 1.0}


def test_presets_are_the_official_configs() -> None:
    crafter, atari = PRESETS["paper"], PRESETS["paper-atari"]
    assert (crafter.layers, crafter.heads, crafter.embed_dim, crafter.max_blocks) == (3, 8, 512, 21)
    assert (crafter.batch_size, crafter.seq_len, crafter.burn_in, crafter.reward) == (32, 21, 5, "two-hot")
    assert (crafter.latents_weight, crafter.rewards_weight, crafter.ends_weight) == (1.0, 1.0, 1.0)
    assert (atari.heads, atari.embed_dim, atari.max_blocks, atari.reward) == (4, 256, 26, "sign")
    assert (atari.latents_weight, atari.ends_weight, atari.frame_latent_dim) == (0.1, 0.1, 4)
    # Catches: architectural drift of G from the official world_model.py / transformer.py (a
    # missing LayerNorm, head layer or embedding table, a wrong context length).
    for spec, A, frame_latent, rewards in ((crafter, 17, 8, 255), (atari, 18, 4, 3)):
        wm = DeltaIrisWorldModel(spec, EnvInfo(name="e", obs_shape=(3, 64, 64), num_actions=A))
        assert isinstance(wm.i_token.proj, torch.nn.Identity)  # 8 × 8 × 8 = 512 / 4 × 8 × 8 = 256: no map
        assert wm.block == 6 and wm.capacity == spec.max_blocks * 6
        d = spec.embed_dim
        layer = 2 * d + 4 * (d * d + d) + 2 * d + (4 * d * d + 4 * d) + (4 * d * d + d)
        heads = sum(d * d + d + d * out + out for out in (1024, rewards, 2))
        official = (official_encoder_count(3, 32, frame_latent) + 2 * d + (A + 1024 + spec.max_blocks * 6) * d
                    + 3 * layer + 2 * d + heads)
        count = sum(p.numel() for part in wm._world_model_parts() for p in part.parameters())
        assert count == official, (count, official)


def test_bf16_autocast_trains_and_keeps_the_codebook_float32() -> None:
    # Catches: the EMA codebook update fed bfloat16 vectors under autocast (a dtype error, or a
    # codebook silently rounded to bf16), a loss returned in bf16.
    from wmzoo.optim import step_components, world_model_optimizers

    wm = _model(bf16=True).train()
    optimizers = world_model_optimizers(wm.components())
    before = wm.tokenizer.quantizer.codebook.clone()
    out = wm.loss(_batch(2, 4, seed=7))
    assert all(loss.dtype == torch.float32 and torch.isfinite(loss) for loss in out.losses.values())
    step_components(optimizers, out.losses)
    codebook = wm.tokenizer.quantizer.codebook
    assert codebook.dtype == torch.float32 and not torch.equal(codebook, before)


def test_long_sequences_train_in_windows_overlapping_by_one_frame() -> None:
    # Catches: blocks beyond the context (positions out of range), transitions at window edges
    # lost or counted twice: the loss of 9 frames with max_blocks 4 is the mean over the two
    # windows of 5 frames (0-4, 4-8), each with 4 transitions.
    wm = _model(max_blocks=4)
    batch = _batch(1, 9, seed=8)
    with torch.no_grad():
        tokens = wm.encode_transitions(batch)
        whole, _ = wm._world_model_loss(batch.windows(5, 4), torch.cat([tokens[:, :4], tokens[:, 4:]]))
        parts = [wm._world_model_loss(batch.slice(i, i + 5), tokens[:, i : i + 4])[0] for i in (0, 4)]
        out = wm.loss(batch)
    torch.testing.assert_close(whole, sum(parts) / 2, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.losses["world_model"], whole, atol=1e-5, rtol=1e-5)


def test_token_accuracy_counts_the_tokens_of_the_transitions_the_loss_scores() -> None:
    # catches: the accuracy metric counting the transition into a new episode, or dividing by the
    # transitions instead of their K tokens. Two transitions get the tokens G predicts (greedy, one
    # token at a time), so the metric is far from 0: the masked one (0, 1) and a scored one (1, 2).
    wm = _model()
    sharpen(wm.head_latents)
    batch = _batch(2, 5, seed=4, boundary=2)
    tokens = wm.encode_transitions(batch)
    a, K = wm.a_pos, wm.K

    def outputs() -> torch.Tensor:
        return wm._forward(wm._blocks(batch.obs[:, :4], batch.action[:, :4], tokens), batch.is_first[:, :4])

    with torch.no_grad():
        for b, t in [(0, 1), (1, 2)]:
            for k in range(K):
                tokens[b, t, k] = wm.head_latents(outputs()[b, t, a + k]).argmax(-1)
        predicted = wm.head_latents(outputs()[:, :, a : a + K]).argmax(-1)
        _, metrics = wm._world_model_loss(batch, tokens)
    scored = [(b, t) for b in range(2) for t in range(4) if not batch.is_first[b, t + 1]]
    hits = torch.stack([(predicted[b, t] == tokens[b, t]).float() for b, t in scored])
    assert len(scored) == 7 and float(hits[scored.index((1, 2))].mean()) == 1.0
    assert metrics["world_model/token_accuracy"] == pytest.approx(float(hits.mean()), abs=1e-6)


def test_observe_burns_in_on_the_last_frames_that_fit_the_context() -> None:
    # catches: observe burning in max_blocks transitions (plus e(x_T)) where G's context holds
    # max_blocks blocks, on a batch longer than the context
    wm = _model(max_blocks=4)
    batch = _batch(2, 7, seed=9)
    tokens = wm.encode_transitions(batch)
    with torch.no_grad():
        long, short = wm.observe(batch), wm.observe(batch.slice(3, 7))
        for key in ("length", "position"):
            assert torch.equal(long[key], short[key])
        got, want = (wm._predict(s, batch.action[:, -1], tokens[:, -1])[1] for s in (long, short))
    assert int(long["length"][0]) == 3 * wm.block + 1
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("stepwise", [False, True])
def test_decode_shows_an_observed_frame_as_the_autoencoder_rebuilds_it(stepwise: bool) -> None:
    # catches: decode rebuilding x_t from x_t itself instead of x_{t-1} (prev_frame), rebuilding
    # an episode's first frame (no frame before it) or showing an observed one as is, by observe
    # (the burn-in) or by observe_step
    wm = _model()
    batch = _batch(2, 4, seed=10, boundary=3)  # row 0: the last frame starts an episode
    with torch.no_grad():
        state = wm.observe(batch.slice(1, 4), wm.observe(batch.slice(0, 1))) if stepwise else wm.observe(batch)
        tokens = wm.tokenizer.encode(batch.obs[1, 2], batch.action[1, 2], batch.obs[1, 3])
        rebuilt = wm.tokenizer.decode(batch.obs[1, 2][None], batch.action[1, 2][None], tokens[None])[0]
        shown = wm.decode(state)
    assert torch.equal(shown[0], batch.obs[0, 3])
    assert torch.equal(shown[1], (rebuilt * 255).round().to(torch.uint8))
    assert not torch.equal(shown[1], batch.obs[1, 3])


def test_observe_step_from_the_initial_state_starts_an_episode_even_unflagged() -> None:
    # catches: a first observation not flagged is_first encoded as a transition from the blank
    # initial frame (the initial state holds no frame to start from)
    wm = _model()
    batch = _batch(2, 2, seed=13)
    zero = torch.zeros(2, dtype=torch.long)
    with torch.no_grad():
        flagged = wm.observe_step(wm.initial_state(2), batch.obs[:, 0], zero, torch.ones(2, dtype=torch.bool))
        unflagged = wm.observe_step(wm.initial_state(2), batch.obs[:, 0], zero, torch.zeros(2, dtype=torch.bool))
        assert torch.equal(flagged["length"], unflagged["length"])
        got, want = (wm._predict(s, batch.action[:, 0])[1] for s in (unflagged, flagged))
    torch.testing.assert_close(got, want)


def test_filtering_past_the_context_restarts_from_the_previous_frame() -> None:
    # catches: observe_step, once G's cache is full and emptied, restarting from a_{t-1} without
    # e(x_{t-1}) (the prefix of the frame the cache lost)
    wm = _model(max_blocks=3)
    batch = _batch(2, 7, seed=14)
    tokens = wm.encode_transitions(batch)
    restarts = 0
    with torch.no_grad():
        state = wm.observe(batch.slice(0, 1))
        for t in range(1, 6):
            before = int(state["length"][0])
            state = wm.observe_step(state, batch.obs[:, t], batch.action[:, t - 1], batch.is_first[:, t])
            if int(state["length"][0]) > before:
                continue
            restarts += 1
            burnt = wm.observe(batch.slice(t - 1, t + 1))
            assert torch.equal(state["length"], burnt["length"])
            got, want = (wm._predict(s, batch.action[:, t], tokens[:, t])[1] for s in (state, burnt))
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert restarts >= 1


def test_a_pending_token_of_code_zero_is_fed_before_the_next_step() -> None:
    # catches: the pending z^K of the previous imagined step dropped when its code is 0 (a test
    # `pending > 0` for "some token is pending")
    wm = _model()
    batch = _batch(2, 3, seed=15)
    tokens = wm.encode_transitions(batch)
    tokens[:, 0, -1] = 0
    a = wm.a_pos
    with torch.no_grad():
        out = wm._forward(wm._blocks(batch.obs[:, :2], batch.action[:, :2], tokens), batch.is_first[:, :2])
        state, _, _, _ = wm._predict(wm.observe(batch.slice(0, 1)), batch.action[:, 0], tokens[:, 0])
        state["frame"] = batch.obs[:, 1].float() / 255
        _, action_out, _, _ = wm._predict(state, batch.action[:, 1], tokens[:, 1])
    torch.testing.assert_close(action_out, out[:, 1, a], atol=1e-5, rtol=1e-5)
