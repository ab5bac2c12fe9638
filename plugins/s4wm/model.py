"""S4WM: the S4-based world model, trained in parallel and imagining recurrently.

Papers:
    Deng, Park, Ahn, "Facing Off World Model Backbones: RNNs, Transformers, and S4" (s4wm), 2023:
        section 4 (eq. 3–9, algorithms 1–2), appendix B.1 (S4WM-Full-Posterior, S4WM-No-MLP),
        tables 7 (3D) and 8 (2D).
    Gu et al., "On the Parameterization and Initialization of Diagonal State Space Models" (S4D),
        2022: the S4 layer used here (``s4.py``).

Notation. The paper's ``a_t`` leads *into* ``x_t``; wmzoo's ``action[t]`` is taken *after* ``obs[t]``
(``wmzoo.interfaces``), so the paper's ``a_t`` is wmzoo's ``action[t − 1]``. In wmzoo indices:

    e_t = CNN(x_t)                                              [embed]
    q(z_t | x_t) = MLP(e_t)                   factorised posterior (eq. 7)
    g_t = MLP([z_{t−1}, a_{t−1}])             input of the S4 blocks (eq. 4; zeros before an episode)
    h_{0:T}, s_T = S4Blocks(g_{0:T}, s_{−1})  parallel form (eq. 4), s_{−1} = 0 or the carried state
    h_t, s_t = S4Blocks(g_t, s_{t−1})         recurrent form (eq. 4, algorithm 2)
    p(z_t | z_{<t}, a_{<t}) = MLP(h_t)        prior (eq. 5)
    x̂_t = Decoder([h_t, z_t]),  r̂, ĉ = heads([h_{t+1}, z_{t+1}])  (eq. 6; heads per wmzoo alignment)
    KL balancing α (eq. 9) on every step but an episode's first (q(z_0 | x_0) = p(z_0 | x_0), eq. 7)

    full posterior (eq. 12):  q(z_t | x_{≤t}, a_{<t}) = MLP(h^q_t),
                              h^q = S4Blocks_q(MLP([e_t, a_{t−1}])), a separate stack

A state is ``{"deter": h_t [B, d_model], "stoch": z_t [B, stoch, classes], "logits": [B, stoch,
classes], "action": [B, A], "ssm": s_t [B, n_layers, 2, d_model, N/2, 2]}`` plus ``"post_ssm"`` (same
shape) for the full posterior. ``ssm`` holds the complex states of both S4 layers of every block as
real/imaginary pairs (``torch.view_as_real``). ``action`` is the action taken in that state where it
is known (the last state of an observed sequence: the carry), else zeros, as in the RSSM backbone.

File order as timm's convnext: spec → world model → presets.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field, model_validator
from torch import Tensor, nn

from wmzoo.errors import WmzooError
from wmzoo.hookspecs import RunPreset
from wmzoo.interfaces import (
    Batch,
    EnvInfo,
    Filtered,
    State,
    Obs,
    Step,
    TrainOutput,
    WorldModel,
    detach_state,
    flatten_state,
    index_state,
    reset_state,
)
from wmzoo.nn import MLP, LatentWorldModelSpec
from wmzoo.nn.heads import RewardContinueHeads, encode_action, start_conts
from wmzoo.nn.latent import CategoricalLatent, KLSpec, sample_latent
from wmzoo.nn.world_model import latent_objective, obs_codec, posterior_rewards
from wmzoo.specs import OptimSpec

from .s4 import S4Blocks, S4DLayer

# --------------------------------------------------------------------------- spec


class S4WMSpec(LatentWorldModelSpec):
    """Hyperparameters of S4WM (S4 defaults: s4wm table 7, 3D environments; presets ``paper`` and
    ``paper-2d``: s4wm tables 7 and 8). The CNN, latent, heads, loss scales and optimizer fields are
    :class:`~wmzoo.nn.LatentWorldModelSpec`'s (defaults: DreamerV3 size S)."""

    d_model: int = Field(512, ge=1, le=16384, description="h_t: width of the S4 blocks (H channels)")
    d_ff: int = Field(2048, ge=1, le=65536, description="hidden units of the MLP in every S4 block")
    n_layers: int = Field(6, ge=1, le=64, description="S4 blocks (each: two S4 layers and an MLP)")
    state_size: int = Field(
        64, ge=2, le=4096, description="N: real state size per channel (N/2 complex conjugate modes); even"
    )
    s4_init: Literal["lin", "inv"] = Field("lin", description="S4D initialisation of Λ: S4D-Lin or S4D-Inv")
    dt_min: float = Field(1e-3, gt=0, le=10, description="smallest initial S4 step size Δ")
    dt_max: float = Field(1e-1, gt=0, le=10, description="largest initial S4 step size Δ")
    mlp: bool = Field(True, description="MLP in every S4 block (false: the S4WM-No-MLP variant)")
    posterior: Literal["factorised", "full"] = Field(
        "factorised",
        description="q(z_t | x_t) from the image alone, or 'full': its own S4 stack over [e_t, a_{t-1}]",
    )
    ssm_lr: float = Field(
        1e-3, gt=0, le=1,
        description="learning rate of the S4 parameters Δ, Λ, B, at most optim.lr, without weight decay "
        "(S4's code: lr=min(0.001, lr)); they follow the model's schedule",
    )
    policy_reads: Literal["output", "output+hidden"] = Field(
        "output",
        description="what the policy reads: 'output', [h_t, z_t] as the decoder and heads (the paper "
        "trains no policy); 'output+hidden', also the S4 hidden state s_t of every layer (real and "
        "imaginary parts), where h_t need not hold what the next action needs "
        "(benchmarks/results/popgym_repeat_previous_pair); the model and its losses are the same",
    )
    carry_state: bool = Field(
        True,
        description="stream episodes in consecutive segments and start each from the S4 states the "
        "previous one ended in (gradients stop at segment borders)",
    )

    @model_validator(mode="before")
    @classmethod
    def _relative_ssm_rate(cls, data: Any) -> Any:
        """Specs saved before ``ssm_lr`` (run.yaml, checkpoints) gave ``ssm_lr_scale = s``, the
        rate ``s × optim.lr``: read as that same rate."""
        if isinstance(data, dict) and "ssm_lr_scale" in data and "ssm_lr" not in data:
            data = dict(data)
            scale, optim = data.pop("ssm_lr_scale"), data.get("optim", {})
            lr = optim.get("lr", OptimSpec().lr) if isinstance(optim, dict) else getattr(optim, "lr", OptimSpec().lr)
            if isinstance(scale, (int, float)) and isinstance(lr, (int, float)):
                data["ssm_lr"] = scale * lr
            else:
                data["ssm_lr"] = scale  # let validation name the bad value
        return data

    @model_validator(mode="after")
    def _check(self) -> S4WMSpec:
        if self.state_size % 2:
            raise ValueError(f"state_size must be even (N/2 complex modes), got {self.state_size}")
        if self.dt_min > self.dt_max:
            raise ValueError(f"dt_min ({self.dt_min}) must not exceed dt_max ({self.dt_max})")
        return self


# --------------------------------------------------------------------------- world model


def _real(state: Tensor) -> Tensor:
    return torch.view_as_real(state)


def _complex(state: Tensor) -> Tensor:
    return torch.view_as_complex(state.contiguous())


class S4WMWorldModel(WorldModel):
    """Encoder, posterior, S4 blocks, prior, observation decoder, reward and continue heads.

    ``sample=False`` on :meth:`observe_step`, :meth:`observe`, :meth:`imagine_step` and
    :meth:`sequence` takes the mode of every categorical instead of a sample, which makes the
    parallel and recurrent forms comparable exactly.
    """

    def __init__(self, spec: S4WMSpec, env: EnvInfo) -> None:
        super().__init__()
        self.spec, self.env = spec, env
        self.stateful_training = spec.carry_state
        self.full_posterior = spec.posterior == "full"
        zdim, A = spec.stoch * spec.classes, env.num_actions

        def s4_blocks() -> S4Blocks:
            blocks = S4Blocks(spec.n_layers, spec.d_model, spec.d_ff, spec.state_size, spec.dt_min,
                              spec.dt_max, spec.s4_init, spec.mlp)
            for layer in blocks.modules():
                if isinstance(layer, S4DLayer):
                    layer.set_ssm_optim(min(spec.ssm_lr, spec.optim.lr) / spec.optim.lr)
            return blocks

        self.encoder = obs_codec(spec, env)
        embed = self.encoder.out_dim
        self.img_in = MLP(zdim + A, spec.d_model, spec.hidden, 1)  # g_t = MLP([z_{t-1}, a_{t-1}])
        self.blocks = s4_blocks()
        self.prior = CategoricalLatent(spec.d_model, spec.stoch, spec.classes, spec.hidden, 1, spec.unimix)
        if self.full_posterior:  # eq. 12: its own stack, not shared with the prior's
            self.post_in = MLP(embed + A, spec.d_model, spec.hidden, 1)
            self.post_blocks = s4_blocks()
            self.posterior = CategoricalLatent(spec.d_model, spec.stoch, spec.classes, spec.hidden, 1, spec.unimix)
        else:
            self.posterior = CategoricalLatent(embed, spec.stoch, spec.classes, spec.hidden, 1, spec.unimix)
        feat = spec.d_model + zdim
        self.reads_hidden = spec.policy_reads == "output+hidden"
        hidden = 2 * int(torch.Size(self.blocks.state_shape).numel()) if self.reads_hidden else 0
        self.feature_shape = (feat + hidden,)
        self.decoder = obs_codec(spec, env, feat)
        self.heads = RewardContinueHeads(feat, spec.hidden, spec.mlp_layers, spec.reward_bins)

    # -- states -----------------------------------------------------------------------------
    def initial_state(self, batch_size: int) -> State:
        """Zeros: no previous ``z`` or action, and ``s_{−1} = 0`` in every S4 layer (eq. 12)."""
        ref = self.prior.mlp.out.weight
        zeros = lambda *shape: torch.zeros(batch_size, *shape, device=ref.device, dtype=ref.dtype)  # noqa: E731
        spec = self.spec
        state = {
            "deter": zeros(spec.d_model),
            "stoch": zeros(spec.stoch, spec.classes),
            "logits": zeros(spec.stoch, spec.classes),
            "action": zeros(self.env.num_actions),
            "ssm": zeros(*self.blocks.state_shape, 2),
        }
        if self.full_posterior:
            state["post_ssm"] = zeros(*self.blocks.state_shape, 2)
        return state

    def features(self, state: State) -> Tensor:
        """What the policy reads: ``[h_t, flat z_t]``, and with ``policy_reads='output+hidden'``
        the S4 state ``s_t`` flattened after them."""
        feat = self._heads_in(state)
        return torch.cat([feat, state["ssm"].flatten(-5)], -1) if self.reads_hidden else feat

    @staticmethod
    def _heads_in(state: State) -> Tensor:
        """``[h_t, flat z_t]``: what the decoder and the reward and continue heads read (eq. 6)."""
        return torch.cat([state["deter"], state["stoch"].flatten(-2)], -1)

    def decode(self, state: State) -> Obs:
        return self.decoder.decode(self._heads_in(state))

    # -- parallel form (algorithm 1) ----------------------------------------------------------
    def sequence(
        self, batch: Batch, state: State | None = None, sample: bool = True, all_states: bool | int = False,
        lazy: bool = False,
    ) -> tuple[State, Tensor, State, dict[str, Any] | None]:
        """The whole batch in parallel from ``state`` (the initial state if None).

        Returns ``(post, prior_logits, last, every)``: the posterior states ``[B, T, ...]`` without
        S4 states, the prior logits ``[B, T, stoch, classes]``, the state after the last step
        (with ``action[:, -1]``, ready to continue), and, if ``all_states``, the S4 states after
        steps ``0, k, 2k, …`` with ``k = int(all_states)`` (True: every step), ``{"ssm": [B, ⌈T/k⌉,
        ...]}`` (detached and built without a graph; for imagination start states); ``lazy``: each
        entry a function of no argument computing it (:class:`~wmzoo_plugins.s4wm.s4.S4DLayer`).
        """
        B, T = batch.shape
        state = self.initial_state(B) if state is None else state
        first = batch.is_first
        embed = self.encoder(batch.obs)
        keep = (~first).unsqueeze(-1).to(embed.dtype)
        action = encode_action(batch.action, self.env).to(embed.dtype)
        # a_{t-1}, zero where an episode starts (the paper's dummy action a_0 = ∅)
        prev_action = torch.cat([state["action"].unsqueeze(1), action[:, :-1]], 1) * keep

        last: State = {"action": action[:, -1]}
        every: State = {}
        if self.full_posterior:
            g_q = self.post_in(torch.cat([embed, prev_action], -1))
            h_q, final, states = self.post_blocks(g_q, _complex(state["post_ssm"]), first, all_states, lazy)
            post_logits = self.posterior(h_q)
            last["post_ssm"] = _real(final)
            if all_states:
                every["post_ssm"] = states if lazy else _real(states)
        else:
            post_logits = self.posterior(embed)
        stoch = sample_latent(post_logits, sample)

        prev_stoch = torch.cat([state["stoch"].unsqueeze(1), stoch[:, :-1]], 1) * keep.unsqueeze(-1)
        g = self.img_in(torch.cat([prev_stoch.flatten(-2), prev_action], -1))
        deter, final, states = self.blocks(g, _complex(state["ssm"]), first, all_states, lazy)
        last["ssm"] = _real(final)
        if all_states:
            every["ssm"] = states if lazy else _real(states)

        post = {"deter": deter, "stoch": stoch, "logits": post_logits, "action": action}
        last = {**index_state({k: v for k, v in post.items() if k != "action"}, (slice(None), -1)), **last}
        return post, self.prior(deter), last, every if all_states else None

    def observe_window(self, batch: Batch, state: State | None = None, sample: bool = True) -> tuple[Tensor, State]:
        """Posterior features and the state after the last step (parallel form, as :meth:`loss`),
        carrying ``action[:, -1]``."""
        post, _, last, _ = self.sequence(batch, state, sample)
        return self._heads_in(post), last

    def observe(self, batch: Batch, state: State | None = None, sample: bool = True) -> State:
        """The posterior state after the last step (parallel form), carrying ``action[:, -1]``."""
        return self.observe_window(batch, state, sample)[1]

    def observe_sequence(self, batch: Batch, state: State | None = None, *, step: bool = False) -> Filtered:
        """Parallel windows of ``seq_len`` continuing each other's S4 states (``step``: the
        recurrence row by row); rewards from the head on the posterior after each transition
        (:func:`~wmzoo.nn.world_model.posterior_rewards`)."""
        if step and self.reads_hidden:
            raise WmzooError("s4wm with model.policy_reads='output+hidden' reads rewards in the parallel form "
                             "only (observe_sequence without step)")
        return posterior_rewards(self, self.heads, batch, state, None if step else self.observe_window)

    def loss(self, batch: Batch, carry: State | None = None) -> TrainOutput:
        """The ELBO of eq. 8 with KL balancing (eq. 9), reward and continue, from ``carry``."""
        spec = self.spec
        starts = slice(None, None, spec.start_stride)  # steps 0, k, 2k, … as TSSM-XL's
        # the S4 states of the start states are built only if a policy imagines from this batch
        post, prior_logits, last, every = self.sequence(batch, carry, all_states=spec.start_stride, lazy=True)
        feat = self._heads_in(post)
        start = detach_state(index_state(post, (slice(None), starts)))

        def start_states() -> tuple[State, Tensor, None]:
            ssm = {key: _real(states()) for key, states in every.items()}
            return flatten_state({**start, **ssm}), start_conts(batch)[:, starts].reshape(-1), None

        total, metrics = latent_objective(
            # eq. 7: q(z_0 | x_0) = p(z_0 | x_0), so no KL at episode starts
            spec, self.decoder, self.heads, feat, post["logits"], prior_logits, batch, kl_mask=~batch.is_first,
        )
        return TrainOutput(
            losses={"model": total},
            metrics=metrics,
            # starts at steps 0, k, 2k, … (k = start_stride), as TSSM-XL's and RSSM's
            starts=start_states,
            carry=detach_state(last) if spec.carry_state else None,
            features=None if self.reads_hidden else feat,  # s_t of every row is not built in training
        )

    # -- recurrent form (algorithm 2) ---------------------------------------------------------
    def observe_step(
        self, state: State, obs: Obs, prev_action: Tensor, is_first: Tensor, sample: bool = True
    ) -> State:
        """Filter one real step with the recurrent form; resets where ``is_first``."""
        state = reset_state(state, self.initial_state(is_first.shape[0]), is_first)
        embed = self.encoder(obs)
        keep = (~is_first).unsqueeze(-1).to(embed.dtype)
        prev_action = encode_action(prev_action, self.env).to(embed.dtype) * keep
        new: State = {}
        if self.full_posterior:
            h_q, s_q = self.post_blocks.step(
                self.post_in(torch.cat([embed, prev_action], -1)), _complex(state["post_ssm"])
            )
            logits = self.posterior(h_q)
            new["post_ssm"] = _real(s_q)
        else:
            logits = self.posterior(embed)
        deter, ssm = self._advance(state, prev_action)
        return {**self._latent(deter, logits, ssm, prev_action, sample), **new}

    def imagine_step(self, state: State, action: Tensor, sample: bool = True) -> Step:
        """One recurrent step of every S4 layer, then ``z ~ p(z | h)`` (algorithm 2, lines 11–13)."""
        action = encode_action(action, self.env).to(state["deter"].dtype)
        deter, ssm = self._advance(state, action)
        prior = self._latent(deter, self.prior(deter), ssm, action, sample)
        if self.full_posterior:  # no observation to filter: the posterior stack stays where it was
            prior["post_ssm"] = state["post_ssm"]
        reward, cont = self.heads.predict(self._heads_in(prior))
        return Step(state=prior, reward=reward, cont=cont, features=self.features(prior))

    def _advance(self, state: State, action: Tensor) -> tuple[Tensor, Tensor]:
        """``h_t, s_t = S4Blocks(MLP([z_{t−1}, a_{t−1}]), s_{t−1})``."""
        g = self.img_in(torch.cat([state["stoch"].flatten(-2), action], -1))
        return self.blocks.step(g, _complex(state["ssm"]))

    @staticmethod
    def _latent(deter: Tensor, logits: Tensor, ssm: Tensor, action: Tensor, sample: bool) -> State:
        return {
            "deter": deter,
            "stoch": sample_latent(logits, sample),
            "logits": logits,
            "action": torch.zeros_like(action),  # the action to be taken here is not known yet
            "ssm": _real(ssm),
        }

    def components(self) -> dict[str, tuple[list[nn.Parameter], OptimSpec]]:
        return {"model": (list(self.parameters()), self.spec.optim)}


# --------------------------------------------------------------------------- presets

PAPER_KL = KLSpec(free=0.0, balance=0.8)
"""s4wm eq. 9 and tables 7–8: KL balancing α = 0.8; the paper mentions no free nats."""

PAPER_OPTIM = OptimSpec(
    lr=1e-3, weight_decay=1e-2, clip=1000.0, warmup=1000, schedule="cosine", decay_steps=199_500
)
"""s4wm tables 7–8 and appendix E: AdamW 1e-3, weight decay 1e-2, clip 1000, "a linear warmup
(1000 gradient steps) and cosine anneal learning rate schedule". The anneal length is not stated;
ours is the 3D run's length: 57 epochs × 28K training episodes / batch 8 = 199,500 updates."""

PAPER_2D_OPTIM = PAPER_OPTIM.model_copy(update={"decay_steps": 100_000})
"""As :data:`PAPER_OPTIM`, annealed over the 2D run: 100 epochs × 8K episodes / batch 8."""

_PAPER_3D = dict(  # s4wm table 7, S4WM column (3D, 64×64)
    batch_size=8,  # table 7
    seq_len=1001,  # a whole Four Rooms episode (501 context + 500 query frames, table 1); no TBTT
    n_layers=6, d_model=512, d_ff=2048,  # "history encoding" layers, d_model, d_ff
    state_size=64,  # not in the table: S4's default N = 64
    stoch=32, classes=32,  # 32×32 discrete latents
    cnn_depth=48, cnn_stages=4,  # CNN multiplier 48, 4 layers
    hidden=1000,  # MLP hidden units
    mlp_layers=2,  # not in the table: DreamerV3 heads (2D with these matches table 8, README)
    kl=PAPER_KL, optim=PAPER_OPTIM,
)

PRESETS: dict[str, S4WMSpec] = {
    # CPU tests: a train step takes ~0.06 s at 32×32 on one thread (README).
    "tiny": S4WMSpec(
        batch_size=4, seq_len=16, n_layers=2, d_model=32, d_ff=64, state_size=16, stoch=8,
        classes=8, hidden=64, mlp_layers=1, cnn_depth=8, cnn_stages=4, kl=PAPER_KL,
        optim=OptimSpec(lr=1e-3, weight_decay=1e-2, warmup=10),
    ),
    # A CPU hour on MiniGrid at 64×64: the CNN costs most of a step, as for rssm's small.
    "small": S4WMSpec(
        batch_size=8, seq_len=32, n_layers=2, d_model=128, d_ff=256, state_size=32, stoch=16,
        classes=16, hidden=256, mlp_layers=1, cnn_depth=8, cnn_stages=4, kl=PAPER_KL,
        optim=OptimSpec(lr=1e-3, weight_decay=1e-2, clip=1000.0, warmup=100),
    ),
    # start_stride 8 (wmzoo's, as TSSM-XL's paper): each start holds n_layers × 2 × d_model × N/2
    # complex S4 states (1.6 MB), so starts from all 1001 steps would not fit in memory (README).
    "paper": S4WMSpec(**{**_PAPER_3D, "start_stride": 8}),
    # s4wm table 8, S4WM column (2D, 40×40): CNN 3 × 32, MLP 512; DreamerV3-S heads (2 layers).
    "paper-2d": S4WMSpec(**{
        **_PAPER_3D, "seq_len": 256,  # not in the table; whole episodes where they fit
        "cnn_depth": 32, "cnn_stages": 3, "hidden": 512, "start_stride": 8, "optim": PAPER_2D_OPTIM,
    }),
    # appendix B.1 variants at the paper's 3D sizes
    "no-mlp": S4WMSpec(**{**_PAPER_3D, "mlp": False, "start_stride": 8}),
    "full-posterior": S4WMSpec(**{**_PAPER_3D, "posterior": "full", "start_stride": 8}),
}

# The world-model variants as run presets: each with the dreamer policy's and the trainer's
# `paper` preset.
RUN_PRESETS: dict[str, RunPreset] = {
    name: RunPreset(model=name, policy="paper", train="paper") for name in ("paper-2d", "no-mlp", "full-posterior")
}
