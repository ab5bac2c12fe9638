"""TokenWM: a recurrent world model whose latent state is a set of tokens.

Paper: Zhai, Zhang, Navab, "Recurrent World Model with Tokenized Latent States" (TokenWM),
section 3 (3.1–3.7), figure 1, appendix A table 2 (its hyperparameters).

Notation (names in brackets):
    o_t                 frame [batch.obs[:, t]]; a_t the action taken after it [batch.action[:, t]]
    z_t ∈ R^{N_z×D_z}    patch tokens of o_t, section 3.1 [z]: a ViT trained with the model, or a
                        frozen pre-trained DINOv2 read from a local folder (``encoder_weights``)
    h_t ∈ R^{N_h×D}      the latent state: a set of N_h tokens of width D [state["h"]]
    h^p_t = f^p(h*_{t−1}, a_{t−1})   prior, 3.2: PE, then blocks of FiLM(a) + post-norm self-attention
    h^q_t = f^q(h^p_t, z_t)          posterior, 3.3: PEs on both, blocks of cross-attention
                                     (state queries, patch keys/values) + self-attention
    h*_t = f^M(h_t, bank)            memory read, 3.5: cross- and self-attention over a FIFO bank
                                     of the last n states [state["hstar"]]; n = 0: h*_t = h_t
    ẑ_t = D(h^q_t)                   perceiver decoder, 3.4: one learned query per patch
                                     cross-attends to h, a shared MLP gives the patch's pixels
                                     (``target: pixels``) or its DINOv2 feature (``features``)

The recurrence (figure 1): h* of the previous step and a_{t−1} give the prior; the observation
turns it into the posterior h^q_t = h_t; the memory read gives h*_t; h_t enters the bank. In
imagination there is no observation and h_t = h^p_t.

Loss (3.7, eq. 1), with the reward and continue heads of the RL extension::

    L = w_state ‖h^q_t − h^p_t‖² + w_recon ‖z_t − ẑ_t‖² + w_r NLL(r_t) + w_c BCE(c_t)

Eq. 1 calls the state weight α and the reconstruction weight β, but table 2 lists α = 10 as the
*reconstruction* weight and β = 0.1 as the *state* weight; the fields are named by what they
weigh and take table 2's values (state 0.1, reconstruction 10). Squared norms are means over the
elements (tokens × width, pixels). Eq. 1's imitation term −γ log π(a_t | h*_t, c) is added by the imitation trainer
(``wmzoo run --imitation``, :mod:`wmzoo.train.imitation`) on the h* this loss returns.

Choices where the paper is silent (each a field where it is a value):
    * The reconstruction target (3.4): "normally, we decode the original observation ô_t ...
      directly tokenized by reshaping [into p × p patches], but when we use a rich pre-trained
      encoder, we can output ẑ_t instead" (section 4 does, with DINOv2-L): ``target: pixels`` (the
      default) or ``features`` (needs ``encoder_weights``; the loss's z is the frozen encoder's).
    * With ``target: features`` the model has no pixels to show, so a second perceiver decoder of
      the same shape (the *viewer*) learns the frame from h with its gradient stopped at h: it
      renders imagination GIFs and generation MSE and changes nothing the paper trains (named
      extension; its loss is logged as ``view``).
    * A pre-trained encoder sees the whole frame resized to ``encoder_size`` (DINOv2's processor
      would also crop; section 4 re-renders LIBERO at 224 × 224, the default).
    * The initial state h_0 is N_h learned tokens; every episode starts from it with an empty bank.
    * The memory reader's keys are the bank *and* h_t itself (so the first step of an episode has
      something to read), each slot with a learned age embedding; the bank holds h (h^q when
      observing, h^p when imagining), not h*.
    * The state term skips steps whose prior knows nothing: episode starts and the first step
      of a training window (which starts from h_0; training does not carry states across windows).
    * Reward and continue (the RL extension, the paper's "future work"): DreamerV3's two-hot and
      Bernoulli heads on one perceiver read-out of h*_{t+1}, as wmzoo's alignment has it.

Deviations (named): by default, and in every preset, the encoder is a ViT trained from scratch
with the world model, not the pre-trained, frozen DINOv2-L of section 4 (nothing downloads here),
and the target is pixels. A user with DINOv2 weights on disk gets the paper's encoder with
``--set model.encoder_weights=DIR --set model.target=features``
(:class:`wmzoo.nn.pretrained.DINOv2Encoder`; the ``pretrained`` extra).
"""

from __future__ import annotations

import torch
from typing import Literal

from pydantic import Field, model_validator
from torch import Tensor, nn

from wmzoo.errors import SpecError
from wmzoo.interfaces import (
    Batch,
    EnvInfo,
    Obs,
    State,
    Step,
    TrainOutput,
    WorldModel,
    detach_state,
    flatten_state,
    index_state,
    obs_entries,
    pack_obs,
    reset_state,
)
from wmzoo.nn.distributions import symexp, symlog
from wmzoo.nn.heads import RewardContinueHeads, encode_action, masked_mean, start_conts
from wmzoo.nn.obs import ObsKeysSpec, select_entries
from wmzoo.nn.pretrained import DINOv2Encoder
from wmzoo.specs import OptimSpec, WorldModelSpec

from .blocks import CrossBlock, FiLMBlock, PerceiverReadout, ViTEncoder, push

# --------------------------------------------------------------------------- spec


class TokenWMSpec(WorldModelSpec, ObsKeysSpec):
    """Hyperparameters of TokenWM (defaults: table 2, with a from-scratch ViT encoder)."""

    tokens: int = Field(64, ge=1, le=4096, description="N_h: tokens of the latent state (table 2: 64)")
    dim: int = Field(512, ge=8, le=8192, description="D: width of a state token (table 2: 512)")
    heads: int = Field(8, ge=1, le=64, description="attention heads of every block (table 2: 8)")
    mult: int = Field(4, ge=1, le=16, description="feed-forward width as a multiple of D")
    prior_layers: int = Field(2, ge=1, le=64, description="N: FiLM + self-attention blocks of the prior (table 2: 2)")
    posterior_layers: int = Field(4, ge=1, le=64, description="P: cross- + self-attention blocks of the posterior (4)")
    memory_layers: int = Field(2, ge=1, le=64, description="M: blocks of the memory reader (table 2: 2)")
    memory: int = Field(5, ge=0, le=1024, description="past states in the memory bank (table 2: 5); 0: no memory (the ablation)")
    post_norm: bool = Field(True, description="post-norm sub-layers (3.2); false: pre-norm, which the paper saw diverge")
    patch: int = Field(8, ge=1, le=256, description="ViT patch size p (the frame's sides must be multiples)")
    encoder_dim: int = Field(384, ge=8, le=8192, description="D_z: width of the ViT's patch tokens")
    encoder_layers: int = Field(6, ge=1, le=64, description="ViT layers")
    encoder_heads: int = Field(6, ge=1, le=64, description="ViT heads")
    encoder_weights: str = Field(
        "", description="a local folder of a pre-trained DINOv2 (Hugging Face format; needs wmzoo[pretrained]; "
        "nothing downloads): z_t are its frozen patch tokens (section 4) in place of the ViT "
        "(patch, encoder_dim/layers/heads then apply to nothing but the pixel decoder's patches)",
    )
    encoder_size: int = Field(224, ge=1, le=4096, description="frames are resized to this for the pre-trained "
                              "encoder (a multiple of its patch size; section 4: 224)")
    target: Literal["pixels", "features"] = Field(
        "pixels", description="what the decoder reconstructs (3.4): the frame's p × p pixel patches, or the "
        "pre-trained encoder's features z_t (section 4; needs encoder_weights)",
    )
    decoder_hidden: int = Field(512, ge=1, le=16384, description="hidden width of the decoder's shared MLP")
    head_hidden: int = Field(512, ge=1, le=16384, description="hidden units of the reward and continue heads")
    head_layers: int = Field(2, ge=0, le=16, description="hidden layers of the reward and continue heads")
    reward_bins: int = Field(255, ge=3, le=1023, description="two-hot bins of the reward head")
    state_weight: float = Field(0.1, ge=0, le=1000, description="weight of ‖h^q − h^p‖² (table 2: 0.1)")
    recon_weight: float = Field(10.0, ge=0, le=1000, description="weight of ‖z − ẑ‖² (table 2: 10)")
    reward_weight: float = Field(1.0, ge=0, le=1000, description="weight of the reward NLL (RL extension)")
    cont_weight: float = Field(1.0, ge=0, le=1000, description="weight of the continue BCE (RL extension)")
    start_stride: int = Field(1, ge=1, le=4096, description="imagination starts from every k-th step's state")
    optim: OptimSpec = Field(
        default_factory=lambda: OptimSpec(lr=1e-4, clip=100.0),
        description="world-model optimizer (table 2: AdamW lr 1e-4, gradient clip 100)",
    )

    @model_validator(mode="after")
    def _fits(self) -> TokenWMSpec:
        if self.dim % self.heads:
            raise ValueError(f"dim {self.dim} must be divisible by heads {self.heads}")
        if self.encoder_dim % self.encoder_heads:
            raise ValueError(f"encoder_dim {self.encoder_dim} must be divisible by encoder_heads {self.encoder_heads}")
        if self.target == "features" and not self.encoder_weights:
            raise ValueError("target 'features' reconstructs a pre-trained encoder's features: set "
                             "encoder_weights to its folder, or use target 'pixels'")
        return self


# --------------------------------------------------------------------------- world model


class TokenWMWorldModel(WorldModel):
    """ViT encoder, prior, posterior, memory reader, perceiver decoder, reward and continue heads.

    A state is ``{"h": [B, N_h, D], "hstar": [B, N_h, D], "bank": [B, n, N_h, D] (oldest first),
    "valid": [B, n] bool}`` (without a memory, ``memory = 0``: h and h* = h only); :meth:`features`
    is h* (``feature_shape = (N_h, D)``)."""

    spec: TokenWMSpec

    def __init__(self, spec: TokenWMSpec, env: EnvInfo) -> None:
        super().__init__()
        self.spec, self.env = spec, env
        encoded, decoded = select_entries(env, spec.encoder_keys, "encoder_keys"), select_entries(
            env, spec.decoder_keys, "decoder_keys")
        images = [k for k, v in encoded.items() if v.kind == "image"]
        if len(images) > 1 or any(v.kind == "image" and k not in encoded for k, v in decoded.items()):
            raise SpecError(f"TokenWM patches one image the encoder reads; env {env.name!r} gives {env.describe_obs()}: "
                            "select one image with model.encoder_keys (and decode only what it encodes)")
        self.image = images[0] if images else None  # the one image entry: ViT patch tokens
        self.vectors = [k for k, v in encoded.items() if v.kind == "vector"]  # one token each
        self.decoded = [k for k, v in decoded.items() if v.kind == "vector"]  # their decoder queries
        if (self.vectors or self.decoded or self.image is None) and spec.target == "features":
            raise SpecError(f"model.target=features reconstructs a pre-trained image encoder's tokens; env {env.name!r} "
                            f"gives {env.describe_obs()}: use target pixels, or select its image alone")
        N_h, D, p = spec.tokens, spec.dim, spec.patch
        c, height, width = encoded[self.image].shape if self.image else (0, p, p)
        if height % spec.patch or width % spec.patch:
            raise SpecError(f"model.patch={spec.patch} must divide the frame's sides {height}x{width} (env {env.name!r})")
        self.image_shape = (c, height, width)
        self.num_patches = (height // p) * (width // p) if self.image else 0
        self.feature_shape = (N_h, D)
        action_dim = env.num_actions
        if spec.encoder_weights and self.image:  # section 4: frozen DINOv2 features
            self.encoder: nn.Module | None = DINOv2Encoder(spec.encoder_weights, spec.encoder_size)
            N_z, D_z = self.encoder.tokens, self.encoder.dim
        elif self.image:
            self.encoder = ViTEncoder(self.image_shape, p, spec.encoder_dim, spec.encoder_layers, spec.encoder_heads,
                                      spec.mult)
            N_z, D_z = self.num_patches, spec.encoder_dim
        else:
            self.encoder, N_z, D_z = None, 0, spec.encoder_dim
        # a vector entry is one more token: symlog (DreamerV3 §2, eq. 10) and a learned projection to D_z
        self.vector_in = nn.ModuleDict({k: nn.Linear(encoded[k].shape[0], D_z) for k in self.vectors})
        N_z += len(self.vectors)
        self.h0 = nn.Parameter(torch.randn(N_h, D) * 0.02)
        self.prior_pos = nn.Parameter(torch.randn(N_h, D) * 0.02)
        self.prior_blocks = nn.ModuleList(
            FiLMBlock(D, spec.heads, spec.mult, spec.post_norm, action_dim) for _ in range(spec.prior_layers)
        )
        self.post_pos = nn.Parameter(torch.randn(N_h, D) * 0.02)
        self.obs_pos = nn.Parameter(torch.randn(N_z, D_z) * 0.02)
        self.post_blocks = nn.ModuleList(
            CrossBlock(D, spec.heads, spec.mult, spec.post_norm, D_z) for _ in range(spec.posterior_layers)
        )
        if spec.memory:
            self.age = nn.Parameter(torch.randn(spec.memory + 1, 1, D) * 0.02)
            self.memory_blocks = nn.ModuleList(
                CrossBlock(D, spec.heads, spec.mult, spec.post_norm) for _ in range(spec.memory_layers)
            )
        pixels = p * p * c  # a patch's pixels
        patches = self.num_patches if self.image in decoded else 0
        self.vector_out = nn.ModuleDict({
            k: nn.Sequential(nn.Linear(spec.dim, spec.decoder_hidden), nn.GELU(),
                             nn.Linear(spec.decoder_hidden, env.obs_spec[k].shape[0]))
            for k in self.decoded})
        self.decoded_patches = patches
        if spec.target == "pixels":  # a query per patch (the shared MLP), then one per decoded vector
            self.decoder_queries, mlp = self.perceiver_decoder(patches + len(self.decoded), pixels or 1)
            if patches:
                self.decoder_mlp = mlp
        else:  # ẑ_t: the features, and the viewer that shows h as a frame (gradient stopped at h)
            self.decoder_queries, self.decoder_mlp = self.perceiver_decoder(N_z, D_z)
            self.viewer_queries, self.viewer_mlp = self.perceiver_decoder(self.num_patches, pixels)
        self.readout = PerceiverReadout(D, spec.heads, 1, spec.post_norm)
        self.heads = RewardContinueHeads(D, spec.head_hidden, spec.head_layers, spec.reward_bins)

    def perceiver_decoder(self, outputs: int, width: int) -> tuple[PerceiverReadout, nn.Sequential]:
        """3.4: ``outputs`` learned queries cross-attend to h; a shared MLP maps each to ``width`` values."""
        spec = self.spec
        mlp = nn.Sequential(nn.Linear(spec.dim, spec.decoder_hidden), nn.GELU(), nn.Linear(spec.decoder_hidden, width))
        return PerceiverReadout(spec.dim, spec.heads, outputs, spec.post_norm), mlp

    def components(self) -> dict[str, tuple[list[nn.Parameter], OptimSpec]]:
        return {"model": (list(self.parameters()), self.spec.optim)}

    # -- the four parts of section 3 -------------------------------------------------------------
    def prior(self, hstar: Tensor, action: Tensor) -> Tensor:
        """h^p_t = f^p(h*_{t−1}, a_{t−1}) (3.2); ``action`` encoded ``[B, A]``."""
        x = hstar + self.prior_pos
        for block in self.prior_blocks:
            x = block(x, action)
        return x

    def posterior(self, prior: Tensor, z: Tensor) -> Tensor:
        """h^q_t = f^q(h^p_t, z_t) (3.3)."""
        x, kv = prior + self.post_pos, z + self.obs_pos
        for block in self.post_blocks:
            x = block(x, kv)
        return x

    def read_memory(self, h: Tensor, bank: Tensor, valid: Tensor) -> Tensor:
        """h*_t = f^M(h_t, bank) (3.5): ``h`` queries the valid bank entries and itself."""
        B, n, N_h, D = bank.shape
        keys = (torch.cat([bank, h.unsqueeze(1)], 1) + self.age).reshape(B, (n + 1) * N_h, D)
        seen = torch.cat([valid, valid.new_ones(B, 1)], 1)
        ignore = ~seen.repeat_interleave(N_h, 1)
        x = h
        for block in self.memory_blocks:
            x = block(x, keys, ignore)
        return x

    def encode(self, obs: Obs) -> Tensor:
        """z_t: the image's patch tokens (ViT or DINOv2) followed by one token per vector entry
        (``symlog`` then a learned linear projection to ``D_z``), ``[..., N_z, D_z]``."""
        entries = obs_entries(obs)
        parts = [self.encoder(entries[self.image])] if self.image else []
        parts += [proj(symlog(entries[k].float())).unsqueeze(-2) for k, proj in self.vector_in.items()]
        return torch.cat(parts, -2) if len(parts) > 1 else parts[0]

    def reconstruct(self, h: Tensor) -> Tensor:
        """ẑ = D(h) (3.4): pixel patches ``[..., N_z, p·p·C]`` in ``[0, 1]`` scale (not clamped), or
        with ``target: features`` the encoder's tokens ``[..., N_z, D_z]``."""
        queries = self.decoder_queries(h)
        if self.spec.target == "pixels":
            return self.decoder_mlp(queries[..., : self.decoded_patches, :]) + 0.5
        return self.decoder_mlp(queries)

    def reconstruct_vectors(self, h: Tensor) -> dict[str, Tensor]:
        """The decoded vector entries in ``symlog`` space, one query each after the patches'."""
        queries = self.decoder_queries(h)[..., self.decoded_patches:, :]
        return {k: out(queries[..., i, :]) for i, (k, out) in enumerate(self.vector_out.items())}

    def frame_patches(self, h: Tensor) -> Tensor:
        """The frame h shows, as pixel patches: the decoder's, or the viewer's (``target: features``)."""
        if self.spec.target == "pixels":
            return self.reconstruct(h)
        return self.viewer_mlp(self.viewer_queries(h.detach())) + 0.5

    def patches(self, obs: Tensor) -> Tensor:
        """The reconstruction target: uint8 frames ``[..., C, H, W]`` → ``[..., N_z, p·p·C]`` in ``[0, 1]``."""
        c, height, width = obs.shape[-3:]
        p = self.spec.patch
        x = obs.float().div(255.0).reshape(*obs.shape[:-3], c, height // p, p, width // p, p)
        return x.movedim(-5, -1).transpose(-4, -3).flatten(-5, -4).flatten(-3)  # [..., H/p·W/p, p·p·C]

    def unpatch(self, patches: Tensor) -> Tensor:
        """The inverse of :meth:`patches`: ``[..., N_z, p·p·C]`` → ``[..., C, H, W]``."""
        c, height, width = self.image_shape
        p = self.spec.patch
        x = patches.reshape(*patches.shape[:-2], height // p, width // p, p, p, c)
        return x.transpose(-4, -3).movedim(-1, -5).reshape(*patches.shape[:-2], c, height, width)

    def _advance(self, state: State, h: Tensor) -> State:
        """The state after ``h``: read the memory, then push ``h`` into the bank."""
        if not self.spec.memory:
            return {"h": h, "hstar": h}
        hstar = self.read_memory(h, state["bank"], state["valid"])
        bank, valid = push(state["bank"], state["valid"], h)
        return {"h": h, "hstar": hstar, "bank": bank, "valid": valid}

    def _filter(self, state: State, z: Tensor, prev_action: Tensor, is_first: Tensor) -> tuple[State, Tensor]:
        """One real step from patch tokens ``z``: ``(the state after it, its prior h^p)``."""
        state = reset_state(state, self.initial_state(z.shape[0]), is_first)
        prior = self.prior(state["hstar"], encode_action(prev_action, self.env))
        return self._advance(state, self.posterior(prior, z)), prior

    # -- the interface ----------------------------------------------------------------------------
    def initial_state(self, batch_size: int) -> State:
        h0 = self.h0.expand(batch_size, -1, -1)
        n = self.spec.memory
        if not n:
            return {"h": h0, "hstar": h0}
        return {"h": h0, "hstar": h0, "bank": h0.new_zeros(batch_size, n, *h0.shape[1:]),
                "valid": torch.zeros(batch_size, n, dtype=torch.bool, device=h0.device)}

    def features(self, state: State) -> Tensor:
        return state["hstar"]

    def observe_step(self, state: State, obs: Obs, prev_action: Tensor, is_first: Tensor) -> State:
        return self._filter(state, self.encode(obs), prev_action, is_first)[0]

    def imagine_step(self, state: State, action: Tensor) -> Step:
        """h^p = f^p(h*, a), which enters the memory as h (no observation to correct it)."""
        new = self._advance(state, self.prior(state["hstar"], encode_action(action, self.env)))
        reward, cont = self.heads.predict(self.readout(new["hstar"]).squeeze(-2))
        return Step(state=new, reward=reward, cont=cont, features=new["hstar"])

    @torch.no_grad()
    def decode(self, state: State) -> Obs:
        out = {k: symexp(v).float() for k, v in self.reconstruct_vectors(state["h"]).items()}
        if self.decoded_patches or self.spec.target == "features":
            image = self.unpatch(self.frame_patches(state["h"]))
            out[self.image] = (image.clamp(0, 1) * 255).round().to(torch.uint8)
        return pack_obs(out)

    def rollout(self, batch: Batch, z: Tensor | None = None) -> tuple[State, Tensor]:
        """The recurrence over a batch from h_0: the states after each step ``[B, T, ...]`` and the
        priors ``[B, T, N_h, D]``. Every row starts from h_0 (training carries no state across
        windows); the prior at a window's first step and at every episode start inside it reads the
        zero action, as :meth:`observe_step` is given it. ``z``: the batch's encoded frames, when
        the caller has them.

        The same recurrence as :meth:`observe_step` step after step, with the work that does not
        depend on it done once for the whole window: the actions' FiLM projections, the patch
        tokens' keys and values of every posterior block, and the memory's validity (episode
        starts as masks, not state resets). The memory bank is a ring buffer of the keys and values
        each state ``h`` gives the memory reader (:class:`MemoryRing`), so every state is projected
        once, not once per step it stays in the bank; the per-step banks of the returned states
        are gathered from the ``h`` sequence once at the end."""
        B, T = batch.shape
        z = self.encode(batch.obs) if z is None else z
        prev_action = torch.cat([torch.zeros_like(batch.action[:, :1]), batch.action[:, :-1]], 1)
        start = batch.is_first if prev_action.dim() == 2 else batch.is_first.unsqueeze(-1)
        prev_action = prev_action.masked_fill(start, 0)
        first = batch.is_first.clone()
        first[:, 0] = True  # every row starts from h_0 at the window's start
        action = encode_action(prev_action, self.env)
        # per step by unbind, not by indexing: the gradient of an index is a zero-filled tensor of
        # the whole window per step, that of unbind one stack of the steps' gradients
        films = [block.film.proj(action).unbind(1) for block in self.prior_blocks]  # T × [B, 2·D]
        obs = z + self.obs_pos
        post_kv = [block.cross.project_kv(obs).unbind(1) for block in self.post_blocks]  # T × [B, N_z, 2·D]
        ring = MemoryRing(self, first) if self.spec.memory else None
        h0 = self.h0.expand(B, -1, -1)
        hstar, hs, hstars, priors = h0, [], [], []
        for t in range(T):
            hstar = torch.where(first[:, t, None, None], h0, hstar)  # the episode starts as a mask
            x = hstar + self.prior_pos
            for block, film in zip(self.prior_blocks, films):
                x = block(x, film=film[t])
            priors.append(x)
            h = x + self.post_pos
            for block, kv in zip(self.post_blocks, post_kv):
                h = block(h, kv_proj=kv[t])
            hstar = ring.read_and_push(h, t) if ring is not None else h
            hs.append(h)
            hstars.append(hstar)
        h_seq = torch.stack(hs, 1)
        states = {"h": h_seq, "hstar": torch.stack(hstars, 1)}
        if ring is not None:
            states["bank"], states["valid"] = ring.banks(h_seq)
        return states, torch.stack(priors, 1)

    def observe(self, batch: Batch, state: State | None = None) -> State:
        if state is not None:  # continue a stream step by step (acting, the memory protocols)
            return super().observe(batch, state)
        return index_state(self.rollout(batch)[0], (slice(None), -1))

    def loss(self, batch: Batch, carry: State | None = None) -> TrainOutput:
        """Eq. 1 (without its imitation term) plus the reward and continue heads."""
        spec = self.spec
        z = self.encode(batch.obs)
        states, priors = self.rollout(batch, z)
        post, hstar = states["h"], states["hstar"]
        informed = ~batch.is_first
        informed[:, 0] = False
        state = masked_mean((post - priors).square().mean((-2, -1)), informed)
        entries = obs_entries(batch.obs)
        parts = {}  # mean squared errors: pixel patches (or z), each decoded vector's symlog values
        if self.decoded_patches or spec.target == "features":
            target = self.patches(entries[self.image]) if spec.target == "pixels" else z
            parts[self.image] = (self.reconstruct(post) - target).square().mean()
        for key, pred in self.reconstruct_vectors(post).items():
            parts[key] = (pred - symlog(entries[key].float())).square().mean()
        recon = torch.stack(list(parts.values())).sum()
        reward, cont, head_metrics = self.heads.loss(self.readout(hstar).squeeze(-2), batch)
        total = spec.state_weight * state + spec.recon_weight * recon + spec.reward_weight * reward + spec.cont_weight * cont
        views = {}
        if spec.target == "features":  # the viewer learns the frame; its gradient stops at h
            views["view"] = (self.frame_patches(post) - self.patches(entries[self.image])).square().mean()
            total = total + views["view"]
        with torch.no_grad():
            metrics = {"model": total, "state": state, "recon": recon, "reward": reward, "cont": cont,
                       **views, **head_metrics,
                       **({f"recon_{k}": v for k, v in parts.items()} if not self.env.pixel else {})}
        starts = slice(None, None, spec.start_stride)
        return TrainOutput(
            losses={"model": total},
            metrics=dict(zip(metrics, torch.stack([m.detach().float() for m in metrics.values()]).tolist())),
            start=flatten_state(detach_state(index_state(states, (slice(None), starts)))),
            start_cont=start_conts(batch)[:, starts].reshape(-1),
            features=hstar,  # h*_t, what π(a_t | h*_t, c) reads (eq. 1)
        )


class MemoryRing:
    """The memory reader's view of a window's states, for :meth:`TokenWMWorldModel.rollout`: per
    memory block a ring buffer ``[B, n + 1, N_h, 2·D]`` of the keys and values (without bias)
    that the last ``n + 1`` states ``h`` project to, state ``t`` in slot ``t mod (n + 1)``, written
    in place; each slot's age embedding (its projection plus the bias, the ring's rotation at step
    ``t``) and which slots belong to step ``t``'s episode are computed for every step at once.
    Reading at step ``t`` is :meth:`TokenWMWorldModel.read_memory` of ``h_t`` over the bank of
    :meth:`observe_step` (the keys and values are linear: ``W(h + age) + b = Wh + (W·age + b)``)."""

    def __init__(self, wm: TokenWMWorldModel, first: Tensor) -> None:
        B, T = first.shape
        n, N_h = wm.spec.memory, wm.spec.tokens
        self.wm, self.slots, self.N_h = wm, n + 1, N_h
        device = first.device
        steps = torch.arange(T, device=device)
        # steps since the episode's start (the window's start counts as one)
        start = torch.where(first, steps, torch.zeros_like(steps)).cummax(1).values
        self.since = steps - start  # [B, T]
        # at step t, slot r holds h_{t - j}, j = (t - r) mod (n + 1), which has age slot n - j
        self.lag = (steps[:, None] - torch.arange(self.slots, device=device)) % self.slots  # [T, n + 1]
        seen = self.lag <= self.since[:, :, None]  # [B, T, n + 1]: h_{t - j} is in t's episode
        self.mask = seen.repeat_interleave(N_h, -1)[:, :, None, None, :]  # [B, T, 1, 1, (n + 1)·N_h]
        blocks = wm.memory_blocks
        self.ages = [block.cross.project_kv(wm.age)[n - self.lag].unbind(0) for block in blocks]  # T × [n + 1, 1, 2·D]
        self.rings: list[Tensor | None] = [None] * len(blocks)

    def read_and_push(self, h: Tensor, t: int) -> Tensor:
        """h*_t: ``h [B, N_h, D]`` enters its slot, then reads the ring (itself included)."""
        B, N_h, D = h.shape
        x, slot = h, t % self.slots
        for i, block in enumerate(self.wm.memory_blocks):
            kv = block.cross.project_kv(h, bias=False)
            ring = self.rings[i]
            if ring is None:
                ring = self.rings[i] = kv.new_zeros(B, self.slots, N_h, kv.shape[-1])
            ring[:, slot] = kv
            keys = (ring + self.ages[i][t]).reshape(B, self.slots * N_h, -1)
            x = block(x, kv_proj=keys, mask=self.mask[:, t])
        return x

    def banks(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """The bank and its validity after each step, as :meth:`TokenWMWorldModel.observe_step`
        leaves them: ``[B, T, n, N_h, D]`` holding h_{t−n+1} … h_t (zeros where empty), and
        ``[B, T, n]``, from the window's states ``h [B, T, N_h, D]``."""
        B, T = h.shape[:2]
        n = self.slots - 1
        padded = torch.cat([h.new_zeros(B, n - 1, *h.shape[2:]), h], 1)
        bank = padded.unfold(1, n, 1).movedim(-1, 2)  # [B, T, n, N_h, D]: slot s holds h_{t - n + 1 + s}
        back = torch.arange(n - 1, -1, -1, device=h.device)  # slot s is n - 1 - s steps back
        valid = back <= self.since[:, :, None]
        return torch.where(valid[..., None, None], bank, torch.zeros((), dtype=h.dtype, device=h.device)), valid


# --------------------------------------------------------------------------- presets

PRESETS: dict[str, TokenWMSpec] = {
    # CPU tests and the tiny end-to-end run: 8 tokens of width 32, one block each, 2 past states.
    "tiny": TokenWMSpec(
        batch_size=4, seq_len=12, tokens=8, dim=32, heads=4, mult=2, prior_layers=1, posterior_layers=1,
        memory_layers=1, memory=2, patch=8, encoder_dim=32, encoder_layers=1, encoder_heads=4,
        decoder_hidden=64, head_hidden=64, head_layers=1, optim=OptimSpec(lr=3e-4, clip=100.0),
    ),
    # A CPU hour: 16 tokens of width 128, table 2's layer counts halved, its memory of 5.
    "small": TokenWMSpec(
        batch_size=8, seq_len=32, tokens=16, dim=128, heads=4, mult=2, prior_layers=1, posterior_layers=2,
        memory_layers=1, memory=5, patch=8, encoder_dim=128, encoder_layers=2, encoder_heads=4,
        decoder_hidden=256, head_hidden=256, head_layers=1, optim=OptimSpec(lr=3e-4, clip=100.0),
    ),
    # Table 2: state 64 × 512, N 2, P 4, M 2, 8 heads, memory 5 × 64 × 512, batch 32 × horizon 64,
    # AdamW 1e-4, clip 100, weights state 0.1 / reconstruction 10. The encoder: a ViT-S-like
    # (D_z 384, 6 layers, 6 heads) trained from scratch in place of the frozen DINOv2-L.
    "paper": TokenWMSpec(batch_size=32, seq_len=64),
}
