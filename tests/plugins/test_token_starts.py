"""The token backbones' actor-critic starts (``imagination_starts``, IRIS, REM and Δ-IRIS): each
segment's last frame, weighted by whether an action can follow it."""

from __future__ import annotations

import pytest
import torch

from wmzoo.bench.harness import synthetic_batch
from wmzoo.interfaces import EnvInfo
from wmzoo.registry import build_world_model, world_model_spec

ENV = EnvInfo(name="t", obs_shape=(3, 16, 16), num_actions=3)


@pytest.mark.parametrize("backbone", ["iris", "rem", "delta-iris"])
def test_an_imagination_start_at_a_terminal_observation_has_weight_zero(backbone: str) -> None:
    """Row 1's last frame is terminal (no action follows it); row 2's follows a terminal row but
    starts a new episode. Catches: the start's continue read at the frame before the start, across
    the episode boundary, or not at all (every start imagined with weight 1)."""
    torch.manual_seed(0)
    wm = build_world_model(backbone, world_model_spec(backbone, "tiny", None), ENV).eval()
    segments = synthetic_batch(ENV, 3, 6, torch.device("cpu"))
    segments.is_first[:] = False
    segments.terminal[:] = False
    segments.terminal[1:, 4] = True
    segments.is_first[2, 5] = True
    with torch.no_grad():
        _, cont, _ = wm.imagination_starts(segments)
    assert cont.tolist() == [1.0, 0.0, 1.0]
