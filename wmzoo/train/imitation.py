"""Imitation: a world model and a policy trained together on demonstrations (``wmzoo run --imitation``).

The TokenWM paper's setting (section 3.7, eq. 1): every update samples windows of demonstrations
(:class:`wmzoo.data.demos.Demonstrations`), computes the world model's own loss on them (its
:meth:`~wmzoo.interfaces.WorldModel.loss`, which returns the features of every step), adds the
policy's ``γ · −log π(a_t | h*_t, c)`` on those features, and steps every optimizer after one
shared backward pass, so the policy's gradient reaches the world model unless the policy
detaches it (appendix B). Nothing is collected and nothing is imagined.

The data is a dataset root of ``wmzoo data generate`` (its ``train`` split); a new run fills the
policy's vocabulary (and, for continuous actions, its bin range: the 1st and 99th percentile of
each dimension, section 4) from that split and records them in ``run.yaml``. ``offline.json``
records the data, with ``"mode": "imitation"``, so ``--resume`` continues on the same episodes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from wmzoo import distributed
from wmzoo.agents.imitation import ImitationPolicy, ImitationSpec
from wmzoo.data.dataset import MANIFEST
from wmzoo.data.demos import Demonstrations, Vocabulary
from wmzoo.errors import WmzooError
from wmzoo.interfaces import Batch
from wmzoo.specs import RunSpec
from wmzoo.train.agent import Agent, step_logged
from wmzoo.train.loop import Progress, restored_updates, update_loop
from wmzoo.train.trackers import check_trackers
from wmzoo.train.rundir import (
    CHECKPOINT, OFFLINE, announce, check_same_data, data_env_info, data_record, recorded_data, recorded_image_size,
    write_offline_record, write_run_spec,
)

MODE = "imitation"  # offline.json's "mode" of an imitation run


def check_imitation_policy(run: RunSpec) -> None:
    """One line when ``run``'s policy does not learn from demonstrations."""
    if not isinstance(run.policy, ImitationSpec):
        raise WmzooError(f"policy '{run.policy_name}' does not learn from demonstrations; --imitation "
                         "needs an imitation policy: leave out --policy, or pass --policy bc")


def fill_from_demonstrations(run: RunSpec, demos: Demonstrations, discrete: bool) -> RunSpec:
    """``run`` with the policy's vocabulary (and continuous bin range: each dimension's 1st and
    99th percentile, section 4) read from the demonstrations where the spec leaves them empty."""
    spec = run.policy
    assert isinstance(spec, ImitationSpec)
    updates: dict[str, object] = {}
    if not spec.vocabulary and not spec.text_encoder:  # a pre-trained text encoder has its own
        updates["vocabulary"] = list(Vocabulary.build(demos.missions, spec.max_words).words)
    if not discrete and not spec.action_low:
        updates["action_low"] = np.percentile(demos.actions, 1, axis=0).astype(float).tolist()
        updates["action_high"] = np.percentile(demos.actions, 99, axis=0).astype(float).tolist()
    if not updates:
        return run
    policy = type(spec).model_validate({**spec.model_dump(), **updates})
    return run.model_copy(update={"policy": policy})


def imitation_losses(agent: Agent, batch: Batch, condition: Tensor, acted: Tensor
                     ) -> tuple[dict[str, Tensor], dict[str, float]]:
    """Eq. 1 on a batch of demonstrations: the world model's losses by component and the policy's
    ``γ · −log π(a_t | h*_t, c)`` as ``policy/policy`` (on the features of the same pass, so its
    gradient reaches the world model unless the policy detaches them), and the scalars to log."""
    policy: ImitationPolicy = agent.policy  # type: ignore[assignment]
    with agent.autocast():
        out = agent.world_model.loss(batch)
        out.discard_starts()  # nothing imagines from them
        if out.features is None:
            raise WmzooError(f"backbone '{agent.run.backbone}' does not return its training features "
                             "(TrainOutput.features), so no policy can learn from them by imitation")
        nll, metrics = policy.imitation_loss(out.features, condition, batch.action, acted)
    losses = {**out.losses, "policy/policy": policy.spec.weight * nll}
    return losses, {**out.metrics, **{f"policy/{k}": v for k, v in metrics.items()}}


class _Frames:
    """The demonstrations' windows without their conditions, as :func:`record_imagination` samples
    a replay."""

    def __init__(self, demos: Demonstrations) -> None:
        self.demos = demos

    def __len__(self) -> int:
        return len(self.demos)

    def sample(self, batch_size: int, seq_len: int) -> Batch:
        return self.demos.sample(batch_size, seq_len)[0]


def train_imitation(run: RunSpec, root: Path, logdir: Path, updates: int, resume: bool = False,
                    show_progress: bool = True) -> Path:
    """Train ``run``'s world model and imitation policy to ``updates`` updates on the
    demonstrations of the dataset ``root``; returns the checkpoint path."""
    if not (root / MANIFEST).is_file():
        raise WmzooError(f"--imitation {root}: not a dataset of wmzoo data generate (no {MANIFEST}); "
                         "record demonstrations with: wmzoo data generate --env babyai-LEVEL --episodes N --out DIR")
    check_imitation_policy(run)
    check_trackers(run.train.loggers)
    train_dir = root / "train"
    record = {**data_record(train_dir), "mode": MODE, "root": str(root.resolve())}
    recorded = recorded_data(logdir) if resume else None
    if resume:
        if not (logdir / CHECKPOINT).is_file():
            raise WmzooError(f"--resume: {logdir} holds no {CHECKPOINT} to continue from")
        if recorded is None or recorded.get("mode") != MODE:
            raise WmzooError(f"--resume: {logdir} is not an imitation run ({OFFLINE} records no imitation data)")
        check_same_data(logdir, recorded, record)
    info = data_env_info(train_dir, run)
    run = recorded_image_size(run, info)
    if run.train.threads:
        torch.set_num_threads(run.train.threads)
    demos = Demonstrations(root, "train")
    if not resume:
        run = fill_from_demonstrations(run, demos, info.discrete)
    torch.manual_seed(distributed.rank_seed(run.seed))
    agent = Agent(run, info)
    policy: ImitationPolicy = agent.policy  # type: ignore[assignment]
    progress = restored_updates(agent, logdir, updates, "imitation") if resume else Progress()
    distributed.broadcast_state(agent)  # data-parallel: every rank from rank 0's weights
    demos.seed(distributed.rank_seed(run.seed) + progress.updates)  # as the replay's (and each rank its own)
    demos.read_with(policy.encode_mission)
    write_run_spec(logdir, run, resume=resume)
    announce(agent, logdir, "imitation", progress.updates)
    if record != recorded:
        write_offline_record(logdir, record)
    optimizers = agent.named_optimizers()
    B, T = agent.world_model.spec.batch_size, agent.world_model.spec.seq_len

    def update() -> dict[str, float]:
        batch, condition, acted = (x.to(agent.device) for x in demos.sample(B, T))
        agent.world_model.train()
        policy.train()
        losses, metrics = imitation_losses(agent, batch, condition, acted)
        return {**metrics, **step_logged(optimizers, losses, progress.updates)}

    frames = _Frames(demos)
    return update_loop(agent, logdir, progress, updates, update, frames, "wmzoo imitation",  # type: ignore[arg-type]
                       show_progress)
