"""The world model of a latent-state backbone built from this package's parts (once here).

:class:`LatentWorldModel` is the glue a backbone whose world model is a CNN encoder, its own
sequence model (a :class:`~wmzoo.interfaces.Dynamics`), a CNN decoder and the two-hot reward and
continue heads would otherwise write out: it builds ``encoder`` → ``dynamics`` → ``decoder`` +
``heads`` from a :class:`~wmzoo.nn.LatentWorldModelSpec` and implements the interface methods
that only delegate to those parts. A subclass supplies the dynamics (:meth:`build_dynamics`) and
what is its own: :meth:`~wmzoo.interfaces.WorldModel.loss`, usually
:meth:`~wmzoo.interfaces.WorldModel.observe` (a parallel form) and how training carries state.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from wmzoo.interfaces import Batch, Dynamics, EnvInfo, Filtered, Obs, State, Step, WorldModel, filter_rows
from wmzoo.nn.distributions import OneHotCategoricalST
from wmzoo.nn.heads import RewardContinueHeads, encode_action, masked_mean
from wmzoo.nn.latent import kl_loss
from wmzoo.nn.obs import ObsDecoder, ObsEncoder
from wmzoo.nn.specs import LatentWorldModelSpec
from wmzoo.specs import OptimSpec


def obs_codec(spec: LatentWorldModelSpec, env: EnvInfo, feat: int | None = None) -> Any:
    """The spec's :class:`~wmzoo.nn.obs.ObsEncoder` (``feat=None``) or, for features of size
    ``feat``, its :class:`~wmzoo.nn.obs.ObsDecoder`: CNN at ``cnn_depth``/``cnn_stages``, vector
    MLPs of ``mlp_layers`` × ``hidden``, over the entries ``encoder_keys``/``decoder_keys`` select."""
    if feat is None:
        return ObsEncoder(env, spec.encoder_keys, spec.cnn_depth, spec.cnn_stages, spec.hidden, spec.mlp_layers)
    return ObsDecoder(env, spec.decoder_keys, feat, spec.cnn_depth, spec.cnn_stages, spec.hidden, spec.mlp_layers)


class LatentWorldModel(WorldModel):
    """Encoder, the subclass's dynamics, observation decoder, reward (two-hot) and continue heads.

    ``action`` arguments of the dynamics are encoded actions (see :func:`encode_action`). Besides
    the :class:`~wmzoo.interfaces.Dynamics` methods it must have ``observe_step(state, embed,
    prev_action, is_first, sample) -> (posterior, prior)`` and a ``feature_dim`` property, the size
    of :meth:`features`, which the decoder and heads read.
    All parameters form one ``"model"`` group trained with ``spec.optim``.

    It does not require categorical latents: this class reads only the dynamics' states and
    features and the spec's ``encoder_keys``, ``decoder_keys``, ``cnn_depth``, ``cnn_stages``,
    ``hidden``, ``mlp_layers``, ``reward_bins``, ``optim`` and ``seq_len``. What is categorical is
    :class:`~wmzoo.nn.LatentWorldModelSpec`'s ``stoch``, ``classes``, ``unimix`` and ``kl`` and
    :func:`latent_objective` (its KL takes logits). A Gaussian-latent backbone may subclass it
    with a spec of its own that has the fields above (``class MySpec(WorldModelSpec,
    ObsKeysSpec)``, so no categorical field is dead) and its own KL in
    :meth:`~wmzoo.interfaces.WorldModel.loss`.
    """

    spec: LatentWorldModelSpec

    def __init__(self, spec: LatentWorldModelSpec, env: EnvInfo) -> None:
        super().__init__()
        self.spec, self.env = spec, env
        self.encoder = obs_codec(spec, env)
        self.dynamics = self.build_dynamics(self.encoder.out_dim)
        feat = self.dynamics.feature_dim
        self.feature_shape = (feat,)
        self.decoder = obs_codec(spec, env, feat)
        self.heads = RewardContinueHeads(feat, spec.hidden, spec.mlp_layers, spec.reward_bins)

    @abstractmethod
    def build_dynamics(self, embed_dim: int) -> Dynamics:
        """The sequence model on encoder embeddings of ``embed_dim`` (``self.spec`` and
        ``self.env`` are set); it must expose ``feature_dim``."""

    # -- the interface ----------------------------------------------------------------------
    def components(self) -> dict[str, tuple[list[nn.Parameter], OptimSpec]]:
        return {"model": (list(self.parameters()), self.spec.optim)}

    def initial_state(self, batch_size: int) -> State:
        return self.dynamics.initial_state(batch_size)

    def features(self, state: State) -> Tensor:
        return self.dynamics.features(state)

    def decode(self, state: State) -> Obs:
        return self.decoder.decode(self.features(state))

    def observe_step(
        self, state: State, obs: Obs, prev_action: Tensor, is_first: Tensor, sample: bool = True
    ) -> State:
        """The posterior state after filtering ``obs``; the dynamics reset where ``is_first``."""
        embed = self.encoder(obs)
        post, _ = self.dynamics.observe_step(
            state, embed, encode_action(prev_action, self.env), is_first, sample
        )
        return post

    def imagine_step(self, state: State, action: Tensor) -> Step:
        prior = self.dynamics.imagine_step(state, encode_action(action, self.env))
        feat = self.features(prior)
        reward, cont = self.heads.predict(feat)
        return Step(state=prior, reward=reward, cont=cont, features=feat)

    def observe_window(self, batch: Batch, state: State | None = None, sample: bool = True) -> tuple[Tensor, State]:
        """One training window as :meth:`loss` filters it: the posterior features ``[B, T, F]``
        and the state after the last row (carrying ``action[:, -1]`` where the backbone keeps
        it). The default filters row by row; a backbone with a parallel form overrides it."""
        return step_features(self, batch, state)

    def observe(self, batch: Batch, state: State | None = None, sample: bool = True) -> State:
        """The state after the last row, in the training form (:meth:`observe_window`)."""
        return self.observe_window(batch, state, sample)[1]

    def observe_sequence(self, batch: Batch, state: State | None = None, *, step: bool = False) -> Filtered:
        """Windows of ``spec.seq_len`` rows, each continuing the last (or rows one at a time with
        ``step``); rewards read by the head on the posterior features of the row after each
        transition, as :meth:`loss` trains it (:func:`posterior_rewards`)."""
        return posterior_rewards(self, self.heads, batch, state, None if step else self.observe_window)


Window = Callable[[Batch, State], tuple[Tensor, State]]
"""A backbone's training form on one window: ``(posterior features [B, T, F], state after it)``."""


def step_features(wm: WorldModel, batch: Batch, state: State | None = None) -> tuple[Tensor, State]:
    """``(features [B, T, F], last state)`` of filtering ``batch`` with ``observe_step`` row by
    row (the previous action of row 0 taken as none)."""
    features = []
    for state in filter_rows(wm, batch, state):
        features.append(wm.features(state))
    return torch.stack(features, 1), state


def posterior_rewards(
    wm: WorldModel, heads: RewardContinueHeads, batch: Batch, state: State | None, window: Window | None,
) -> Filtered:
    """:meth:`~wmzoo.interfaces.WorldModel.observe_sequence` of a backbone whose reward head
    reads the posterior after the transition (``heads.loss`` on ``features[:, 1:]``): the s4wm
    paper's inference accuracy (section 5.5) observes the whole sequence, ending frame included,
    and reads the head where training reads it. ``window``: the training form of one window,
    applied to consecutive windows of ``wm.spec.seq_len`` rows from row 0, each from the state
    the one before ended in (so TSSM-XL attends over its carried cache plus the segment, as in
    training); ``None``: row by row."""
    B, T = batch.shape
    state = wm.initial_state(B) if state is None else state
    if window is None:
        features, state = step_features(wm, batch, state)
    else:
        parts = []
        for start in range(0, T, wm.spec.seq_len):
            feat, state = window(batch.slice(start, start + wm.spec.seq_len), state)
            parts.append(feat)
        features = torch.cat(parts, 1)
    return Filtered(state, heads.predict(features[:, 1:])[0])


def latent_objective(
    spec: LatentWorldModelSpec,
    decoder: ObsDecoder,
    heads: RewardContinueHeads,
    feat: Tensor,
    post_logits: Tensor,
    prior_logits: Tensor,
    batch: Batch,
    kl_mask: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The ELBO-style loss every latent-state backbone here trains (DreamerV3 eq. 4–5, s4wm eq. 7–9):
    ``recon + reward + cont + KL`` with the spec's scales, and its metrics as floats. ``recon`` sums
    the decoder's per-entry losses (:meth:`~wmzoo.nn.obs.ObsDecoder.losses`), each also logged as
    ``recon_<name>`` unless the one entry is a pixel env's image.

    ``feat`` ``[B, T, F]`` are the posterior features; ``kl_mask`` ``[B, T]`` keeps only the steps
    whose KL counts (S4WM skips episode starts); without it every step counts.
    """
    entries = decoder.losses(feat, batch.obs)
    image = torch.stack(list(entries.values())).sum()
    reward, cont, head_metrics = heads.loss(feat, batch)
    kl = kl_loss(post_logits, prior_logits, spec.kl)

    def reduce(x: Tensor) -> Tensor:
        return x.mean() if kl_mask is None else masked_mean(x, kl_mask)

    kl_term = reduce(kl.loss)
    total = spec.recon_scale * image + spec.reward_scale * reward + spec.cont_scale * cont + kl_term
    with torch.no_grad():
        metrics = {
            "model": total.detach(),
            "recon": image,
            **({f"recon_{k}": v for k, v in entries.items()} if isinstance(batch.obs, dict) else {}),
            "reward": reward,
            "cont": cont,
            "kl_loss": kl_term,
            "kl": reduce(kl.dyn),
            "kl_rep": reduce(kl.rep),
            "post_entropy": OneHotCategoricalST(post_logits).entropy().sum(-1).mean(),
            "prior_entropy": OneHotCategoricalST(prior_logits).entropy().sum(-1).mean(),
            **head_metrics,
        }
    return total, dict(zip(metrics, torch.stack(list(metrics.values())).tolist()))
