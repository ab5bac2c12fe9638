"""Every registered backbone, at its tiny preset, passes the same contract (timm-style)."""

from __future__ import annotations

import pytest

from wmzoo import registry
from wmzoo.testing import check_backbone


@pytest.mark.parametrize("name", registry.list_backbones())
def test_backbone_contract(name):
    check_backbone(name)
