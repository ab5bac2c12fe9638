"""REM: POP training forward == recurrent prefix + prediction tokens block by block, exactly two
world-model calls per imagined step, the two faces of observe, start states of two real frames,
the world-model start counter, shared frozen embeddings, the paper preset's sizes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from wmzoo.bench.harness import synthetic_batch
from wmzoo.errors import WmzooError
from wmzoo.imagination import imagine, random_actions
from wmzoo.interfaces import Batch, EnvInfo
from wmzoo.registry import default_registry, world_model_spec
from wmzoo.testing_wiring import sharpen
from wmzoo_plugins.rem import PRESETS, REMSpec, REMWorldModel

ENV = EnvInfo(name="check-16x16", obs_shape=(3, 16, 16), num_actions=3)


def _model(seed: int = 0, **overrides) -> REMWorldModel:
    torch.manual_seed(seed)
    spec = REMSpec.model_validate({**PRESETS["tiny"].model_dump(), **overrides})
    return REMWorldModel(spec, ENV).eval()


def _batch(seed: int, B: int, T: int, firsts: bool) -> Batch:
    torch.manual_seed(seed)
    batch = synthetic_batch(ENV, B, T, torch.device("cpu"))
    batch.is_first[:] = False
    if firsts and T > 2:
        batch.is_first[0, T // 2] = True
    return batch


@settings(max_examples=6, deadline=None)
@given(T=st.integers(1, 7), c=st.integers(1, 4), seed=st.integers(0, 1000), firsts=st.booleans())
def test_pop_training_logits_equal_recurrent_prefix_then_prediction_tokens(T, c, seed, firsts):
    wm = _model(seed, blocks_per_chunk=c)
    batch = _batch(seed, 2, T, firsts)
    with torch.no_grad():
        tokens = wm.tokenizer.encode(batch.obs)
        real, pred = wm.pop_forward(tokens, batch.action, batch.is_first)
        logits = wm.obs_head(pred)
        x = wm.embed_blocks(tokens, batch.action).unflatten(1, (T, wm.block_len))
        state = wm.retnet.initial_state(2)
        for t in range(T):
            state = state * (~batch.is_first[:, t]).float()[:, None, None, None, None]
            torch.testing.assert_close(logits[:, t], wm.predict_tokens(state), atol=1e-4, rtol=1e-4)
            y, state = wm.retnet.recurrent(x[:, t], state)  # token by token
            # atol 1e-3: the per-token GroupNorm of a block's first tokens (a nearly empty state)
            # amplifies float32 rounding to ~3e-4 on rare seeds (seed 885, T 6); a wiring bug is O(1)
            torch.testing.assert_close(real[:, t], y, atol=1e-3, rtol=1e-4)


def test_one_world_model_call_per_imagined_step():
    # Catches: an imagined step falling back to figure 4's two calls run one after the other (a
    # slower step), or running more (K sequential calls, IRIS's): one chunk absorbs the block and
    # runs the prediction tokens (RetNet.absorb_then_predict)
    wm = _model()
    calls = []
    wm.retnet.register_forward_hook(lambda *args: calls.append(1))
    with torch.no_grad():
        start = wm.observe(_batch(0, 3, 4, False))
        calls.clear()
        traj = imagine(wm, random_actions(ENV.num_actions, True), start, 5, decode=True)
    assert len(calls) == 5
    assert traj.images is not None and traj.images.shape == (6, 3, *ENV.obs_shape)


def test_imagined_frames_are_decoded_predicted_tokens():
    wm = _model()
    with torch.no_grad():
        start = wm.observe(_batch(0, 2, 3, False))
        step = wm.imagine_step(start, torch.tensor([0, 2]))
        expected = (wm.tokenizer.decode(step.state["tokens"]) * 255).round().to(torch.uint8)
        assert torch.equal(wm.decode(step.state), expected)
        assert step.features.shape == (2, *wm.feature_shape)
        assert ((step.cont >= 0) & (step.cont <= 1)).all() and (step.reward.abs() <= 1).all()


@pytest.mark.parametrize("first", [None, 1, 4])
def test_observe_chunkwise_equals_observe_step(first):
    # catches: the chunkwise fast path (which has no resets) taken for a batch with an episode
    # start in column 1, where the step-by-step filter resets the state
    wm = _model(1)
    batch = _batch(1, 2, 6, False)
    if first is not None:
        batch.is_first[1, first] = True
    with torch.no_grad():
        fast = wm.observe(batch)
        slow = super(REMWorldModel, wm).observe(batch)
    for key in fast:
        torch.testing.assert_close(fast[key].to(slow[key].dtype), slow[key], atol=1e-5, rtol=1e-4)


def test_start_states_hold_two_real_frames():
    wm = _model(2)
    batch = _batch(2, 2, 5, True)  # is_first at t = 2 in row 0
    out = wm.loss(batch)
    start, _, _ = out.imagination_start()
    tokens = wm.tokenizer.encode(batch.obs)
    with torch.no_grad():
        for b, t in [(0, 1), (0, 2), (0, 4), (1, 0), (1, 3)]:
            n = b * 5 + t
            assert torch.equal(start["tokens"][n], tokens[b, t])
            empty = t == 0 or bool(batch.is_first[b, t])
            x = wm.embed_blocks(tokens[b, t - 1][None, None], batch.action[b, t - 1][None, None])
            expected = torch.zeros_like(start["retnet"][n]) if empty else wm.retnet(x)[1][0]
            torch.testing.assert_close(start["retnet"][n], expected, atol=1e-5, rtol=1e-4)
    assert out.start_cont.shape == (10,)
    # C starts from the same block: its code vectors and action, reset where it is not in t's episode
    assert out.burn_in.features.shape == (10, 1, *wm.feature_shape) and out.burn_in.actions.shape == (10, 1)
    for b, t in [(0, 1), (0, 2), (0, 3), (1, 0), (1, 4)]:
        n, inside = b * 5 + t, t > 0 and not bool(batch.is_first[b, t])
        assert out.burn_in.is_first[n].tolist() == ([True, False] if inside else [False, True])
        if inside:
            torch.testing.assert_close(out.burn_in.features[n, 0], wm.features({"tokens": tokens[b, t - 1][None]})[0])
            assert out.burn_in.actions[n, 0] == batch.action[b, t - 1]


def test_frozen_shared_embeddings():
    # Catches: M's loss training V's code vectors it embeds z_t with (section 2.1: detached).
    wm = _model(3).train()
    out = wm.loss(_batch(3, 2, 4, False))
    out.losses["world_model"].backward()
    assert wm.tokenizer.codebook.grad is None  # M never updates V's code vectors
    assert wm.pred_tokens.grad is not None


def test_weight_decay_skips_biases_norms_and_embeddings():
    wm = _model()
    params, _ = wm.components()["world_model"]
    decayed = {id(p) for p in params if getattr(p, "_optim", {}).get("weight_decay", 1.0) != 0.0}
    assert id(wm.retnet.layers[0].msr.qkv.weight) in decayed
    assert id(wm.retnet.layers[0].msr.qkv.bias) not in decayed
    assert id(wm.action_embed.weight) not in decayed and id(wm.pred_tokens) not in decayed


def test_rejects_mismatched_embedding_widths_and_continuous_actions():
    with pytest.raises(WmzooError, match="embed_dim"):
        world_model_spec("rem", "tiny", {"retnet": {"d_model": 64}})
    with pytest.raises(WmzooError, match="discrete"):
        REMWorldModel(PRESETS["tiny"], EnvInfo("c", (3, 16, 16), 2, discrete=False))


def test_paper_preset_matches_tables():
    spec = default_registry().backbone("rem").presets["paper"]
    assert (spec.retnet.n_layers, spec.retnet.n_heads, spec.retnet.d_model, spec.retnet.d_ff) == (5, 4, 256, 1024)
    assert (spec.retnet.dropout, spec.retnet.norm_eps, spec.blocks_per_chunk, spec.context) == (0.1, 1e-6, 3, 2)
    assert (spec.tokenizer.vocab_size, spec.tokenizer.tokens_per_side) == (512, 8)
    assert (spec.optim.lr, spec.optim.weight_decay, spec.optim.clip, spec.batch_size) == (2e-4, 0.05, 100.0, 64)
    wm = REMWorldModel(spec, EnvInfo("atari", (3, 64, 64), 6))
    assert wm.num_tokens == 64 and wm.feature_shape == (256, 8, 8)
    retnet = sum(p.numel() for p in wm.retnet.parameters())
    # per layer: qkv 3·(256² + 256) + gate, out 2·(256² + 256) + FFN 2·256·1024 + 1024 + 256 + 2 LayerNorms
    assert retnet == 5 * (5 * (256 * 256 + 256) + 2 * 256 * 1024 + 1024 + 256 + 4 * 256)


@pytest.mark.parametrize("actions, official", [(6, 4_757_509), (18, 4_760_581)])
def test_paper_counts_are_the_official_codes(actions, official):
    # Counted by building the official leor-c/REM models (config/*/default.yaml) for 6 and 18
    # actions: tokenizer 3,189,667, world model `official`, actor-critic (test_policy) equal.
    # The official world model allocates an embedding row for every token id (512 observation ids,
    # the A actions and one more) though shared embeddings read only the action rows, and 65
    # prediction tokens of which the last is sliced away: 513 + 1 rows of 256 never read.
    # Catches: a missing or extra layer, bias, head or table row anywhere in V or M.
    spec = default_registry().backbone("rem").presets["paper"]
    wm = REMWorldModel(spec, EnvInfo("atari", (3, 64, 64), actions))
    counts = {name: sum(p.numel() for p in params) for name, (params, _) in wm.components().items()}
    assert counts == {"tokenizer": 3_189_667, "world_model": official - (512 + 1 + 1) * 256}


def test_teacher_forced_imagination_reproduces_the_training_forward(monkeypatch):
    # From the same history, imagine_step fed the recorded tokens (a sampler that returns them)
    # gives the training forward's predictions: reward and termination at a_t's action token,
    # the logits of z_{t+1} from the prediction tokens after (z_t, a_t) is absorbed.
    # Catches: reward/termination read one block late or before the block is absorbed, POP
    # reading the state before instead of after the update, the imagined reward's sign inverted,
    # tokens fed back transposed or shifted.
    wm, T, B = _model(3), 4, 2
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(wm.tokenizer.vocab_size, (B, T, wm.num_tokens), generator=g)
    action = torch.randint(3, (B, T), generator=g)
    with torch.no_grad():
        real, pred = wm.pop_forward(tokens, action, torch.zeros(B, T, dtype=torch.bool))
    seen: list[torch.Tensor] = []
    script: list[torch.Tensor] = []

    class Recorded:
        def __init__(self, logits: torch.Tensor) -> None:
            seen.append(logits)

        def sample(self) -> torch.Tensor:
            return script.pop(0)

    monkeypatch.setattr(torch.distributions, "Categorical", Recorded)
    state = {"retnet": wm.retnet.initial_state(B), "tokens": tokens[:, 0], "valid": torch.ones(B)}
    with torch.no_grad():
        for t in range(T - 1):
            script[:], seen[:] = [tokens[:, t + 1]], []
            step = wm.imagine_step(state, action[:, t])
            probs = wm.reward_head(real[:, t, -1]).softmax(-1)
            torch.testing.assert_close(step.reward, probs[:, 2] - probs[:, 0], atol=1e-5, rtol=1e-4)
            p_end = wm.end_head(real[:, t, -1]).softmax(-1)[:, 1]
            torch.testing.assert_close(step.cont, 1 - p_end, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(seen[0], wm.obs_head(pred[:, t + 1]), atol=1e-4, rtol=1e-4)
            assert torch.equal(step.state["tokens"], tokens[:, t + 1])
            state = step.state


def test_imagined_reward_is_positive_for_the_positive_class():
    # Catches: the expectation p(+1) − p(−1) written the other way round (class 0 is −1).
    wm = _model(0)
    with torch.no_grad():
        wm.reward_head[-1].weight.zero_()  # the logits are the bias: class 2 (reward +1) dominates
        wm.reward_head[-1].bias.copy_(torch.tensor([0.0, 0.0, 5.0]))
        start = {"retnet": wm.retnet.initial_state(2), "tokens": torch.zeros(2, wm.num_tokens, dtype=torch.long), "valid": torch.ones(2)}
        step = wm.imagine_step(start, torch.zeros(2, dtype=torch.long))
    assert (step.reward > 0.9).all()


def test_world_model_loss_targets_by_hand():
    # Which output predicts what, with K = 16: prediction token k of block t predicts z_t^k,
    # the action token of block t predicts reward[t] (sign class) and terminal[t], for t <= T - 2,
    # no loss on the first `context` = 2 blocks (the official code's context_length), on a block
    # that starts an episode (its prediction has seen nothing) or on the transition into it.
    # Catches: targets shifted one block, rewards read one block late, the reward's sign classes
    # flipped, the termination target inverted, the warm-up blocks or an episode's first block
    # scored. The heads are sharpened: an untrained model's logits are nearly flat, so a shifted
    # read would move the loss by less than the tolerance.
    import torch.nn.functional as F

    wm = _model(7)
    sharpen(wm.obs_head, wm.reward_head, wm.end_head)
    batch = _batch(7, 2, 6, True)  # row 0: an episode starts at step 3
    batch.reward[:] = torch.tensor([[1.0, 0.0, -2.0, 0.5, -1.0, 0.0], [0.0, 3.0, 0.0, -0.5, 2.0, 0.0]])
    batch.terminal[:] = False
    batch.terminal[1, 2] = batch.terminal[0, 4] = True
    with torch.no_grad():
        out = wm.loss(batch)
        tokens = wm.tokenizer.encode(batch.obs)
        real, pred = wm.pop_forward(tokens, batch.action, batch.is_first)
        blocks = [(b, t) for b in range(2) for t in range(2, 6) if not batch.is_first[b, t]]
        obs = torch.stack([F.cross_entropy(wm.obs_head(pred[b, t]), tokens[b, t]) for b, t in blocks]).mean()
        acted = [(b, t) for b in range(2) for t in range(2, 5) if not batch.is_first[b, t + 1]]
        assert acted == [(0, 3), (0, 4), (1, 2), (1, 3), (1, 4)]
        sign = (torch.sign(batch.reward) + 1).long()
        reward = torch.stack([
            F.cross_entropy(wm.reward_head(real[b, t, -1])[None], sign[b, t, None]) for b, t in acted
        ]).mean()
        end = torch.stack([
            F.cross_entropy(wm.end_head(real[b, t, -1])[None], batch.terminal[b, t, None].long()) for b, t in acted
        ]).mean()
    assert out.metrics["world_model/obs_loss"] == pytest.approx(obs.item(), rel=1e-4)
    assert out.metrics["world_model/reward_loss"] == pytest.approx(reward.item(), rel=1e-4)
    assert out.metrics["world_model/end_loss"] == pytest.approx(end.item(), rel=1e-4)


def test_imagination_starts_of_the_policys_own_segments():
    # The official actor-critic batch (128 x 21): M starts at each segment's last frame from the
    # block before it; C burns in on every frame before the start with its action. Catches: a
    # start taken one frame early, the burn-in including the start frame or skipping the first,
    # actions shifted against their frames, M's context read from the wrong blocks.
    wm = _model(5)
    segments = _batch(5, 3, 6, True)  # an episode starts at step 3 of row 0
    with torch.no_grad():
        start, cont, burn_in = wm.imagination_starts(segments)
        tokens = wm.tokenizer.encode(segments.obs)
        every, _ = wm._start_states(tokens, segments)  # a start at every step of every row
    last = torch.arange(3) * 6 + 5
    for key in start:
        torch.testing.assert_close(start[key], every[key][last], atol=1e-5, rtol=1e-5)
    assert torch.equal(start["tokens"], tokens[:, -1])
    torch.testing.assert_close(burn_in.features, wm.tokenizer.embed(tokens[:, :-1]).transpose(2, 3).unflatten(3, (4, 4)))
    assert torch.equal(burn_in.actions, segments.action[:, :-1])
    assert torch.equal(burn_in.is_first, segments.is_first) and cont.shape == (3,)


def test_world_model_loss_is_the_sum_of_its_three_terms():
    # catches: the reward or the termination term dropped from M's loss (or weighted), which the
    # per-term metrics, computed apart, do not show
    wm = _model(7)
    sharpen(wm.obs_head, wm.reward_head, wm.end_head)
    with torch.no_grad():
        out = wm.loss(_batch(7, 2, 6, True))
    terms = [out.metrics[f"world_model/{name}_loss"] for name in ("obs", "reward", "end")]
    assert min(terms) > 0.01
    assert float(out.losses["world_model"]) == pytest.approx(sum(terms), rel=1e-5)


def test_next_token_accuracy_metrics_by_hand():
    # catches: the copy baseline compared with the next frame's tokens instead of the previous
    # frame's, or the accuracy read at blocks the loss masks
    wm = _model(8)
    batch = _batch(8, 2, 6, True)  # row 0: an episode starts at step 3
    batch.obs[:, 4] = batch.obs[:, 3]  # frame 4 repeats frame 3: the copy baseline is right there
    with torch.no_grad():
        out = wm.loss(batch)
        tokens = wm.tokenizer.encode(batch.obs)
        _, pred = wm.pop_forward(tokens, batch.action, batch.is_first)
        predicted = wm.obs_head(pred).argmax(-1)
    scored = [(0, 2), (0, 4), (0, 5), (1, 2), (1, 3), (1, 4), (1, 5)]  # t >= context, not a first
    right = torch.stack([(predicted[b, t] == tokens[b, t]).float().mean() for b, t in scored]).mean()
    copied = torch.stack([(tokens[b, t - 1] == tokens[b, t]).float().mean() for b, t in scored]).mean()
    assert out.metrics["world_model/obs_acc"] == pytest.approx(float(right), abs=1e-6)
    assert out.metrics["world_model/obs_acc_copy"] == pytest.approx(float(copied), abs=1e-6)
    assert float(copied) >= 2 / 7  # the repeated frames score: the metric can tell previous from next


def test_embed_blocks_puts_the_frame_tokens_then_the_action_token():
    # catches: the action token placed before the frame's tokens (reward, termination and the
    # action-conditioned prediction then read a position that has not seen the action last)
    wm = _model(9)
    tokens = torch.randint(wm.tokenizer.vocab_size, (2, 3, wm.num_tokens))
    action = torch.randint(3, (2, 3))
    x = wm.embed_blocks(tokens, action).unflatten(1, (3, wm.block_len))
    torch.testing.assert_close(x[:, :, : wm.num_tokens], wm.tokenizer.codebook[tokens])
    torch.testing.assert_close(x[:, :, -1], wm.action_embed(action))


def test_imagination_from_a_training_start_first_absorbs_the_start_block():
    # catches: a training start marked as holding no real frame (valid 0), so its first imagined
    # step skips absorbing (z_t, a_t) and reads reward and next tokens from the older state
    wm = _model(2)
    batch = _batch(2, 2, 5, False)
    with torch.no_grad():
        out = wm.loss(batch)
        start, _, _ = out.imagination_start()
        tokens = wm.tokenizer.encode(batch.obs)
        b, t = 1, 3
        n = b * 5 + t
        one = {k: v[n : n + 1] for k, v in start.items()}
        step = wm.imagine_step(one, batch.action[b, t][None])
        x = wm.embed_blocks(tokens[b, t - 1 : t + 1][None], batch.action[b, t - 1 : t + 1][None])
        expected = wm.retnet(x)[1]
    torch.testing.assert_close(step.state["retnet"], expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("frames, expected", [(5, 5), (0, 16)])
def test_the_tokenizer_trains_on_tokenizer_frames_distinct_frames(frames, expected, monkeypatch):
    # catches: the tokenizer's frame sample one frame short (or long), or drawn with repeats
    wm = _model(0, tokenizer_frames=frames)
    batch = _batch(0, 2, 8, False)
    seen = []
    loss = wm.tokenizer.loss
    monkeypatch.setattr(wm.tokenizer, "loss", lambda x: seen.append(x) or loss(x))
    with torch.no_grad():
        wm.loss(batch)
    (x,) = seen
    assert x.shape[0] == expected
    assert len({bytes(f.numpy()) for f in x}) == expected


def test_a_longer_context_absorbs_its_blocks_oldest_first():
    # catches: the start state's context blocks absorbed newest first (equal to oldest first only
    # for table 7's context of 2, where there is one block)
    wm = _model(4, context=3)
    batch = _batch(4, 2, 5, False)
    with torch.no_grad():
        start, _, _ = wm.loss(batch).imagination_start()
        tokens = wm.tokenizer.encode(batch.obs)
        b, t = 1, 3
        x = wm.embed_blocks(tokens[b, t - 2 : t][None], batch.action[b, t - 2 : t][None])
        expected = wm.retnet(x)[1][0]
    torch.testing.assert_close(start["retnet"][b * 5 + t], expected, atol=1e-5, rtol=1e-4)
