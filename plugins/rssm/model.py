"""RSSM world model of DreamerV3, trained with truncated backpropagation through time (RSSM-TBTT).

Papers:
    Hafner et al., "Mastering Diverse Domains through World Models" (DreamerV3), 2023.
    Pašukonis et al., "Evaluating Long-Term Memory in 3D Mazes" (Memory Maze), 2023: the TBTT
        training of pydreamer (github.com/jurgisp/pydreamer), each batch row streaming an episode
        in consecutive segments and starting each from the last state of the previous one.
    Deng et al., "Facing Off World Model Backbones: RNNs, Transformers, and S4", 2023: the
        RSSM-TBTT baseline, tables 7 (3D) and 8 (2D); equations 15–19 of its appendix D.1.

Notation (used once here, names in brackets):
    h_t  deterministic state, the GRU output [deter]
    z_t  stochastic state, ``stoch`` one-hot categoricals of ``classes`` classes [stoch]
    e_t  embedding of the image x_t by the CNN encoder [embed]
    a_t  action taken after seeing x_t (wmzoo's data convention) [action]

    h_t = GRU(h_{t-1}, MLP([z_{t-1}, a_{t-1}]))         sequence model    (s4wm eq. 15)
    p(z_t | h_t) = MLP(h_t)                              prior / dynamics  (eq. 16)
    q(z_t | h_t, e_t) = MLP([h_t, e_t])                  posterior         (eq. 18)
    x̂_t = Decoder([h_t, z_t]), r̂, ĉ = MLP([h_t, z_t])   heads             (eq. 17)

A state is ``{"deter": h [B, deter], "stoch": z [B, stoch, classes], "logits": [B, stoch, classes],
"action": [B, A]}``. ``action`` holds the (one-hot) action taken in that state where it is known:
the last state of an observed sequence carries ``a_{T-1}`` so that the next segment's first
transition uses it (DreamerV3's train state is likewise ``(latent, last action)``); states whose
action is not yet known (initial, one observe step, imagined) hold zeros.

File order as timm's convnext: spec → building blocks → dynamics → world model → presets.
"""

from __future__ import annotations

from functools import partial

import torch
from pydantic import Field
from torch import Tensor, nn

from wmzoo.hookspecs import RunPreset
from wmzoo.interfaces import (
    Batch,
    Dynamics,
    EnvInfo,
    State,
    TrainOutput,
    detach_state,
    flatten_state,
    index_state,
    reset_state,
)
from wmzoo.nn import LatentWorldModel, LatentWorldModelSpec, NormedLinear
from wmzoo.nn.heads import encode_action, start_conts
from wmzoo.nn.latent import CategoricalLatent, KLSpec, sample_latent
from wmzoo.nn.world_model import latent_objective
from wmzoo.specs import OptimSpec

# --------------------------------------------------------------------------- spec


class RSSMSpec(LatentWorldModelSpec):
    """Hyperparameters of the RSSM world model (defaults: DreamerV3 size S; presets ``paper`` and
    ``paper-2d``: s4wm tables 7 and 8, RSSM-TBTT). The CNN, latent, heads, loss scales and optimizer
    fields are :class:`~wmzoo.nn.LatentWorldModelSpec`'s."""

    deter: int = Field(512, ge=1, le=16384, description="h_t: GRU (deterministic state) size")
    tbtt: bool = Field(
        True, description="truncated BPTT: carry the last posterior state into the next segment"
    )


# --------------------------------------------------------------------------- building blocks


class LayerNormGRUCell(nn.Module):
    """DreamerV3's GRU cell: one linear map of ``[x, h]`` to reset, candidate and update gates,
    LayerNorm over all three, and an update bias of −1 (the state is kept by default)."""

    def __init__(self, in_dim: int, size: int, eps: float = 1e-3) -> None:
        super().__init__()
        self.linear = nn.Linear(in_dim + size, 3 * size, bias=False)
        self.norm = nn.LayerNorm(3 * size, eps=eps)

    def forward(self, x: Tensor, h: Tensor) -> Tensor:
        reset, cand, update = self.norm(self.linear(torch.cat([x, h], -1))).chunk(3, -1)
        reset = torch.sigmoid(reset)
        cand = torch.tanh(reset * cand)
        update = torch.sigmoid(update - 1.0)
        return update * cand + (1.0 - update) * h


# --------------------------------------------------------------------------- dynamics


class RSSM(Dynamics):
    """The recurrent state-space model (DreamerV3 ``RSSM``, zero initial state as pydreamer).

    ``action`` arguments are encoded actions ``[..., A]`` (see :func:`encode_action`).
    ``sample=False`` takes the mode of every categorical instead of a sample, which makes the
    sequence and step forms comparable exactly.
    """

    def __init__(
        self,
        embed_dim: int,
        action_dim: int,
        deter: int,
        stoch: int,
        classes: int,
        hidden: int,
        unimix: float,
    ) -> None:
        super().__init__()
        self.deter, self.stoch, self.classes, self.action_dim = deter, stoch, classes, action_dim
        self.img_in = NormedLinear(stoch * classes + action_dim, hidden)
        self.gru = LayerNormGRUCell(hidden, deter)
        self.prior = CategoricalLatent(deter, stoch, classes, hidden, 1, unimix)
        self.posterior = CategoricalLatent(deter + embed_dim, stoch, classes, hidden, 1, unimix)

    @property
    def feature_dim(self) -> int:
        return self.deter + self.stoch * self.classes

    def initial_state(self, batch_size: int) -> State:
        """Zeros: ``h_0 = 0``, ``z_0 = 0`` and no previous action."""
        ref = self.gru.linear.weight
        zeros = partial(torch.zeros, batch_size, device=ref.device, dtype=ref.dtype)
        return {
            "deter": zeros(self.deter),
            "stoch": zeros(self.stoch, self.classes),
            "logits": zeros(self.stoch, self.classes),
            "action": zeros(self.action_dim),
        }

    def features(self, state: State) -> Tensor:
        """``[h_t, flat z_t]``."""
        return torch.cat([state["deter"], state["stoch"].flatten(-2)], -1)

    def _transition(self, state: State, action: Tensor) -> Tensor:
        """``h_t = GRU(h_{t-1}, MLP([z_{t-1}, a_{t-1}]))``."""
        x = self.img_in(torch.cat([state["stoch"].flatten(-2), action], -1))
        return self.gru(x, state["deter"])

    @staticmethod
    def _state(deter: Tensor, logits: Tensor, action: Tensor, sample: bool) -> State:
        return {"deter": deter, "stoch": sample_latent(logits, sample), "logits": logits, "action": action}

    def imagine_step(self, state: State, action: Tensor, sample: bool = True) -> State:
        """The prior state ``(h_t, z_t ~ p(z_t | h_t))`` after taking ``action`` in ``state``."""
        deter = self._transition(state, action)
        return self._state(deter, self.prior(deter), torch.zeros_like(action), sample)

    def observe_step(
        self, state: State, embed: Tensor, prev_action: Tensor, is_first: Tensor, sample: bool = True
    ) -> tuple[State, State]:
        """One filtering step: ``(posterior, prior)`` for embedding ``e_t`` after ``prev_action``.

        Where ``is_first``, the state is reset and ``prev_action`` ignored (zeroed).
        """
        state = reset_state(state, self.initial_state(embed.shape[0]), is_first)
        prev_action = prev_action * (~is_first).unsqueeze(-1).to(prev_action.dtype)
        deter = self._transition(state, prev_action)
        unknown = torch.zeros_like(prev_action)
        post = self._state(deter, self.posterior(torch.cat([deter, embed], -1)), unknown, sample)
        prior = self._state(deter, self.prior(deter), unknown, sample)
        return post, prior

    def observe(
        self,
        embed: Tensor,
        action: Tensor,
        is_first: Tensor,
        state: State | None = None,
        sample: bool = True,
    ) -> tuple[State, State]:
        """Posterior and prior states ``[B, T, ...]`` (DreamerV3 ``observe``; pydreamer ``RSSMCore``).

        The transition into step ``t`` uses ``action[:, t-1]``, and ``state["action"]`` at
        ``t = 0``; both state and action are reset where ``is_first``. Only ``h_t`` and the
        posterior are computed step by step; the prior ``p(z_t | h_t)`` is applied to all
        ``h_{1:T}`` at once afterwards, as pydreamer does.
        """
        initial = self.initial_state(embed.shape[0])
        state = initial if state is None else state
        prev_action = state["action"]
        keep = (~is_first).unsqueeze(-1).to(action.dtype)
        deters, stochs, logits = [], [], []
        # unbind once: indexing embed[:, t] in the loop costs a full-size gradient per step
        for embed_t, action_t, first_t, keep_t in zip(
            embed.unbind(1), action.unbind(1), is_first.unbind(1), keep.unbind(1)
        ):
            state = reset_state(state, initial, first_t)
            deter = self._transition(state, prev_action * keep_t)
            post_logits = self.posterior(torch.cat([deter, embed_t], -1))
            state = {"deter": deter, "stoch": sample_latent(post_logits, sample)}
            deters.append(deter)
            stochs.append(state["stoch"])
            logits.append(post_logits)
            prev_action = action_t
        deter = torch.stack(deters, 1)
        post = {
            "deter": deter,
            "stoch": torch.stack(stochs, 1),
            "logits": torch.stack(logits, 1),
            "action": action,
        }
        return post, self._state(deter, self.prior(deter), action, sample)


# --------------------------------------------------------------------------- world model


class RSSMWorldModel(LatentWorldModel):
    """Encoder, RSSM, image decoder, reward head (two-hot, zero-initialised) and continue head."""

    spec: RSSMSpec
    dynamics: RSSM

    def __init__(self, spec: RSSMSpec, env: EnvInfo) -> None:
        super().__init__(spec, env)
        self.stateful_training = spec.tbtt

    def build_dynamics(self, embed_dim: int) -> RSSM:
        spec = self.spec
        return RSSM(
            embed_dim,
            self.env.num_actions,
            spec.deter,
            spec.stoch,
            spec.classes,
            spec.hidden,
            spec.unimix,
        )

    # -- the interface (the rest: LatentWorldModel) -------------------------------------------
    def observe_window(self, batch: Batch, state: State | None = None, sample: bool = True) -> tuple[Tensor, State]:
        """Posterior features and the posterior state after the last step, carrying
        ``action[:, -1]`` for what follows (the TBTT segment :meth:`loss` trains on)."""
        post, _ = self.dynamics.observe(
            self.encoder(batch.obs), encode_action(batch.action, self.env), batch.is_first, state, sample
        )
        return self.features(post), index_state(post, (slice(None), -1))

    def loss(self, batch: Batch, carry: State | None = None) -> TrainOutput:
        """DreamerV3's world-model loss (eq. 4–5) on a segment, starting from ``carry`` (TBTT)."""
        spec = self.spec
        post, prior = self.dynamics.observe(
            self.encoder(batch.obs), encode_action(batch.action, self.env), batch.is_first, carry
        )
        feat = self.features(post)

        total, metrics = latent_objective(
            spec, self.decoder, self.heads, feat, post["logits"], prior["logits"], batch
        )
        last = index_state(post, (slice(None), -1))
        starts = slice(None, None, spec.start_stride)
        return TrainOutput(
            losses={"model": total},
            metrics=metrics,
            # starts at steps 0, k, 2k, … (k = start_stride), as TSSM-XL's and S4WM's
            start=flatten_state(detach_state(index_state(post, (slice(None), starts)))),
            start_cont=start_conts(batch)[:, starts].reshape(-1),
            carry=detach_state(last) if spec.tbtt else None,
            features=feat,
        )


# --------------------------------------------------------------------------- presets

PAPER_OPTIM = OptimSpec(lr=3e-4, eps=1e-5, weight_decay=1e-2, clip=200.0)
"""s4wm tables 7–8, RSSM-TBTT: AdamW 3e-4, weight decay 1e-2, clip 200; eps 1e-5 from pydreamer."""

PAPER_KL = KLSpec(free=0.0, balance=0.8)
"""s4wm tables 7–8: "KL balancing 0.8"; pydreamer applies it without free nats."""

PRESETS: dict[str, RSSMSpec] = {
    # CPU tests: a train step takes ~0.06 s at 32×32, ~0.12 s at 64×64 on one thread (README).
    "tiny": RSSMSpec(
        batch_size=4, seq_len=16, deter=64, stoch=8, classes=8, hidden=64, mlp_layers=1,
        cnn_depth=8, cnn_stages=4, optim=OptimSpec(lr=3e-4),
    ),
    # A CPU hour on MiniGrid at 64×64 (DreamerV3 losses and KL; far smaller than DreamerV3-S):
    # the 64×64 CNN costs most of a step, hence depth 8 and 8 × 32 frames per batch.
    "small": RSSMSpec(
        batch_size=8, seq_len=32, deter=256, stoch=16, classes=16, hidden=256, mlp_layers=1,
        cnn_depth=8, cnn_stages=4, optim=OptimSpec(lr=3e-4),
    ),
    # s4wm table 7, RSSM-TBTT (3D, 64×64): TBTT 48, batch 32, 32×32 latents, GRU 2048,
    # CNN 4 × 48, MLP 1000; 4-layer reward/continue heads as pydreamer (Memory Maze).
    "paper": RSSMSpec(
        batch_size=32, seq_len=48, deter=2048, stoch=32, classes=32, hidden=1000, mlp_layers=4,
        cnn_depth=48, cnn_stages=4, kl=PAPER_KL, optim=PAPER_OPTIM,
    ),
    # s4wm table 8, RSSM-TBTT (2D, 40×40): TBTT 50, CNN 3 × 32, MLP 512; DreamerV3-S heads.
    "paper-2d": RSSMSpec(
        batch_size=32, seq_len=50, deter=2048, stoch=32, classes=32, hidden=512, mlp_layers=2,
        cnn_depth=32, cnn_stages=3, kl=PAPER_KL, optim=PAPER_OPTIM,
    ),
}

# The world-model variants as run presets: each with the dreamer policy's and the trainer's
# `paper` preset.
RUN_PRESETS: dict[str, RunPreset] = {"paper-2d": RunPreset(model="paper-2d", policy="paper", train="paper")}
