"""The training loops: online (collect → train world model → train policy in imagination) and
offline (train a world model from a directory of recorded episodes).

Reads top to bottom like the papers' Algorithm 1 (DreamerV3, IRIS, REM all share it):

1. prefill the replay with a random policy;
2. for every env step, act with the policy on the world model's filtered state (ε-greedy with
   the policy spec's ``epsilon``) and store the row;
3. every ``B·T / train_ratio`` env steps, train the world model on a replayed batch, then (every
   ``policy_every`` updates, after ``policy.start``, ``policy_updates`` times) imagine from the batch's states — or from
   the last steps of ``policy.max_starts`` segments of ``policy.segment`` steps sampled for the
   policy — and train the policy on the imagined trajectories;
4. after the last env step, ``final_updates`` more updates without collecting;
5. log, checkpoint (replay flushed first, so ``--resume`` loses nothing), and at the end write
   an imagination GIF.

Offline (:func:`train_offline`): step 3 alone on a folder of recorded episodes, recorded in
``<logdir>/offline.json`` so that ``--resume`` continues on the same data.

A step whose loss or gradient is NaN or inf is skipped and counted; ``train.max_nonfinite`` in a
row stop the run with one line, and a checkpoint is only ever written finite
(:mod:`wmzoo.train.nonfinite`), so the last good one survives.

The collector (step 2) is :class:`wmzoo.train.collector.Collector`; what a run writes to and
restores from its ``logdir`` is :mod:`wmzoo.train.rundir`.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import asdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from wmzoo import distributed
from wmzoo.agents.imitation import ImitationSpec
from wmzoo.data import Replay
from wmzoo.data.dataset import training_dir, write_env_info
from wmzoo.envs.vector import make_vector_env, vector_env_info
from wmzoo.errors import WmzooError
from wmzoo.interfaces import State, TrainOutput, reset_state
from wmzoo.specs import RunSpec
from wmzoo.train.agent import Agent
from wmzoo.train.checkpoint import Progress
from wmzoo.train.collector import Collector
from wmzoo.train.logger import Logger
from wmzoo.train.nonfinite import NonFiniteGuard, kept_checkpoint, nonfinite_hint
from wmzoo.train.rundir import (
    CHECKPOINT,
    OFFLINE,
    ProgressFile,
    announce,
    check_same_data,
    data_env_info,
    data_record,
    record_imagination,
    recorded_image_size,
    recorded_data,
    replay_dir,
    restore_run,
    save_run,
    write_offline_record,
    write_run_spec,
)
from wmzoo.train.schedule import Schedule
from wmzoo.train.trackers import check_trackers


def train_online(run: RunSpec, logdir: Path, resume: bool = False, show_progress: bool = True) -> Path:
    """Train ``run`` online in ``logdir``; returns the checkpoint path."""
    if isinstance(run.policy, ImitationSpec):
        raise WmzooError(f"policy '{run.policy_name}' learns from demonstrations, not in imagination: "
                         "train it with --imitation DATA (a dataset of wmzoo data generate)")
    T = run.train
    if T.windows == "episodes":
        raise WmzooError(
            "train.windows=episodes aligns windows to the episodes of an offline dataset (--offline); "
            "online runs sample streams (train.windows=stream or auto)"
        )
    check_trackers(T.loggers)
    if T.threads:
        torch.set_num_threads(T.threads)
    seed = distributed.rank_seed(run.seed)  # data-parallel: each rank its own envs, episodes, batches
    torch.manual_seed(seed)
    envs = make_vector_env(
        run.env, T.envs, seed=seed, size=T.image_size, train=True,
        mode=T.vector if T.envs > 1 else "sync",
    )
    info = vector_env_info(envs, run.env)
    agent = Agent(run, info)
    progress = Progress()
    if resume:
        progress = Progress(**restore_run(agent, logdir))
        if progress.env_steps == 0 and progress.updates > 0:  # only offline runs update without env steps
            envs.close()
            raise WmzooError(
                f"the run in {logdir} trained offline before offline runs recorded their data ({OFFLINE}), "
                "so it cannot be resumed; start a new run"
            )
        if progress.env_steps > T.steps or (progress.env_steps == T.steps and progress.final >= T.final_updates):
            envs.close()
            raise WmzooError(
                f"the run in {logdir} is at env step {progress.env_steps} (and {progress.final} final "
                f"updates); --steps {T.steps} asks for nothing more: pass --steps above {progress.env_steps}"
            )
    distributed.broadcast_state(agent)  # every rank starts from rank 0's weights
    write_run_spec(logdir, run, resume=resume)
    announce(agent, logdir, "online", progress.env_steps)
    write_env_info(replay_dir(logdir), info)
    replay = Replay(
        replay_dir(logdir), capacity=T.replay_capacity, chunk_size=T.replay_chunk,
        seed=seed + progress.updates, sampling=T.sampling,
    )
    collector = Collector(envs, agent, replay, seed=seed + 1000 * progress.episodes)
    logger = Logger(logdir, run.train.loggers, json.loads(run.model_dump_json()),
                    resumed_at=progress.env_steps + progress.final if resume else None)
    B, L = agent.world_model.spec.batch_size, agent.world_model.spec.seq_len
    batches = WorldModelBatches(agent, replay)
    schedule = Schedule(T, agent.policy.spec, B * L)
    start, next_log = time.time(), progress.env_steps + T.log_every
    next_ckpt = progress.env_steps + T.checkpoint_every
    bar = tqdm(total=T.steps, initial=progress.env_steps, disable=not show_progress, unit="env step", desc="wmzoo run")
    shown = ProgressFile(logdir, T.steps, "env steps")

    def checkpoint() -> Path:
        replay.flush()
        return save_run(logdir, agent, asdict(progress))

    guard = nonfinite_guard(agent, logdir)

    def update() -> None:
        """One world-model update, then the schedule's policy updates (each on its own batch)."""
        P = agent.policy.spec
        policy = schedule.policy_updates(progress.updates + 1)
        # start states are built only for a policy that imagines from this batch's
        out = batches.update(progress.updates, starts=bool(policy) and not P.segment)
        metrics = dict(out.metrics)
        progress.updates += 1
        runs = [agent.train_policy(out, segments=replay.sample(P.max_starts, P.segment) if P.segment else None)
                for _ in range(policy)]
        metrics.update({key: sum(run[key] for run in runs) / policy for key in runs[0]} if runs else {})
        log_update(guard, logger, progress, metrics, progress.env_steps + progress.final)

    filled = False  # every rank's replay holds a batch (ranks update together, or deadlock)

    with _interrupt_guard(checkpoint, progress):
        while progress.env_steps < T.steps:
            if not filled and progress.env_steps >= T.prefill:
                filled = distributed.all_true(len(replay) >= B * L)
            prefill = progress.env_steps < T.prefill or not filled
            for ret, length in collector.step(random=prefill):
                progress.episodes += 1
                logger.add({"episode/return": ret, "episode/length": length})
            progress.env_steps += T.envs
            bar.update(T.envs)
            shown.update(progress.env_steps)
            for _ in range(0 if prefill else schedule.due(progress)):
                update()
            if progress.env_steps >= next_log:
                logger.add({"fps": progress.env_steps / max(time.time() - start, 1e-9)})
                means = logger.write(progress.env_steps)
                if "episode/return" in means:
                    bar.set_postfix(ret=f"{means['episode/return']:.2f}", upd=progress.updates)
                next_log += T.log_every
            if progress.env_steps >= next_ckpt:
                checkpoint()
                next_ckpt += T.checkpoint_every
        # training-only epochs after collection ends (REM table 2: epochs 501-600), logged at
        # env step T + k for the k-th
        final = T.final_updates if distributed.all_true(len(replay) >= B * L) else 0
        for _ in tqdm(range(progress.final, final), disable=not show_progress, desc="final updates", unit="update"):
            update()
            progress.final += 1
            if progress.final % T.log_every == 0:
                logger.write(progress.env_steps + progress.final)
            if progress.final % T.checkpoint_every == 0:
                checkpoint()
    bar.close()
    path = checkpoint()
    shown.update(progress.env_steps, force=True)
    record_imagination(agent, replay, logdir, logger, progress.env_steps)
    logger.write(progress.env_steps)
    logger.close()
    envs.close()
    return path


def train_offline(run: RunSpec, data: Path, logdir: Path, updates: int, resume: bool = False,
                  show_progress: bool = True) -> Path:
    """Train only the world model to ``updates`` steps on recorded episodes in ``data`` (a folder
    of chunk files, or a dataset root of ``wmzoo data generate``: its train split); returns the
    checkpoint path.

    ``<logdir>/offline.json`` records the data (:func:`~wmzoo.train.rundir.data_record`). With
    ``resume``, the checkpoint's weights, optimizer state and counters are restored and training
    continues to ``updates`` in all, on the same data only (one line otherwise). As online, the
    resumed replay samples with seed ``run.seed + updates done`` (a stateful world model's carry
    starts afresh), so a resumed run is not bit-identical to an uninterrupted one."""
    check_trackers(run.train.loggers)
    data = training_dir(data)
    if not data.is_dir():
        moved = " (a dataset that moved: --resume --offline ITS_NEW_FOLDER)" if resume else ""
        raise WmzooError(f"--offline {data}: no such folder; check the path{moved}")
    record, empty = data_record(data), f"--offline {data}: no episodes found (expected the replay's .npz chunk files)"
    if record["files"] == 0:
        raise WmzooError(empty)
    recorded = recorded_data(logdir) if resume else None
    if resume:
        if not (logdir / CHECKPOINT).is_file():
            raise WmzooError(f"--resume: {logdir} holds no {CHECKPOINT} to continue from")
        if recorded is None:
            raise WmzooError(
                f"--resume: {logdir} records no offline data ({OFFLINE}): an online run (resume it without "
                "--offline) or an offline run from before offline runs could resume (start a new run)"
            )
        check_same_data(logdir, recorded, record)
    info = data_env_info(data, run)
    run = recorded_image_size(run, info)
    if run.train.threads:
        torch.set_num_threads(run.train.threads)
    torch.manual_seed(distributed.rank_seed(run.seed))
    agent = Agent(run, info)
    progress = restored_updates(agent, logdir, updates, "offline") if resume else Progress()
    distributed.broadcast_state(agent)
    # data-parallel: every rank reads all the data and samples its own batches (seed + rank)
    replay = Replay.load(data, capacity=run.train.replay_capacity, seed=distributed.rank_seed(run.seed) + progress.updates,
                         sampling=run.train.sampling)
    if len(replay) == 0:  # every file unreadable
        raise WmzooError(empty)
    episode_rows = aligned_episode_rows(replay, agent.world_model.spec.seq_len, run.train.windows)
    write_run_spec(logdir, run, resume=resume)
    announce(agent, logdir, "offline", progress.updates)
    if record != recorded:  # a new run, or its data moved
        write_offline_record(logdir, record)
    batches = WorldModelBatches(agent, replay, episode_rows)
    return update_loop(agent, logdir, progress, updates, lambda: batches.update(progress.updates).metrics,
                       replay, "wmzoo offline", show_progress)


def restored_updates(agent: Agent, logdir: Path, updates: int, what: str) -> Progress:
    """The counters of a run without env steps (``what``: offline, imitation), its checkpoint
    loaded into ``agent``; one line when it has done ``updates`` already."""
    progress = Progress(**restore_run(agent, logdir))
    if progress.updates >= updates:
        raise WmzooError(
            f"the {what} run in {logdir} is at update {progress.updates}; --steps {updates} asks for "
            f"nothing more: pass --steps above {progress.updates}"
        )
    return progress


def update_loop(agent: Agent, logdir: Path, progress: Progress, updates: int, update: Callable[[], dict[str, float]],
                frames: Replay, desc: str, show_progress: bool = True) -> Path:
    """The loop of a run without env steps (offline, imitation): ``update()`` (one update, its
    scalars) until ``updates``, logging every ``train.log_every`` and checkpointing every
    ``train.checkpoint_every`` (and on Ctrl-C or SIGTERM); then the last checkpoint and the
    imagination GIF of a segment of ``frames``. Returns the checkpoint path."""
    train = agent.run.train
    logger = Logger(logdir, train.loggers, json.loads(agent.run.model_dump_json()),
                    resumed_at=progress.updates if progress.updates else None)
    guard = nonfinite_guard(agent, logdir)
    shown = ProgressFile(logdir, updates, "updates")

    def checkpoint() -> Path:
        return save_run(logdir, agent, asdict(progress))

    with _interrupt_guard(checkpoint, progress, offline=True):
        for _ in tqdm(range(progress.updates, updates), initial=progress.updates, total=updates,
                      disable=not show_progress, desc=desc, unit="update"):
            metrics = update()
            progress.updates += 1  # counts finished updates, as the checkpoint's weights
            shown.update(progress.updates)
            log_update(guard, logger, progress, metrics, progress.updates)
            if progress.updates % train.log_every == 0:
                logger.write(progress.updates)
            if progress.updates % train.checkpoint_every == 0:
                checkpoint()
    logger.write(progress.updates)
    path = checkpoint()
    shown.update(progress.updates, force=True)
    record_imagination(agent, frames, logdir, logger, progress.updates)
    logger.close()
    return path


# --------------------------------------------------------------------------- helpers


def log_update(guard: NonFiniteGuard, logger: Logger, progress: Progress, metrics: dict[str, float],
               step: int) -> None:
    """Log an update's scalars with the run's count of skipped steps (``train/nonfinite_steps``);
    when the guard says stop, write them out at ``step`` and stop with its line."""
    skipped, stop = guard.check(progress.updates, metrics)
    progress.nonfinite += skipped
    logger.add(metrics)
    logger.set({"train/nonfinite_steps": progress.nonfinite})
    if stop:
        logger.write(step)
        raise WmzooError(stop)


def nonfinite_guard(agent: Agent, logdir: Path) -> NonFiniteGuard:
    """The run's watch over skipped (non-finite) steps: it stops the run after
    ``train.max_nonfinite`` in a row of one optimizer, naming the loss, keeping the checkpoint
    (which ``--resume`` continues, online or offline)."""
    checkpoint = logdir / CHECKPOINT
    return NonFiniteGuard(
        agent.named_optimizers(), agent.run.train.max_nonfinite,
        lambda opt: f"{kept_checkpoint(checkpoint)}; {nonfinite_hint(agent.run, opt.spec, resumable=True)}",
    )


def aligned_episode_rows(replay: Replay, seq_len: int, windows: str) -> int | None:
    """The episode length ``E`` that offline training windows align to (``train.windows``), or
    ``None`` to stream them. ``episodes`` needs every episode of the data to have ``E`` rows with
    ``E ≤ seq_len`` (a window is the whole episode) or ``E`` a multiple of ``seq_len`` (one
    episode in consecutive segments), one line otherwise; ``auto`` aligns where that holds.

    Why (s4wm appendix, table 8: S4WM and TSSM-XL train on whole episodes): streamed windows
    of ``seq_len`` rows drift against fixed-length episodes (256-row windows over 250-row
    Distracting Memory episodes move 6 rows per episode), so most windows cut an episode and
    with it the gradient from its ending's reward back to its cue."""
    if windows == "stream":
        return None
    lengths = np.unique(replay.episode_lengths())
    if len(lengths) == 1 and (lengths[0] <= seq_len or lengths[0] % seq_len == 0):
        return int(lengths[0])
    if windows == "auto":
        return None
    if len(lengths) != 1:
        found = "no episode start" if not len(lengths) else f"episodes of {lengths[0]}–{lengths[-1]} rows"
        raise WmzooError(
            f"train.windows=episodes needs episodes of one length; the data has {found} "
            "(train.windows=stream samples windows across them)"
        )
    raise WmzooError(
        f"train.windows=episodes: the episodes ({lengths[0]} rows) are longer than model.seq_len={seq_len} "
        f"and not a multiple of it; set model.seq_len={lengths[0]} (whole episodes) or a divisor of "
        f"{lengths[0]}, or train.windows=stream"
    )


class WorldModelBatches:
    """World-model updates on replayed batches: uniform segments, or, when the world model trains
    statefully (TBTT), consecutive segments per row with the carried state fed back and zeroed
    for rows whose stream was re-assigned to a new episode (their first row is_first).

    ``episode_rows`` (offline, :func:`aligned_episode_rows`): every row reads one episode of that
    many rows from its first row, whole or in consecutive segments, whether or not the model
    carries its state."""

    def __init__(self, agent: Agent, replay: Replay, episode_rows: int | None = None) -> None:
        spec = agent.world_model.spec
        self.agent, self.replay, self.size = agent, replay, (spec.batch_size, spec.seq_len)
        streamed = agent.world_model.stateful_training or episode_rows is not None
        self.stream = replay.stream(*self.size, episode_rows) if streamed else None
        self.carry: State | None = None

    def update(self, update: int | None = None, starts: bool = False) -> TrainOutput:
        """One world-model update; ``update`` (0-based) decides which components have started;
        ``starts``: build the batch's imagination start states (a policy imagines from them)."""
        batch = next(self.stream) if self.stream is not None else self.replay.sample(*self.size)
        if self.carry is not None:
            fresh = self.agent.world_model.initial_state(batch.shape[0])
            device = next(iter(self.carry.values())).device
            self.carry = reset_state(self.carry, fresh, batch.is_first[:, 0].to(device))
        out = self.agent.train_world_model(batch, self.carry, update, starts=starts)
        self.carry = out.carry
        return out


class _interrupt_guard:
    """On Ctrl-C or SIGTERM, write a checkpoint (replay flushed) before leaving."""

    def __init__(self, checkpoint: Any, progress: Progress, offline: bool = False) -> None:
        self.checkpoint, self.progress, self.offline = checkpoint, progress, offline

    def __enter__(self) -> None:
        self.previous = signal.signal(signal.SIGTERM, _raise_interrupt)

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        signal.signal(signal.SIGTERM, self.previous)
        if kind is KeyboardInterrupt:
            path = self.checkpoint()
            if self.offline:
                raise WmzooError(
                    f"interrupted at update {self.progress.updates}; the world model so far is "
                    f"saved to {path}; continue with --resume"
                )
            raise WmzooError(
                f"interrupted at env step {self.progress.env_steps}; checkpoint saved to {path}; "
                "continue with --resume"
            )
        return False


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
