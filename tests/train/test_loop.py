"""The training loop's windows on offline datasets of fixed-length episodes (``train.windows``).

Every row of a dataset here records its place in its episode (``reward`` = row index, channel 0
of ``obs`` = episode index), so each training batch shows where its windows start.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from wmzoo.cli import main
from wmzoo.config import run_spec
from wmzoo.data import Replay
from wmzoo.data.dataset import write_env_info
from wmzoo.errors import WmzooError
from wmzoo.interfaces import Batch, EnvInfo
from wmzoo.train import loop
from wmzoo.train.agent import Agent

ENV = "minigrid-empty-5x5"  # the CLI's default env, so runs need no --env


def fixed_length_data(root: Path, lengths: list[int]) -> Path:
    """Episodes of ``lengths[i]`` rows, one chunk file each, in one stream (as `wmzoo data generate`)."""
    replay = Replay(root, capacity=10**6, chunk_size=max(lengths))
    for episode, rows in enumerate(lengths):
        for t in range(rows):
            obs = np.zeros((3, 32, 32), np.uint8)
            obs[0] = episode
            replay.add(0, obs, 0, float(t), t == rows - 2, t == 0)
        replay.flush()
    write_env_info(root, EnvInfo(ENV, (3, 32, 32), 7))
    return root


def train_and_record(monkeypatch, tmp_path: Path, backbone: str, lengths: list[int], updates: int,
                     overrides: tuple[str, ...] = ()) -> list[Batch]:
    seen: list[Batch] = []
    original = Agent.train_world_model

    def record(self, batch, carry=None, update=None, **kwargs):
        seen.append(batch)
        return original(self, batch, carry, update, **kwargs)

    monkeypatch.setattr(Agent, "train_world_model", record)
    data = fixed_length_data(tmp_path / "data", lengths)
    run = run_spec(backbone, ENV, "tiny", overrides=[f"train.steps={updates}", *overrides])
    loop.train_offline(run, data, tmp_path / "run", updates=updates, show_progress=False)
    return seen


def test_whole_episode_windows_on_fixed_length_data_by_default(monkeypatch, tmp_path):
    """Catches: offline windows of ``seq_len`` rows streamed back to back over shorter fixed-length
    episodes (s4wm ``paper-2d``: 256-row windows on 250-row Distracting Memory episodes), which
    drift against the episodes so that most windows cut one and the gradient from its ending's
    reward to its cue; the s4wm paper trains S4WM on whole episodes (table 8)."""
    batches = train_and_record(monkeypatch, tmp_path, "s4wm", [12] * 6, updates=4)  # tiny: seq_len 16
    assert len(batches) == 4
    for batch in batches:
        assert batch.shape == (4, 12)  # one whole episode per row, not 16 rows crossing into the next
        assert batch.is_first[:, 0].all() and not batch.is_first[:, 1:].any()
        assert (batch.reward == np.arange(12)).all()
        assert (batch.obs[:, :, 0] == batch.obs[:, :1, 0]).all()  # one episode per row


def test_longer_episodes_stream_in_aligned_consecutive_segments(monkeypatch, tmp_path):
    """Catches: a stateful model's (TSSM-XL, cache carried) segments that do not start at the
    episode's first row and continue it, e.g. a slot re-assigned mid-episode or one that runs on
    into the next episode (its segment borders then drift against the episodes)."""
    batches = train_and_record(monkeypatch, tmp_path, "tssm-xl", [32] * 5, updates=6)  # seq_len 16
    for k, batch in enumerate(batches):
        assert batch.shape == (4, 16)
        first = k % 2 == 0  # rows 0-15 of an episode, then rows 16-31 of the same one
        assert bool(batch.is_first[:, 0].all()) is first and not batch.is_first[:, 1:].any()
        assert (batch.reward == np.arange(16) + (0 if first else 16)).all()
        if not first:  # the same episodes as the segment before
            assert (batch.obs[:, 0, 0] == batches[k - 1].obs[:, 0, 0]).all()


def test_stream_keeps_the_old_windows(monkeypatch, tmp_path):
    """Catches: ``train.windows=stream`` not honoured (windows aligned anyway)."""
    batches = train_and_record(monkeypatch, tmp_path, "s4wm", [12] * 6, updates=2, overrides=("train.windows=stream",))
    assert all(batch.shape == (4, 16) for batch in batches)


def test_auto_streams_episodes_of_several_lengths(monkeypatch, tmp_path):
    """Catches: ``auto`` refusing (or aligning) data whose episodes differ in length."""
    batches = train_and_record(monkeypatch, tmp_path, "s4wm", [12, 20] * 3, updates=2)
    assert all(batch.shape == (4, 16) for batch in batches)


@pytest.mark.parametrize("lengths, overrides, message", [
    ([20] * 4, [], "the episodes (20 rows) are longer than model.seq_len=16 and not a multiple of it"),
    ([12, 20] * 2, [], "needs episodes of one length; the data has episodes of 12–20 rows"),
])
def test_episode_windows_that_cannot_apply_are_one_line(tmp_path, capsys, lengths, overrides, message):
    """Catches: ``train.windows=episodes`` silently falling back to drifting windows where whole or
    evenly split episodes cannot be had."""
    data = fixed_length_data(tmp_path / "data", lengths)
    code = main(["run", "--backbone", "s4wm", "--preset", "tiny", "--offline", str(data), "--steps", "1",
                 "--logdir", str(tmp_path / "run"), "--no-progress", "--set", "train.windows=episodes", *overrides])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1
    assert not (tmp_path / "run" / "run.yaml").exists()


def test_episode_windows_online_is_an_error(tmp_path):
    """Catches: ``train.windows=episodes`` accepted by an online run, whose replay it cannot align."""
    run = run_spec("rssm", ENV, "tiny", overrides=["train.windows=episodes"])
    with pytest.raises(WmzooError, match="offline dataset"):
        loop.train_online(run, tmp_path / "run", show_progress=False)



def test_online_checkpoints_land_on_their_cadence_and_a_resume_finishes_the_final_updates(monkeypatch, tmp_path):
    """Catches an off-by-one checkpoint cadence (``>`` for ``>=``: the env-step checkpoints one
    step late; ``% every == 1`` in the final updates) and a resumed run that restarts its final
    updates from 0 instead of from the checkpoint's count (it would train them twice)."""
    pytest.importorskip("minigrid")
    from wmzoo.train.checkpoint import load_checkpoint

    saved: list[tuple[int, int]] = []
    save_run = loop.save_run
    monkeypatch.setattr(loop, "save_run", lambda logdir, agent, progress: saved.append(
        (progress["env_steps"], progress["final"])) or save_run(logdir, agent, progress))
    updates = loop.WorldModelBatches.update

    def interrupt_at_final_5(self, *args, **kwargs):
        if [final for _, final in saved] == [0, 0, 0, 0, 4]:
            raise KeyboardInterrupt  # during final update 5, after the checkpoint at final 4
        return updates(self, *args, **kwargs)

    monkeypatch.setattr(loop.WorldModelBatches, "update", interrupt_at_final_5)
    run = run_spec("rssm", ENV, "tiny", overrides=[
        "train.steps=16", "train.prefill=16", "train.checkpoint_every=4", "train.final_updates=6",
        "train.log_every=1000", "train.gif_horizon=2", "model.batch_size=2", "model.seq_len=4",
    ])
    with pytest.raises(WmzooError, match="interrupted at env step 16"):
        loop.train_online(run, tmp_path, show_progress=False)
    assert saved == [(4, 0), (8, 0), (12, 0), (16, 0), (16, 4), (16, 4)]  # the last: on the interrupt
    monkeypatch.setattr(loop.WorldModelBatches, "update", updates)
    saved.clear()
    path = loop.train_online(run, tmp_path, resume=True, show_progress=False)
    assert saved == [(16, 6)]  # final updates 5 and 6 only, then the closing checkpoint
    assert load_checkpoint(path)["progress"]["final"] == 6


def test_the_carried_state_restarts_only_for_rows_whose_segment_starts_an_episode():
    """TBTT (WorldModelBatches): the state carried into the next segment is reset to the initial
    state exactly for the rows whose new segment's first row ``is_first``. Catches a reset read
    from another column of ``is_first`` (an episode start later in the segment is the model's
    business, not the carry's) or the carry passed on unreset."""
    from types import SimpleNamespace

    import torch

    B, L = 3, 4

    def segment(first_rows: list[int]) -> Batch:
        is_first = torch.zeros(B, L, dtype=torch.bool)
        is_first[first_rows, 0] = True
        is_first[:, 2] = True  # a start inside every segment: no reset of the carry
        zeros = torch.zeros(B, L)
        return Batch(obs=torch.zeros(B, L, 1), action=zeros, reward=zeros, terminal=zeros.bool(), is_first=is_first)

    carries: list = []

    def train_world_model(batch, carry, update, starts=False):
        carries.append(carry)
        return SimpleNamespace(carry={"h": torch.full((B, 2), float(len(carries)))})

    world_model = SimpleNamespace(spec=SimpleNamespace(batch_size=B, seq_len=L), stateful_training=True,
                                  initial_state=lambda n: {"h": torch.full((n, 2), -1.0)})
    agent = SimpleNamespace(world_model=world_model, train_world_model=train_world_model)
    stream = iter([segment([0, 1, 2]), segment([1]), segment([])])
    batches = loop.WorldModelBatches(agent, SimpleNamespace(stream=lambda *args: stream))
    for _ in range(3):
        batches.update()
    assert carries[0] is None
    assert carries[1]["h"][:, 0].tolist() == [1.0, -1.0, 1.0]
    assert carries[2]["h"][:, 0].tolist() == [2.0, 2.0, 2.0]


def test_a_policy_with_its_own_segments_is_given_max_starts_segments_of_segment_rows(monkeypatch, tmp_path):
    """``policy.segment`` (the IRIS-family actor-critics sample their own batch): every policy update
    of an online run gets ``policy.max_starts`` segments of ``policy.segment`` rows. Catches the
    replay sampled with the two swapped (``replay.sample(segment, max_starts)``), or the world
    model's batch handed on instead."""
    pytest.importorskip("minigrid")
    from wmzoo.train.agent import Agent

    shapes: list[tuple[int, int] | None] = []
    train_policy = Agent.train_policy

    def spy(self, out, generator=None, segments=None):
        shapes.append(None if segments is None else tuple(segments.shape))
        return train_policy(self, out, generator, segments)

    monkeypatch.setattr(Agent, "train_policy", spy)
    run = run_spec("rem", ENV, "tiny", overrides=[
        "train.steps=18", "train.prefill=16", "train.checkpoint_every=1000", "train.log_every=1000",
        "train.gif_horizon=2", "model.batch_size=2", "model.seq_len=4", "policy.segment=5", "policy.max_starts=3",
    ])
    loop.train_online(run, tmp_path, show_progress=False)
    assert len(shapes) >= 1 and set(shapes) == {(3, 5)}
