"""`wmzoo run --backbone rem --env atari-pong --preset tiny` end to end (slow: ~1-2 CPU minutes)."""

from __future__ import annotations

import pytest
from PIL import Image

from wmzoo.cli import main
from wmzoo.train.checkpoint import load_checkpoint


@pytest.mark.slow
def test_rem_tiny_atari_run_writes_imagination_gif(capsys, tmp_path):
    pytest.importorskip("ale_py")
    logdir = tmp_path / "rem"
    code = main(["run", "--backbone", "rem", "--env", "atari-pong", "--preset", "tiny", "--steps", "230",
                 "--logdir", str(logdir), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    tree = load_checkpoint(logdir / "checkpoint.safetensors")
    assert tree["progress"]["env_steps"] == 230 and tree["progress"]["updates"] > 0
    assert tree["run"]["policy_name"] in ("", "rem-ac")
    gif = Image.open(logdir / "imagination.gif")
    assert gif.n_frames >= 16  # 8 observed frames, then frames decoded from predicted tokens
