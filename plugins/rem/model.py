"""REM: a retentive token world model with Parallel Observation Prediction (POP).

Paper:
    Cohen, Wang, Kang, Mannor, "Improving Token-Based World Models with Parallel Observation
    Prediction", 2024 (arXiv:2402.05643): section 2 (V-M-C, eq. 1-3),
    2.2 (chunkwise retention, eq. 4-5), 2.3 (POP imagination, figure 4), 2.4 (POP training,
    eq. 6-7, algorithms 1-2, figure 6), appendix A.1 (tables 2, 3, 7), A.2 (algorithms 3-7).

Notation (the paper's block ``(z_t, a_t)`` is wmzoo's ``(tokens of obs[t], action[t])``):
    z_t  the K tokens of frame t from the tokenizer V (``wmzoo.nn.tokenizer``) [tokens]
    E    V's codebook; M embeds z_t with it and never updates it (section 2.1) [detached]
    u    K learned prediction tokens E_u (section 2.3) [pred_tokens]
    S_t  the RetNet state after the blocks (z_1, a_1) .. (z_t, a_t) [state "retnet"]

    p(ẑ_{t+1} | z_1, a_1, .., z_t, a_t, u)   obs head on the outputs of u read from S_t (eq. 1)
    p(r̂_t | z_1, a_1, .., z_t, a_t)          reward head on the output of a_t's token (eq. 2)
    p(d_t | z_1, a_1, .., z_t, a_t)          termination head, same token (eq. 3)

A state is ``{"retnet": S [B, layers, heads, d_h, d_h], "tokens": z_t [B, K] (int64), "valid" [B]}``:
the retention state summarising every block *before* the current frame, the current frame's tokens
(what the policy reads) and whether those tokens are a real frame (0 in the initial state).
Retention states are kept in their own frame (``wmzoo.nn.retention``), so states of different time
steps batch together.

File order: spec → world model → presets.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import Tensor, nn

from wmzoo.errors import SpecError
from wmzoo.hookspecs import RunPreset
from wmzoo.interfaces import Batch, BurnIn, EnvInfo, State, Step, TrainOutput, WorldModel
from wmzoo.nn.heads import EndHead, SignRewardHead, TokenHead, masked_mean, reward_cont_targets, start_conts
from wmzoo.nn.retention import RetNet, RetNetSpec
from wmzoo.nn.tokenizer import Tokenizer, TokenizerSpec, next_token_accuracy
from wmzoo.optim import decay_linear_weights_only
from wmzoo.specs import OptimSpec, WorldModelSpec

# --------------------------------------------------------------------------- spec


class REMSpec(WorldModelSpec):
    """REM's world model M and tokenizer V (defaults: REM tables 2, 3 and 7)."""

    tokenizer: TokenizerSpec = Field(TokenizerSpec(), description="the VQ-VAE V (table 4)")
    retnet: RetNetSpec = Field(RetNetSpec(), description="the RetNet of M (table 7, appendix A.3)")
    blocks_per_chunk: int = Field(
        3, ge=1, le=1000, description="c: observation-action blocks per training chunk (table 7: 3)"
    )
    context: int = Field(
        2, ge=1, le=1000,
        description="real frames an imagination starts from (table 7: world model context length 2)",
    )
    reward_loss: Literal["sign", "mse"] = Field(
        "sign",
        description="'sign': 3-class cross-entropy on sign(r) (discrete Atari rewards, section 2.4); "
        "'mse': mean-squared error for continuous rewards",
    )
    tokenizer_frames: int = Field(
        128, ge=0, le=100_000,
        description="frames of each batch the tokenizer trains on (table 3: batch 128; 0: all)",
    )
    optim: OptimSpec = Field(
        OptimSpec(lr=2e-4, weight_decay=0.05, clip=100.0),
        description="optimizer of M (table 3: lr 2e-4, wd 0.05, clip 100)",
    )

    @model_validator(mode="after")
    def _shared_embeddings(self) -> REMSpec:
        if self.tokenizer.embed_dim != self.retnet.d_model:
            raise ValueError(
                f"tokenizer.embed_dim {self.tokenizer.embed_dim} must equal retnet.d_model "
                f"{self.retnet.d_model}: M embeds tokens with V's code vectors"
            )
        return self


# --------------------------------------------------------------------------- world model


class REMWorldModel(WorldModel):
    """Tokenizer V and retentive world model M with POP (training: algorithms 1-2; imagination:
    figure 4's two RetNet calls per imagined step, run as one chunk)."""

    spec: REMSpec

    def __init__(self, spec: REMSpec, env: EnvInfo) -> None:
        super().__init__()
        if not env.discrete:
            raise SpecError(f"backbone 'rem' needs discrete actions; env {env.name!r} has continuous ones")
        self.spec, self.env = spec, env
        self.tokenizer = Tokenizer(spec.tokenizer, env.obs_shape)
        self.num_tokens = self.tokenizer.num_tokens
        self.block_len = self.num_tokens + 1  # K observation tokens and the action token
        d = spec.retnet.d_model
        self.retnet = RetNet(spec.retnet)
        self.action_embed = nn.Embedding(env.num_actions, d)
        self.pred_tokens = nn.Parameter(torch.randn(self.num_tokens, d) * 0.02)  # E_u
        self.obs_head = TokenHead(d, self.tokenizer.vocab_size)
        self.reward_head = SignRewardHead(d) if spec.reward_loss == "sign" else TokenHead(d, 1)
        self.end_head = EndHead(d)
        # as the official code: M's weight decay skips biases, norms and embeddings
        decay_linear_weights_only(*(m for name, m in self.named_children() if name != "tokenizer"))
        self.pred_tokens._optim = {"weight_decay": 0.0}  # type: ignore[attr-defined]  # E_u: an embedding
        side = self.tokenizer.side
        self.feature_shape = (spec.tokenizer.embed_dim, side, side)

    # -- parameters ---------------------------------------------------------------------
    def components(self) -> dict[str, tuple[list[nn.Parameter], OptimSpec]]:
        tokenizer = list(self.tokenizer.parameters())
        owned = {id(p) for p in tokenizer}
        world_model = [p for p in self.parameters() if id(p) not in owned]
        return {
            "tokenizer": (tokenizer, self.spec.tokenizer.optim),
            "world_model": (world_model, self.spec.optim),
        }

    # -- sequences of blocks --------------------------------------------------------------
    def embed_blocks(self, tokens: Tensor, action: Tensor) -> Tensor:
        """Blocks ``(z_t, a_t)`` → embeddings ``[N, T·(K+1), d]``; obs tokens use V's code
        vectors without gradient (section 2.1), actions M's own table."""
        obs = F.embedding(tokens, self.tokenizer.codebook.detach())  # [N, T, K, d]
        act = self.action_embed(action.long())[..., None, :]
        return torch.cat([obs, act], -2).flatten(-3, -2)

    def _token_resets(self, is_first: Tensor) -> Tensor:
        """``is_first [N, T]`` → resets on the first token of each block ``[N, T·(K+1)]``."""
        reset = torch.zeros(*is_first.shape, self.block_len, dtype=torch.bool, device=is_first.device)
        reset[..., 0] = is_first
        return reset.flatten(-2)

    def pop_forward(self, tokens: Tensor, action: Tensor, is_first: Tensor) -> tuple[Tensor, Tensor]:
        """Algorithm 6's forward: chunks of ``c`` blocks through algorithm 1 from an empty state.

        Returns the real tokens' outputs ``[N, T, K+1, d]`` and the prediction tokens' outputs
        ``[N, T, K, d]`` (block ``t``'s predict ``z_t`` from the state before block ``t``).
        """
        N, T = tokens.shape[:2]
        L, c = self.block_len, self.spec.blocks_per_chunk
        x = self.embed_blocks(tokens, action)
        reset = self._token_resets(is_first)
        reset[:, 0] = False  # the state is empty at the start anyway
        state, real, pred = None, [], []
        for start in range(0, T, c):
            n = min(c, T - start)
            sl = slice(start * L, (start + n) * L)
            u = self.pred_tokens.expand(N, n, *self.pred_tokens.shape)
            y, yu, state = self.retnet.pop_forward(x[:, sl], u, state, L, reset[:, sl])
            real.append(y)
            pred.append(yu)
        return torch.cat(real, 1).unflatten(1, (T, L)), torch.cat(pred, 1)

    # -- training -------------------------------------------------------------------------
    def loss(self, batch: Batch, carry: State | None = None) -> TrainOutput:
        """V's equation 8 on ``tokenizer_frames`` frames of the batch, and M's cross-entropies of
        the next tokens, the reward (sign classes or MSE) and the termination (section 2.4).

        Table 3's "M starts after 20 epochs" is ``optim.start``: the trainer computes and logs
        M's loss before it but gives it no gradient.
        """
        spec = self.spec
        frames = batch.obs.flatten(0, 1)
        if spec.tokenizer_frames and frames.shape[0] > spec.tokenizer_frames:
            frames = frames[torch.randperm(frames.shape[0], device=frames.device)[: spec.tokenizer_frames]]
        tok_loss, metrics = self.tokenizer.loss(frames)

        with torch.no_grad():
            tokens = self.tokenizer.encode(batch.obs)  # [B, T, K]
        wm_loss, wm_metrics = self._world_model_loss(batch, tokens)
        metrics.update(wm_metrics)

        def starts() -> tuple[State, Tensor, BurnIn]:  # built only when a policy imagines from them
            start, burn_in = self._start_states(tokens, batch)
            return start, start_conts(batch).flatten(), burn_in

        return TrainOutput(losses={"tokenizer": tok_loss, "world_model": wm_loss}, metrics=metrics, starts=starts)

    def _world_model_loss(self, batch: Batch, tokens: Tensor) -> tuple[Tensor, dict[str, float]]:
        """M's loss on the batch's tokens ``[B, T, K]``: cross-entropies of the next tokens (POP),
        the reward and the termination (section 2.4)."""
        spec = self.spec
        B, T = batch.shape
        real, pred = self.pop_forward(tokens, batch.action, batch.is_first)
        logits = self.obs_head(pred)  # [B, T, K, N]
        # the official code's loss skips the first `context` blocks of a segment (its
        # `context_length`, table 7): their state has seen less than an imagination start's
        obs_mask = ~batch.is_first
        obs_mask[:, : spec.context] = False
        ce = F.cross_entropy(logits.flatten(0, 2), tokens.flatten(), reduction="none")
        obs_loss = masked_mean(ce.view(B, T, -1).mean(-1), obs_mask)
        act_out = real[:, :-1, -1]  # the action token of blocks 0..T-2
        reward_target, cont_target, mask = reward_cont_targets(batch)
        mask[:, : spec.context] = False
        if isinstance(self.reward_head, SignRewardHead):
            reward_loss = self.reward_head.loss(act_out, reward_target, mask)
        else:
            reward_loss = masked_mean((self.reward_head(act_out).squeeze(-1) - reward_target) ** 2, mask)
        end_loss = self.end_head.loss(act_out, 1.0 - cont_target, mask)
        wm_loss = obs_loss + reward_loss + end_loss
        metrics = {
            "world_model/obs_loss": float(obs_loss.detach()),
            "world_model/reward_loss": float(reward_loss.detach()),
            "world_model/end_loss": float(end_loss.detach()),
            **next_token_accuracy(logits.argmax(-1)[obs_mask], tokens[obs_mask], tokens.roll(1, 1)[obs_mask]),
        }
        return wm_loss, metrics

    @torch.no_grad()
    def _start_states(self, tokens: Tensor, batch: Batch) -> tuple[State, BurnIn]:
        """An imagination start at every step ``t`` (``[B·T]``): the state of the ``context − 1``
        blocks before ``t`` within ``t``'s episode, built from an empty state, and ``z_t`` (REM's
        context of two real frames, table 7 and the official code; not the whole segment).

        The same blocks initialise C (section 2: "M and C are initialized with a short trajectory
        segment"): their code vectors ``[B·T, context − 1, d, s, s]``, actions and reset flags
        ``[B·T, context]`` (set before the first block inside ``t``'s episode, and at ``t`` itself
        when none is) for :meth:`Policy.burn_in`."""
        B, T = batch.shape
        was = self.retnet.training
        self.retnet.eval()
        state = self.retnet.initial_state(B * T, tokens.device)
        episode = batch.is_first.long().cumsum(1)  # [B, T]
        t = torch.arange(T, device=tokens.device)
        features, actions, valids = [], [], []
        for back in range(self.spec.context - 1, 0, -1):  # blocks t − back, oldest first
            idx = (t - back).clamp(min=0)
            valid = ((t >= back) & (episode[:, idx] == episode)).flatten()  # [B·T]
            z, a = tokens[:, idx].flatten(0, 1), batch.action[:, idx].flatten(0, 1)
            _, new = self.retnet(self.embed_blocks(z[:, None], a[:, None]), state, keep_last=0)
            state = torch.where(valid[:, None, None, None, None], new, state)
            features.append(self.features({"tokens": z}))
            actions.append(a)
            valids.append(valid)
        self.retnet.train(was)
        start = {"retnet": state, "tokens": tokens.flatten(0, 1), "valid": torch.ones(B * T, device=tokens.device)}
        # validity only grows towards t: reset before the first valid block, or at t if none is
        valid = torch.stack([torch.zeros_like(valid), *valids, torch.ones_like(valid)], 1)  # [B·T, C + 1]
        first = valid[:, 1:] & ~valid[:, :-1]
        if not features:  # context 1: the start frame alone
            empty = BurnIn(self.features(start)[:, None][:, :0], first, batch.action.flatten(0, 1)[:, None][:, :0])
            return start, empty
        return start, BurnIn(torch.stack(features, 1), first, torch.stack(actions, 1))

    @torch.no_grad()
    def imagination_starts(self, segments: Batch) -> tuple[State, Tensor, BurnIn]:
        """The official actor-critic batch (128 × 21 with ``rem-ac`` ``paper``'s ``segment``): M
        starts at each segment's last frame from its ``context − 1`` blocks before (as
        :meth:`_start_states`), and C burns in on every frame before it, with its action (the
        official config's 20 frames; reset where an episode starts)."""
        B, T = segments.shape
        tokens = self.tokenizer.encode(segments.obs)  # [B, T, K]
        c = min(self.spec.context, T)  # only the blocks M's start state reads
        starts, _ = self._start_states(tokens[:, T - c :], segments.slice(T - c, T))
        last = torch.arange(B, device=tokens.device) * c + (c - 1)
        start = {k: v[last] for k, v in starts.items()}
        cont = start_conts(segments)[:, -1]
        features = self.features({"tokens": tokens[:, :-1].flatten(0, 1)}).unflatten(0, (B, T - 1))
        return start, cont, BurnIn(features, segments.is_first, segments.action[:, :-1])

    # -- filtering and imagination -----------------------------------------------------------
    def initial_state(self, batch_size: int) -> State:
        device = self.pred_tokens.device
        return {
            "retnet": self.retnet.initial_state(batch_size, device),
            "tokens": torch.zeros(batch_size, self.num_tokens, dtype=torch.long, device=device),
            "valid": torch.zeros(batch_size, device=device),
        }

    def _absorb(self, state: State, action: Tensor) -> tuple[Tensor, Tensor]:
        """One RetNet call over the block ``(z_t, a_t)``: the action token's output ``[B, d]`` (the
        only one read) and the new state (eq. 4-5)."""
        x = self.embed_blocks(state["tokens"][:, None], action[:, None])
        y, new = self.retnet(x, state["retnet"], keep_last=1)
        assert new is not None
        keep = state["valid"].bool()[:, None, None, None, None]  # no real frame yet: nothing to absorb
        return y[:, -1], torch.where(keep, new, state["retnet"])

    def observe_step(self, state: State, obs: Tensor, prev_action: Tensor, is_first: Tensor) -> State:
        """Absorb the previous block ``(z_{t−1}, a_{t−1})`` (reset where ``is_first``) and
        tokenize ``obs``."""
        _, retnet = self._absorb(state, prev_action)
        retnet = retnet * (~is_first.bool()).to(retnet.dtype)[:, None, None, None, None]
        tokens = self.tokenizer.encode(obs)
        return {"retnet": retnet, "tokens": tokens, "valid": torch.ones_like(state["valid"])}

    def observe(self, batch: Batch, state: State | None = None) -> State:
        """From an empty state: all blocks but the last in one chunkwise pass (chunks of ``c``
        blocks), the last frame tokenized; otherwise step by step."""
        B, T = batch.shape
        if state is not None or T < 2 or bool(batch.is_first[:, 1:].any()):
            return super().observe(batch, state)
        tokens = self.tokenizer.encode(batch.obs)
        x = self.embed_blocks(tokens[:, :-1], batch.action[:, :-1])
        _, retnet = self.retnet.chunkwise(x, self.spec.blocks_per_chunk * self.block_len)
        return {"retnet": retnet, "tokens": tokens[:, -1], "valid": torch.ones(B, device=tokens.device)}

    def predict_tokens(self, retnet: Tensor) -> Tensor:
        """POP (section 2.3): logits ``[B, K, N]`` of the next frame's tokens from one RetNet call
        over the prediction tokens ``u``, reading the state without updating it."""
        u = self.pred_tokens.expand(retnet.shape[0], *self.pred_tokens.shape)
        y, _ = self.retnet(u, retnet, update_state=False)
        return self.obs_head(y)

    def imagine_step(self, state: State, action: Tensor) -> Step:
        """Figure 4 / algorithm 7: call 1 absorbs ``(z_t, a_t)`` and reads the reward and
        termination at the action token; call 2 runs ``u`` from the new state and samples all K
        next tokens at once. The two calls run as one chunk of ``L + K`` tokens where the state
        holds a real frame (:meth:`RetNet.absorb_then_predict`: the same outputs and state, one
        pass through the layers). Reward and continue are returned as expectations (the engine
        weights by continue probabilities) rather than samples."""
        if bool(state["valid"].all()):  # both calls in one chunk (RetNet.absorb_then_predict)
            x = self.embed_blocks(state["tokens"][:, None], action[:, None])
            u = self.pred_tokens.expand(x.shape[0], *self.pred_tokens.shape)
            out, y, retnet = self.retnet.absorb_then_predict(x, u, state["retnet"])
            logits = self.obs_head(y)
        else:  # a state without a real frame absorbs nothing (_absorb), then predicts
            out, retnet = self._absorb(state, action)
            logits = self.predict_tokens(retnet)
        if isinstance(self.reward_head, SignRewardHead):
            reward = self.reward_head.expected(out)
        else:
            reward = self.reward_head(out).squeeze(-1)
        cont = self.end_head.continue_probability(out)
        tokens = torch.distributions.Categorical(logits=logits).sample()
        new = {"retnet": retnet, "tokens": tokens, "valid": torch.ones_like(state["valid"])}
        return Step(new, reward, cont, self.features(new))

    def features(self, state: State) -> Tensor:
        """V's code vectors of the current tokens on their grid ``[B, d, s, s]`` (appendix A.1.2)."""
        vectors = self.tokenizer.embed(state["tokens"]).detach()  # [B, K, d]
        return vectors.transpose(1, 2).unflatten(2, self.feature_shape[1:])

    def decode(self, state: State) -> Tensor:
        """V's decoder on the current tokens, as uint8 images."""
        return (self.tokenizer.decode(state["tokens"]) * 255).round().to(torch.uint8)


# --------------------------------------------------------------------------- presets

PRESETS: dict[str, REMSpec] = {
    # CPU tests: 4x4 tokens of a 32-code book, a 2-layer RetNet of width 32.
    "tiny": REMSpec(
        batch_size=8, seq_len=8, blocks_per_chunk=2, context=2, tokenizer_frames=32,
        tokenizer=TokenizerSpec(
            vocab_size=32, embed_dim=32, tokens_per_side=4, channels=8, ch_mult=(1, 2), groups=4,
            optim=OptimSpec(lr=1e-3, weight_decay=0.01, clip=10.0),
        ),
        retnet=RetNetSpec(d_model=32, n_heads=2, n_layers=2, d_ff=64, dropout=0.0),
        optim=OptimSpec(lr=1e-3, weight_decay=0.05, clip=100.0),
    ),
    # A CPU hour (the learning check of benchmarks/learning_check.py): IRIS's 4x4 token grid
    # (K = 16) and a 2-layer RetNet of width 64. REM's own 8x8 grid and 3-layer width-128 RetNet
    # cost 14 s per update (world model and policy) on one CPU thread, 10x this.
    "small": REMSpec(
        batch_size=16, seq_len=10, tokenizer_frames=64,
        tokenizer=TokenizerSpec(
            vocab_size=256, embed_dim=64, tokens_per_side=4, channels=16, ch_mult=(1, 2, 4),
            optim=OptimSpec(lr=3e-4, weight_decay=0.01, clip=10.0),
        ),
        retnet=RetNetSpec(d_model=64, n_heads=4, n_layers=2, d_ff=256, dropout=0.1),
        optim=OptimSpec(lr=3e-4, weight_decay=0.05, clip=100.0),
    ),
    # REM as published.
    "paper": REMSpec(
        batch_size=64,  # table 3: world-model batch 64
        seq_len=10,  # algorithm 6: segments of H = 10 blocks (table 2)
        blocks_per_chunk=3,  # table 7: c = 3
        context=2,  # table 7: world model context length 2
        tokenizer_frames=128,  # table 3: tokenizer batch 128
        tokenizer=TokenizerSpec(),  # tables 2-4: K = 64, N = 512, d = 256; lr 1e-4, wd 0.01, clip 10
        retnet=RetNetSpec(),  # table 7: 5 layers, 4 heads, d 256, FFN 1024, dropout 0.1, eps 1e-6
        # table 3; M from epoch 25, V from 5, 200 steps per epoch each: 4000 updates later
        optim=OptimSpec(lr=2e-4, weight_decay=0.05, clip=100.0, start=4000),
    ),
}

# The run presets whose trainer schedule is REM's (table 3; `--set train.…` still wins). An epoch
# is 200 env steps then 200 tokenizer and world-model updates and 100 actor-critic updates: one
# update of batch 64 x 10 per env step (train_ratio = 640 replayed steps per env step), the policy
# every second one; 600 epochs of which the last 100 collect nothing (table 2).
_SCHEDULE = {"train_ratio": 64 * 10, "policy_every": 2, "final_updates": 100 * 200}
RUN_PRESETS: dict[str, RunPreset] = {
    "paper": RunPreset(model="paper", policy="paper", train="paper", schedule=_SCHEDULE),
    "paper-atari100k": RunPreset(model="paper", policy="paper", train="paper-atari100k", schedule=_SCHEDULE),
}

