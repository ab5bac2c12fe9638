"""The run directory of ``wmzoo run``: what a training run writes to and restores from ``logdir``.

    <logdir>/run.yaml                 the run spec (``--resume`` reads it back)
    <logdir>/checkpoint.safetensors   run spec, env shapes, progress counters, agent state
    <logdir>/imagination.gif          a replayed segment, real beside imagined, at the end
    <logdir>/replay/                  the replay's chunk files and env.json (wmzoo.data); rank 0's
    <logdir>/replay-rank<r>/          rank r's replay in a data-parallel run (r ≥ 1)
    <logdir>/offline.json             an offline run's dataset (``--resume`` trains on it again)
    <logdir>/tb/                      TensorBoard scalars and images (wmzoo.train.logger)
    <logdir>/progress.json            the run's step and its budget, for another process to show

In a data-parallel run (:mod:`wmzoo.distributed`) rank 0 alone writes the run's files; every rank
writes its own replay.

Also the open-loop imagination behind the GIF and ``wmzoo imagine``, and the env shapes of
recorded data for offline training.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from wmzoo import distributed
from wmzoo.atomic import remove_temporaries, write_text_atomic
from wmzoo.data import Replay
from wmzoo.data.dataset import recorded_env_info
from wmzoo.data.store import ChunkName
from wmzoo.errors import WmzooError
from wmzoo.interfaces import Batch, EnvInfo, map_obs, obs_entries, stack_obs
from wmzoo.outputs import check_output_folder
from wmzoo.registry import env_info, make_env
from wmzoo.specs import RunSpec
from wmzoo.train.agent import Agent
from wmzoo.train.checkpoint import load_checkpoint, save_checkpoint
from wmzoo.train.logger import Logger, obs_frames, strip, write_rollout
from wmzoo.train.nonfinite import kept_checkpoint, nonfinite_hint, nonfinite_tensors
from wmzoo.train.schedule import Schedule

CHECKPOINT = "checkpoint.safetensors"
GIF = "imagination.gif"
OFFLINE = "offline.json"
PROGRESS = "progress.json"


class ProgressFile:
    """``<logdir>/progress.json``, ``{"step", "total", "unit"}``: how far the run is, for another
    process to show (``wmzoo study run``); rewritten at most every ``every`` seconds, and at the
    end. Rank 0 alone writes it."""

    def __init__(self, logdir: Path, total: int, unit: str, every: float = 1.0) -> None:
        self.path, self.total, self.unit, self.every, self.last = logdir / PROGRESS, total, unit, every, 0.0

    def update(self, step: int, force: bool = False) -> None:
        now = time.time()
        if distributed.is_main() and (force or now - self.last >= self.every):
            write_text_atomic(self.path, json.dumps({"step": step, "total": self.total, "unit": self.unit}))
            self.last = now


def replay_dir(logdir: Path) -> Path:
    """This rank's replay folder: ``replay/`` for rank 0 (and a one-process run: today's layout),
    ``replay-rank<r>/`` beside it for rank ``r`` of a data-parallel run."""
    r = distributed.rank()
    return logdir / ("replay" if r == 0 else f"replay-rank{r}")


def write_offline_record(logdir: Path, record: Mapping[str, Any]) -> None:
    """``offline.json`` (rank 0 only)."""
    if distributed.is_main():
        write_text_atomic(logdir / OFFLINE, json.dumps(record, indent=1))


def write_run_spec(logdir: Path, run: RunSpec, resume: bool = False) -> None:
    """``run.yaml`` of a new run (one-line error when a run is already there), or of a resumed
    one (its ``--set`` changes kept for the next resume)."""
    check_output_folder(logdir, CHECKPOINT, "--logdir", only_empty=False)
    logdir.mkdir(parents=True, exist_ok=True)
    if distributed.is_main():  # another rank would delete the file rank 0 is writing
        remove_temporaries(logdir)  # what a kill left of a checkpoint or run.yaml being written
    if not resume and (logdir / CHECKPOINT).exists():
        raise WmzooError(
            f"--logdir {logdir} already holds a run; pass --resume to continue it or choose another --logdir"
        )
    if distributed.is_main():
        write_text_atomic(logdir / "run.yaml", yaml.safe_dump(json.loads(run.model_dump_json()), sort_keys=False))


def announce(agent: Agent, logdir: Path, mode: str, done: int) -> None:
    """The run's header line, printed (rank 0) once its agent is built and before any training:
    what was resolved (backbone:preset, env, logdir, parameters, device, precision) and the
    budget ``train.steps`` gives in ``mode`` (online: env steps, prefill and the world-model
    updates they make; offline/imitation: updates), from ``done`` (a resumed run's count). An
    online budget that leaves no world-model update is one ``wmzoo: warning:`` line."""
    if not distributed.is_main():
        return
    run, T = agent.run, agent.run.train
    params = sum(p.numel() for module in (agent.world_model, agent.policy) for p in module.parameters() if p.requires_grad)
    if mode == "online":
        spec = agent.world_model.spec
        updates = Schedule(T, agent.policy.spec, spec.batch_size * spec.seq_len).updates(done)
        budget = (f"{T.steps:,} env steps (prefill {T.prefill:,}; about {updates:,} world-model updates: "
                  f"train_ratio {T.train_ratio:g} / batch {spec.batch_size} x {spec.seq_len}"
                  f"{f', then {T.final_updates:,} final' if T.final_updates else ''})")
    else:
        updates = T.steps - done
        budget = f"{T.steps:,} updates ({mode}, no env steps)"
    resumed = f", resumed at {done:,}" if done else ""
    print(f"wmzoo run: {run.backbone}:{run.preset} on {run.env} in {logdir} | {params:,} parameters | "
          f"{agent.device} {T.precision} | budget {budget}{resumed}", flush=True)  # auto: the device it resolved to
    if mode == "online" and updates < 1:
        print(f"wmzoo: warning: --steps {T.steps} leaves no world-model update (train.prefill={T.prefill} "
              f"random steps first, then one update per {spec.batch_size * spec.seq_len / T.train_ratio:g} env "
              "steps): the checkpoint and imagination GIF will be of an untrained model; pass more --steps",
              file=sys.stderr, flush=True)


def save_run(logdir: Path, agent: Agent, progress: Mapping[str, Any]) -> Path:
    """Write ``<logdir>/checkpoint.safetensors``: the run spec, env shapes, ``progress`` counters
    and the agent's state; returns its path.

    Refuses (one-line WmzooError, the previous file kept) when a floating tensor of the agent's
    state (weights, buffers, optimizer state) holds NaN or inf: a checkpoint is always finite.
    Rank 0 alone writes (every rank checks); the others return the path it writes."""
    state = agent.state_tree()
    bad = nonfinite_tensors(state)
    if bad:
        where = f"update {progress.get('updates', 0)}"
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise WmzooError(
            f"{where}: the agent's state is not finite ('{bad[0]}'{more} holds NaN or inf), so no "
            f"checkpoint was written; {kept_checkpoint(logdir / CHECKPOINT)}; {nonfinite_hint(agent.run)}"
        )
    if not distributed.is_main():
        return logdir / CHECKPOINT
    tree = {"run": agent.run.model_dump(), "env": agent.env.to_dict(), "progress": dict(progress), **state}
    return save_checkpoint(logdir / CHECKPOINT, tree)


def restore_run(agent: Agent, logdir: Path) -> dict[str, Any]:
    """Load ``<logdir>/checkpoint.safetensors`` into ``agent`` (every rank from the same file);
    returns its progress counters. One line when the run trained on another number of processes."""
    tree = load_checkpoint(logdir / CHECKPOINT)
    check_world_size(logdir, tree["progress"], distributed.world_size())
    agent.load_state_tree(tree, f"checkpoint {logdir / CHECKPOINT}")
    return tree["progress"]


def check_world_size(logdir: Path, progress: Mapping[str, Any], processes: int) -> None:
    """One line when the run in ``logdir`` (its checkpoint's ``progress``) trained data-parallel
    on another number of processes than ``processes``: its global batch and per-rank replays
    would change under it."""
    recorded = int(progress.get("world_size", 1))
    if recorded != processes:
        again = f"--nproc {recorded}" if recorded > 1 else "without --nproc (one process)"
        raise WmzooError(
            f"--resume: the run in {logdir} trained on {recorded} process(es), not {processes}; "
            f"resume it {again} (its global batch and per-rank replays depend on it)"
        )


def data_record(data: Path) -> dict[str, Any]:
    """What ``<logdir>/offline.json`` records of the folder of chunk files ``data`` an offline run
    trains on: its absolute path, and what recognises the same episodes without reading them —
    the number of chunk files, their rows, and a sha256 over their names and byte sizes. A chunk's
    name carries its stream, index and row count, and a dataset's stream ids are fixed by its env,
    seed and split (:mod:`wmzoo.data.dataset`), so a copy or a move of the same data matches and
    a regenerated, grown or different dataset does not; listing the folder costs one ``stat`` a
    file, at any dataset size."""
    files = sorted((path.name, path.stat().st_size) for path in data.iterdir() if ChunkName.parse(path.name))
    listing = "".join(f"{name} {size}\n" for name, size in files)
    return {
        "data": str(data.resolve()), "files": len(files),
        "rows": sum(ChunkName.parse(name).rows for name, _ in files),  # type: ignore[union-attr]
        "sha256": hashlib.sha256(listing.encode()).hexdigest(),
    }


def recorded_data(logdir: Path) -> dict[str, Any] | None:
    """The ``offline.json`` of the run in ``logdir`` (``None``: an online run); one line when corrupt."""
    path = logdir / OFFLINE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        if not {"data", "files", "rows", "sha256"} <= set(record):
            raise ValueError("expected the fields data, files, rows and sha256")
    except (ValueError, TypeError) as exc:
        raise WmzooError(f"{path}: not a valid {OFFLINE} ({type(exc).__name__}: {exc}); start a new run") from None
    return record


def check_same_data(logdir: Path, record: Mapping[str, Any], data: Mapping[str, Any]) -> None:
    """One line when the chunk files ``data`` (a :func:`data_record`) are not those ``record``
    says the run in ``logdir`` trained on."""
    if data["sha256"] != record["sha256"]:
        raise WmzooError(
            f"the data in {data['data']} ({data['files']} chunk files, {data['rows']} rows) is not what the run "
            f"in {logdir} trained on ({record['data']}: {record['files']} chunk files, {record['rows']} rows; "
            "file names and sizes compared); resume with that data, or start a new run"
        )


def data_env_info(data: Path, run: RunSpec) -> EnvInfo:
    """Shapes of recorded data: ``<data>/env.json`` when the recorder wrote one, else the env's.
    Data recorded on another env than ``run.env`` is refused in one line (a model trained on it
    would later be evaluated on the wrong env)."""
    info = recorded_env_info(data)
    if info is not None:
        if info.name != run.env:
            raise WmzooError(
                f"--offline {data} was recorded on env {info.name!r}, not {run.env!r}; leave out "
                f"--env (the recorded env is used) or pass --env {info.name}"
            )
        return info
    env = make_env(run.env, size=run.train.image_size)
    try:
        return env_info(env, run.env)
    finally:
        env.close()


def recorded_image_size(run: RunSpec, info: EnvInfo) -> RunSpec:
    """``run`` with ``train.image_size`` set to the recorded frames' size (square frames only):
    offline, the data decides the frames, and the run spec (``run.yaml``, the checkpoint) must
    name the env as the model saw it, or ``wmzoo eval`` would make it at another size than the
    model was built for (an offline run on 40×40 data once recorded the default 64)."""
    images = [entry.shape for entry in info.obs_spec.values() if entry.kind == "image"]
    if not images:
        return run
    _, height, width = images[0]
    if height != width or run.train.image_size == height:
        return run
    return run.model_copy(update={"train": run.train.model_copy(update={"image_size": height})})


@torch.no_grad()
def imagine_open_loop(agent: Agent, batch: Batch, context: int) -> tuple[np.ndarray, np.ndarray]:
    """Observe the first ``context`` frames of a 1-row batch, then imagine the rest under the
    recorded actions. Returns ``(real, model)`` as RGB frames uint8 ``[T, 3, H, W]``
    (:func:`~wmzoo.train.logger.obs_frames`: a 3-channel image as it is, a many-channel one in
    colours, every entry the model decodes beside its real one); the model's first ``context``
    frames are reconstructions of the observed ones."""
    from wmzoo.imagination import imagine, replay_actions

    wm = agent.world_model
    wm.eval()
    batch = batch.to(agent.device)
    state = wm.initial_state(1)
    recon = []
    prev = torch.zeros_like(batch.action[:, 0])
    for t in range(context):
        state = wm.observe_step(state, map_obs(lambda x: x[:, t], batch.obs), prev, batch.is_first[:, t])
        prev = batch.action[:, t]
        recon.append(map_obs(lambda x: x[0], wm.decode(state)))
    actions = batch.action[:, context - 1 : -1].transpose(0, 1)  # actions[t] leads into frame t+1
    traj = imagine(wm, replay_actions(actions), state, actions.shape[0], decode=True)
    assert traj.images is not None
    recon_entries, imagined = obs_entries(stack_obs(recon)), obs_entries(traj.images)
    model = {k: torch.cat([recon_entries[k], v[1:, 0]]).cpu().numpy() for k, v in imagined.items()}
    real = {k: v[0].cpu().numpy() for k, v in obs_entries(batch.obs).items() if k in model}
    return obs_frames(real), obs_frames(model, like=real)


def record_imagination(agent: Agent, replay: Replay, logdir: Path, logger: Logger, step: int) -> None:
    """A replayed segment: ``<logdir>/imagination.gif`` and a TensorBoard image strip; none when
    the run collected too little for one (fewer than 2 rows in a stream). Rank 0 only."""
    if not distributed.is_main():
        return
    length = min(min(8, agent.world_model.spec.seq_len) + agent.run.train.gif_horizon, len(replay))
    while length >= 2:
        try:
            batch = replay.sample(1, length)
            break
        except WmzooError:  # no stream that long (several short worker streams)
            length //= 2
    else:
        return
    context = min(8, agent.world_model.spec.seq_len, length - 1)
    real, model = imagine_open_loop(agent, batch, context)
    logger.gif("imagination_gif", write_rollout(logdir / GIF, real, model, context), step)
    logger.image("imagination", strip(real, model, context), step)
