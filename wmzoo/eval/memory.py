"""The s4wm paper's memory metrics of a trained world model on an offline dataset (section 5).

Every protocol reads test episodes of ``wmzoo data generate`` (context phase, then query phase)
and drives the world model only through :class:`~wmzoo.interfaces.WorldModel`
(``observe_step``, ``observe_sequence``, ``imagine_step`` via :func:`wmzoo.imagination.imagine`,
``decode``):

- ``imagination`` (5.3, Table 1, Figure 5; also Table 3 for Multi Doors Keys): observe the context
  phase, imagine the query phase under its recorded actions. *Recon. MSE* averages over the
  context frames the error of the decoded posterior state; *Gen. MSE* over the query frames the
  error of the imagined frame; the per-step curve is the Gen. MSE at each imagination step.
- ``recall`` (5.4, Figure 6): teleport datasets (``info_teleport_to``). Observe the context through
  the first frame after the teleport plus ``k = 0..20`` more frames, then imagine the rest of the
  query; Gen. MSE per ``k``.
- ``reward`` (5.5, Table 2): Distracting Memory reward prediction accuracy. *Inference*: the model
  observes the whole episode, its last frame included ("the full sequence of observations"), and
  the reward of transition ``t`` is read as training reads it
  (:meth:`~wmzoo.interfaces.WorldModel.observe_sequence`; RSSM, S4WM, TSSM-XL: the reward head on
  the posterior of row ``t + 1``); *imagination*: the model observes the context and the rewards
  of the query transitions are those predicted while imagining it. Both are scored with the
  context filtered in the backbone's training form and, as ``step_*``, one row at a time
  (:data:`FORMS`). Scored transitions: the query's episode-ending ones (the reward is given when
  the agent reaches a square; chance is 50 %).
- ``reasoning`` (5.6): the same two accuracies for the query's unlock attempts in Multi Doors
  Keys (the paper reports Gen. MSE there, Table 3, which ``imagination`` gives; the env pays 1 for
  an unlock that opens a door). Attempts: the transitions the env flags with
  ``info["unlock_attempt"]``, else those taking the one action every rewarded transition took.
  Which of ``reward`` and ``reasoning`` a dataset has (a study runs it beside ``imagination``) is
  read from its episodes by :func:`reward_protocol`.
- ``probing`` (appendix C, Table 6): :func:`wmzoo.eval.probing.run_probing`, probes fitted on the
  train split and reported on the evaluated split.

Error unit (the paper's): per image, the **sum** over pixels and channels of the squared error
between images scaled to ``[0, 1]`` (uint8 / 255), averaged over frames and episodes; a 64x64x3
image of constant error 0.1 scores 12288 · 0.01 = 122.88. This is the DreamerV3 / pydreamer image
log-likelihood's sum convention that the paper's Table 1 values (1.5–360 for 64x64x3 frames) are
in. A predicted reward counts as right when it is within 0.5 of the recorded one (rewards are 0/1
in both tasks).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wmzoo.atomic import write_text_atomic
from wmzoo.outputs import EVALUATE_JSON, IMAGE, check_output
from wmzoo.data.dataset import Manifest, iter_episodes, load_episodes
from wmzoo.errors import MissingDependencyError, WmzooError
from wmzoo.eval.plots import line_plot
from wmzoo.imagination import imagine, replay_actions
from wmzoo.data.store import row_fields, split_row
from wmzoo.interfaces import Batch, EnvInfo, State, WorldModel, map_obs

PROTOCOLS = ("imagination", "recall", "reward", "reasoning", "probing")
MAX_EXTRA_FRAMES = 20
"""Section 5.4: "we provide up to 20 observations after the teleport as additional contexts"."""
TELEPORT_KEY = "info_teleport_to"
REPLAY_KEY = "info_replay"
ATTEMPT_KEY = "info_unlock_attempt"
BATCH = 16  # episodes of equal length evaluated together


# --------------------------------------------------------------------------- errors and accuracy


def image_error(real: np.ndarray, model: np.ndarray) -> np.ndarray:
    """Per-image sum of squared error of uint8 images scaled to ``[0, 1]``: ``[..., C, H, W]``
    -> ``[...]``. Summed exactly in integers one image at a time (no float copy of a batch)."""
    lead, shape = real.shape[:-3], real.shape[-3:]
    real, model = real.reshape(-1, int(np.prod(shape))), model.reshape(-1, int(np.prod(shape)))
    out = np.empty(len(real))
    for i in range(len(real)):
        diff = real[i].astype(np.int64) - model[i]
        out[i] = diff @ diff
    return out.reshape(lead) / 255.0**2


def reward_correct(predicted: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Whether each predicted reward is within 0.5 of the recorded 0/1 reward."""
    return np.abs(predicted - target) < 0.5


# --------------------------------------------------------------------------- model rollouts


@dataclass
class Observed:
    """What filtering rows ``[start, stop)`` gave: the state after them and the decoded posterior
    frames ``[B, n, C, H, W]`` (``None`` unless asked for)."""

    state: State
    frames: np.ndarray | None


@torch.no_grad()
def observe_rows(
    wm: WorldModel, batch: Batch, start: int, stop: int, state: State | None = None, *, decode: bool = False,
    usage: ClassUsage | None = None,
) -> Observed:
    """Filter rows ``[start, stop)`` of ``batch`` one at a time (from ``state``, the initial state
    at row 0); ``usage`` counts the latent classes of every state."""
    B = batch.shape[0]
    state = wm.initial_state(B) if state is None else state
    frames = []
    for t in range(start, stop):
        prev = batch.action[:, t - 1] if t > 0 else torch.zeros_like(batch.action[:, 0])
        state = wm.observe_step(state, map_obs(lambda x: x[:, t], batch.obs), prev, batch.is_first[:, t])
        if usage is not None:
            usage.add(state)
        if decode:
            frames.append(wm.decode(state).cpu())
    return Observed(state, torch.stack(frames, 1).numpy() if decode else None)


@torch.no_grad()
def imagine_rows(wm: WorldModel, state: State, actions: torch.Tensor, *, decode: bool = True
                 ) -> tuple[np.ndarray | None, np.ndarray]:
    """Imagine one step per action ``[B, H]`` from ``state``: decoded frames ``[B, H, C, H, W]``
    (``None`` unless ``decode``) and predicted rewards ``[B, H]``."""
    traj = imagine(wm, replay_actions(actions.transpose(0, 1)), state, actions.shape[1], decode=decode)
    frames = traj.images[1:].transpose(0, 1).cpu().numpy() if traj.images is not None else None
    return frames, traj.rewards.transpose(0, 1).float().cpu().numpy()


# --------------------------------------------------------------------------- protocols


Batches = Iterator[tuple[Batch, dict[str, np.ndarray], int]]
"""Batches of episodes with their ``info_<key>`` arrays and their number of context rows."""


def imagination_metrics(wm: WorldModel, batches: Batches) -> dict[str, Any]:
    """Recon. MSE over the context, Gen. MSE over the query and Gen. MSE per imagination step;
    beside them the ``baselines`` of :class:`ImaginationBaselines` on the same episodes (a model
    that has learnt nothing of the frames at hand scores about these), ``mean_frame_mse`` (the
    best constant's Recon. MSE, kept for older readers) and, for states with categorical latents,
    ``latent_perplexity`` (:class:`ClassUsage`)."""
    recon, gen = _Mean(), _Mean()
    baselines, usage = ImaginationBaselines(), ClassUsage()
    per_step: dict[int, _Mean] = {}
    for batch, _, context in batches:
        real = batch.obs.numpy()
        baselines.add(real, context)
        seen = observe_rows(wm, batch.to(_device(wm)), 0, context, decode=True, usage=usage)
        frames, _ = imagine_rows(wm, seen.state, batch.action[:, context - 1 : -1].to(_device(wm)))
        recon.add(image_error(real[:, :context], seen.frames))
        errors = image_error(real[:, context:], frames)  # [B, query]
        gen.add(errors)
        for j in range(errors.shape[1]):
            per_step.setdefault(j, _Mean()).add(errors[:, j])
    steps = sorted(per_step)
    latent = {"latent_perplexity": usage.perplexity, "latent_classes": usage.classes} if usage.classes else {}
    found = baselines.result()
    return {"recon_mse": recon.value, "gen_mse": gen.value, "baselines": found,
            "mean_frame_mse": found["best_constant"]["recon_mse"],
            **latent, "episodes": recon.episodes, "gen_mse_per_step": [per_step[j].value for j in steps]}


class ImaginationBaselines:
    """The imagination protocol's two constant predictors, scored like a model on the same frames
    (:func:`image_error`'s units):

    - ``mean_context_frame``: each episode's per-pixel mean of its observed context frames, drawn
      at every step (Recon. MSE: at every context row; Gen. MSE: at every imagined row);
    - ``best_constant``: one image for the whole split, the per-pixel mean of the evaluated target
      frames (the context frames for Recon. MSE, the query frames for Gen. MSE): the constant with
      the least mean error, which is the sum over pixels of each pixel's variance."""

    def __init__(self) -> None:
        self.context, self.query = _PixelMoments(), _PixelMoments()
        self.recon, self.gen = _Mean(), _Mean()

    def add(self, real: np.ndarray, context: int) -> None:
        """``real``: uint8 episodes ``[B, T, C, H, W]`` whose first ``context`` rows are observed."""
        self.context.add(real[:, :context])
        self.query.add(real[:, context:])
        for episode in real:  # one episode at a time: no float copy of a batch
            frames = episode.astype(np.float64) / 255.0
            mean = frames[:context].mean(0)
            errors = np.square(frames - mean).sum(axis=(1, 2, 3))
            self.recon.add(errors[None, :context])
            self.gen.add(errors[None, context:])

    def result(self) -> dict[str, dict[str, float]]:
        return {"mean_context_frame": {"recon_mse": self.recon.value, "gen_mse": self.gen.value},
                "best_constant": {"recon_mse": self.context.mean_frame_error, "gen_mse": self.query.mean_frame_error}}


def scored_episodes(data: str | Path, split: str, episodes: int | None, context: int | None, skip_short: bool
                    ) -> tuple[Manifest, Iterator[dict[str, np.ndarray]], list[int]]:
    """What a protocol scores: the dataset's manifest (``context`` rows observed where the dataset
    has no context phase) and the first ``episodes`` episodes of ``split``, read lazily, less those
    too short for that fixed context when ``skip_short`` (their indices fill the list returned)."""
    manifest = Manifest.read(Path(data))
    if context is not None and manifest.context_length is None:
        manifest = dataclasses.replace(manifest, context_length=context)
    stream = iter_episodes(data, split, episodes)
    skipped: list[int] = []
    if skip_short:
        stream = long_enough(stream, manifest, skipped)
    return manifest, stream, skipped


def imagination_baselines(data: str | Path, split: str = "test", episodes: int | None = None,
                          context: int | None = None) -> dict[str, Any]:
    """:class:`ImaginationBaselines` of the episodes ``wmzoo evaluate --protocol imagination``
    scores with the same arguments (no model needed): ``{"baselines": ..., "episodes": N,
    "skipped_episodes": N}``."""
    manifest, stream, skipped = scored_episodes(data, split, episodes, context, skip_short=context is not None)
    found = ImaginationBaselines()
    for batch, _, rows in batches(stream, manifest):
        found.add(batch.obs.numpy(), rows)
    return {"baselines": found.result(), "episodes": found.recon.episodes, "skipped_episodes": len(skipped)}


def recall_metrics(wm: WorldModel, episodes: Iterator[dict[str, np.ndarray]], extra: int = MAX_EXTRA_FRAMES
                   ) -> dict[str, Any]:
    """Gen. MSE of the recall after a teleport with ``k = 0..extra`` more observed frames: over all
    imagined frames (``gen_mse``) and over the frames after the last ``k`` (``gen_mse_common``,
    the same frames for every ``k``). Where the env marks the rows that replay its history
    (``info_replay``), only those are compared."""
    gen: dict[int, _Mean] = {}
    common: dict[int, _Mean] = {}
    count = 0
    for episode in episodes:
        landing = teleport_row(episode)
        T = len(episode["reward"])
        last = min(extra, T - landing - 2)  # at least one frame is left to imagine
        if last < 0:
            raise WmzooError(f"episode has no query frame to imagine after the teleport at row {landing}")
        batch = _batch([episode])[0].to(_device(wm))
        real = episode["obs"]
        compare = episode[REPLAY_KEY] if REPLAY_KEY in episode else np.ones(T, bool)
        # the states after the landing frame plus k = 0..last more, imagined as one batch
        seen = observe_rows(wm, batch, 0, landing + 1)
        states = [seen.state]
        for k in range(1, last + 1):
            states.append(observe_rows(wm, batch, landing + k, landing + k + 1, states[-1]).state)
        start = {key: torch.cat([s[key] for s in states]) for key in states[0]}
        horizon = T - landing - 1
        actions = batch.action.new_zeros((last + 1, horizon, *batch.action.shape[2:]))
        for k in range(last + 1):  # row landing + 1 + k follows action[landing + k]; zeros pad
            actions[k, : horizon - k] = batch.action[0, landing + k : -1]
        frames, _ = imagine_rows(wm, start, actions)
        for k in range(last + 1):
            first = landing + 1 + k  # the first imagined row
            errors = image_error(real[first:], frames[k, : horizon - k])
            compared = compare[first:]
            gen.setdefault(k, _Mean()).add(errors[compared])
            common.setdefault(k, _Mean()).add(errors[last - k :][compared[last - k :]])
        count += 1
    ks = sorted(gen)
    return {"extra_frames": ks, "gen_mse": [gen[k].value for k in ks],
            "gen_mse_common": [common[k].value for k in ks], "episodes": count}


FORMS = {"": False, "step_": True}
"""Result-key prefix → ``step`` argument of :meth:`~wmzoo.interfaces.WorldModel.observe_sequence`:
each backbone is scored in the form it trains in (no prefix) and, beside it, one row at a time
(``step_``), so that the protocol does not decide a ranking between backbones whose two forms
see different contexts (TSSM-XL: ``m + i`` steps per query in training, ``m`` per step)."""


@torch.no_grad()
def reward_accuracy(wm: WorldModel, batches: Batches, scored: str | None) -> dict[str, Any]:
    """Inference and imagination accuracy of the predicted rewards of the scored query transitions:
    the episode-ending ones (``scored=None``) or the attempts (``scored=ATTEMPT_KEY``, see
    :func:`attempts`).

    The s4wm paper, section 5.5 (Table 2): "The inference accuracy is measured when the model
    takes the full sequence of observations as input (including both the context and the query
    phases) ... the imagination accuracy is evaluated within the model's imagination, conditioned
    on the observations in the context phase and additionally the action sequence in the query
    phase." So *inference* observes every row, the episode's last frame included, and reads each
    transition's reward where the backbone's training reads it
    (:meth:`~wmzoo.interfaces.WorldModel.observe_sequence`: for the latent backbones the reward
    head on the posterior of the row after the transition); *imagination* observes the context
    rows and imagines the query under its recorded actions. Both in each form of :data:`FORMS`.
    """
    correct: dict[str, list[np.ndarray]] = {}
    scores: dict[str, list[np.ndarray]] = {}
    per_episode: dict[str, list[np.ndarray]] = {}  # correct predictions per episode: the unit of its intervals
    labels: list[np.ndarray] = []
    n = 0
    for batch, extras, context in batches:
        target, mask = _scored(batch, extras, context, scored)
        on_device = batch.to(_device(wm))
        query_actions = on_device.action[:, context - 1 : -1]
        for prefix, step in FORMS.items():
            full = wm.observe_sequence(on_device, step=step).rewards[:, context - 1 :]
            seen = wm.observe_sequence(on_device.slice(0, context), step=step)
            _, imagined = imagine_rows(wm, seen.state, query_actions, decode=False)
            for name, predicted in (("inference", full.float().cpu().numpy()), ("imagination", imagined)):
                ok = reward_correct(predicted, target)
                correct.setdefault(f"{prefix}{name}_accuracy", []).append(ok[mask])
                per_episode.setdefault(f"{prefix}{name}_accuracy", []).append((ok & mask).sum(1))
                scores.setdefault(f"{prefix}{name}_auc", []).append(predicted[mask])
        labels.append(target[mask] > 0.5)
        per_episode.setdefault("scored", []).append(mask.sum(1))
        n += batch.shape[0]
    results = {key: np.concatenate(values) for key, values in correct.items()}
    if results["inference_accuracy"].size == 0:
        what = "episode-ending" if scored is None else f"{scored}-marked"
        raise WmzooError(f"the evaluated episodes have no {what} query transitions to score")
    positive = np.concatenate(labels)
    aucs = {key: reward_auc(np.concatenate(values), positive) for key, values in scores.items()}
    return {**{key: float(value.mean()) for key, value in results.items()}, **aucs,
            "baselines": rate_baselines(positive),
            "scored_transitions": int(results["inference_accuracy"].size), "episodes": n,
            "per_episode": {key: np.concatenate(v).astype(int).tolist() for key, v in per_episode.items()}}


REWARD_PROTOCOLS = {"reward": None, "reasoning": ATTEMPT_KEY}
"""The reward-based protocols -> the query transitions each scores (``None``: the episode-ending ones)."""


def reward_protocol(data: str | Path, split: str = "test") -> str | None:
    """Which reward-based protocol scores the dataset ``data``, decided from its first episode of
    ``split`` by what the protocols score (no env is named): ``reasoning`` where the env flags its
    attempts (``info_unlock_attempt``), else ``reward`` where the query phase has an episode-ending
    transition; ``None`` for a dataset without a context phase of its own (no memory task, e.g.
    MiniGrid's random episodes), or whose query has neither (e.g. a task that never ends an
    episode and flags nothing: its reward is not a prediction target)."""
    manifest = Manifest.read(Path(data))
    episode = next(iter_episodes(data, split, 1), None)
    if episode is None or ("phase" not in episode and manifest.context_length is None):
        return None
    if ATTEMPT_KEY in episode:
        return "reasoning"
    batch, extras = _batch([episode])
    _, scored = _scored(batch, extras, context_rows(episode, manifest), REWARD_PROTOCOLS["reward"])
    return "reward" if scored.any() else None


def _scored(batch: Batch, extras: dict[str, np.ndarray], context: int, scored: str | None
            ) -> tuple[np.ndarray, np.ndarray]:
    """``(target, mask)`` ``[B, query transitions]``: the recorded rewards of the query's
    transitions (``t = context - 1 .. T - 2``; transition t leaves row t) and which are scored."""
    return batch.reward.numpy()[:, context - 1 : -1], _marks(batch, extras, scored)[:, context - 1 : -1]


def rate_baselines(positive: np.ndarray) -> dict[str, float]:
    """The reward protocols' baselines on the scored transitions: always predicting the majority
    class, and a score that ranks by chance; with the class counts (for intervals)."""
    rate = float(positive.mean())
    return {"majority_class_accuracy": max(rate, 1 - rate), "chance_auc": 0.5,
            "positives": int(positive.sum()), "negatives": int(positive.size - positive.sum())}


def reward_baselines(data: str | Path, scored: str | None, split: str = "test", episodes: int | None = None
                     ) -> dict[str, Any]:
    """The ``baselines`` of :func:`reward_accuracy` on the episodes it scores with the same
    arguments, without a model (e.g. for results kept from before it carried them)."""
    manifest = Manifest.read(Path(data))
    labels, n = [], 0
    for batch, extras, context in batches(iter_episodes(data, split, episodes), manifest):
        target, mask = _scored(batch, extras, context, scored)
        labels.append(target[mask] > 0.5)
        n += batch.shape[0]
    return {**rate_baselines(np.concatenate(labels)), "episodes": n}


def reward_auc(score: np.ndarray, positive: np.ndarray) -> float | None:
    """The area under the ROC curve of the predicted rewards as scores for the rewarded
    transitions (Mann–Whitney U over the ranks, ties counted half): the threshold-free beside the
    accuracy, which reads the prediction at 0.5. 0.5: no better than chance; ``None`` (JSON null)
    where every transition is of one kind."""
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    if not n_pos or not n_neg:
        return None
    _, group, counts = np.unique(score, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2)[group]  # 1-based, tied scores share their mean rank
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _marks(batch: Batch, extras: dict[str, np.ndarray], scored: str | None) -> np.ndarray:
    """``[B, T]``: which transitions are scored (transition ``t`` leaves row ``t``)."""
    return batch.terminal.numpy().copy() if scored is None else attempts(batch, extras, scored)


def attempts(batch: Batch, extras: dict[str, np.ndarray], key: str = ATTEMPT_KEY) -> np.ndarray:
    """``[B, T]``: the transitions that attempt what the reward pays for (Multi Doors Keys: an
    unlock). The env's per-step ``info`` flag ``key`` when it gives one; else every transition
    taking the action that all rewarded transitions of the batch took (in Multi Doors Keys only an
    unlock that opens a door is rewarded, so that action is *unlock* and the transitions taking it
    are the attempts, successful or not)."""
    marks = np.zeros(batch.shape, bool)
    if key in extras:
        marks[:, :-1] = extras[key][:, 1:] > 0  # the info of transition t comes with row t + 1
        return marks
    rewarded = np.unique(batch.action.numpy()[batch.reward.numpy() > 0])
    if batch.action.dim() != 2 or len(rewarded) != 1:
        raise WmzooError(
            f"cannot tell the attempts: the dataset has no {key} and its rewarded transitions take "
            f"{len(rewarded)} different actions (expected one discrete action, e.g. Multi Doors Keys' unlock)"
        )
    return batch.action.numpy() == rewarded[0]


# --------------------------------------------------------------------------- episodes


def context_rows(episode: dict[str, np.ndarray], manifest: Manifest) -> int:
    """Observations in the context phase: the leading ``phase == 0`` rows, else the env's
    ``context_length``; one-line error for datasets without phases."""
    if "phase" in episode:
        context = int(np.argmax(episode["phase"] != 0)) if (episode["phase"] != 0).any() else len(episode["phase"])
    elif manifest.context_length is not None:
        context = manifest.context_length
    else:
        raise WmzooError(
            f"the dataset of {manifest.args.env} has no context/query phases (its env has no "
            "scripted policy); the memory protocols need a memory-task dataset"
        )
    if not 1 <= context < len(episode["reward"]):
        raise WmzooError(f"an episode of {len(episode['reward'])} rows has {context} context rows; "
                         "it needs at least one of each phase")
    return context


def long_enough(episodes: Iterator[dict[str, np.ndarray]], manifest: Manifest, skipped: list[int]
                ) -> Iterator[dict[str, np.ndarray]]:
    """The episodes with at least one query row after a fixed context of
    ``manifest.context_length`` rows (``--context`` on a dataset without phases, whose episodes
    vary in length, e.g. MiniGrid's); the length of each one left out is appended to ``skipped``.
    One-line error when none is left."""
    kept = 0
    for episode in episodes:
        length = len(episode["reward"])
        if "phase" not in episode and manifest.context_length is not None and length <= manifest.context_length:
            skipped.append(length)
            continue
        kept += 1
        yield episode
    if not kept:
        longest = max(skipped, default=0)
        raise WmzooError(f"none of the {len(skipped)} episodes is longer than the context of "
                         f"{manifest.context_length} rows (the longest has {longest}); give a smaller --context")


def teleport_row(episode: dict[str, np.ndarray]) -> int:
    """The row of the first observation after the teleport (its info names ``teleport_to``)."""
    if TELEPORT_KEY not in episode or not (episode[TELEPORT_KEY] >= 0).any():
        raise WmzooError("the recall protocol needs a teleport dataset (e.g. two-rooms-teleport): "
                         f"its episodes have no {TELEPORT_KEY}")
    return int(np.argmax(episode[TELEPORT_KEY] >= 0))


def _batch(episodes: Sequence[dict[str, np.ndarray]]) -> tuple[Batch, dict[str, np.ndarray]]:
    batch = Batch(**split_row({key: torch.from_numpy(np.stack([e[key] for e in episodes]))
                               for key in row_fields(episodes[0])}))
    extras = {key: np.stack([e[key] for e in episodes]) for key in episodes[0] if key.startswith("info_")}
    return batch, extras


def batches(episodes: Iterator[dict[str, np.ndarray]], manifest: Manifest, size: int = BATCH) -> Batches:
    """Consecutive episodes of equal length and context in batches of up to ``size``."""
    group: list[dict[str, np.ndarray]] = []
    context = 0
    for episode in episodes:
        this = context_rows(episode, manifest)
        if group and (len(group) == size or this != context
                      or len(episode["reward"]) != len(group[0]["reward"])):
            yield (*_batch(group), context)
            group = []
        group.append(episode)
        context = this
    if group:
        yield (*_batch(group), context)


class _PixelMoments:
    """Running per-pixel sums of uint8 frames, for the error of their mean frame."""

    def __init__(self) -> None:
        self.total: np.ndarray | None = None
        self.squares: np.ndarray | None = None
        self.count = 0

    def add(self, frames: np.ndarray) -> None:
        flat = frames.reshape(-1, *frames.shape[-3:]).astype(np.float64) / 255.0
        total, squares = flat.sum(0), np.square(flat).sum(0)
        self.total = total if self.total is None else self.total + total
        self.squares = squares if self.squares is None else self.squares + squares
        self.count += len(flat)

    @property
    def mean_frame_error(self) -> float:
        """Mean per-image sum of squared errors of the mean frame (:func:`image_error`'s units):
        the sum over pixels of each pixel's variance."""
        if not self.count or self.total is None or self.squares is None:
            return float("nan")
        mean = self.total / self.count
        return float((self.squares / self.count - np.square(mean)).clip(min=0).sum())


class ClassUsage:
    """How many latent classes a model uses: for states whose ``logits`` are categorical latents
    ``[B, groups, classes]`` (:mod:`wmzoo.nn.latent`), the perplexity ``exp H(p̄_g)`` of each group's
    class probabilities averaged over every observed state, averaged over the groups. 1: every
    state has the same class (a collapsed latent); ``classes``: all used evenly. States without such
    logits are not counted."""

    def __init__(self) -> None:
        self.sums: torch.Tensor | None = None
        self.count = 0

    def add(self, state: State) -> None:
        logits = state.get("logits")
        if not isinstance(logits, torch.Tensor) or logits.dim() != 3:
            return
        probs = logits.detach().float().softmax(-1).sum(0).cpu().double()
        self.sums = probs if self.sums is None else self.sums + probs
        self.count += logits.shape[0]

    @property
    def classes(self) -> int:
        return 0 if self.sums is None else int(self.sums.shape[-1])

    @property
    def perplexity(self) -> float:
        if self.sums is None:
            return float("nan")
        p = self.sums / self.count
        entropy = -(p * p.clamp(min=1e-12).log()).sum(-1)
        return float(entropy.exp().mean())


class _Mean:
    """A running mean of per-frame errors (and the number of episodes added)."""

    def __init__(self) -> None:
        self.total, self.count, self.episodes = 0.0, 0, 0

    def add(self, values: np.ndarray) -> None:
        self.total += float(values.sum())
        self.count += values.size
        self.episodes += values.shape[0] if values.ndim > 1 else 1

    @property
    def value(self) -> float:
        return self.total / self.count if self.count else float("nan")


def _device(wm: WorldModel) -> torch.device:
    return next(wm.parameters()).device


# --------------------------------------------------------------------------- the command


def evaluate_memory(
    checkpoint: str | Path, protocol: str, data: str | Path, out: str | Path, *,
    split: str = "test", episodes: int | None = None, context: int | None = None, log: Any = print,
    device: str | None = None,
) -> dict[str, Any]:
    """Run ``protocol`` for ``checkpoint`` on ``split`` of the dataset ``data``; writes
    ``<out>/<protocol>.json`` (and a PNG curve for imagination and recall) and returns the
    results. ``context``: observed frames of each episode where the dataset has no context phase
    (an env without a scripted memory task); a memory task's own phases always win. ``device``:
    where the model runs (``None``: where it trained)."""
    from wmzoo.eval.rollout import load_agent

    if protocol not in PROTOCOLS:
        raise WmzooError(f"unknown protocol '{protocol}'; expected one of {', '.join(PROTOCOLS)}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise WmzooError(f"--out {out}: is a file, not a folder; give a folder for the results (nothing was written)")
    check_output(out / f"{protocol}.json", EVALUATE_JSON, "--out")
    plot = {"imagination": out / "imagination.png", "recall": out / "recall.png"}.get(protocol)
    if plot is not None:
        check_output(plot, IMAGE, "--out")
    fixed_context = context is not None and protocol != "probing"  # --context given: count what it leaves out
    manifest, stream, skipped = scored_episodes(data, split, episodes, context, skip_short=fixed_context)
    agent = load_agent(checkpoint, device)
    if (agent.env.obs_space, agent.env.num_actions, agent.env.discrete) != (
        manifest.env_info.obs_space, manifest.env_info.num_actions, manifest.env_info.discrete
    ):
        raise WmzooError(
            f"checkpoint {checkpoint} was trained on {agent.env.name} {_shapes(agent.env)} "
            f"with {agent.env.num_actions} actions; the dataset holds {manifest.args.env} "
            f"{_shapes(manifest.env_info)} with {manifest.env_info.num_actions}"
        )
    if protocol in ("imagination", "recall", "probing") and not agent.env.pixel:
        raise WmzooError(f"--protocol {protocol} scores images of a pixel env; {manifest.args.env} observes "
                         f"{agent.env.describe_obs()}: use --protocol reward or reasoning")
    wm = agent.world_model
    wm.eval()
    if protocol == "imagination":
        results = imagination_metrics(wm, batches(stream, manifest))
    elif protocol == "recall":
        results = recall_metrics(wm, stream)
    elif protocol in REWARD_PROTOCOLS:
        results = reward_accuracy(wm, batches(stream, manifest), REWARD_PROTOCOLS[protocol])
    else:
        results = _probing(agent, data, split, episodes)
    payload = {"protocol": protocol, "checkpoint": str(checkpoint), "data": str(data), "split": split,
               "env": manifest.args.env, "backbone": agent.run.backbone, **results}
    if fixed_context:
        payload["skipped_episodes"] = len(skipped)  # too short for --context: no query row
        if skipped:
            log(f"left out {len(skipped)} episodes of at most {context} rows (no query row after --context {context})")
    path = write_text_atomic(out / f"{protocol}.json", json.dumps(payload, indent=2))
    for line in summary(results):
        log(line)
    log(f"wrote {path}")
    if protocol == "imagination":
        curve = results["gen_mse_per_step"]
        log(f"wrote {line_plot(plot, range(1, len(curve) + 1), curve, 'imagination step', 'Gen. MSE')}")
    elif protocol == "recall":
        x, y = results["extra_frames"], results["gen_mse"]
        log(f"wrote {line_plot(plot, x, y, 'observations after the teleport', 'Gen. MSE')}")
    return payload


def _probing(agent: Any, data: str | Path, split: str, episodes: int | None) -> dict[str, Any]:
    try:
        from wmzoo.eval.probing import run_probing
    except ImportError as exc:
        raise MissingDependencyError(f"the probing protocol is unavailable: {exc}") from None
    _, train = load_episodes(data, "train", episodes)
    _, test = load_episodes(data, split, episodes)
    return dict(run_probing(agent, train, test))


def summary(results: dict[str, Any]) -> list[str]:
    """Printable lines of a protocol's headline numbers."""
    lines = []
    headline = ("recon_mse", "gen_mse", *(f"{prefix}{name}_accuracy" for prefix in FORMS
                                            for name in ("inference", "imagination")))
    for key in headline:
        value = results.get(key)
        if isinstance(value, float):
            if "accuracy" in key:
                form = "one row at a time" if key.startswith("step_") else "the backbone's training form"
                lines.append(f"{key}: {100 * value:.1f}% ({form})")
            else:
                lines.append(f"{key}: {value:.3f}")
        elif isinstance(value, list):
            pairs = ", ".join(f"{k}: {v:.3f}" for k, v in zip(results["extra_frames"], value))
            lines.append(f"{key} by observations after the teleport: {pairs}")
    for key, value in results.items():
        if key not in (*headline, "gen_mse_per_step", "extra_frames", "gen_mse_common") and isinstance(value, (int, float)):
            lines.append(f"{key}: {value:g}")
    for name, values in results.get("baselines", {}).items():  # a constant predictor, the base rate
        shown = ", ".join(f"{k} {v:.3f}" for k, v in values.items()) if isinstance(values, dict) else f"{values:.3f}"
        lines.append(f"baseline {name}: {shown}")
    return lines


def _shapes(info: EnvInfo) -> str:
    """A pixel env's ``[C, H, W]`` as before the observation spec; other specs in words."""
    return str(list(info.obs_shape)) if info.pixel else f"({info.describe_obs()})"
