"""Offline probing on Memory Maze: what a frozen world model's features know about the maze.

The Memory Maze offline probing benchmark (Pasukonis et al., 2022), as the s4wm paper reports it
for RSSM-TBTT, TSSM-XL and S4WM (appendix C, Table 6): two probes read the world model's features
of every real step, *Walls* (the maze's wall layout, accuracy ↑) and *Objects* (the objects'
positions, MSE ↓), each beside a *Constant Baseline* that ignores the features.

The set-up follows the Memory Maze authors' code (pydreamer ``models/probes.py`` and its batch
preprocessing):

- features: ``WorldModel.features(state)`` after filtering each real step with ``observe_step``
  from the episode's first row, with the world model frozen (``no_grad``, ``eval``);
- wall probe: an MLP of 4 × 1024 LayerNorm units over ``[features, map_coord]`` with
  ``map_coord = [agent_pos / n · 2 − 1, agent_dir]`` (the layout is in maze coordinates, so the
  probe is told where the agent stands), one output per cell, trained with the cross-entropy
  summed over cells; accuracy is the fraction of cells classified right, averaged over steps;
- object probe: an MLP of 4 × 400 LayerNorm units over the features, predicting every object's
  position relative to the agent in the agent's frame (``targets_vec``), trained with
  ``0.5 · squared error`` (pydreamer's unit-variance Normal); the MSE is the squared distance
  summed over x and y, averaged over objects and steps;
- constant baselines, fitted on the train targets: the majority class of each cell and the mean
  of each coordinate (pydreamer's ``var_goals`` is the latter's MSE).

Probe targets come from ``info["probe"]`` of the Memory Maze envs
(:func:`wmzoo.envs.memory_maze.probe_targets`), stored per row as ``probe_<name>``.

Deviations, named:

- the probes are fitted after training, on a frozen model's features; pydreamer trains them
  alongside the world model on detached features (no gradient reaches the model either way, but
  there the features come from a model that is still changing). Probe updates draw rows shuffled
  across all steps rather than 48-step sequences.
- the MLP units are :class:`wmzoo.nn.MLP`'s (Linear without bias → LayerNorm → SiLU) instead of
  Linear → LayerNorm → ELU (a bias before LayerNorm has no effect).
- one logit per cell with a binary cross-entropy instead of a two-class softmax per cell: the same
  family of predictors (a two-class softmax depends only on the difference of its logits).
- :func:`collect_probe_episodes` acts uniformly at random for a few short episodes; the paper's
  datasets hold 30k full-length trajectories of a scripted navigate-to-random-points policy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from wmzoo.data.store import FIELDS
from wmzoo.errors import WmzooError
from wmzoo.interfaces import WorldModel
from wmzoo.nn import MLP
from wmzoo.optim import Optimizer
from wmzoo.specs import OptimSpec, Spec

if TYPE_CHECKING:
    from wmzoo.train.agent import Agent

PROBE_KEYS = ("walls", "objects", "agent_pos", "agent_dir")
"""The ``info["probe"]`` entries probing reads, stored in episodes as ``probe_<name>``."""


class ProbeSpec(Spec):
    """The two probes and how they are fitted."""

    wall_hidden: int = Field(1024, ge=1, le=16_384, description="wall probe: units per hidden layer")
    wall_layers: int = Field(4, ge=0, le=16, description="wall probe: hidden layers")
    object_hidden: int = Field(400, ge=1, le=16_384, description="object probe: units per hidden layer")
    object_layers: int = Field(4, ge=0, le=16, description="object probe: hidden layers")
    batch_size: int = Field(1536, ge=1, le=1_000_000, description="rows per probe update")
    optim: OptimSpec = Field(
        OptimSpec(lr=3e-4, eps=1e-5, clip=200.0), description="AdamW of each probe"
    )


PROBE_PRESETS: dict[str, ProbeSpec] = {
    "tiny": ProbeSpec(
        wall_hidden=64, wall_layers=2, object_hidden=64, object_layers=2, batch_size=256,
        optim=OptimSpec(lr=1e-3, eps=1e-5, clip=200.0),
    ),
    # pydreamer's Memory Maze probes: map decoder 4 x 1024, goals decoder 4 x 400 (probes.py);
    # its model optimizer, which trains them: AdamW lr 3e-4, eps 1e-5, clip 200; 32 x 48 rows
    "paper": ProbeSpec(),
}


# --------------------------------------------------------------------------- metrics


def wall_accuracy(pred: Tensor, target: Tensor) -> float:
    """Fraction of cells where the 0/1 prediction equals the 0/1 target (over all rows and cells)."""
    return float((pred.to(torch.bool) == target.to(torch.bool)).float().mean())


def object_mse(pred: Tensor, target: Tensor) -> float:
    """Squared distance ``[..., k, 2]`` summed over x, y, averaged over objects and rows."""
    return float((pred.float() - target.float()).square().sum(-1).mean())


def constant_predictions(walls: Tensor, objects: Tensor) -> tuple[Tensor, Tensor]:
    """The constant baseline fitted on train targets ``[N, n, n]`` and ``[N, k, 2]``: each cell's
    majority (a tie counts as free) and each coordinate's mean."""
    return walls.float().mean(0) > 0.5, objects.float().mean(0)


# --------------------------------------------------------------------------- features


@dataclass
class ProbeData:
    """Rows of every episode: features with the probe inputs and targets."""

    features: Tensor  # [N, F] float32
    map_coord: Tensor  # [N, 4] agent position in [-1, 1] and heading: the wall probe's extra input
    walls: Tensor  # [N, n, n] float32 0/1
    objects: Tensor  # [N, k, 2] float32


def _device(world_model: WorldModel) -> torch.device:
    tensor = next(iter(world_model.parameters()), None)
    if tensor is None:
        tensor = next(iter(world_model.buffers()), None)
    return tensor.device if tensor is not None else torch.device("cpu")


def _check_episode(episode: dict[str, np.ndarray], index: int, world_model: WorldModel) -> None:
    missing = [k for k in (*FIELDS, *(f"probe_{p}" for p in PROBE_KEYS)) if k not in episode]
    if missing:
        raise WmzooError(
            f"episode {index} lacks {', '.join(missing)}: probing needs the rows and the "
            "probe_* targets of a Memory Maze env (info['probe'])"
        )
    obs = episode["obs"]
    if obs.dtype != np.uint8 or tuple(obs.shape[1:]) != tuple(world_model.env.obs_shape):
        raise WmzooError(
            f"episode {index}: obs {obs.dtype} {list(obs.shape)} does not fit the world model's "
            f"uint8 [T, {', '.join(map(str, world_model.env.obs_shape))}]"
        )
    lengths = {len(episode[k]) for k in episode}
    if len(lengths) != 1:
        raise WmzooError(f"episode {index}: arrays of different lengths {sorted(lengths)}")


@torch.no_grad()
def episode_features(world_model: WorldModel, episodes: Sequence[dict[str, np.ndarray]]) -> list[Tensor]:
    """``features(state)`` ``[T, F]`` after each row of each episode, filtered with ``observe_step``.

    Episodes of equal length are filtered side by side. The filter starts from
    ``initial_state`` at every episode's first row; ``is_first`` inside an episode resets it too.
    """
    world_model.eval()
    device = _device(world_model)
    by_length: dict[int, list[int]] = {}
    for i, episode in enumerate(episodes):
        _check_episode(episode, i, world_model)
        by_length.setdefault(len(episode["obs"]), []).append(i)
    out: list[Tensor] = [torch.empty(0)] * len(episodes)
    for length, members in by_length.items():
        obs = torch.as_tensor(np.stack([episodes[i]["obs"] for i in members]), device=device)
        action = torch.as_tensor(np.stack([episodes[i]["action"] for i in members]), device=device)
        action = action.to(world_model.env.action_dtype)
        is_first = torch.as_tensor(np.stack([episodes[i]["is_first"] for i in members]), device=device)
        is_first = is_first.to(torch.bool)
        is_first[:, 0] = True
        state = world_model.initial_state(len(members))
        prev_action = torch.zeros_like(action[:, 0])
        features = []
        for t in range(length):
            first = is_first[:, t]
            prev_action = torch.where(first.view(-1, *[1] * (action.dim() - 2)), 0, prev_action)
            state = world_model.observe_step(state, obs[:, t], prev_action, first)
            features.append(world_model.features(state).reshape(len(members), -1).float().cpu())
            prev_action = action[:, t]
        stacked = torch.stack(features, 1)  # [B, T, F]
        for row, i in enumerate(members):
            out[i] = stacked[row]
    return out


def probe_data(world_model: WorldModel, episodes: Sequence[dict[str, np.ndarray]]) -> ProbeData:
    """Features and probe targets of every row of ``episodes``, concatenated."""
    if not episodes:
        raise WmzooError("probing needs at least one episode for training and one for testing")
    features = torch.cat(episode_features(world_model, episodes))

    def cat(key: str) -> Tensor:
        return torch.as_tensor(np.concatenate([e[f"probe_{key}"] for e in episodes])).float()

    walls = cat("walls")
    size = walls.shape[-1]
    map_coord = torch.cat([cat("agent_pos") / size * 2 - 1, cat("agent_dir")], -1)
    return ProbeData(features, map_coord, walls, cat("objects"))


# --------------------------------------------------------------------------- probes


def _fit(
    probe: nn.Module, inputs: Tensor, targets: Tensor, loss_fn: Callable[[Tensor, Tensor], Tensor],
    spec: ProbeSpec, epochs: int, generator: torch.Generator,
) -> None:
    """Minibatch AdamW on rows shuffled every epoch."""
    optimizer = Optimizer(probe.parameters(), spec.optim)
    probe.train()
    for _ in range(epochs):
        order = torch.randperm(inputs.shape[0], generator=generator)
        for start in range(0, len(order), spec.batch_size):
            rows = order[start:start + spec.batch_size]
            optimizer.step(loss_fn(probe(inputs[rows]), targets[rows]))
    probe.eval()


def _wall_loss(logits: Tensor, walls: Tensor) -> Tensor:
    return F.binary_cross_entropy_with_logits(logits, walls, reduction="none").sum(-1).mean()


def _object_loss(pred: Tensor, objects: Tensor) -> Tensor:
    return 0.5 * (pred - objects).square().sum(-1).mean()


@torch.no_grad()
def _predict(probe: nn.Module, inputs: Tensor, batch: int = 4096) -> Tensor:
    return torch.cat([probe(inputs[i:i + batch]) for i in range(0, inputs.shape[0], batch)])


def run_probing(
    agent: Agent | WorldModel,
    train_episodes: Sequence[dict[str, np.ndarray]],
    test_episodes: Sequence[dict[str, np.ndarray]],
    *,
    epochs: int = 10,
    seed: int = 0,
    spec: ProbeSpec = PROBE_PRESETS["paper"],
) -> dict[str, float]:
    """Fit the wall and object probes on the train episodes' features, report on the test episodes.

    Each episode holds row arrays ``obs`` uint8 ``[T, C, H, W]``, ``action``, ``reward``,
    ``terminal``, ``is_first`` and ``probe_walls`` ``[T, n, n]``, ``probe_objects`` ``[T, k, 2]``,
    ``probe_agent_pos`` ``[T, 2]``, ``probe_agent_dir`` ``[T, 2]``. The world model (an agent's, or
    one given directly) is only run, in eval mode, never changed; the global torch RNG is left as
    it was. ``seed`` fixes the model's sampling, the probes' initialisation and the row order.
    The probes are small and fitted on the CPU whatever the world model's device.

    Returns ``walls_acc`` and ``objects_mse`` on the test rows with the constant baselines
    ``walls_acc_baseline`` and ``objects_mse_baseline`` beside them (Table 6 of the s4wm paper),
    the same probe metrics on the train rows, the row counts and the seconds taken.
    """
    if epochs < 1:
        raise WmzooError(f"epochs must be at least 1, got {epochs}")
    began = time.perf_counter()
    world_model = agent if isinstance(agent, WorldModel) else agent.world_model
    was_training = world_model.training
    try:
        with torch.random.fork_rng(devices=[]):  # the model's own sampling, the probes' init
            torch.manual_seed(seed)
            result = _probe(world_model, train_episodes, test_episodes, epochs, seed, spec)
    finally:
        world_model.train(was_training)
    return {**result, "seconds": time.perf_counter() - began}


def _probe(
    world_model: WorldModel,
    train_episodes: Sequence[dict[str, np.ndarray]],
    test_episodes: Sequence[dict[str, np.ndarray]],
    epochs: int, seed: int, spec: ProbeSpec,
) -> dict[str, float]:
    train = probe_data(world_model, train_episodes)
    test = probe_data(world_model, test_episodes)
    if train.walls.shape[1:] != test.walls.shape[1:] or train.objects.shape[1:] != test.objects.shape[1:]:
        raise WmzooError(
            f"train and test mazes differ: walls {list(train.walls.shape[1:])} vs "
            f"{list(test.walls.shape[1:])}, objects {list(train.objects.shape[1:])} vs "
            f"{list(test.objects.shape[1:])}"
        )
    cells, objects_shape = train.walls.shape[1:], train.objects.shape[1:]
    features = train.features.shape[1]
    generator = torch.Generator().manual_seed(seed)
    wall_probe = MLP(features + 4, cells.numel(), spec.wall_hidden, spec.wall_layers)
    object_probe = MLP(features, objects_shape.numel(), spec.object_hidden, spec.object_layers)

    def wall_inputs(data: ProbeData) -> Tensor:
        return torch.cat([data.features, data.map_coord], -1)

    _fit(wall_probe, wall_inputs(train), train.walls.flatten(1), _wall_loss, spec, epochs, generator)
    _fit(object_probe, train.features, train.objects.flatten(1), _object_loss, spec, epochs, generator)

    def walls_pred(data: ProbeData) -> Tensor:
        return (_predict(wall_probe, wall_inputs(data)) > 0).view(-1, *cells)

    def objects_pred(data: ProbeData) -> Tensor:
        return _predict(object_probe, data.features).view(-1, *objects_shape)

    const_walls, const_objects = constant_predictions(train.walls, train.objects)
    return {
        "walls_acc": wall_accuracy(walls_pred(test), test.walls),
        "walls_acc_baseline": wall_accuracy(const_walls.expand_as(test.walls), test.walls),
        "objects_mse": object_mse(objects_pred(test), test.objects),
        "objects_mse_baseline": object_mse(const_objects.expand_as(test.objects), test.objects),
        "walls_acc_train": wall_accuracy(walls_pred(train), train.walls),
        "objects_mse_train": object_mse(objects_pred(train), train.objects),
        "train_rows": float(train.features.shape[0]),
        "test_rows": float(test.features.shape[0]),
    }


# --------------------------------------------------------------------------- data


def collect_probe_episodes(
    env_name: str, n: int, steps: int, seed: int, *, size: int = 64
) -> list[dict[str, np.ndarray]]:
    """``n`` episodes of at most ``steps`` uniformly random actions in ``env_name`` with probe targets.

    Each episode is ``steps + 1`` rows (fewer when it ends earlier) in the replay's row layout
    (the last row holds the final observation, a zero action and reward), plus ``probe_<name>``
    for every entry of ``info["probe"]`` at that row's observation. The first episode's maze
    comes from ``seed``, the next from the same task's generator.
    """
    from wmzoo.data.record import record_episode
    from wmzoo.registry import make_env

    if n < 1 or steps < 1:
        raise WmzooError(f"collect_probe_episodes needs n >= 1 and steps >= 1, got n={n}, steps={steps}")
    env = make_env(env_name, seed=seed, size=size, train=False)
    episodes = []
    try:
        for i in range(n):
            data, _ = record_episode(env, seed if i == 0 else None, max_steps=steps)
            probes = {k: v for k, v in data.items() if k.startswith("probe_")}
            if not probes:
                raise WmzooError(
                    f"environment '{env_name}' gives no probe targets (info['probe']); "
                    "probing needs a Memory Maze env, e.g. memory-maze-9x9"
                )
            episodes.append({key: data[key] for key in FIELDS} | probes)
    finally:
        env.close()
    return episodes
