"""IRIS world model (wmzoo_plugins.iris.model): cached generation = full forward, K + 1 calls per
imagined step, the loss terms and schedule, presets against the paper."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from wmzoo.bench.harness import synthetic_batch
from wmzoo.interfaces import EnvInfo
from wmzoo.nn.tokenizer import TokenizerSpec
from wmzoo.nn.transformer import KVCache
from wmzoo.testing_wiring import sharpen
from wmzoo_plugins.iris import PRESETS, IrisSpec, IrisWorldModel

ENV = EnvInfo(name="t", obs_shape=(3, 16, 16), num_actions=3)


def _model(side: int = 2, layers: int = 2, heads: int = 2, max_blocks: int = 6, seed: int = 0, **kw) -> IrisWorldModel:
    torch.manual_seed(seed)
    tok = TokenizerSpec(vocab_size=16, embed_dim=8, tokens_per_side=side, channels=8, ch_mult=(1,))
    spec = IrisSpec(
        batch_size=2, seq_len=4, layers=layers, embed_dim=8 * heads, heads=heads, dropout=0.1,
        max_blocks=max_blocks, tokenizer_frames=8, burn_in=2, tokenizer=tok, **kw,
    )
    return IrisWorldModel(spec, ENV).eval()


@given(
    side=st.sampled_from([1, 2, 4]), layers=st.integers(1, 3), heads=st.sampled_from([1, 2]),
    steps=st.integers(1, 4), seed=st.integers(0, 2**16),
)
@settings(max_examples=20, deadline=None)
def test_cached_token_by_token_equals_full_forward(side: int, layers: int, heads: int, steps: int, seed: int) -> None:
    wm = _model(side, layers, heads, max_blocks=steps + 1, seed=seed)
    K, B = wm.K, 2
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(16, (B, steps + 1, K), generator=g)
    action = torch.randint(3, (B, steps + 1), generator=g)
    with torch.no_grad():
        full = wm.sequence(tokens, action).flatten(1, 2)  # [B, (steps + 1)(K + 1), d]
        state = wm._state_from_tokens(tokens[:, 0])
        cache = KVCache(state["cache_k"], state["cache_v"], int(state["length"][0]))
        outs = [wm._call(wm.obs_emb(tokens[:, 0]))]  # the seeding call's outputs, uncached
        for t in range(steps):
            outs.append(wm._call(wm._embed_actions(action[:, t]).unsqueeze(1), cache))
            for k in range(K):
                outs.append(wm._call(wm.obs_emb(tokens[:, t + 1, k]).unsqueeze(1), cache))
        cached = torch.cat(outs, 1)
    n = cached.shape[1]
    torch.testing.assert_close(cached, full[:, :n], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(wm.head_obs(cached), wm.head_obs(full[:, :n]), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("boundary", [1, 2, 3])
def test_a_new_episode_in_a_window_sees_nothing_of_the_previous_one(boundary: int) -> None:
    # Catches: G attending across an episode start inside a training window (mask missing or on
    # the wrong token of the step), or positions that keep counting across it (the steps after
    # a start must match a window that begins there, as imagination from a fresh frame does).
    wm = _model(side=2, max_blocks=4)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(16, (2, 4, wm.K), generator=g)
    action = torch.randint(3, (2, 4), generator=g)
    is_first = torch.zeros(2, 4, dtype=torch.bool)
    is_first[:, 0] = is_first[0, boundary] = True
    with torch.no_grad():
        out = wm.sequence(tokens, action, is_first)
        alone = wm.sequence(tokens[:1, boundary:], action[:1, boundary:])
        torch.testing.assert_close(out[0, boundary:], alone[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out[0, :boundary], wm.sequence(tokens[:1, :boundary], action[:1, :boundary])[0])
        torch.testing.assert_close(out[1], wm.sequence(tokens[1:], action[1:])[0])  # row 1: no start inside
        other = tokens.clone()
        other[0, :boundary] = (other[0, :boundary] + 1) % 16
        torch.testing.assert_close(wm.sequence(other, action, is_first)[0, boundary:], out[0, boundary:])


def test_imagine_step_feeds_action_and_sampled_tokens_in_order() -> None:
    """The cache after two imagined steps equals one uncached call on [z_0, a_0, z_1, a_1, z_2]."""
    wm = _model(side=2, max_blocks=4)
    obs = torch.randint(0, 256, (2, *ENV.obs_shape), dtype=torch.uint8)
    state = wm.observe_step(wm.initial_state(2), obs, torch.zeros(2, dtype=torch.long), torch.ones(2, dtype=torch.bool))
    z0 = state["tokens"]
    a = torch.tensor([[1, 2], [0, 1]])
    s1 = wm.imagine_step(state, a[0]).state
    s2 = wm.imagine_step(s1, a[1]).state
    assert int(s2["length"][0]) == 3 * wm.K + 2
    seq = torch.cat([wm.obs_emb(z0), wm._embed_actions(a[0])[:, None], wm.obs_emb(s1["tokens"]),
                     wm._embed_actions(a[1])[:, None], wm.obs_emb(s2["tokens"])], 1)
    ref = wm.transformer.empty_cache(2, wm.capacity)
    with torch.no_grad():
        wm._call(seq, ref)
    n = ref.length
    torch.testing.assert_close(s2["cache_k"][:, :, :, :n], ref.k[:, :, :, :n], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(s2["cache_v"][:, :, :, :n], ref.v[:, :, :, :n], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(s2["frame"], wm.tokenizer.decode(s2["tokens"]))


@pytest.mark.parametrize("side", [1, 2, 4])
def test_k_plus_one_transformer_calls_per_imagined_step(side: int) -> None:
    wm = _model(side=side, max_blocks=5)
    calls = []
    wm.transformer.register_forward_hook(lambda *_: calls.append(1))
    obs = synthetic_batch(ENV, 3, 4, torch.device("cpu"))
    state = wm.observe(obs)
    assert len(calls) == 1  # the context: the last real frame's K tokens, one call
    for step in range(4):  # 1 + 4 blocks fill the cache exactly
        calls.clear()
        out = wm.imagine_step(state, torch.randint(3, (3,)))
        state = out.state
        assert len(calls) == wm.K + 1, f"step {step}"
        assert out.reward.shape == (3,) and set(out.reward.tolist()) <= {-1.0, 0.0, 1.0}
        assert set(out.cont.tolist()) <= {0.0, 1.0}
        assert out.features.shape == (3, *ENV.obs_shape)
    calls.clear()
    state = wm.imagine_step(state, torch.randint(3, (3,))).state  # overflow: rebuilt from the frame
    assert len(calls) == wm.K + 2 and int(state["length"][0]) == 2 * wm.K + 1


def test_world_model_loss_terms_and_starts() -> None:
    wm = _model(side=2).train()
    data = synthetic_batch(ENV, 2, 4, torch.device("cpu"))
    data.reward[:] = torch.tensor([[-2.0, 0.0, 3.0, 0.5], [0.0, 0.0, 0.0, 0.0]])
    out = wm.loss(data)
    assert out.losses["world_model"].item() > 0
    # the world-model loss does not reach the tokenizer (tokens are computed without gradient)
    out.losses["world_model"].backward()
    assert all(p.grad is None for p in wm.tokenizer.parameters())
    assert any(p.grad is not None for p in wm.transformer.parameters())
    # starts: one per row, at its last frame; burn-in context of 2 frames before it
    out.imagination_start()
    assert out.start["tokens"].shape == (2, wm.K) and out.start_cont.shape == (2,)
    assert out.burn_in is not None and out.burn_in.features.shape == (2, 2, *ENV.obs_shape)
    assert out.burn_in.is_first.shape == (2, 3)
    assert int(out.start["length"][0]) == wm.K


def test_reward_and_end_targets_by_hand() -> None:
    # Sharpened heads: an untrained model's logits are nearly flat, so a target read one step off
    # would change the loss by less than the tolerance.
    wm = _model(side=1, heads=1).eval()
    sharpen(wm.head_obs, wm.head_reward, wm.head_end)
    data = synthetic_batch(ENV, 1, 3, torch.device("cpu"))
    data.reward[:] = torch.tensor([[-0.5, 2.0, 0.0]])
    data.terminal[:] = torch.tensor([[False, True, False]])
    data.is_first[:] = torch.tensor([[True, False, False]])
    tokens = wm.tokenizer.encode(data.obs)
    loss, metrics = wm._world_model_loss(data, tokens)
    with torch.no_grad():
        out = wm.sequence(tokens, data.action)[:, :-1, -1]  # action tokens a_0, a_1
        r = torch.log_softmax(wm.head_reward(out), -1)[0]
        e = torch.log_softmax(wm.head_end(out), -1)[0]
        obs = torch.log_softmax(wm.head_obs(out), -1)[0]
    assert metrics["world_model/reward_ce"] == pytest.approx(-(r[0, 0] + r[1, 2]).item() / 2, rel=1e-4)
    assert metrics["world_model/end_ce"] == pytest.approx(-(e[0, 0] + e[1, 1]).item() / 2, rel=1e-4)
    # K = 1: every obs target is the next frame's token predicted at the action token
    expected = -(obs[0, tokens[0, 1, 0]] + obs[1, tokens[0, 2, 0]]).item() / 2
    assert metrics["world_model/obs_ce"] == pytest.approx(expected, rel=1e-4)


def test_long_sequences_train_in_windows() -> None:
    wm = _model(side=2, max_blocks=3).train()
    out = wm.loss(synthetic_batch(ENV, 2, 7, torch.device("cpu")))
    assert torch.isfinite(out.losses["world_model"])


def test_frames_past_the_last_whole_window_are_left_out_of_the_loss() -> None:
    # catches: the tokens cut into windows from the end while the batch's windows start at frame
    # 0 (each window's tokens then belong to the frames one step later)
    wm = _model(side=2, max_blocks=3)
    batch = synthetic_batch(ENV, 2, 7, torch.device("cpu"))
    with torch.no_grad():
        tokens = wm.tokenizer.encode(batch.obs)
        whole, _ = wm._world_model_loss(batch, tokens)
        cut, _ = wm._world_model_loss(batch.slice(0, 6), tokens[:, :6])
    torch.testing.assert_close(whole, cut)


def test_weight_decay_only_on_linear_weights() -> None:
    wm = _model()
    no_decay = {id(p) for p in wm.parameters() if getattr(p, "_optim", {}).get("weight_decay") == 0.0}
    assert id(wm.pos_emb.weight) in no_decay and id(wm.obs_emb.weight) in no_decay
    assert id(wm.transformer.blocks[0].ln1.weight) in no_decay
    assert id(wm.transformer.blocks[0].attn.qkv.bias) in no_decay
    assert id(wm.transformer.blocks[0].attn.qkv.weight) not in no_decay


def test_paper_presets_sizes() -> None:
    env = EnvInfo(name="atari", obs_shape=(3, 64, 64), num_actions=6)
    paper = IrisWorldModel(PRESETS["paper"], env)
    assert paper.K == 16 and paper.capacity == 20 * 17
    wm_params = sum(p.numel() for part in paper._world_model_parts() for p in part.parameters())
    # IRIS: 8.45M world-model parameters (10 layers, d 256, 340 positions, 512 + A token embeddings, heads)
    assert 8.2e6 < wm_params < 8.6e6
    rem = IrisWorldModel(PRESETS["rem-config"], env)
    assert rem.K == 64 and rem.tokenizer.codebook.shape == (512, 256)
    assert len(rem.transformer.blocks) == 5


def test_teacher_forced_imagination_reproduces_the_training_forward(monkeypatch) -> None:
    # Feeding the recorded tokens through imagine_step (a sampler that records the logits it is
    # given and returns the recorded token) must reproduce the training forward's predictions:
    # reward and termination at a_t, z_{t+1}^1 at a_t, z_{t+1}^k at z_{t+1}^{k-1} (K = 4).
    # Catches: reward/termination read one step (block) late or at a token instead of the action,
    # an observation target shifted by one, imagination predicting before the action is absorbed,
    # tokens fed back in another order than sampled.
    import wmzoo.nn.heads as heads
    import wmzoo_plugins.iris.model as iris_model

    wm, steps, B = _model(side=2, max_blocks=6, seed=3), 3, 2
    K = wm.K
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(16, (B, steps + 1, K), generator=g)
    action = torch.randint(3, (B, steps + 1), generator=g)
    with torch.no_grad():
        out = wm.sequence(tokens, action)  # [B, T, K + 1, d]
    seen: list[torch.Tensor] = []
    script: list[torch.Tensor] = []

    def sampler(logits: torch.Tensor) -> torch.Tensor:
        seen.append(logits)
        return script.pop(0)

    monkeypatch.setattr(iris_model, "sample_class", sampler)  # the tokens
    monkeypatch.setattr(heads, "sample_class", sampler)  # the reward and end heads
    state = wm._state_from_tokens(tokens[:, 0])
    for t in range(steps):
        reward_class, end_class = torch.tensor([2, 0]), torch.tensor([0, 1])
        script[:] = [reward_class, end_class, *tokens[:, t + 1].unbind(1)]
        seen.clear()
        step = wm.imagine_step(state, action[:, t])
        with torch.no_grad():
            torch.testing.assert_close(seen[0], wm.head_reward(out[:, t, -1]), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(seen[1], wm.head_end(out[:, t, -1]), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(seen[2], wm.head_obs(out[:, t, -1]), atol=1e-5, rtol=1e-5)
            for k in range(1, K):
                torch.testing.assert_close(seen[2 + k], wm.head_obs(out[:, t + 1, k - 1]), atol=1e-5, rtol=1e-5)
        assert torch.equal(step.reward, torch.tensor([1.0, -1.0]))  # class c is reward c - 1
        assert torch.equal(step.cont, torch.tensor([1.0, 0.0]))  # class 1 is an end
        assert torch.equal(step.state["tokens"], tokens[:, t + 1])
        state = step.state


def test_world_model_loss_targets_by_hand() -> None:
    # Which position predicts which token, with K = 4: the loss equals cross-entropies computed
    # here position by position. Catches: targets shifted by one token or one step, the last
    # token of a frame predicting the next frame's first (it is the action's job), within-frame
    # targets leaking the token they predict. Sharpened heads make every shifted read visible.
    wm = _model(side=2, max_blocks=4, seed=5)
    sharpen(wm.head_obs, wm.head_reward, wm.head_end)
    torch.manual_seed(5)
    batch = synthetic_batch(ENV, 2, 4, torch.device("cpu"))
    batch.is_first[:] = False
    batch.terminal[:] = False
    batch.reward[:] = torch.tensor([[1.0, 0.0, -2.0, 0.0], [0.0, 3.0, 0.0, 0.0]])
    with torch.no_grad():
        tokens = wm.tokenizer.encode(batch.obs)
        loss, _ = wm._world_model_loss(batch, tokens)
        out = wm.sequence(tokens, batch.action)
        F = torch.nn.functional
        obs_terms = []
        for t in range(4):
            for k in range(1, wm.K):  # z_t^{k+1} from the output at z_t^k
                obs_terms.append(F.cross_entropy(wm.head_obs(out[:, t, k - 1]), tokens[:, t, k], reduction="none"))
            if t + 1 < 4:  # z_{t+1}^1 from the output at a_t
                obs_terms.append(F.cross_entropy(wm.head_obs(out[:, t, -1]), tokens[:, t + 1, 0], reduction="none"))
        obs = torch.stack(obs_terms).mean()
        sign = (torch.sign(batch.reward[:, :3]) + 1).long()  # reward[t] follows a_t
        reward = torch.stack([F.cross_entropy(wm.head_reward(out[:, t, -1]), sign[:, t], reduction="none") for t in range(3)]).mean()
        end = torch.stack([F.cross_entropy(wm.head_end(out[:, t, -1]), torch.zeros(2, dtype=torch.long), reduction="none") for t in range(3)]).mean()
    assert loss.item() == pytest.approx((obs + reward + end).item(), rel=1e-5)


def test_imagination_starts_of_the_policys_own_segments() -> None:
    # IRIS's 64 x 21 actor-critic batch: the cache holds each segment's last frame, the burn_in
    # frames before it are reconstructions. Catches: a start one frame early, a burn-in that
    # includes the start frame.
    wm = _model(side=2, max_blocks=4)
    segments = synthetic_batch(ENV, 2, 5, torch.device("cpu"))
    with torch.no_grad():
        start, cont, burn_in = wm.imagination_starts(segments)
        tokens = wm.tokenizer.encode(segments.obs)
    assert torch.equal(start["tokens"], tokens[:, -1]) and int(start["length"][0]) == wm.K
    torch.testing.assert_close(burn_in.features, wm.tokenizer.decode(tokens[:, 2:4]))  # burn_in 2
    assert torch.equal(burn_in.is_first, segments.is_first[:, 2:]) and cont.shape == (2,)


def test_obs_loss_and_accuracy_leave_out_the_transition_into_an_episode() -> None:
    # catches: the next-token loss divided by every transition where it sums the scored ones, the
    # accuracy metrics counting the transition into a new episode, reading the within-frame
    # predictions one token off, or comparing the copy baseline with the next frame. Row 0 starts
    # an episode at step 2: its across term a_1 → z_2^1 is not scored.
    wm = _model(side=2, max_blocks=4, seed=6)
    sharpen(wm.head_obs)
    torch.manual_seed(6)
    batch = synthetic_batch(ENV, 2, 4, torch.device("cpu"))
    batch.is_first[:] = False
    batch.is_first[0, 2] = True
    batch.obs[1, 2] = batch.obs[1, 1]  # a repeated frame: the copy baseline is right there
    F = torch.nn.functional
    with torch.no_grad():
        tokens = wm.tokenizer.encode(batch.obs)
        _, metrics = wm._world_model_loss(batch, tokens)
        out = wm.sequence(tokens, batch.action, batch.is_first)
    terms, hits, copies = [], [], []
    with torch.no_grad():
        for b in range(2):
            for t in range(4):
                for k in range(1, wm.K):
                    terms.append(F.cross_entropy(wm.head_obs(out[b, t, k - 1]), tokens[b, t, k]))
                if t + 1 < 4 and not batch.is_first[b, t + 1]:
                    terms.append(F.cross_entropy(wm.head_obs(out[b, t, -1]), tokens[b, t + 1, 0]))
                    logits = torch.stack([out[b, t, -1], *out[b, t + 1, : wm.K - 1]])
                    hits.append((wm.head_obs(logits).argmax(-1) == tokens[b, t + 1]).float())
                    copies.append((tokens[b, t] == tokens[b, t + 1]).float())
    assert metrics["world_model/obs_ce"] == pytest.approx(float(torch.stack(terms).mean()), rel=1e-5)
    assert metrics["world_model/obs_acc"] == pytest.approx(float(torch.cat(hits).mean()), abs=1e-6)
    assert metrics["world_model/obs_acc_copy"] == pytest.approx(float(torch.cat(copies).mean()), abs=1e-6)
    assert float(torch.cat(copies).mean()) >= 0.2


def test_the_tokenizer_trains_on_tokenizer_frames_frames(monkeypatch) -> None:
    # catches: the tokenizer's frame sample one frame short
    wm = _model(side=2)
    seen = []
    loss = wm.tokenizer.loss
    monkeypatch.setattr(wm.tokenizer, "loss", lambda x: seen.append(x.shape[0]) or loss(x))
    with torch.no_grad():
        wm.loss(synthetic_batch(ENV, 2, 6, torch.device("cpu")))
    assert seen == [8]


def test_short_segments_burn_in_on_every_frame_before_the_start() -> None:
    # catches: the burn-in one frame short when the segment is shorter than burn_in + 1
    wm = _model(side=2)  # burn_in 2
    segments = synthetic_batch(ENV, 2, 2, torch.device("cpu"))
    with torch.no_grad():
        _, _, burn_in = wm.imagination_starts(segments)
        tokens = wm.tokenizer.encode(segments.obs)
    torch.testing.assert_close(burn_in.features, wm.tokenizer.decode(tokens[:, :1]))


def test_a_start_cache_is_built_without_dropout_and_decoded_frames_round() -> None:
    # catches: the start state's cache built with dropout while the model trains (a noisy
    # prediction context), decode truncating the frame to uint8 instead of rounding it
    wm = _model(side=2).train()  # dropout 0.1
    tokens = torch.randint(16, (2, wm.K), generator=torch.Generator().manual_seed(0))
    a, b = wm._state_from_tokens(tokens), wm._state_from_tokens(tokens)
    assert wm.transformer.training
    n = int(a["length"][0])
    torch.testing.assert_close(a["cache_k"][..., :n, :], b["cache_k"][..., :n, :])
    torch.testing.assert_close(a["cache_v"][..., :n, :], b["cache_v"][..., :n, :])
    assert torch.equal(wm.decode(a), (a["frame"] * 255).round().to(torch.uint8))
