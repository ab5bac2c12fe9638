"""Every registered backbone, at its tiny preset, passes the same contract (timm-style)."""

from __future__ import annotations

import pytest

from wmzoo import registry
from wmzoo.interfaces import EnvInfo
from wmzoo.testing import check_backbone


@pytest.mark.parametrize("name", registry.list_backbones())
def test_backbone_contract(name):
    check_backbone(name)


CONTINUOUS = EnvInfo(name="check-continuous-32x32", obs_shape=(3, 32, 32), num_actions=3, discrete=False)


@pytest.mark.parametrize("name", ["rssm", "s4wm", "tssm-xl"])
def test_continuous_action_contract(name):
    """The DreamerV3-family backbones take continuous actions (DMC): float [B, T, A] through
    training, filtering and imagination (their dynamics backpropagation:
    tests/agents/test_dynamics_backprop.py)."""
    check_backbone(name, env=CONTINUOUS)
