"""DMC through the whole stack from the CLI: a tiny RSSM run (continuous actions through
collection, replay, the world-model loss, imagination with dynamics backpropagation, the GIF and
the checkpoint), its evaluation beside a random policy, the env bench, and the token backbones'
one-line refusal of continuous actions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mujoco_rendering import require_rendering

require_rendering("dm_control.suite")

from wmzoo.cli import main  # noqa: E402
from wmzoo.data.replay import Replay  # noqa: E402


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_tiny_rssm_run_and_eval_on_dmc(capsys, tmp_path: Path) -> None:
    run = tmp_path / "run"
    code, _, err = run_cli(
        capsys, "run", "--backbone", "rssm", "--env", "dmc-cartpole-balance", "--preset", "tiny",
        "--steps", "40", "--set", "train.prefill=20", "--set", "train.image_size=32",
        "--set", "policy.horizon=5", "--set", "train.log_every=20", "--set", "model.seq_len=8",
        "--set", "train.train_ratio=16", "--logdir", str(run), "--no-progress",
    )
    assert code == 0, err
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logged = EventAccumulator(str(run / "tb"))
    logged.Reload()
    assert logged.Scalars("policy/actor_grad_norm")[-1].value > 0  # the actor learnt, by backprop
    assert (run / "checkpoint.safetensors").exists() and (run / "imagination.gif").exists()
    batch = Replay.load(run / "replay").sample(2, 4)  # continuous actions stored as float vectors
    assert batch.action.dtype.is_floating_point and tuple(batch.action.shape) == (2, 4, 1)
    assert batch.action.abs().max() <= 1 and batch.action.std() > 0
    out = tmp_path / "eval.json"
    code, _, err = run_cli(capsys, "eval", "--checkpoint", str(run / "checkpoint.safetensors"),
                           "--episodes", "1", "--max-steps", "10", "--random", "--json", str(out))
    assert code == 0, err
    result = json.loads(out.read_text())
    text = json.dumps(result)
    assert "random" in text


def test_env_bench_with_continuous_actions(capsys, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    code, _, err = run_cli(capsys, "bench", "--mode", "env", "--env", "dmc-cartpole-balance",
                           "--envs", "1", "--steps", "10", "--json", str(out))
    assert code == 0, err
    assert out.exists()


@pytest.mark.parametrize(("backbone", "who"), [
    ("iris", "policy 'iris-ac'"), ("rem", "backbone 'rem'"), ("delta-iris", "backbone 'delta-iris'"),
])
def test_token_backbones_refuse_continuous_actions_in_one_line(capsys, tmp_path: Path, backbone: str, who: str) -> None:
    logdir = tmp_path / "r"
    code, _, err = run_cli(capsys, "run", "--backbone", backbone, "--env", "dmc-walker-walk", "--preset", "tiny",
                           "--logdir", str(logdir), "--no-progress")
    assert code == 2
    assert err.startswith("wmzoo: error: ") and err.count("\n") == 1
    assert who in err and "discrete actions" in err and "dmc-walker-walk" in err
    assert not logdir.exists()
