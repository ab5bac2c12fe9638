"""The training loops: online (collect → train world model → train policy in imagination) and
offline (train a world model from a directory of recorded episodes).

Reads top to bottom like the papers' Algorithm 1 (DreamerV3, IRIS, REM all share it):

1. prefill the replay with a random policy;
2. for every env step, act with the policy on the world model's filtered state (ε-greedy with
   the policy spec's ``epsilon``) and store the row;
3. every ``B·T / train_ratio`` env steps, train the world model on a replayed batch, then (every
   ``policy_every`` updates, after ``policy.start``) imagine from the batch's states and train the
   policy on the imagined trajectories;
4. after the last env step, ``final_updates`` more updates without collecting;
5. log, checkpoint (replay flushed first, so ``--resume`` loses nothing), and at the end write
   an imagination GIF.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from gymnasium.vector import VectorEnv
from tqdm import tqdm

from wmzoo.atomic import write_text_atomic
from wmzoo.data import Replay
from wmzoo.data.dataset import recorded_env_info, training_dir, write_env_info
from wmzoo.envs.vector import action_samplers, make_vector_env, vector_env_info
from wmzoo.errors import WmzooError
from wmzoo.interfaces import Batch, EnvInfo, State, TrainOutput, reset_state
from wmzoo.registry import env_info, make_env
from wmzoo.specs import RunSpec
from wmzoo.train.agent import Agent
from wmzoo.train.checkpoint import load_checkpoint, save_checkpoint
from wmzoo.train.logger import Logger, strip, write_rollout

CHECKPOINT = "checkpoint.safetensors"
GIF = "imagination.gif"


@dataclass
class Progress:
    env_steps: int = 0
    updates: int = 0
    episodes: int = 0
    credit: float = 0.0  # world-model updates owed by the train ratio
    final: int = 0  # of train.final_updates, done after the last env step


class Collector:
    """Steps a vector of ``N`` environments with the agent and writes one replay row per env step.

    ``envs`` is a Gymnasium vector env that resets an environment in the step that ends its
    episode (:func:`wmzoo.envs.vector.make_vector_env`); worker ``i``'s rows go to replay stream
    ``i``. Random actions come from per-env action spaces seeded ``seed + i`` here, so the rows do
    not depend on whether the environments run in this process or in their own.
    """

    def __init__(self, envs: VectorEnv, agent: Agent, replay: Replay, seed: int) -> None:
        self.envs, self.agent, self.replay = envs, agent, replay
        n = envs.num_envs
        self.samplers = action_samplers(envs, seed)
        self.epsilon = agent.policy.spec.epsilon
        self.rng = np.random.default_rng(seed)
        self.obs, _ = envs.reset(seed=[seed + i for i in range(n)])
        self.is_first = np.ones(n, bool)
        self.returns = np.zeros(n)
        self.lengths = np.zeros(n, int)
        agent.reset_acting()

    def step(self, random: bool) -> list[tuple[float, int]]:
        """One step of every env; returns (return, length) of the episodes that ended.

        ``random``: every action uniformly random (prefill); otherwise the policy's, each
        replaced by a random one with the policy spec's ``epsilon`` chance (ε-greedy)."""
        n = self.envs.num_envs
        if random or self.epsilon == 0:
            explore = np.full(n, random)
        else:
            explore = self.rng.random(n) < self.epsilon
        forced = np.stack([space.sample() for space in self.samplers]) if explore.any() else None
        actions = self.agent.act(self.obs, self.is_first, actions=forced, override=None if random else explore)
        obs, rewards, terminated, truncated, info = self.envs.step(actions)
        ended = []
        for i in range(len(actions)):
            self.replay.add(i, self.obs[i], actions[i], float(rewards[i]), bool(terminated[i]), bool(self.is_first[i]))
            self.returns[i] += rewards[i]
            self.lengths[i] += 1
            if terminated[i] or truncated[i]:
                # the final observation closes the episode (zero action/reward, not terminal)
                self.replay.add(i, info["final_obs"][i], np.zeros_like(actions[i]), 0.0, False, False)
                ended.append((float(self.returns[i]), int(self.lengths[i])))
                self.returns[i], self.lengths[i] = 0.0, 0
        self.is_first = terminated | truncated  # obs[i] already starts the next episode
        self.obs = obs
        return ended


def train_online(run: RunSpec, logdir: Path, resume: bool = False, show_progress: bool = True) -> Path:
    """Train ``run`` online in ``logdir``; returns the checkpoint path."""
    T = run.train
    if T.threads:
        torch.set_num_threads(T.threads)
    torch.manual_seed(run.seed)
    envs = make_vector_env(
        run.env, T.envs, seed=run.seed, size=T.image_size, train=True,
        mode=T.vector if T.envs > 1 else "sync",
    )
    info = vector_env_info(envs, run.env)
    agent = Agent(run, info)
    progress = Progress()
    if resume:
        progress = _restore(agent, logdir)
    else:
        _write_run_spec(logdir, run)
    write_env_info(logdir / "replay", info)
    replay = Replay(
        logdir / "replay", capacity=T.replay_capacity, chunk_size=T.replay_chunk,
        seed=run.seed + progress.updates, sampling=T.sampling,
    )
    collector = Collector(envs, agent, replay, seed=run.seed + 1000 * progress.episodes)
    logger = Logger(logdir)
    B, L = agent.world_model.spec.batch_size, agent.world_model.spec.seq_len
    batches = WorldModelBatches(agent, replay)
    start, next_log = time.time(), progress.env_steps + T.log_every
    next_ckpt = progress.env_steps + T.checkpoint_every
    bar = tqdm(total=T.steps, initial=progress.env_steps, disable=not show_progress, unit="step", desc="wmzoo run")

    def checkpoint() -> Path:
        replay.flush()
        return save_checkpoint(logdir / CHECKPOINT, _checkpoint_tree(agent, progress))

    def update() -> None:
        """One world-model update; the policy's every ``policy_every``, once it has started."""
        out = batches.update()
        logger.add(out.metrics)
        progress.updates += 1
        if progress.updates > agent.policy.spec.start and progress.updates % T.policy_every == 0:
            logger.add(agent.train_policy(out))

    with _interrupt_guard(checkpoint, progress):
        while progress.env_steps < T.steps:
            prefill = progress.env_steps < T.prefill or len(replay) < B * L
            for ret, length in collector.step(random=prefill):
                progress.episodes += 1
                logger.add({"episode/return": ret, "episode/length": length})
            progress.env_steps += T.envs
            bar.update(T.envs)
            if not prefill:
                progress.credit += T.envs * T.train_ratio / (B * L)
            while progress.credit >= 1:
                progress.credit -= 1
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
        final = T.final_updates if len(replay) >= B * L else 0
        for _ in tqdm(range(progress.final, final), disable=not show_progress, desc="final updates"):
            update()
            progress.final += 1
            if progress.final % T.log_every == 0:
                logger.write(progress.env_steps + progress.final)
            if progress.final % T.checkpoint_every == 0:
                checkpoint()
    bar.close()
    path = checkpoint()
    record_imagination(agent, replay, logdir, logger, progress.env_steps)
    logger.write(progress.env_steps)
    logger.close()
    envs.close()
    return path


def train_offline(run: RunSpec, data: Path, logdir: Path, updates: int, show_progress: bool = True) -> Path:
    """Train only the world model for ``updates`` steps on recorded episodes in ``data`` (a
    folder of chunk files, or a dataset root of ``wmzoo data generate``: its train split)."""
    data = training_dir(data)
    replay = Replay.load(data, capacity=run.train.replay_capacity, seed=run.seed, sampling=run.train.sampling)
    if len(replay) == 0:
        raise WmzooError(f"--offline {data}: no episodes found (expected the replay's .npz chunk files)")
    info = _data_env_info(data, run)
    torch.manual_seed(run.seed)
    agent = Agent(run, info)
    _write_run_spec(logdir, run)
    logger = Logger(logdir)
    batches = WorldModelBatches(agent, replay)
    progress = Progress()

    def checkpoint() -> Path:
        return save_checkpoint(logdir / CHECKPOINT, _checkpoint_tree(agent, progress))

    with _interrupt_guard(checkpoint, progress, offline=True):
        for _ in tqdm(range(updates), disable=not show_progress, desc="wmzoo offline"):
            logger.add(batches.update().metrics)
            progress.updates += 1  # counts finished updates, as the checkpoint's weights
            if progress.updates % run.train.log_every == 0:
                logger.write(progress.updates)
            if progress.updates % run.train.checkpoint_every == 0:
                checkpoint()
    logger.write(progress.updates)
    path = checkpoint()
    record_imagination(agent, replay, logdir, logger, progress.updates)
    logger.close()
    return path


# --------------------------------------------------------------------------- helpers


@torch.no_grad()
def imagine_open_loop(agent: Agent, batch: Batch, context: int) -> tuple[np.ndarray, np.ndarray]:
    """Observe the first ``context`` frames of a 1-row batch, then imagine the rest under the
    recorded actions. Returns ``(real, model)`` uint8 ``[T, C, H, W]``; the model's first
    ``context`` frames are reconstructions of the observed ones."""
    from wmzoo.imagination import imagine, replay_actions

    wm = agent.world_model
    wm.eval()
    batch = batch.to(agent.device)
    state = wm.initial_state(1)
    recon = []
    prev = torch.zeros_like(batch.action[:, 0])
    for t in range(context):
        state = wm.observe_step(state, batch.obs[:, t], prev, batch.is_first[:, t])
        prev = batch.action[:, t]
        recon.append(wm.decode(state)[0])
    actions = batch.action[:, context - 1 : -1].transpose(0, 1)  # actions[t] leads into frame t+1
    traj = imagine(wm, replay_actions(actions), state, actions.shape[0], decode=True)
    assert traj.images is not None
    model = torch.cat([torch.stack(recon), traj.images[1:, 0]])
    return batch.obs[0].cpu().numpy(), model.cpu().numpy()


def record_imagination(agent: Agent, replay: Replay, logdir: Path, logger: Logger, step: int) -> None:
    """A replayed segment: ``<logdir>/imagination.gif`` and a TensorBoard image strip."""
    context = min(8, agent.world_model.spec.seq_len)
    length = min(context + agent.run.train.gif_horizon, len(replay))
    real, model = imagine_open_loop(agent, replay.sample(1, length), context)
    write_rollout(logdir / GIF, real, model, context)
    logger.image("imagination", strip(real, model, context), step)


class WorldModelBatches:
    """World-model updates on replayed batches: uniform segments, or, when the world model trains
    statefully (TBTT), consecutive segments per row with the carried state fed back and zeroed
    for rows whose stream was re-assigned to a new episode (their first row is_first)."""

    def __init__(self, agent: Agent, replay: Replay) -> None:
        spec = agent.world_model.spec
        self.agent, self.replay, self.size = agent, replay, (spec.batch_size, spec.seq_len)
        self.stream = replay.stream(*self.size) if agent.world_model.stateful_training else None
        self.carry: State | None = None

    def update(self) -> TrainOutput:
        batch = next(self.stream) if self.stream is not None else self.replay.sample(*self.size)
        if self.carry is not None:
            fresh = self.agent.world_model.initial_state(batch.shape[0])
            device = next(iter(self.carry.values())).device
            self.carry = reset_state(self.carry, fresh, batch.is_first[:, 0].to(device))
        out = self.agent.train_world_model(batch, self.carry)
        self.carry = out.carry
        return out


def _checkpoint_tree(agent: Agent, progress: Progress) -> dict[str, Any]:
    return {"run": agent.run.model_dump(), "env": asdict(agent.env), "progress": asdict(progress),
            **agent.state_tree()}


def _data_env_info(data: Path, run: RunSpec) -> EnvInfo:
    """Shapes of recorded data: ``<data>/env.json`` when the recorder wrote one, else the env's."""
    info = recorded_env_info(data)
    if info is not None:
        return info
    env = make_env(run.env, size=run.train.image_size)
    try:
        return env_info(env, run.env)
    finally:
        env.close()


def _write_run_spec(logdir: Path, run: RunSpec) -> None:
    logdir.mkdir(parents=True, exist_ok=True)
    if (logdir / CHECKPOINT).exists():
        raise WmzooError(
            f"--logdir {logdir} already holds a run; pass --resume to continue it or choose another --logdir"
        )
    write_text_atomic(logdir / "run.yaml", yaml.safe_dump(json.loads(run.model_dump_json()), sort_keys=False))


def _restore(agent: Agent, logdir: Path) -> Progress:
    tree = load_checkpoint(logdir / CHECKPOINT)
    agent.load_state_tree(tree)
    return Progress(**tree["progress"])


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
                    f"saved to {path}"
                )
            raise WmzooError(
                f"interrupted at env step {self.progress.env_steps}; checkpoint saved to {path}; "
                "continue with --resume"
            )
        return False


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
