"""When the online loop trains (steps 3 and 4 of :mod:`wmzoo.train.loop`), apart from the loop
so that a test can count a run preset's updates of every component without running it.

An update is one world-model update (each component whose ``OptimSpec.start`` has passed steps,
:meth:`~wmzoo.specs.OptimSpec.started`) followed by :meth:`Schedule.policy_updates` policy
updates. The papers' epochs ("collect n env steps, then train each component m steps, starting
after e epochs") map onto it as: ``train_ratio`` = m world-model updates per n env steps,
``policy_every`` / ``policy_updates`` = the policy's steps per world-model step, the starts in
updates, and ``final_updates`` = the epochs that train after the last env step.
"""

from __future__ import annotations

from dataclasses import dataclass

from wmzoo.specs import PolicySpec, TrainSpec
from wmzoo.train.checkpoint import Progress


@dataclass(frozen=True)
class Schedule:
    """The trainer's schedule of ``train`` for a policy ``policy`` and world-model batches of
    ``rows`` = B · T replayed steps."""

    train: TrainSpec
    policy: PolicySpec
    rows: int

    def due(self, progress: Progress) -> int:
        """Credit one collected (not prefill) step of every env to ``progress`` (DreamerV3's train
        ratio: ``envs · train_ratio / (B · T)`` world-model updates) and take the whole updates
        now owed out of it; returns how many. Whole to 1e-9: rates such as 0.6 an env step add
        up in floating point to just under a whole update (58,799 of 58,800 over Δ-IRIS's Atari)."""
        progress.credit += self.train.envs * self.train.train_ratio / self.rows
        owed = 0
        while progress.credit >= 1 - 1e-9:
            progress.credit -= 1
            owed += 1
        return owed

    def updates(self, done: int = 0) -> int:
        """World-model updates the env steps from ``done`` to ``train.steps`` earn, as :meth:`due`
        credits them (the prefill earns none), and the final updates: a run's budget in updates."""
        collected = max(0, self.train.steps - max(self.train.prefill, done))
        return int(collected * self.train.train_ratio / self.rows + 1e-9) + self.train.final_updates

    def policy_updates(self, update: int) -> int:
        """Policy updates after the 1-based world-model update ``update``: ``policy_updates``
        on every ``policy_every``-th once ``policy.start`` updates are done, else none."""
        if update <= self.policy.start or update % self.train.policy_every:
            return 0
        return self.train.policy_updates
