"""The trainer's schedule: when the policy starts, updates after collection, ε-greedy collection."""

from __future__ import annotations

import numpy as np
import pytest

from wmzoo.config import run_spec
from wmzoo.train.agent import Agent
from wmzoo.train.checkpoint import load_checkpoint
from wmzoo.train.loop import train_online

pytest.importorskip("minigrid")

BASE = ["train.steps=80", "train.prefill=40", "train.log_every=1000", "train.checkpoint_every=1000",
        "train.gif_horizon=2", "model.batch_size=2", "model.seq_len=8", "train.train_ratio=4"]


def test_policy_start_every_and_final_updates(tmp_path, monkeypatch):
    world_model_updates, policy_updates, indices = [], [], []
    train_world_model, train_policy = Agent.train_world_model, Agent.train_policy

    def counting_world_model(self, batch, carry=None, update=None, **kwargs):
        world_model_updates.append(len(world_model_updates) + 1)
        indices.append(update)
        return train_world_model(self, batch, carry, update, **kwargs)

    def counting_policy(self, *args, **kwargs):
        policy_updates.append(len(world_model_updates))  # after which world-model update
        return train_policy(self, *args, **kwargs)

    monkeypatch.setattr(Agent, "train_world_model", counting_world_model)
    monkeypatch.setattr(Agent, "train_policy", counting_policy)
    run = run_spec("rssm", "minigrid-empty-5x5", "tiny", overrides=[
        *BASE, "policy.start=3", "train.policy_every=2", "train.final_updates=5",
    ])
    progress = load_checkpoint(train_online(run, tmp_path, show_progress=False))["progress"]
    total = progress["updates"]
    assert progress["final"] == 5 and progress["env_steps"] == 80
    assert total == len(world_model_updates) == 40 * 4 // 16 + 5  # 40 trained env steps x 4 / (2 x 8), then 5
    # the policy learns after world-model update 3, on every second update, through the final ones
    assert policy_updates == [u for u in range(4, total + 1) if u % 2 == 0]
    # each world-model update is told its 0-based index (OptimSpec.start counts from it): catches
    # the loop passing the 1-based count, which starts every component one update early
    assert indices == list(range(total))


def _actions(tmp_path, *overrides: str) -> np.ndarray:
    run = run_spec("rssm", "minigrid-empty-5x5", "tiny", overrides=[*BASE, *overrides])
    train_online(run, tmp_path, show_progress=False)
    return np.concatenate([np.load(f)["action"] for f in sorted((tmp_path / "replay").glob("*.npz"))])


def test_epsilon_one_collects_the_random_actions_of_prefill(tmp_path):
    """ε = 1 replaces every policy action by the same seeded random draws as prefill does."""
    random = _actions(tmp_path / "random", "train.prefill=80")
    explored = _actions(tmp_path / "eps1", "policy.epsilon=1.0")
    policy = _actions(tmp_path / "eps0", "policy.epsilon=0.0")
    assert np.array_equal(random, explored)
    assert np.array_equal(random[:40], policy[:40])  # the prefill itself
    assert not np.array_equal(random, policy)  # the policy's own choices afterwards


@pytest.mark.parametrize(("ratio", "done", "final"), [(64, 0, 0), (0.6 * 64, 0, 5), (64, 230, 0), (32, 500, 3)])
def test_a_budgets_updates_are_what_the_loop_credits(ratio, done, final):
    # Catches: the header line's update count drifting from the loop's credit (the prefill counted
    # as training, a resumed run's done steps counted again, the final updates left out, or a rate
    # like 0.6 an env step losing its last update to rounding).
    from wmzoo.train.checkpoint import Progress
    from wmzoo.train.schedule import Schedule

    run = run_spec("rssm", "minigrid-empty-5x5", "tiny", None, None, None,
                   [f"train.train_ratio={ratio}", "train.steps=700", "train.prefill=200", f"train.final_updates={final}"])
    schedule = Schedule(run.train, run.policy, run.model.batch_size * run.model.seq_len)
    progress, counted = Progress(env_steps=done), 0
    while progress.env_steps < run.train.steps:  # the loop: a step of every env, credited once collected
        prefill = progress.env_steps < run.train.prefill
        progress.env_steps += run.train.envs
        counted += 0 if prefill else schedule.due(progress)
    assert schedule.updates(done) == counted + final


def _schedule(*overrides: str):
    from wmzoo.train.schedule import Schedule

    run = run_spec("rssm", "minigrid-empty-5x5", "tiny", None, None, None, list(overrides))
    return Schedule(run.train, run.policy, 16)


def test_the_policy_starts_on_the_update_after_policy_start():
    # Catches `update < start` for `update <= start` (the policy learning on update `start`
    # itself); with policy_every=1 no parity hides it.
    schedule = _schedule("policy.start=3", "train.policy_every=1", "train.policy_updates=2")
    assert [schedule.policy_updates(u) for u in range(1, 7)] == [0, 0, 0, 2, 2, 2]


def test_every_env_of_a_vector_step_earns_its_share_of_updates():
    # train_ratio 8 over B·T = 16 rows: half an update per env step, so two envs earn one update
    # a step. Catches the credit ignoring train.envs (half the updates with two envs).
    from wmzoo.train.checkpoint import Progress

    progress, schedule = Progress(), _schedule("train.envs=2", "train.train_ratio=8")
    assert [schedule.due(progress) for _ in range(4)] == [1, 1, 1, 1]
