"""TSSM-XL world model: TransDreamer's TSSM on a Transformer-XL, the s4wm paper's baseline.

Papers:
    Deng et al., "Facing Off World Model Backbones: RNNs, Transformers, and S4", 2023: TSSM-XL,
        section 4 ("TSSM-XL"), appendix D.2 (eq. 20–24), tables 7 (3D) and 8 (2D).
    Chen et al., "TransDreamer: Reinforcement Learning with Transformer World Models", 2021:
        TSSM (pre-LN transformer over embeddings of ``(z_{t-1}, a_t)``).
    Dai et al., "Transformer-XL", 2019: segment recurrence with a cache of ``m`` steps
        (``transformer_xl.py``).

Notation (the paper's ``a_t`` leads *into* ``x_t``; wmzoo's ``action[t]`` follows ``obs[t]``,
so the paper's ``a_t`` is wmzoo's ``action[t-1]``):
    e_t  embedding of the image x_t by the CNN encoder [embed]
    z_t  stochastic state, ``stoch`` one-hot categoricals of ``classes`` classes [stoch]
    h_t  deterministic state, output of the Transformer-XL [deter]

    q(z_t | x_t) = MLP(e_t)                         factorised posterior   (eq. 21)
    g_t = MLP([z_{t-1}, action[t-1]])               transformer input      (eq. 23)
    h_t = TransformerXL(g_{≤t})  (cache of m steps) history encoding      (eq. 23)
    p(z_t | z_{<t}, a_{≤t}) = MLP(h_t)              prior                  (eq. 24)
    x̂_t = Decoder([h_t, z_t]); r̂, ĉ = MLP([h_{t+1}, z_{t+1}])  heads      (eq. 24)

Because the posterior needs no history, a training segment is one parallel pass: all ``z_t``
from the encoder, then all ``h_t`` from one Transformer-XL call over the segment and the cache.

A state is ``{"deter" [B, d], "stoch" [B, S, K], "logits" [B, S, K], "action" [B, A],
"memory" [B, L, m, d], "memory_valid" [B, m]}``: the latent at the current step, the action
taken there where known (the last state of an observed segment carries ``action[T-1]`` for the
next segment's first input; zeros elsewhere), and each layer's cache of its last ``m`` inputs,
which includes the current step's. ``memory_valid`` marks slots of the current episode.

File order as timm's convnext: spec → dynamics → world model → presets.
"""

from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from wmzoo.hookspecs import RunPreset
from wmzoo.interfaces import (
    Batch,
    Dynamics,
    State,
    TrainOutput,
    detach_state,
    flatten_state,
    reset_state,
)
from wmzoo.nn import MLP, LatentWorldModel, LatentWorldModelSpec
from wmzoo.nn.heads import encode_action, start_conts
from wmzoo.nn.latent import CategoricalLatent, KLSpec, sample_latent
from wmzoo.nn.world_model import latent_objective
from wmzoo.specs import OptimSpec

from .transformer_xl import TransformerXL, XLOutput

# --------------------------------------------------------------------------- spec


class TSSMXLSpec(LatentWorldModelSpec):
    """Hyperparameters of TSSM-XL (Transformer-XL defaults: s4wm table 7, 3D; presets ``paper`` and
    ``paper-2d``: s4wm tables 7 and 8). The CNN, latent, heads, loss scales and optimizer fields are
    :class:`~wmzoo.nn.LatentWorldModelSpec`'s (defaults: DreamerV3 size S)."""

    d_model: int = Field(512, ge=8, le=8192, description="Transformer-XL width (h_t size)")
    n_heads: int = Field(8, ge=1, le=128, description="attention heads")
    head_dim: int = Field(64, ge=1, le=1024, description="width of each attention head")
    d_ff: int = Field(512, ge=1, le=32768, description="hidden units of each feed-forward block")
    n_layers: int = Field(12, ge=1, le=96, description="Transformer-XL layers")
    cache_len: int = Field(
        128, ge=1, le=4096, description="m: cached steps per layer (s4wm: 128, ablations 256 / 512)"
    )
    dropout: float = Field(0.1, ge=0, lt=1, description="dropout on inputs, positions, attention and residuals")


# --------------------------------------------------------------------------- dynamics


class TSSMXL(Dynamics):
    """Posterior, input MLP, Transformer-XL and prior.

    ``action`` arguments are encoded actions ``[..., A]`` (see :func:`encode_action`).
    ``sample=False`` takes modes instead of samples, which makes the segment and step forms
    comparable exactly.
    """

    def __init__(self, embed_dim: int, action_dim: int, spec: TSSMXLSpec) -> None:
        super().__init__()
        self.stoch, self.classes, self.action_dim = spec.stoch, spec.classes, action_dim
        self.d_model = spec.d_model
        latent = spec.stoch * spec.classes
        self.posterior = CategoricalLatent(embed_dim, spec.stoch, spec.classes, spec.hidden, 1, spec.unimix)
        self.img_in = MLP(latent + action_dim, spec.d_model, spec.hidden, 1)
        self.transformer = TransformerXL(
            spec.d_model, spec.n_heads, spec.head_dim, spec.d_ff, spec.n_layers, spec.cache_len, spec.dropout
        )
        self.prior = CategoricalLatent(spec.d_model, spec.stoch, spec.classes, spec.hidden, 1, spec.unimix)

    @property
    def feature_dim(self) -> int:
        return self.d_model + self.stoch * self.classes

    def initial_state(self, batch_size: int) -> State:
        """Zero latent, no previous action and an empty (all-masked) cache."""
        ref = self.img_in.out.weight
        zeros = lambda *shape: torch.zeros(batch_size, *shape, device=ref.device, dtype=ref.dtype)  # noqa: E731
        memory, valid = self.transformer.initial_memory(batch_size, ref.device, ref.dtype)
        return {
            "deter": zeros(self.d_model),
            "stoch": zeros(self.stoch, self.classes),
            "logits": zeros(self.stoch, self.classes),
            "action": zeros(self.action_dim),
            "memory": memory,
            "memory_valid": valid,
        }

    def features(self, state: State) -> Tensor:
        """``[h_t, flat z_t]``."""
        return torch.cat([state["deter"], state["stoch"].flatten(-2)], -1)

    def history(
        self, prev_stoch: Tensor, prev_action: Tensor, is_first: Tensor, state: State
    ) -> tuple[Tensor, Tensor, XLOutput]:
        """``(h [B, T, d], prior logits [B, T, S, K], XLOutput)`` from the inputs of each step:
        ``z_{t-1}`` ``[B, T, S, K]`` and ``action[t-1]`` ``[B, T, A]``, zeroed where ``is_first``."""
        keep = (~is_first).unsqueeze(-1).to(prev_action.dtype)
        g = self.img_in(torch.cat([prev_stoch.flatten(-2) * keep, prev_action * keep], -1))
        xl = self.transformer(g, state["memory"], state["memory_valid"], is_first)
        return xl.out, self.prior(xl.out), xl

    def _next_state(self, xl: XLOutput, logits: Tensor, action: Tensor, sample: bool) -> State:
        """A state at the last step of a pass of length 1."""
        return {
            "deter": xl.out[:, -1],
            "stoch": sample_latent(logits, sample),
            "logits": logits,
            "action": action,
            "memory": xl.memory,
            "memory_valid": xl.memory_valid,
        }

    def imagine_step(self, state: State, action: Tensor, sample: bool = True) -> State:
        """Append the token ``g = MLP([z_t, a_t])``: attend over the cache, take the prior."""
        first = torch.zeros(action.shape[0], 1, dtype=torch.bool, device=action.device)
        _, logits, xl = self.history(state["stoch"][:, None], action[:, None], first, state)
        return self._next_state(xl, logits[:, -1], torch.zeros_like(action), sample)

    def observe_step(
        self, state: State, embed: Tensor, prev_action: Tensor, is_first: Tensor, sample: bool = True
    ) -> tuple[State, State]:
        """One filtering step: ``(posterior, prior)``. Where ``is_first`` the state (cache
        included) is reset and ``prev_action`` ignored."""
        state = reset_state(state, self.initial_state(embed.shape[0]), is_first)
        _, prior_logits, xl = self.history(state["stoch"][:, None], prev_action[:, None], is_first[:, None], state)
        unknown = torch.zeros_like(prev_action)
        post = self._next_state(xl, self.posterior(embed), unknown, sample)
        prior = self._next_state(xl, prior_logits[:, -1], unknown, sample)
        return post, prior

    def observe_segment(
        self, embed: Tensor, action: Tensor, is_first: Tensor, state: State | None = None, sample: bool = True
    ) -> tuple[State, Tensor, XLOutput]:
        """The parallel pass over a segment: ``(post [B, T, ...], prior logits, XLOutput)``.

        ``post`` holds ``deter``, ``stoch``, ``logits`` and ``action`` per step (no cache; see
        :meth:`states_at`). The first input uses ``state``'s ``z`` and ``action``.
        """
        state = self.initial_state(embed.shape[0]) if state is None else state
        post_logits = self.posterior(embed)
        stoch = sample_latent(post_logits, sample)
        prev_stoch = torch.cat([state["stoch"][:, None], stoch[:, :-1]], 1)
        prev_action = torch.cat([state["action"][:, None], action[:, :-1]], 1)
        deter, prior_logits, xl = self.history(prev_stoch, prev_action, is_first, state)
        post = {"deter": deter, "stoch": stoch, "logits": post_logits, "action": action}
        return post, prior_logits, xl

    def observe(
        self, embed: Tensor, action: Tensor, is_first: Tensor, state: State | None = None, sample: bool = True
    ) -> tuple[State, State]:
        """Posterior and prior latents ``[B, T, ...]`` (without caches), as :class:`Dynamics` asks."""
        post, prior_logits, _ = self.observe_segment(embed, action, is_first, state, sample)
        prior = {"deter": post["deter"], "stoch": sample_latent(prior_logits, sample), "logits": prior_logits}
        return post, prior

    @staticmethod
    def states_at(post: State, xl: XLOutput, steps: Tensor) -> State:
        """Full states ``[B, n, ...]`` (cache included) after each of the segment ``steps``."""
        memory, valid = xl.memory_at(steps)
        return {**{k: v[:, steps] for k, v in post.items()}, "memory": memory, "memory_valid": valid}

    @staticmethod
    def last_state(post: State, xl: XLOutput) -> State:
        """The state after the segment's last step, carrying ``action[T-1]``."""
        return {**{k: v[:, -1] for k, v in post.items()}, "memory": xl.memory, "memory_valid": xl.memory_valid}


# --------------------------------------------------------------------------- world model


class TSSMXLWorldModel(LatentWorldModel):
    """Encoder, TSSM-XL dynamics, image decoder, reward (two-hot) and continue heads.

    Training is stateful: ``loss(batch, carry)`` continues from the previous segment's cache
    (Transformer-XL's segment recurrence) and returns the new one, detached.
    """

    spec: TSSMXLSpec
    dynamics: TSSMXL
    stateful_training = True

    def build_dynamics(self, embed_dim: int) -> TSSMXL:
        return TSSMXL(embed_dim, self.env.num_actions, self.spec)

    # -- the interface (the rest: LatentWorldModel) -------------------------------------------
    def observe_window(self, batch: Batch, state: State | None = None, sample: bool = True) -> tuple[Tensor, State]:
        """Posterior features and the state after the last step, from one parallel pass over
        the batch as a segment continuing ``state``'s cache (the training form)."""
        post, _, xl = self.dynamics.observe_segment(
            self.encoder(batch.obs), encode_action(batch.action, self.env), batch.is_first, state, sample
        )
        return self.features(post), self.dynamics.last_state(post, xl)

    def loss(self, batch: Batch, carry: State | None = None) -> TrainOutput:
        """The s4wm objective (eq. 22 with KL balancing) on a segment continuing ``carry``."""
        spec = self.spec
        post, prior_logits, xl = self.dynamics.observe_segment(
            self.encoder(batch.obs), encode_action(batch.action, self.env), batch.is_first, carry
        )
        feat = self.features(post)

        total, metrics = latent_objective(
            spec, self.decoder, self.heads, feat, post["logits"], prior_logits, batch
        )
        steps = torch.arange(0, batch.shape[1], spec.start_stride, device=feat.device)
        start = detach_state(self.dynamics.states_at(post, xl, steps))
        return TrainOutput(
            losses={"model": total},
            metrics=metrics,
            start=flatten_state(start),
            start_cont=start_conts(batch)[:, steps].reshape(-1),
            carry=detach_state(self.dynamics.last_state(post, xl)),
            features=feat,
        )


# --------------------------------------------------------------------------- presets

PAPER_OPTIM = OptimSpec(lr=1e-4, weight_decay=1e-2, clip=1000.0)
"""s4wm tables 7–8, TSSM-XL: AdamW, constant lr 1e-4, weight decay 1e-2, clip 1000."""

PAPER_KL = KLSpec(free=0.0, balance=0.8)
"""s4wm tables 7–8: "KL balancing 0.8" (section 4: α = 0.8), no free nats."""

PRESETS: dict[str, TSSMXLSpec] = {
    # CPU tests: 2 layers of width 32, cache 16; dropout off so that forms compare exactly.
    "tiny": TSSMXLSpec(
        batch_size=4, seq_len=16, d_model=32, n_heads=2, head_dim=16, d_ff=64, n_layers=2,
        cache_len=16, dropout=0.0, stoch=8, classes=8, hidden=64, mlp_layers=1,
        cnn_depth=8, cnn_stages=4, optim=OptimSpec(lr=3e-4),
    ),
    # A CPU hour on MiniGrid at 64×64 (sized like rssm's small).
    "small": TSSMXLSpec(
        batch_size=8, seq_len=32, d_model=128, n_heads=4, head_dim=32, d_ff=256, n_layers=3,
        cache_len=64, dropout=0.1, stoch=16, classes=16, hidden=256, mlp_layers=1,
        cnn_depth=8, cnn_stages=4, optim=OptimSpec(lr=3e-4),
    ),
    # s4wm table 7, TSSM-XL (3D, 64×64): batch 8, 12 layers, d_model 512, d_ff 512, cache 128,
    # 32×32 latents, CNN 4 × 48, MLP 1000; AdamW 1e-4, wd 1e-2, clip 1000; KL balance 0.8.
    # Heads 8 × 64 and dropout 0.1 from TSSM (TransDreamer); segment length 128 = m is ours
    # (the paper does not give it); 2-layer heads as DreamerV3.
    "paper": TSSMXLSpec(
        batch_size=8, seq_len=128, d_model=512, n_heads=8, head_dim=64, d_ff=512, n_layers=12,
        cache_len=128, stoch=32, classes=32, hidden=1000, mlp_layers=2, cnn_depth=48,
        cnn_stages=4, kl=PAPER_KL, start_stride=8, optim=PAPER_OPTIM,
    ),
    # s4wm table 8, TSSM-XL (2D, 40×40): 10 layers, CNN 3 × 32, MLP 512; otherwise as `paper`.
    "paper-2d": TSSMXLSpec(
        batch_size=8, seq_len=128, d_model=512, n_heads=8, head_dim=64, d_ff=512, n_layers=10,
        cache_len=128, stoch=32, classes=32, hidden=512, mlp_layers=2, cnn_depth=32,
        cnn_stages=3, kl=PAPER_KL, start_stride=8, optim=PAPER_OPTIM,
    ),
}
# s4wm appendix B.2 / table 5: the cache-length ablation (m = 256, 512), segment length = m.
PRESETS["paper-m256"] = PRESETS["paper"].model_copy(update={"cache_len": 256, "seq_len": 256, "start_stride": 16})
PRESETS["paper-m512"] = PRESETS["paper"].model_copy(update={"cache_len": 512, "seq_len": 512, "start_stride": 32})

# The world-model variants as run presets: each with the dreamer policy's and the trainer's
# `paper` preset.
RUN_PRESETS: dict[str, RunPreset] = {
    name: RunPreset(model=name, policy="paper", train="paper") for name in ("paper-2d", "paper-m256", "paper-m512")
}
