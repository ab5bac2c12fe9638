"""IRIS: a discrete autoencoder and a GPT over its tokens, imagining token by token.

Paper:
    Micheli, Alonso, Fleuret, "Transformers are Sample-Efficient World Models" (IRIS), ICLR 2023,
        section 2 (equations 1–3), appendix A (tokenizer), B (transformer) and its code
        (github.com/eloialonso/iris).
    Cohen et al. 2024 (REM), appendix A: tables 2, 3, 4, 7 for the ``rem-config`` preset ("IRIS with
        REM's configurations", appendix A.4, figure 11).

Notation (names in brackets):
    o_t                 observation [batch.obs[:, t]]
    z_t = (z_t^1..z_t^K) tokens of o_t from the VQ-VAE tokenizer V [tokens], K = tokens_per_side²
    a_t                 action taken after o_t [batch.action[:, t]]
    G                   a causal GPT over the interleaved sequence z_0^1..z_0^K a_0 z_1^1..z_1^K a_1 …
    p(z_{t+1}^{k} | z_≤t, a_≤t, z_{t+1}^{<k})   next-token head, read at the position before
    r̂_t, d̂_t                                      reward (sign: 3 classes) and termination heads,
                                                  read at the action token a_t

wmzoo's alignment (``reward[t]``, ``terminal[t]`` follow ``action[t]``) is IRIS's: both heads read
the output at ``a_t``.

Training (``loss``): two components, each with its own optimizer —
``tokenizer``: equation 8 of REM / IRIS's VQ-VAE loss on ``tokenizer_frames`` frames drawn uniformly
from the batch; ``world_model``: cross-entropies of next tokens, reward class and termination on
the tokens of the batch (computed without gradient: the tokenizer is not trained by G).
Sequences longer than ``max_blocks`` steps are cut into windows of ``max_blocks``. Where a window
holds the start of a new episode, G attends only within each episode and positions restart at 0
there (the official code samples windows inside one episode, padding the rest). Table 3's "start
after epochs" is the world-model optimizer's ``optim.start``: trainer updates before G first
trains, the tokenizer alone training meanwhile (``paper``: 20 epochs × 200 = 4000).

Imagination (``imagine_step``): the state carries the current frame's tokens, its reconstruction
and a preallocated KV cache that already holds the frame (the context at imagination start is the
last real frame, as in IRIS). One step makes exactly ``K + 1`` sequential transformer calls:
the action token (→ reward, termination and the first token's logits), then each of the K sampled
tokens (→ the next token's logits; the last call only writes the K-th token into the cache).
Reward and termination are sampled (IRIS). When the cache would overflow, it is rebuilt from the
current frame (one extra call), as IRIS does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import Tensor, nn

from wmzoo.hookspecs import RunPreset
from wmzoo.interfaces import Batch, BurnIn, EnvInfo, State, Step, TrainOutput, WorldModel
from wmzoo.nn.heads import EndHead, SignRewardHead, TokenHead, reward_cont_targets, sample_class, start_conts
from wmzoo.nn.tokenizer import Tokenizer, TokenizerSpec, next_token_accuracy
from wmzoo.nn.transformer import CausalTransformer, KVCache, init_gpt_weights, restart_positions
from wmzoo.optim import decay_linear_weights_only
from wmzoo.specs import OptimSpec, WorldModelSpec

# --------------------------------------------------------------------------- spec


# IRIS's tokenizer (its appendix A / config tokenizer.yaml): VQGAN's nets, N = 512 codes of
# d = 512, K = 4 × 4, 64 channels at all 5 resolutions (ch_mult 1), 2 residual blocks per
# resolution (3 in the decoder), attention at 16×16 and 8×8, a 512-channel map before the
# codebook, GroupNorm 32; Adam 1e-4, clip 10 (no weight decay); 256 frames per update.
_IRIS_TOKENIZER = TokenizerSpec(
    arch="vqgan", vocab_size=512, embed_dim=512, tokens_per_side=4, channels=64, ch_mult=(1, 1, 1, 1, 1),
    num_res_blocks=2, attn_resolutions=(16, 8), z_channels=512, groups=32, beta=1.0,
    optim=OptimSpec(lr=1e-4, weight_decay=0.0, clip=10.0),
)



class IrisSpec(WorldModelSpec):
    """Hyperparameters of IRIS (defaults: IRIS's Atari 100k configuration)."""

    tokenizer: TokenizerSpec = Field(
        default_factory=lambda: _IRIS_TOKENIZER, description="the VQ-VAE tokenizer V (appendix A)"
    )
    layers: int = Field(10, ge=1, le=64, description="transformer blocks")
    embed_dim: int = Field(256, ge=8, le=4096, description="transformer width d")
    heads: int = Field(4, ge=1, le=64, description="attention heads")
    dropout: float = Field(0.1, ge=0, lt=1, description="dropout on embeddings, attention and residuals")
    max_blocks: int = Field(
        20, ge=2, le=1024, description="context of G in steps (blocks of K + 1 tokens); also the KV cache size"
    )
    tokenizer_frames: int = Field(
        256, ge=1, le=65536, description="frames per tokenizer update, drawn uniformly from the batch"
    )
    burn_in: int = Field(
        20, ge=0, le=1024,
        description="real frames before each imagination start given to the policy to burn in (at most "
        "the policy's segment - 1; from the world-model batch, seq_len - 1)",
    )
    optim: OptimSpec = Field(
        default_factory=lambda: OptimSpec(lr=1e-4, weight_decay=0.01, clip=10.0),
        description="world-model (transformer) optimizer",
    )

    @model_validator(mode="after")
    def _heads_divide(self) -> IrisSpec:
        if self.embed_dim % self.heads:
            raise ValueError(f"embed_dim {self.embed_dim} must be divisible by heads {self.heads}")
        return self


# --------------------------------------------------------------------------- building blocks


# --------------------------------------------------------------------------- world model


class IrisWorldModel(WorldModel):
    """IRIS's tokenizer and transformer world model behind wmzoo's ``WorldModel`` contract."""

    spec: IrisSpec
    def __init__(self, spec: IrisSpec, env: EnvInfo) -> None:
        super().__init__()
        self.spec, self.env = spec, env
        self.tokenizer = Tokenizer(spec.tokenizer, env.obs_shape)
        K = self.tokenizer.num_tokens
        self.K, self.block = K, K + 1
        self.capacity = spec.max_blocks * self.block
        self.feature_shape = tuple(env.obs_shape)
        self.obs_emb = nn.Embedding(self.tokenizer.vocab_size, spec.embed_dim)
        self.act_emb: nn.Module = (
            nn.Embedding(env.num_actions, spec.embed_dim) if env.discrete
            else nn.Linear(env.num_actions, spec.embed_dim)
        )
        self.pos_emb = nn.Embedding(self.capacity, spec.embed_dim)
        self.transformer = CausalTransformer(spec.layers, spec.embed_dim, spec.heads, spec.dropout)
        self.head_obs = TokenHead(spec.embed_dim, self.tokenizer.vocab_size)
        self.head_reward = SignRewardHead(spec.embed_dim)  # sign(r) + 1
        self.head_end = EndHead(spec.embed_dim)
        for part in self._world_model_parts():
            part.apply(init_gpt_weights)
        decay_linear_weights_only(*self._world_model_parts())  # IRIS: minGPT's rule

    def _world_model_parts(self) -> list[nn.Module]:
        return [self.obs_emb, self.act_emb, self.pos_emb, self.transformer,
                self.head_obs, self.head_reward, self.head_end]

    def components(self) -> dict[str, tuple[list[nn.Parameter], OptimSpec]]:
        wm = [p for part in self._world_model_parts() for p in part.parameters()]
        return {
            "tokenizer": (list(self.tokenizer.parameters()), self.spec.tokenizer.optim),
            "world_model": (wm, self.spec.optim),
        }

    # -- the transformer G ----------------------------------------------------------------
    def _embed_actions(self, action: Tensor) -> Tensor:
        return self.act_emb(action.long() if self.env.discrete else action.float())

    def _call(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
        """One transformer call on embedded tokens ``[B, n, d]`` (positions added here)."""
        start = 0 if cache is None else cache.length
        return self.transformer(x + self.pos_emb.weight[start:start + x.shape[1]], cache)

    def sequence(self, tokens: Tensor, action: Tensor, is_first: Tensor | None = None) -> Tensor:
        """Outputs ``[B, T, K + 1, d]`` of G over tokens ``[B, T, K]`` and actions ``[B, T, ...]``.

        With ``is_first`` (``[B, T]``), a step that starts an episode starts afresh: its tokens
        attend to nothing before it and their positions count from 0 again, as a window of the
        official code (sampled inside one episode) and an imagination start (one frame at
        position 0) see it."""
        B, T, K = tokens.shape
        x = torch.cat([self.obs_emb(tokens), self._embed_actions(action).unsqueeze(2)], 2)
        x = x.reshape(B, T * (K + 1), -1)
        if is_first is None or not bool(is_first[:, 1:].any()):
            return self._call(x).reshape(B, T, K + 1, -1)
        starts = torch.zeros(B, T, K + 1, dtype=torch.bool, device=x.device)
        starts[:, :, 0] = is_first
        starts = starts.flatten(1)
        out = self.transformer(x + self.pos_emb(restart_positions(starts)), starts=starts)
        return out.reshape(B, T, K + 1, -1)

    # -- training -------------------------------------------------------------------------
    def loss(self, batch: Batch, carry: State | None = None) -> TrainOutput:
        frames = batch.obs.flatten(0, 1)
        pick = torch.randperm(frames.shape[0], device=frames.device)[: self.spec.tokenizer_frames]
        tok_loss, metrics = self.tokenizer.loss(frames[pick])

        with torch.no_grad():
            all_tokens = self.tokenizer.encode(batch.obs)  # [B, T, K], no gradient into V
        wm_loss, wm_metrics = self._world_model_loss(batch, all_tokens)
        metrics.update(wm_metrics)

        return TrainOutput(
            losses={"tokenizer": tok_loss, "world_model": wm_loss}, metrics=metrics,
            starts=lambda: self._starts(batch, all_tokens),  # built only when a policy imagines from them
        )

    def _world_model_loss(self, batch: Batch, tokens: Tensor) -> tuple[Tensor, dict[str, float]]:
        """IRIS's loss: CE of next obs tokens + CE of reward sign + CE of termination."""
        size = min(batch.shape[1], self.spec.max_blocks)
        win = batch.windows(size)
        tokens = tokens[:, : (batch.shape[1] // size) * size].reshape(-1, size, self.K)
        out = self.sequence(tokens, win.action, win.is_first)  # [B', T, K + 1, d]
        # within a frame: outputs at z^1..z^{K-1} predict z^2..z^K
        within_logits = self.head_obs(out[:, :, :-2])
        within = F.cross_entropy(within_logits.flatten(0, 2), tokens[:, :, 1:].flatten(), reduction="none")
        # across frames: the output at a_t predicts z_{t+1}^1 (not into a new episode)
        action_out = out[:, :-1, -1]
        across_logits = self.head_obs(action_out)
        across = F.cross_entropy(across_logits.flatten(0, 1), tokens[:, 1:, 0].flatten(), reduction="none")
        across_mask = (~win.is_first[:, 1:]).flatten().float()
        obs_loss = (within.sum() + (across * across_mask).sum()) / (within.numel() + across_mask.sum())

        reward, cont, mask = reward_cont_targets(win)
        reward_loss = self.head_reward.loss(action_out, reward, mask)
        end_loss = self.head_end.loss(action_out, 1 - cont, mask)
        loss = obs_loss + reward_loss + end_loss
        # frames 1..T-1 of each window as predicted: z^1 from a_{t-1}, z^2..z^K within the frame
        predicted = torch.cat([across_logits.argmax(-1)[..., None], within_logits[:, 1:].argmax(-1)], -1)
        scored = ~win.is_first[:, 1:]
        metrics = {
            "world_model/obs_ce": float(obs_loss.detach()),
            "world_model/reward_ce": float(reward_loss.detach()),
            "world_model/end_ce": float(end_loss.detach()),
            **next_token_accuracy(predicted[scored], tokens[:, 1:][scored], tokens[:, :-1][scored]),
        }
        return loss, metrics

    @torch.no_grad()
    def _starts(self, batch: Batch, tokens: Tensor) -> tuple[State, Tensor, BurnIn]:
        """Imagination starts at each row's last frame; the ``burn_in`` frames before it (their
        reconstructions) and the ``is_first`` flags let the policy burn in (IRIS)."""
        T = batch.shape[1]
        start = self._state_from_tokens(tokens[:, -1])
        start_cont = start_conts(batch)[:, -1]
        n = min(self.spec.burn_in, T - 1)
        context = self.tokenizer.decode(tokens[:, T - 1 - n : T - 1])
        return start, start_cont, BurnIn(features=context, is_first=batch.is_first[:, T - 1 - n :])

    @torch.no_grad()
    def imagination_starts(self, segments: Batch) -> tuple[State, Tensor, BurnIn]:
        """IRIS's actor-critic batch (64 × 21 with ``iris-ac`` ``paper``'s ``segment``): start at
        each segment's last frame, the ``burn_in`` frames before it burn the policy in."""
        return self._starts(segments, self.tokenizer.encode(segments.obs))

    # -- states -----------------------------------------------------------------------------
    def _empty_cache(self, batch: int, device: torch.device) -> KVCache:
        t = self.transformer
        shape = (batch, t.layers, t.heads, self.capacity, t.head_dim)
        # torch.empty: only positions below the length are ever read
        return KVCache(torch.empty(shape, device=device), torch.empty(shape, device=device), 0)

    @torch.no_grad()
    def _state_from_tokens(self, tokens: Tensor, frame: Tensor | None = None) -> State:
        """A state whose KV cache holds the frame of ``tokens [B, K]`` (one transformer call)."""
        B = tokens.shape[0]
        cache = self._empty_cache(B, tokens.device)
        training = self.transformer.training
        self.transformer.eval()  # the cache is a prediction context: no dropout
        self._call(self.obs_emb(tokens), cache)
        self.transformer.train(training)
        if frame is None:
            frame = self.tokenizer.decode(tokens)
        return self._pack(tokens, frame, cache)

    def _pack(self, tokens: Tensor, frame: Tensor, cache: KVCache) -> State:
        length = torch.full((tokens.shape[0],), cache.length, dtype=torch.int64, device=tokens.device)
        return {"tokens": tokens, "frame": frame, "cache_k": cache.k, "cache_v": cache.v, "length": length}

    def initial_state(self, batch_size: int) -> State:
        """A blank (all-zero) frame's tokens (IRIS has no state before the first observation)."""
        device = self.pos_emb.weight.device
        obs = torch.zeros(batch_size, *self.env.obs_shape, dtype=torch.uint8, device=device)
        return self._state_from_tokens(self.tokenizer.encode(obs))

    @torch.no_grad()
    def observe_step(self, state: State, obs: Tensor, prev_action: Tensor, is_first: Tensor) -> State:
        """IRIS's context is the current frame alone: encode it and seed a fresh cache."""
        return self._state_from_tokens(self.tokenizer.encode(obs))

    @torch.no_grad()
    def observe(self, batch: Batch, state: State | None = None) -> State:
        """The state after the last step of ``batch``: only its last frame matters."""
        return self._state_from_tokens(self.tokenizer.encode(batch.obs[:, -1]))

    @torch.no_grad()
    def imagine_step(self, state: State, action: Tensor) -> Step:
        tokens = state["tokens"]
        cache = KVCache(state["cache_k"], state["cache_v"], int(state["length"][0]))
        if cache.length + self.block > cache.capacity:  # rebuild from the current frame (IRIS)
            cache = self._empty_cache(tokens.shape[0], tokens.device)
            self._call(self.obs_emb(tokens), cache)
        out = self._call(self._embed_actions(action).unsqueeze(1), cache)[:, -1]
        reward = self.head_reward.sample(out)
        cont = self.head_end.sample(out)
        new = []
        for k in range(self.K):
            token = sample_class(self.head_obs(out))
            new.append(token)
            out = self._call(self.obs_emb(token).unsqueeze(1), cache)[:, -1]
        tokens = torch.stack(new, 1)
        frame = self.tokenizer.decode(tokens)
        next_state = self._pack(tokens, frame, cache)
        return Step(state=next_state, reward=reward, cont=cont, features=frame)

    def features(self, state: State) -> Tensor:
        """The reconstructed frame ``[B, C, H, W]`` in ``[0, 1]`` (IRIS's actor-critic input)."""
        return state["frame"]

    def decode(self, state: State) -> Tensor:
        return (state["frame"] * 255.0).round().to(torch.uint8)


# --------------------------------------------------------------------------- presets

PRESETS: dict[str, IrisSpec] = {
    # CPU tests and the tiny end-to-end run: K = 4 tokens, a 2-layer GPT of width 32; 4 × 32
    # steps per update (trained as 16 windows of 8) keep updates per env step few.
    "tiny": IrisSpec(
        batch_size=4, seq_len=32, layers=2, embed_dim=32, heads=2, dropout=0.0, max_blocks=8,
        tokenizer_frames=8, burn_in=4,
        tokenizer=TokenizerSpec(
            arch="vqgan", vocab_size=32, embed_dim=16, tokens_per_side=2, channels=4, ch_mult=(1, 2, 4),
            num_res_blocks=1, attn_resolutions=(4,), optim=OptimSpec(lr=1e-3, clip=10.0),
        ),
        optim=OptimSpec(lr=1e-3, clip=10.0),
    ),
    # A CPU hour: K = 16 as IRIS, a 3-layer GPT of width 128.
    "small": IrisSpec(
        batch_size=16, seq_len=16, layers=3, embed_dim=128, heads=4, dropout=0.1, max_blocks=16,
        tokenizer_frames=64, burn_in=8,
        tokenizer=TokenizerSpec(
            arch="vqgan", vocab_size=256, embed_dim=64, tokens_per_side=4, channels=16, ch_mult=(1, 2, 4),
            num_res_blocks=1, attn_resolutions=(8,), optim=OptimSpec(lr=3e-4, weight_decay=0.01, clip=10.0),
        ),
        optim=OptimSpec(lr=3e-4, weight_decay=0.01, clip=10.0),
    ),
    # IRIS (Micheli et al. 2023, appendix B and config): 10 layers, 4 heads, d 256, dropout 0.1,
    # 20 blocks of 17 tokens; AdamW lr 1e-4, wd 0.01, clip 10; world model from epoch 25,
    # tokenizer from epoch 5: 20 epochs × 200 tokenizer steps before it; batch 64 × 20; the
    # actor-critic's own 64 × 21 segments (iris-ac paper) burn in on 20 frames.
    "paper": IrisSpec(
        batch_size=64, seq_len=20, layers=10, embed_dim=256, heads=4, dropout=0.1, max_blocks=20,
        tokenizer_frames=256, burn_in=20, tokenizer=_IRIS_TOKENIZER,
        optim=OptimSpec(lr=1e-4, weight_decay=0.01, clip=10.0, start=4000),
    ),
    # IRIS with REM's configuration (REM appendix A.4, figure 11): REM's tokenizer (table 4,
    # K = 64, N = 512, d = 256; table 3: batch 128, lr 1e-4, wd 0.01, clip 10) and REM's world-model
    # size (table 7: 5 layers, 4 heads, d 256, dropout 0.1) and optimisation (table 3: batch 64,
    # lr 2e-4, wd 0.05, clip 100; start after epochs 5 / 25 → 4000 tokenizer updates first);
    # 10-step segments as REM trains (its code); IRIS's 20-block context; the actor-critic's
    # own 128 × 21 segments (iris-ac rem-config) burn in on 20 frames.
    "rem-config": IrisSpec(
        batch_size=64, seq_len=10, layers=5, embed_dim=256, heads=4, dropout=0.1, max_blocks=20,
        tokenizer_frames=128, burn_in=20, tokenizer=TokenizerSpec(),
        optim=OptimSpec(lr=2e-4, weight_decay=0.05, clip=100.0, start=4000),
    ),
}

# The run presets whose trainer schedule is IRIS's (appendix B and its config) or REM's (table 3)
# (`--set train.…` still wins). An epoch is 200 env steps, then 200 updates of each component:
# one world-model update per env step (train_ratio = its batch, 64 x 20 replayed steps); with
# rem-config, REM's 64 x 10 batch and 100 actor-critic updates per epoch. 600 epochs of which the
# last 100 collect nothing.
_IRIS_SCHEDULE = {"train_ratio": 64 * 20, "policy_every": 1, "final_updates": 100 * 200}
_REM_SCHEDULE = {"train_ratio": 64 * 10, "policy_every": 2, "final_updates": 100 * 200}
RUN_PRESETS: dict[str, RunPreset] = {
    "paper": RunPreset(model="paper", policy="paper", train="paper", schedule=_IRIS_SCHEDULE),
    "paper-atari100k": RunPreset(model="paper", policy="paper", train="paper-atari100k", schedule=_IRIS_SCHEDULE),
    "rem-config": RunPreset(model="rem-config", policy="rem-config", train="paper", schedule=_REM_SCHEDULE),
}
