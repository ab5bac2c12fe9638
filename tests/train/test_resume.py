"""``wmzoo run --resume``: the same resolver as a new run; ``--set`` applies to the fields that may
change on resume and is refused, before anything is written, for every other."""

from __future__ import annotations

import hashlib

import pytest
import yaml

from wmzoo.cli import main
from wmzoo.train.checkpoint import load_checkpoint

PREFILL = 200  # tiny


def _cli(capsys, *argv: str) -> tuple[int, str]:
    code = main([*argv, "--no-progress"] if argv[0] == "run" else list(argv))
    return code, capsys.readouterr().err


def _snapshot(folder) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("resume") / "run"
    code = main(["run", "--backbone", "rssm", "--env", "minigrid-empty-5x5", "--preset", "tiny",
                 "--steps", str(PREFILL + 4), "--logdir", str(logdir), "--no-progress"])
    assert code == 0
    return logdir


def test_set_train_steps_continues_to_the_new_target_and_is_recorded(capsys, trained):
    """Catches --set being ignored on resume (the run would stop at its old step count) and a
    run.yaml left at the old target (a second --resume would stop early)."""
    code, err = _cli(capsys, "run", "--logdir", str(trained), "--resume", "--set", f"train.steps={PREFILL + 9}")
    assert code == 0, err
    assert load_checkpoint(trained / "checkpoint.safetensors")["progress"]["env_steps"] == PREFILL + 9
    assert yaml.safe_load((trained / "run.yaml").read_text())["train"]["steps"] == PREFILL + 9
    code, err = _cli(capsys, "run", "--logdir", str(trained), "--resume", "--steps", str(PREFILL + 12))
    assert code == 0, err
    assert load_checkpoint(trained / "checkpoint.safetensors")["progress"]["env_steps"] == PREFILL + 12


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # the model's shape is in the checkpoint: silently applying it would fail or mislead
        (["--set", "model.deter=32"], "--set model.deter=32: cannot change on --resume"),
        (["--set", "policy.horizon=3"], "--set policy.horizon=3: cannot change on --resume"),
        (["--set", "train.train_ratio=8"], "--set train.train_ratio=8: cannot change on --resume"),
        (["--set", "seed=4"], "--set seed=4: cannot change on --resume"),
        (["--set", "train.stepz=9"], "--set train.stepz=9: unknown field"),
        (["--set", "train.steps=0"], "train.steps: Input should be greater than or equal to 1"),
        (["--env", "minigrid-empty-8x8"], "--env cannot change on resume"),
        (["--preset", "small", "--seed", "3"], "--preset, --seed cannot change on resume"),
    ],
)
def test_a_field_fixed_by_the_checkpoint_is_one_line_and_writes_nothing(capsys, trained, argv, message):
    """Catches the old resume path that ignored --set (and --env, --preset) silently, and a
    refusal that comes after the run folder was touched."""
    before = _snapshot(trained)
    code, err = _cli(capsys, "run", "--logdir", str(trained), "--resume", *argv)
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert _snapshot(trained) == before


def test_resume_without_a_run_is_one_line(capsys, tmp_path):
    code, err = _cli(capsys, "run", "--logdir", str(tmp_path), "--resume")
    assert code == 2 and "holds no checkpoint.safetensors" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []
