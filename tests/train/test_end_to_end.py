"""End to end through the CLI at the tiny preset: train, TensorBoard, checkpoint, GIF, eval,
imagine, resume — on MiniGrid, Crafter, Atari Pong and (when installed) Memory Maze."""

from __future__ import annotations

import importlib.util
import json
import re

import numpy as np
import pytest
from PIL import Image

from wmzoo.cli import main
from wmzoo.data import Replay
from wmzoo.train.checkpoint import load_checkpoint

STEPS = 260  # tiny prefill is 200 env steps; then one world-model + policy update per step


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _train(capsys, tmp_path, env: str, steps: int = STEPS):
    logdir = tmp_path / env
    code, out, err = _run(capsys, "run", "--backbone", "rssm", "--env", env, "--preset", "tiny",
                          "--steps", str(steps), "--logdir", str(logdir), "--no-progress")
    assert code == 0, err
    return logdir, out


def _check_run_folder(logdir, steps: int):
    tree = load_checkpoint(logdir / "checkpoint.safetensors")
    assert tree["progress"]["env_steps"] == steps
    assert tree["progress"]["updates"] >= steps - 200 - 64  # trained after prefill
    events = list((logdir / "tb").glob("events.out.tfevents.*"))
    assert events and max(e.stat().st_size for e in events) > 1000
    gif = Image.open(logdir / "imagination.gif")
    assert gif.n_frames >= 16
    assert Replay.load(logdir / "replay").__len__() >= steps  # n steps -> n rows + final rows


@pytest.mark.heavy  # end to end, ~15 s: CI's second step
def test_minigrid_run_eval_imagine_resume(capsys, tmp_path):
    logdir, out = _train(capsys, tmp_path, "minigrid-memory-s7")
    assert "checkpoint:" in out
    _check_run_folder(logdir, STEPS)

    code, out, _ = _run(capsys, "eval", "--checkpoint", str(logdir / "checkpoint.safetensors"),
                        "--episodes", "2", "--max-steps", "50", "--json", str(tmp_path / "eval.json"))
    assert code == 0
    returns = [float(x) for x in re.findall(r"episode \d of \d: return (-?[\d.]+)", out)]
    mean = float(re.search(r"mean return over 2 episodes: (-?[\d.]+)", out).group(1))
    assert len(returns) == 2 and mean == pytest.approx(np.mean(returns), abs=1e-3)

    gif = tmp_path / "imagined.gif"
    code, out, _ = _run(capsys, "imagine", "--checkpoint", str(logdir / "checkpoint.safetensors"),
                        "--out", str(gif), "--context", "4", "--horizon", "6")
    assert code == 0
    frames = Image.open(gif)
    assert frames.n_frames == 10 and frames.size == (2 * (64 * 2 + 4), 2 * (64 + 4))

    # running again into the same folder without --resume writes nothing over
    before = (logdir / "checkpoint.safetensors").read_bytes()
    code, _, err = _run(capsys, "run", "--env", "minigrid-memory-s7", "--logdir", str(logdir), "--steps", "300")
    assert code == 2 and "--resume" in err
    assert (logdir / "checkpoint.safetensors").read_bytes() == before

    rows_before = len(Replay.load(logdir / "replay"))
    code, _, err = _run(capsys, "run", "--logdir", str(logdir), "--resume", "--steps", str(STEPS + 20), "--no-progress")
    assert code == 0, err
    tree = load_checkpoint(logdir / "checkpoint.safetensors")
    assert tree["progress"]["env_steps"] == STEPS + 20
    assert len(Replay.load(logdir / "replay")) >= rows_before + 20  # old experience kept


@pytest.mark.heavy
@pytest.mark.parametrize("env", ["crafter", "atari-pong"])
def test_crafter_and_atari_tiny(capsys, tmp_path, env):
    module = {"crafter": "crafter", "atari-pong": "ale_py"}[env]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} not installed")
    logdir, _ = _train(capsys, tmp_path, env)
    _check_run_folder(logdir, STEPS)
    score = {"crafter": "Crafter score: ", "atari-pong": "human-normalised score: "}[env]
    reports = []
    for name in ("a.json", "b.json"):
        code, out, _ = _run(capsys, "eval", "--checkpoint", str(logdir / "checkpoint.safetensors"),
                            "--episodes", "2", "--max-steps", "30", "--random", "--json", str(tmp_path / name))
        assert code == 0 and "mean return over 2 episodes" in out and score in out
        assert f"random policy, same seeds: {score}" in out
        reports.append(json.loads((tmp_path / name).read_text()))
    # the random baseline is reported like the agent (Crafter: score and achievements) and is
    # reproducible from the seeds (catches a baseline whose actions are drawn from an unseeded RNG)
    baseline = reports[0]["random"]
    assert len(baseline["episodes"]) == 2 and set(baseline) >= set(reports[0]) - {"checkpoint", "env", "backbone", "preset", "seed", "sample", "temperature", "random"}
    assert baseline == reports[1]["random"]


@pytest.mark.heavy
def test_memory_maze_tiny(capsys, tmp_path):
    pytest.importorskip("memory_maze")
    logdir, _ = _train(capsys, tmp_path, "memory-maze-9x9", steps=230)
    _check_run_folder(logdir, 230)
