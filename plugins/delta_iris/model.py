"""Δ-IRIS: an autoregressive transformer over I-tokens, actions and Δ-tokens.

Paper: Micheli, Alonso, Fleuret, "Efficient World Models with Context-Aware Tokenization"
(Δ-IRIS), ICML 2024, section 2.2 (the dynamics model G), appendix A.2 table 3 (its
hyperparameters), appendix B (Crafter), C (Atari); facts the paper leaves out are read from the
official code (vmicheli/delta-iris, ``config/params/{crafter,atari}.yaml``, "the official config").

Notation (names in brackets):
    x_t                  frame [batch.obs[:, t]]
    a_t                  action taken after x_t [batch.action[:, t]]
    z_{t+1} = (z¹..z^K)  Δ-tokens of the transition x_t, a_t → x_{t+1} from the context-aware
                         autoencoder (:mod:`.tokenizer`) [tokens], K = 4
    e(x_t)               I-token: a continuous embedding of the whole frame by its own CNN
                         (FrameEncoder → flatten → LayerNorm) [i_token], section 2.2
    G                    a causal GPT over blocks ``[e(x_t), a_t, z¹_{t+1}, .., z^K_{t+1}]``

G predicts (heads Linear-ReLU-Linear, read at the outputs named):
    at a_t       → z¹_{t+1}, r_t (Crafter: two-hot symlog, 255 bins; Atari: sign, 3 classes), d_t
    at z^k_{t+1} → z^{k+1}_{t+1}                                                    (k < K)
wmzoo's alignment (``reward[t]``, ``terminal[t]`` follow ``action[t]``) is the official one.
Loss: ``w_z · CE(z) + w_r · CE(r) + w_d · CE(d)`` (official config: Crafter 1 / 1 / 1, Atari
0.1 / 1 / 0.1); the autoencoder trains on the same transitions with its own loss and optimizer
(component ``tokenizer``), G on tokens computed without gradient (component ``world_model``).
A training sequence of ``T`` frames gives ``T − 1`` transitions, whose Δ-tokens G learns, and
``T`` actions, whose reward and end it learns: the last frame's block ``[e(x_{T−1}), a_{T−1}]``
is fed with zero Δ-tokens whose outputs are dropped, as the official does (when G's context
holds ``T`` blocks, as both official configs: ``max_blocks`` = the segment length). Where a frame starts an episode, its block attends to nothing
before it and positions restart at 0 (the official samples segments inside one episode); the
transition into it is excluded from every loss.

Imagination (``imagine_step``): the state carries G's KV cache, the current frame and the last
Δ-token of the previous step (``pending``, not yet fed). One step makes exactly K sequential
calls of G: ``[z^K_prev, e(x_t), a_t]`` (→ reward, end and z¹'s logits), then z¹ .. z^{K−1}
(→ the next token's logits); then the autoencoder decodes ``x_{t+1}`` from ``x_t``, ``a_t`` and
the sampled tokens (clamped, rounded to 1/255). Reward: the two-hot mean (Crafter) or a sampled
sign (Atari); the end is sampled (official). When a step's tokens would overflow the cache, it
is emptied and the step starts from the current frame (the official resets with one block left).
Imagination starts (``imagination_starts``, the actor-critic's segments) burn G in on the
segment's real transitions (official: 5) as the official ``burn_in``: the cache then holds
``[e(x_0), a_0, z_1, .., e(x_n)]``.

Deviations (named):
    * When the I-token CNN's flattened map is not ``d`` wide (another image size or width), a
      linear map to ``d`` precedes the LayerNorm; the official configs have equal widths
      (Crafter 8×8×8 = 512, Atari 4×8×8 = 256) and no map.
    * ``observe_step`` (acting, the memory protocols) extends the cache with each real
      transition; the official agent acts from frames alone and never filters real steps with G.
    * Replay sampling is wmzoo's (uniform windows across episodes), not the official
      count-based per-component episode weights ∝ (1 + n_e)^−α.
"""

from __future__ import annotations

import contextlib
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import Tensor, nn

from wmzoo.errors import SpecError
from wmzoo.hookspecs import RunPreset
from wmzoo.interfaces import Batch, BurnIn, EnvInfo, State, Step, TrainOutput, WorldModel
from wmzoo.nn.heads import EndHead, SignRewardHead, TokenHead, TwoHotRewardHead, reward_cont_targets, sample_class, start_conts
from wmzoo.nn.transformer import CausalTransformer, KVCache, init_gpt_weights, restart_positions
from wmzoo.optim import decay_linear_weights_only
from wmzoo.specs import OptimSpec, WorldModelSpec

from .tokenizer import ATARI, DeltaTokenizer, DeltaTokenizerSpec, FrameCnnSpec, FrameEncoder

# --------------------------------------------------------------------------- spec


class DeltaIrisSpec(WorldModelSpec):
    """Hyperparameters of Δ-IRIS (defaults: the official Crafter config, appendix A.2 table 3)."""

    tokenizer: DeltaTokenizerSpec = Field(
        default_factory=DeltaTokenizerSpec, description="the context-aware autoencoder (section 2.1, table 2)"
    )
    layers: int = Field(3, ge=1, le=64, description="transformer blocks (table 3: 3)")
    embed_dim: int = Field(512, ge=8, le=4096, description="width d (official config: Crafter 512, Atari 256)")
    heads: int = Field(8, ge=1, le=64, description="attention heads (official config: Crafter 8, Atari 4)")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout (official config: 0)")
    max_blocks: int = Field(
        21, ge=2, le=1024,
        description="context of G in steps (official config: the segment length, Crafter 21, Atari 26)",
    )
    i_tokens: bool = Field(
        True, description="false: the paper's ablation without I-tokens (figure 4): blocks [a_t, z_{t+1}]"
    )
    frame_cnn: FrameCnnSpec = Field(
        default_factory=lambda: FrameCnnSpec(channels=32), description="the I-token CNN (official config: C 32)"
    )
    frame_latent_dim: int = Field(
        8, ge=1, le=1024, description="channels of the I-token CNN's map (official config: Crafter 8, Atari 4)"
    )
    reward: Literal["two-hot", "sign"] = Field(
        "two-hot", description="reward head: two-hot symlog, 255 bins (Crafter) or sign(r) + 1 (Atari)"
    )
    latents_weight: float = Field(1.0, ge=0, le=100, description="Δ-token loss weight (Crafter 1, Atari 0.1)")
    rewards_weight: float = Field(1.0, ge=0, le=100, description="reward loss weight (1)")
    ends_weight: float = Field(1.0, ge=0, le=100, description="termination loss weight (Crafter 1, Atari 0.1)")
    burn_in: int = Field(
        5, ge=0, le=1024,
        description="real transitions G and the policy burn in on before imagining from the world-model "
        "batch (table 3 / official config: 5; the actor-critic's own segments use its segment - 1)",
    )
    bf16: bool = Field(
        False, description="train under bfloat16 autocast (the official code does; fast on GPUs and CPUs with AMX)"
    )
    optim: OptimSpec = Field(
        default_factory=lambda: OptimSpec(lr=1e-4, weight_decay=0.01, clip=10.0),
        description="world-model optimizer (official config: AdamW lr 1e-4, wd 0.01 on Linear weights, clip 10)",
    )

    @model_validator(mode="after")
    def _fits(self) -> DeltaIrisSpec:
        if self.embed_dim % self.heads:
            raise ValueError(f"embed_dim {self.embed_dim} must be divisible by heads {self.heads}")
        if sum(self.frame_cnn.down) != sum(self.tokenizer.encoder.down):
            raise ValueError("frame_cnn must halve the resolution as often as the tokenizer's encoder (sum of down)")
        return self


# --------------------------------------------------------------------------- world model


class IToken(nn.Module):
    """``e(x)``: FrameEncoder → flatten ``(h w c)`` → [Linear, only when not ``d`` wide] → LayerNorm."""

    def __init__(self, spec: DeltaIrisSpec, obs_shape: tuple[int, int, int]) -> None:
        super().__init__()
        c, h, w = obs_shape
        factor = 2 ** sum(spec.frame_cnn.down)
        flat = spec.frame_latent_dim * (h // factor) * (w // factor)
        self.cnn = FrameEncoder(c, spec.frame_cnn, spec.frame_latent_dim).to(memory_format=torch.channels_last)
        self.proj = nn.Identity() if flat == spec.embed_dim else nn.Linear(flat, spec.embed_dim)
        self.norm = nn.LayerNorm(spec.embed_dim)

    def forward(self, frames: Tensor) -> Tensor:
        """Frames ``[..., C, H, W]`` (uint8, or float in ``[0, 1]``) → ``[..., d]``."""
        lead = frames.shape[:-3]
        x = DeltaTokenizer.pixels(frames.reshape(-1, *frames.shape[-3:]))
        z = self.cnn(x.contiguous(memory_format=torch.channels_last))
        return self.norm(self.proj(z.permute(0, 2, 3, 1).flatten(1))).reshape(*lead, self.norm.normalized_shape[0])


class DeltaIrisWorldModel(WorldModel):
    """Δ-IRIS's autoencoder and transformer G behind wmzoo's ``WorldModel`` contract."""

    spec: DeltaIrisSpec

    def __init__(self, spec: DeltaIrisSpec, env: EnvInfo) -> None:
        super().__init__()
        if not env.discrete:
            raise SpecError(f"backbone 'delta-iris' needs discrete actions (action embeddings); env {env.name!r} is continuous")
        self.spec, self.env = spec, env
        self.feature_shape = tuple(env.obs_shape)
        self.tokenizer = DeltaTokenizer(spec.tokenizer, env.obs_shape, env.num_actions)
        self.K = self.tokenizer.num_tokens
        self.a_pos = int(spec.i_tokens)  # index of a_t in a block
        self.block = self.K + 1 + self.a_pos
        self.capacity = spec.max_blocks * self.block
        d = spec.embed_dim
        self.i_token = IToken(spec, env.obs_shape) if spec.i_tokens else None
        self.act_emb = nn.Embedding(env.num_actions, d)
        self.latents_emb = nn.Embedding(spec.tokenizer.codebook_size, d)
        self.pos_emb = nn.Embedding(self.capacity, d)
        self.transformer = CausalTransformer(spec.layers, d, spec.heads, spec.dropout)
        self.head_latents = TokenHead(d, spec.tokenizer.codebook_size)
        self.head_reward: SignRewardHead | TwoHotRewardHead = (
            TwoHotRewardHead(d) if spec.reward == "two-hot" else SignRewardHead(d)
        )
        self.head_end = EndHead(d)
        for part in self._world_model_parts():
            part.apply(init_gpt_weights)
        decay_linear_weights_only(self.tokenizer, *self._world_model_parts())  # the official minGPT rule

    def _world_model_parts(self) -> list[nn.Module]:
        parts = [self.act_emb, self.latents_emb, self.pos_emb, self.transformer,
                 self.head_latents, self.head_reward, self.head_end]
        return parts if self.i_token is None else [self.i_token, *parts]

    def components(self) -> dict[str, tuple[list[nn.Parameter], OptimSpec]]:
        wm = [p for part in self._world_model_parts() for p in part.parameters()]
        return {
            "tokenizer": (list(self.tokenizer.parameters()), self.spec.tokenizer.optim),
            "world_model": (wm, self.spec.optim),
        }

    # -- the sequence G reads --------------------------------------------------------------
    def _blocks(self, frames: Tensor, action: Tensor, tokens: Tensor) -> Tensor:
        """Embedded blocks ``[B, T, block, d]`` of frames ``[B, T, C, H, W]``, actions ``[B, T]``
        and the Δ-tokens ``[B, T, K]`` of the transitions they start."""
        parts = [self.act_emb(action).unsqueeze(2), self.latents_emb(tokens)]
        if self.i_token is not None:
            parts.insert(0, self.i_token(frames).unsqueeze(2))
        return torch.cat(parts, 2)

    def _forward(self, x: Tensor, is_first: Tensor) -> Tensor:
        """G over embedded blocks ``[B, T, block, d]`` (a last partial block allowed when
        flattened by the caller: ``x [B, n, d]`` with ``starts`` given per token)."""
        B, T = x.shape[:2]
        starts = torch.zeros(B, T, self.block, dtype=torch.bool, device=x.device)
        starts[:, :, 0] = is_first
        starts = starts.flatten(1)
        out = self.transformer(x.flatten(1, 2) + self.pos_emb(restart_positions(starts)), starts=starts)
        return out.reshape(B, T, self.block, -1)

    def encode_transitions(self, batch: Batch) -> Tensor:
        """Δ-tokens ``[B, T − 1, K]`` of every transition of ``batch`` (no gradient)."""
        return self.tokenizer.encode(batch.obs[:, :-1], batch.action[:, :-1], batch.obs[:, 1:])

    # -- training ---------------------------------------------------------------------------
    def loss(self, batch: Batch, carry: State | None = None) -> TrainOutput:
        """Both components' losses on ``batch``; sequences of more than ``max_blocks + 1`` frames
        are cut into windows of ``max_blocks + 1`` frames overlapping by one (every transition
        once; transitions past the last whole window are left out)."""
        full = batch
        if batch.shape[1] - 1 > self.spec.max_blocks:
            batch = batch.windows(self.spec.max_blocks + 1, self.spec.max_blocks)
        device = batch.obs.device.type
        # its own bf16 region where the spec asks; else the caller's precision (train.precision)
        own = torch.autocast(device, dtype=torch.bfloat16) if self.spec.bf16 else contextlib.nullcontext()
        with own:
            valid = ~batch.is_first[:, 1:]  # transitions inside one episode
            tok_loss, metrics = self.tokenizer.loss(batch.obs[:, :-1], batch.action[:, :-1], batch.obs[:, 1:], valid)
            tokens = self.encode_transitions(batch)
            wm_loss, wm_metrics = self._world_model_loss(batch, tokens)
        metrics.update(wm_metrics)
        n = min(self.spec.burn_in, full.shape[1] - 1)
        return TrainOutput(
            losses={"tokenizer": tok_loss.float(), "world_model": wm_loss.float()}, metrics=metrics,
            # built only when a policy imagines from them
            starts=lambda: self._burn(full.slice(full.shape[1] - 1 - n, full.shape[1])),
        )

    def _world_model_loss(self, batch: Batch, tokens: Tensor) -> tuple[Tensor, dict[str, float]]:
        """Section 2.2: CE of the next Δ-token at a_t and z¹..z^{K−1} over the ``T − 1``
        transitions inside one episode, and of the reward and the termination at a_t over every
        frame's action, the last one's too where G's context holds its block (official: a last
        block of zero tokens whose Δ-token outputs are dropped)."""
        T = batch.shape[1] - 1
        n = T + 1 if T < self.spec.max_blocks else T  # blocks: with the last frame's [e(x_T), a_T]
        x = self._blocks(batch.obs[:, :n], batch.action[:, :n], F.pad(tokens, (0, 0, 0, n - T)))
        out = self._forward(x, batch.is_first[:, :n])  # [B, n, block, d]
        logits = self.head_latents(out[:, :T, self.a_pos : self.a_pos + self.K]).float()  # → z¹..z^K
        reward, cont, mask = reward_cont_targets(batch)  # [B, T] each: transition t inside an episode
        ce = F.cross_entropy(logits.flatten(0, 2), tokens.flatten(), reduction="none").view(tokens.shape)
        latent_loss = (ce * mask[..., None]).sum() / (mask.sum() * self.K).clamp(min=1)
        acted = mask  # a_T's reward and end too, unless x_T is a terminal observation (no action follows it)
        if n > T:
            reward, cont = batch.reward, 1.0 - batch.terminal.float()
            acted = torch.cat([mask, start_conts(batch)[:, -1:].bool()], 1)
        action_out = out[:, :, self.a_pos]
        reward_loss = self.head_reward.loss(action_out, reward, acted)
        end_loss = self.head_end.loss(action_out, 1 - cont, acted)
        s = self.spec
        loss = s.latents_weight * latent_loss + s.rewards_weight * reward_loss + s.ends_weight * end_loss
        with torch.no_grad():
            hit = (logits.argmax(-1) == tokens).float()
            accuracy = (hit * mask[..., None]).sum() / (mask.sum() * self.K).clamp(min=1)
        return loss, {
            "world_model/latents_ce": float(latent_loss.detach()),
            "world_model/reward_ce": float(reward_loss.detach()),
            "world_model/end_ce": float(end_loss.detach()),
            "world_model/token_accuracy": float(accuracy),
        }

    # -- states -----------------------------------------------------------------------------
    # A state: "k", "v" [B, layers, heads, capacity, head_dim] and "episode" [B, capacity] (G's
    # cache), "length" and "position" [B] (tokens cached; position of the next one), "frame"
    # [B, C, H, W] in [0, 1] (x_t: what the policy reads), "pending" [B] (z^K of the last imagined
    # step, not yet fed; -1: none), "fed" [B] (e(x_t) is in the cache), and for decode():
    # "prev_frame", "prev_action", "tokens", "recon" (decode reconstructs x_t from them; false:
    # x_t is shown as is); "begin" [B]: the next token fed starts an episode (without I-tokens,
    # the first frame of an episode has no token of its own: its action begins the episode).

    def _empty(self, frame: Tensor) -> State:
        B, dev = frame.shape[0], frame.device
        cache = self.transformer.empty_cache(B, self.capacity, dev)
        zeros = torch.zeros(B, dtype=torch.int64, device=dev)
        return {
            "k": cache.k, "v": cache.v, "episode": torch.zeros(B, self.capacity, dtype=torch.int64, device=dev),
            "length": zeros, "position": zeros.clone(), "frame": frame, "pending": zeros - 1,
            "fed": torch.zeros(B, dtype=torch.bool, device=dev), "prev_frame": frame.clone(),
            "prev_action": zeros.clone(), "tokens": zeros[:, None].expand(B, self.K).clone(),
            "recon": torch.zeros(B, dtype=torch.bool, device=dev),
            "begin": torch.zeros(B, dtype=torch.bool, device=dev),
        }

    def _call(self, state: State, x: Tensor, starts: Tensor | None = None) -> Tensor:
        """One call of G on embedded tokens ``x [B, n, d]`` continuing ``state``'s cache (updated
        in place, with ``length`` and ``position``); ``starts [B, n]`` marks episode starts."""
        cache = KVCache(state["k"], state["v"], int(state["length"][0]), state["episode"])
        n = x.shape[1]
        begins = torch.zeros(x.shape[:2], dtype=torch.bool, device=x.device) if starts is None else starts.clone()
        begins[:, 0] |= state["begin"]
        position = restart_positions(begins, state["position"])
        out = self.transformer(x + self.pos_emb(position), cache, begins)
        state["begin"] = torch.zeros_like(state["begin"])
        state["length"] = state["length"] + n
        state["position"] = position[:, -1] + 1
        return out

    def _prefix(self, state: State) -> list[Tensor]:
        """What the cache lacks before an action can follow x_t: the pending z^K, then e(x_t)."""
        parts = []
        if bool((state["pending"] >= 0).any()):
            parts.append(self.latents_emb(state["pending"].clamp(min=0)).unsqueeze(1))
        if self.i_token is not None and not bool(state["fed"].all()):
            parts.append(self.i_token(state["frame"]).unsqueeze(1))
        return parts

    def _room(self, state: State, n: int) -> State:
        """``state``, or when ``n`` more tokens would overflow G's cache, the same state with an
        empty cache: the next call starts again from x_t (official: reset with one block left)."""
        if int(state["length"][0]) + n <= self.capacity:
            return state
        fresh = self._empty(state["frame"])
        for key in ("prev_frame", "prev_action", "tokens", "recon"):
            fresh[key] = state[key]
        return fresh

    def initial_state(self, batch_size: int) -> State:
        """No frame yet: a blank (zero) frame and an empty cache."""
        frame = torch.zeros(batch_size, *self.env.obs_shape, device=self.pos_emb.weight.device)
        return self._empty(frame)

    @torch.no_grad()
    def _burn(self, segment: Batch) -> tuple[State, Tensor, BurnIn]:
        """The official ``burn_in``: G over ``[e(x_0), a_0, z_1, .., e(x_n)]`` of a segment of
        ``n + 1`` frames in one call; the state at its last frame, that frame's continue flag, and
        the policy's context (the ``n`` real frames before it)."""
        B, T = segment.shape
        n = min(T - 1, self.spec.max_blocks - 1)
        segment = segment.slice(T - 1 - n, T)
        last = segment.obs[:, -1]
        state = self._empty(DeltaTokenizer.pixels(last))
        x = last.new_zeros(B, 0, self.spec.embed_dim, dtype=torch.float32)
        starts = torch.zeros(B, 0, dtype=torch.bool, device=x.device)
        if n:
            tokens = self.tokenizer.encode(segment.obs[:, :-1], segment.action[:, :-1], segment.obs[:, 1:])
            x = self._blocks(segment.obs[:, :-1], segment.action[:, :-1], tokens).flatten(1, 2)
            starts = torch.zeros(B, n, self.block, dtype=torch.bool, device=x.device)
            starts[:, :, 0] = segment.is_first[:, :-1]
            starts = starts.flatten(1)
        if self.i_token is not None:
            x = torch.cat([x, self.i_token(last).unsqueeze(1)], 1)
            starts = torch.cat([starts, segment.is_first[:, -1:]], 1)
        if x.shape[1]:
            training = self.transformer.training
            self.transformer.eval()
            self._call(state, x, starts)
            self.transformer.train(training)
        state["fed"][:] = True
        if self.i_token is None:
            state["begin"] = segment.is_first[:, -1].clone()
        if n:
            inside = ~segment.is_first[:, -1]
            state.update(prev_frame=DeltaTokenizer.pixels(segment.obs[:, -2]), prev_action=segment.action[:, -2],
                         tokens=tokens[:, -1], recon=inside)
        context = BurnIn(features=DeltaTokenizer.pixels(segment.obs[:, :-1]), is_first=segment.is_first)
        return state, start_conts(segment)[:, -1], context

    @torch.no_grad()
    def imagination_starts(self, segments: Batch) -> tuple[State, Tensor, BurnIn]:
        """The actor-critic's own segments (official: 86 × 6 Crafter, 64 × 6 Atari): G and the
        policy burn in on the first ``segment − 1`` steps, imagination starts at the last."""
        return self._burn(segments)

    @torch.no_grad()
    def observe(self, batch: Batch, state: State | None = None) -> State:
        """The state after the last step of ``batch``: from scratch, G burnt in on its last
        ``max_blocks − 1`` transitions in one call; after ``state``, step by step."""
        if state is not None:
            return super().observe(batch, state)
        return self._burn(batch)[0]

    @torch.no_grad()
    def observe_step(self, state: State, obs: Tensor, prev_action: Tensor, is_first: Tensor) -> State:
        """Extend the cache with the real transition ``x_{t−1}, a_{t−1} → x_t``: its Δ-tokens and
        ``e(x_t)``. Where ``is_first`` (or no frame was seen yet), ``e(x_t)`` starts a new
        episode: nothing before it is attended to."""
        frame = DeltaTokenizer.pixels(obs)
        new = is_first | (state["length"] == 0) & ~state["fed"]
        if bool(new.all()):  # every row starts afresh: nothing before x_t is needed
            state = self._empty(frame)
            if self.i_token is not None:
                self._call(state, self.i_token(obs).unsqueeze(1), torch.ones_like(new)[:, None])
            else:
                state["begin"][:] = True  # no token of x_t: the next action begins the episode
            state["fed"][:] = True
            return state
        tokens = self.tokenizer.encode(state["frame"], prev_action, frame)
        tail = [self.act_emb(prev_action).unsqueeze(1), self.latents_emb(tokens)]
        if self.i_token is not None:
            tail.append(self.i_token(frame).unsqueeze(1))
        n = sum(p.shape[1] for p in tail)
        state = dict(self._room(state, n + 2))  # a shallow copy: the cache is written in place
        x = torch.cat([*self._prefix(state), *tail], 1)
        starts = torch.zeros(x.shape[:2], dtype=torch.bool, device=x.device)
        if self.i_token is not None:
            starts[:, -1] = new  # e(x_t) begins the new episode
        self._call(state, x, starts)
        if self.i_token is None:
            state["begin"] = new  # no token of x_t: the next action begins it
        state.update(frame=frame, pending=torch.full_like(state["pending"], -1), fed=torch.ones_like(state["fed"]),
                     prev_frame=state["frame"], prev_action=prev_action, tokens=tokens, recon=~new)
        return state

    def _predict(self, state: State, action: Tensor, tokens: Tensor | None = None) -> tuple[State, Tensor, Tensor, Tensor]:
        """The K calls of one step from ``state`` (a copy is advanced): G's output at a_t, the
        logits ``[B, K, N]`` of z¹..z^K and the tokens, sampled (or ``tokens``, teacher forcing)."""
        state = dict(self._room(state, 2 + self.K))  # a shallow copy: the cache is written in place
        x = torch.cat([*self._prefix(state), self.act_emb(action).unsqueeze(1)], 1)
        action_out = out = self._call(state, x)[:, -1]
        logits, chosen = [], []
        for k in range(self.K):
            logits.append(self.head_latents(out).float())
            token = sample_class(logits[-1]) if tokens is None else tokens[:, k]
            chosen.append(token)
            if k < self.K - 1:
                out = self._call(state, self.latents_emb(token).unsqueeze(1))[:, -1]
        state["pending"] = chosen[-1]
        state["fed"] = torch.zeros_like(state["fed"])
        return state, action_out, torch.stack(logits, 1), torch.stack(chosen, 1)

    @torch.no_grad()
    def imagine_step(self, state: State, action: Tensor) -> Step:
        next_state, action_out, _, tokens = self._predict(state, action)
        reward = self.head_reward.sample(action_out)
        cont = self.head_end.sample(action_out)
        frame = self.tokenizer.decode(state["frame"], action, tokens)
        next_state.update(frame=frame, prev_frame=state["frame"], prev_action=action, tokens=tokens,
                          recon=torch.zeros_like(state["recon"]))
        return Step(state=next_state, reward=reward, cont=cont, features=frame)

    def features(self, state: State) -> Tensor:
        """The frame x_t ``[B, C, H, W]`` in ``[0, 1]``: the actor-critic's input (official)."""
        return state["frame"]

    @torch.no_grad()
    def decode(self, state: State) -> Tensor:
        """x_t as the model sees it: an imagined frame, or the autoencoder's reconstruction of an
        observed one from the frame before it (a first frame, which has none, as observed)."""
        frame = state["frame"]
        recon = state["recon"]
        if bool(recon.any()):
            rebuilt = self.tokenizer.decode(state["prev_frame"], state["prev_action"], state["tokens"])
            frame = torch.where(recon[:, None, None, None], rebuilt, frame)
        return (frame * 255.0).round().to(torch.uint8)


# --------------------------------------------------------------------------- presets

ATARI_EPOCH_UPDATES = 120
"""G's updates per official Atari epoch (``training.world_model.steps_per_epoch``): the trainer's
update count advances by it per epoch, so "start after e epochs" is ``e × 120`` updates."""

_TINY_CNN = FrameCnnSpec(channels=8, mult=(1, 1, 2), down=(1, 1, 1))
_TINY_TOKENIZER = DeltaTokenizerSpec(
    num_tokens=4, codebook_size=64, codebook_dim=16, latent_dim=16, encoder=_TINY_CNN, decoder=_TINY_CNN,
    frame_cnn=_TINY_CNN, frame_latent_dim=4, revival_updates=None, optim=OptimSpec(lr=1e-3, clip=10.0),
)
_SMALL_CNN = FrameCnnSpec(channels=16, mult=(1, 1, 2, 2), down=(1, 0, 1, 1))
_SMALL_TOKENIZER = DeltaTokenizerSpec(
    num_tokens=4, codebook_size=256, codebook_dim=32, latent_dim=32, encoder=_SMALL_CNN, decoder=_SMALL_CNN,
    frame_cnn=_SMALL_CNN, frame_latent_dim=8, optim=OptimSpec(lr=3e-4, weight_decay=0.01, clip=10.0),
)

PRESETS: dict[str, DeltaIrisSpec] = {
    # CPU tests and the tiny end-to-end run (32×32 frames: a 4×4 latent map, 2×2 tokens).
    "tiny": DeltaIrisSpec(
        batch_size=4, seq_len=9, layers=2, embed_dim=32, heads=2, max_blocks=12, burn_in=3,
        tokenizer=_TINY_TOKENIZER, frame_cnn=_TINY_CNN, frame_latent_dim=2,
        optim=OptimSpec(lr=1e-3, clip=10.0),
    ),
    # A CPU hour or two: narrower CNNs, a 3-layer GPT of width 128, the official block layout.
    "small": DeltaIrisSpec(
        batch_size=16, seq_len=21, layers=3, embed_dim=128, heads=4, max_blocks=21,
        tokenizer=_SMALL_TOKENIZER, frame_cnn=_SMALL_CNN, frame_latent_dim=2,
        optim=OptimSpec(lr=3e-4, weight_decay=0.01, clip=10.0),
    ),
    # Crafter (appendix B, official config): batch 32 × 21 for both components, AdamW lr 1e-4,
    # wd 0.01, clip 10; G: 3 layers, 8 heads, d 512; I-token CNN C 32 → 8×8×8; two-hot rewards;
    # loss weights 1 / 1 / 1; bf16 autocast.
    "paper": DeltaIrisSpec(batch_size=32, seq_len=21, max_blocks=21, bf16=True),
    # Atari 100k (appendix C, official config): G 3 layers, 4 heads, d 256, segments of 26 (64 per
    # batch); I-token CNN → 4×8×8; sign rewards; weights 0.1 / 1 / 0.1; the Atari autoencoder
    # (frame_cnn C 32 → 16 channels, revival during its first 400 updates, no weight decay); G
    # after epoch 50 (start_after_epochs), 45 epochs after the tokenizer's (5), whose first update
    # is the trainer's first (the run preset's prefill of 3000 steps).
    "paper-atari": DeltaIrisSpec(
        batch_size=64, seq_len=26, max_blocks=26, embed_dim=256, heads=4, frame_latent_dim=4,
        reward="sign", latents_weight=0.1, ends_weight=0.1, tokenizer=ATARI, bf16=True,
        optim=OptimSpec(lr=1e-4, weight_decay=0.01, clip=10.0, start=45 * ATARI_EPOCH_UPDATES),
    ),
}

# The official schedules (config/params/crafter.yaml, config/trainer.yaml; `--set train.…` still
# wins); tests/plugins/delta_iris/test_schedule.py counts them against the official epochs. An
# official epoch collects, then trains each component; wmzoo spreads an epoch's updates over its
# env steps, so the official epochs that train after the last env step (from the last collecting
# one on) are `final_updates`.
# Crafter: 16 envs, 100k random steps, then epochs of 10k env steps with 500 updates of each
# component (batch 32 × 21): 0.05 updates per env step = 33.6 replayed steps; 10M steps (991
# collecting epochs of 1000, appendix B): 10 epochs × 500 updates after the last env step.
# Atari 100k: 2000 random steps, then epochs of 200 steps with 120 world-model updates (64 × 26:
# 998.4 replayed steps per env step) and 200 actor-critic updates (5 every 3); the tokenizer after
# epoch 5, i.e. from env step 3000 (the prefill); 491 collecting epochs of 600: 110 × 120 after.
RUN_PRESETS: dict[str, RunPreset] = {
    "paper": RunPreset(
        model="paper", policy="paper", train="paper",
        schedule={"steps": 10_000_000, "envs": 16, "prefill": 100_000, "train_ratio": 500 * 32 * 21 / 10_000,
                  "final_updates": 10 * 500},
    ),
    "paper-atari": RunPreset(
        model="paper-atari", policy="paper-atari", train="paper-atari100k",
        schedule={"prefill": 2000 + 5 * 200, "train_ratio": ATARI_EPOCH_UPDATES * 64 * 26 / 200,
                  "policy_every": 3, "policy_updates": 5, "final_updates": 110 * ATARI_EPOCH_UPDATES},
    ),
}
