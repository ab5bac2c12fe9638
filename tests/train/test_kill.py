"""Fault injection: a real ``wmzoo run`` subprocess killed with SIGKILL at seeded random moments
across its phases (start-up, prefill, training, checkpoint writes), then resumed.

After every kill: the checkpoint loads; the replay on disk holds every row the checkpoint counted
(the replay is flushed before each checkpoint, so only rows collected after it may be lost, at most
a chunk per env worker) and loads without a warning; the next resume continues from the
checkpoint's counters (they never go back). After the last, uninterrupted resume: the run reaches
its target, and no temporary file is left."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from wmzoo.data import Replay
from wmzoo.train.checkpoint import load_checkpoint

CHUNK = 16


def _command(logdir: Path, steps: int, resume: bool) -> list[str]:
    base = [sys.executable, "-m", "wmzoo.cli", "run", "--logdir", str(logdir), "--no-progress"]
    if resume:
        return [*base, "--resume", "--steps", str(steps)]
    return [*base, "--backbone", "rssm", "--env", "minigrid-empty-5x5", "--preset", "tiny",
            "--steps", str(steps), "--set", "train.checkpoint_every=10", "--set", f"train.replay_chunk={CHUNK}",
            "--set", "train.prefill=30", "--set", "train.threads=1"]


def _state(logdir: Path) -> tuple[dict, int] | None:
    """The checkpoint's progress and the rows of the replay on disk (None before a checkpoint)."""
    if not (logdir / "checkpoint.safetensors").exists():
        return None
    progress = load_checkpoint(logdir / "checkpoint.safetensors")["progress"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a torn or stray chunk file would warn
        rows = len(Replay.load(logdir / "replay"))
    return progress, rows


def _kill_and_check(
    logdir: Path, steps: int, delay: float, previous: dict | None, after_checkpoint: bool = False
) -> dict | None:
    """Start (or resume) the run, SIGKILL it ``delay`` seconds after it starts or, with
    ``after_checkpoint``, after it writes its next checkpoint (whatever the machine's speed),
    and check what it left."""
    ckpt = logdir / "checkpoint.safetensors"
    started = ckpt.exists()
    stamp = ckpt.stat().st_mtime_ns if started else 0
    env = {**os.environ, "MUJOCO_GL": "egl"}
    proc = subprocess.Popen(_command(logdir, steps, started), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    if after_checkpoint:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if ckpt.exists() and ckpt.stat().st_mtime_ns != stamp:
                break
            time.sleep(0.05)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    state = _state(logdir)
    if state is None:
        return previous
    progress, rows = state
    # every row collected before the checkpoint is on disk: rows >= env steps (n steps are
    # n + 1 rows of an episode)
    assert rows >= progress["env_steps"], (rows, progress)
    if previous is not None:  # a resume continues from the checkpoint, never from scratch
        assert progress["env_steps"] >= previous["env_steps"] and progress["updates"] >= previous["updates"]
    return progress


def _finish(logdir: Path, steps: int) -> None:
    result = subprocess.run(_command(logdir, steps, resume=True), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    progress, rows = _state(logdir)  # type: ignore[misc]
    assert progress["env_steps"] == steps and rows >= steps
    leftovers = [p for p in logdir.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


@pytest.mark.heavy
def test_a_killed_run_resumes_from_its_checkpoint(tmp_path):
    # Catches: a checkpoint torn by kill -9 (not written atomically), replay rows counted by the
    # checkpoint but not on disk (no flush before it), a resume that restarts its counters, a
    # temporary file left forever.
    logdir = tmp_path / "run"
    steps = 80
    previous = None
    for delay in (0.3, 0.0):  # just after a checkpoint (training), then right as one is written
        previous = _kill_and_check(logdir, steps, delay, previous, after_checkpoint=True)
    assert previous is not None, "no checkpoint was written before the kills; the test needs a slower kill"
    _finish(logdir, steps)


@pytest.mark.slow
def test_random_kills_across_every_phase(tmp_path):
    # The long loop: 10 kills at seeded random moments (start-up and imports, prefill, training,
    # checkpoint writes), each followed by the checks above.
    rng = random.Random(0)
    logdir = tmp_path / "run"
    steps = 400
    previous = None
    for i in range(10):
        previous = _kill_and_check(logdir, steps, rng.uniform(0.0, 3.0), previous, after_checkpoint=i % 2 == 1)
    _finish(logdir, steps)


def _offline_command(data: Path, logdir: Path, updates: int, resume: bool) -> list[str]:
    base = [sys.executable, "-m", "wmzoo.cli", "run", "--logdir", str(logdir), "--no-progress", "--steps", str(updates)]
    if resume:  # no --offline: the data recorded in offline.json
        return [*base, "--resume"]
    return [*base, "--offline", str(data), "--preset", "tiny", "--set", "train.checkpoint_every=2",
            "--set", "train.threads=1"]


def _offline_progress(logdir: Path) -> int:
    """The checkpoint's update count, checked against its optimizer's own step count."""
    tree = load_checkpoint(logdir / "checkpoint.safetensors")
    steps = {float(s["step"]) for s in tree["world_model_optim"]["model"]["opt"]["state"].values()}
    assert steps == {tree["progress"]["updates"]}, (steps, tree["progress"])
    return tree["progress"]["updates"]


@pytest.mark.slow
def test_a_killed_offline_run_resumes_from_its_checkpoint(tmp_path):
    # Catches: an offline checkpoint torn by kill -9, a resume that restarts its counters or its
    # optimizer (the update count would go back, or Adam's step count would fall behind it), a
    # resume that does not find its data without --offline, a temporary file left forever.
    from wmzoo.data.generate import generate

    data = tmp_path / "data"
    generate("minigrid-empty-5x5", 2, data, split=(1.0, 0.0, 0.0), log=lambda line: None)
    logdir = tmp_path / "run"
    ckpt = logdir / "checkpoint.safetensors"
    updates, previous = 200, 0
    for delay in (0.3, 0.0):  # just after a checkpoint (training), then right as one is written
        stamp = ckpt.stat().st_mtime_ns if ckpt.exists() else 0
        proc = subprocess.Popen(_offline_command(data, logdir, updates, ckpt.exists()),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if ckpt.exists() and ckpt.stat().st_mtime_ns != stamp:
                break
            time.sleep(0.05)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        done = _offline_progress(logdir)
        assert previous < done < updates, (previous, done)  # a new checkpoint, further on
        previous = done
    record = (logdir / "offline.json").read_bytes()
    result = subprocess.run(_offline_command(data, logdir, updates, resume=True), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert _offline_progress(logdir) == updates
    assert (logdir / "offline.json").read_bytes() == record
    assert [p for p in logdir.rglob("*") if p.name.endswith(".tmp")] == []
