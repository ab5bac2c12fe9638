"""The `paper` (Crafter) and `paper-atari` run presets against the official epoch structure.

The official trainer (vmicheli/delta-iris ``src/trainer.py``, ``Trainer.run`` / ``train_agent``)
runs ``common.epochs`` epochs; each collects (``collection.train.num_steps``, the first epoch
``num_steps_first_epoch`` random steps) while ``epoch <= stop_after_epochs``, then trains each
component ``steps_per_epoch`` times (the first epoch ``steps_first_epoch``) once ``epoch >
start_after_epochs``. Both sides are simulated here and each component's updates and the env
step of its first update compared; the differences that remain are the README's named ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wmzoo.config import run_spec
from wmzoo.specs import RunSpec
from wmzoo.train.checkpoint import Progress
from wmzoo.train.schedule import Schedule


@dataclass(frozen=True)
class Component:
    """``config.training.<component>``: start_after_epochs, steps_per_epoch, steps_first_epoch."""

    start_after_epochs: int
    steps_per_epoch: int
    steps_first_epoch: int | None = None


@dataclass(frozen=True)
class Official:
    """An official config's epoch structure."""

    epochs: int  # common.epochs
    stop_after_epochs: int  # collection.train
    num_steps_first_epoch: int
    num_steps: int
    components: dict[str, Component] = field(default_factory=dict)


# config/trainer.yaml (common.epochs 600; the Atari params it defaults to are config/params/atari.yaml's)
ATARI = Official(
    epochs=600, stop_after_epochs=491, num_steps_first_epoch=2000, num_steps=200, components={
        "tokenizer": Component(5, 200, 400), "world_model": Component(50, 120, 120), "actor_critic": Component(75, 200),
    },
)
# config/params/crafter.yaml
CRAFTER = Official(
    epochs=1000, stop_after_epochs=991, num_steps_first_epoch=100_000, num_steps=10_000, components={
        "tokenizer": Component(0, 500, 5000), "world_model": Component(0, 500, 2500), "actor_critic": Component(0, 500),
    },
)


def official_counts(cfg: Official) -> tuple[int, dict[str, int], dict[str, int]]:
    """(env steps, updates of each component, env step of each one's first update)."""
    env_steps, updates, first = 0, dict.fromkeys(cfg.components, 0), {}
    for epoch in range(1, cfg.epochs + 1):
        if epoch <= cfg.stop_after_epochs:
            env_steps += cfg.num_steps_first_epoch if epoch == 1 else cfg.num_steps
        for name, c in cfg.components.items():
            if epoch > c.start_after_epochs:
                updates[name] += c.steps_first_epoch if epoch == 1 and c.steps_first_epoch else c.steps_per_epoch
                first.setdefault(name, env_steps)
    return env_steps, updates, first


def wmzoo_counts(run: RunSpec) -> tuple[int, dict[str, int], dict[str, int]]:
    """The same counts for the online loop's schedule (:class:`wmzoo.train.schedule.Schedule`):
    prefill, the train ratio's credit, each component's ``OptimSpec.start``, the policy's updates,
    then ``final_updates``."""
    T = run.train
    assert T.prefill >= run.model.batch_size * run.model.seq_len  # the loop's "replay holds a batch"
    schedule = Schedule(T, run.policy, run.model.batch_size * run.model.seq_len)
    optims = {"tokenizer": run.model.tokenizer.optim, "world_model": run.model.optim}  # type: ignore[attr-defined]
    progress, updates, first = Progress(), {"tokenizer": 0, "world_model": 0, "actor_critic": 0}, {}

    def update() -> None:
        trained = {name: int(spec.started(progress.updates)) for name, spec in optims.items()}
        trained["actor_critic"] = schedule.policy_updates(progress.updates + 1)
        for name, n in trained.items():
            updates[name] += n
            if n:
                first.setdefault(name, progress.env_steps)
        progress.updates += 1

    while progress.env_steps < T.steps:
        prefill = progress.env_steps < T.prefill
        progress.env_steps += T.envs
        for _ in range(0 if prefill else schedule.due(progress)):
            update()
    for _ in range(T.final_updates):
        update()
    return progress.env_steps, updates, first


def test_atari_schedule_is_the_official_epochs():
    env_steps, updates, first = wmzoo_counts(run_spec("delta-iris", "atari-pong", "paper-atari"))
    official_steps, official, official_first = official_counts(ATARI)
    assert env_steps == official_steps == 100_000
    # G: epochs 51-600 x 120; the actor-critic: epochs 76-600 x 200
    assert updates["world_model"] == official["world_model"] == 550 * 120
    assert updates["actor_critic"] == official["actor_critic"] == 525 * 200
    # named: the autoencoder trains on G's batches, so at G's 120 an epoch (official 200), epochs 6-600
    assert official["tokenizer"] == 595 * 200 and updates["tokenizer"] == 595 * 120
    # first updates after env steps 3000 / 12,000 / 17,000; wmzoo's spread over an epoch's steps
    assert official_first == {"tokenizer": 3000, "world_model": 12_000, "actor_critic": 17_000}
    for name, step in official_first.items():
        assert 0 < first[name] - step <= 5 * 200 // 120, name  # within 5 env steps (G's 3 updates)


def test_crafter_schedule_is_the_official_epochs():
    env_steps, updates, first = wmzoo_counts(run_spec("delta-iris", "crafter", "paper"))
    official_steps, official, official_first = official_counts(CRAFTER)
    assert env_steps == official_steps == 10_000_000
    assert updates["actor_critic"] == official["actor_critic"] == 1000 * 500
    # named: the first epoch's extra updates (steps_first_epoch 5000 / 2500 instead of 500)
    assert updates["world_model"] == official["world_model"] - (2500 - 500) == 1000 * 500
    assert updates["tokenizer"] == official["tokenizer"] - (5000 - 500) == 1000 * 500
    assert set(official_first.values()) == {100_000}
    for name, step in official_first.items():
        assert 0 < first[name] - step <= 2 * 16, name  # 0.8 updates per 16 env steps
