"""``benchmarks/tokenizer_channels.py``: what a tokenizer keeps of each channel, on a fake agent
whose tokenizer drops one channel (nothing trained)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from benchmark_scripts import load_script


class DropsChannelZero:
    """Tokens = the frame itself; decoding zeroes channel 0 and lights cell (0, 0) of channel 2."""

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1).long()

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        x = tokens.view(-1, 3, 4, 4).float().clone()
        x[:, 0] = 0
        x[:, 2, 0, 0] = 255
        return x


def test_lit_cells_kept_and_false_lit_per_channel_over_the_newest_frames(tmp_path, monkeypatch):
    """Catches: channels indexed wrong, 'kept' taken over every cell instead of the lit ones, the
    oldest frames read instead of the newest, the decoded scale misread."""
    script = load_script("tokenizer_channels")
    (tmp_path / "replay").mkdir()
    old = np.zeros((5, 3, 4, 4), np.uint8)
    new = np.zeros((4, 3, 4, 4), np.uint8)
    new[:, 0, 1, 1] = 255            # one lit cell per frame in channel 0: dropped by the tokenizer
    new[:, 1, 2, :] = 255            # four in channel 1: kept
    old[:, 1] = 255                  # the old chunk lights all of channel 1: not read with frames=4
    np.savez(tmp_path / "replay" / "000000000-a-000000-5.npz", obs=old)
    np.savez(tmp_path / "replay" / "000000001-a-000001-4.npz", obs=new)
    agent = SimpleNamespace(world_model=SimpleNamespace(tokenizer=DropsChannelZero()), run=SimpleNamespace(backbone="fake"))
    monkeypatch.setattr(script, "load_agent", lambda path: agent)
    result = script.channel_survival(tmp_path, frames=4)
    assert result["frames"] == 4
    assert result["channels"][0] == {"lit_per_frame": 1.0, "kept": 0.0, "false_lit_per_frame": 0.0}
    assert result["channels"][1] == {"lit_per_frame": 4.0, "kept": 1.0, "false_lit_per_frame": 0.0}
    assert result["channels"][2] == {"lit_per_frame": 0.0, "kept": None, "false_lit_per_frame": 1.0}
    assert result["distinct_tokens"] == 2
    assert script.channel_survival(tmp_path, frames=9)["channels"][1]["lit_per_frame"] == round((5 * 16 + 4 * 4) / 9, 3)


def test_a_folder_without_a_run_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    """Catches: a missing checkpoint or an empty replay ending in a traceback instead of one line."""
    import sys

    script = load_script("tokenizer_channels")
    monkeypatch.setattr(sys, "argv", ["tokenizer_channels.py", str(tmp_path)])
    with pytest.raises(SystemExit) as stop:
        script.main()
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("tokenizer_channels: error: ") and err.count("\n") == 1
