"""``wmzoo run --backbone iris --env atari-pong --preset tiny`` end to end: collect, tokenizer,
world model, actor-critic, checkpoint and the imagination GIF (slow: about a CPU minute)."""

from __future__ import annotations

import pytest
from PIL import Image

from wmzoo.cli import main
from wmzoo.train.checkpoint import load_checkpoint

pytest.importorskip("ale_py")


@pytest.mark.slow
def test_tiny_atari_pong_run(capsys, tmp_path) -> None:
    logdir = tmp_path / "iris"
    code = main(["run", "--backbone", "iris", "--env", "atari-pong", "--preset", "tiny",
                 "--steps", "300", "--logdir", str(logdir), "--no-progress"])
    _, err = capsys.readouterr()
    assert code == 0, err
    tree = load_checkpoint(logdir / "checkpoint.safetensors")
    assert tree["progress"]["env_steps"] == 300 and tree["progress"]["updates"] > 0
    assert set(tree["world_model_optim"]) == {"tokenizer", "world_model"}
    assert set(tree["policy_optim"]) == {"actor_critic"}
    gif = Image.open(logdir / "imagination.gif")
    assert gif.n_frames >= 16 and gif.size[0] >= 64
