"""Skip a MuJoCo test module (Memory Maze, DMC) where its package does not import or OpenGL
cannot render (conftest.py sets ``MUJOCO_GL=egl`` unless set)."""

from __future__ import annotations

import importlib
import os

import pytest


def require_rendering(module: str) -> None:
    """Import ``module`` and render a 16x16 frame with dm_control, or skip the calling module."""
    os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco/dm_control are imported
    try:
        importlib.import_module(module)
        from dm_control import mujoco
    except Exception as err:  # ImportError, or dm_control rejecting MUJOCO_GL
        pytest.skip(f"{module} does not import: {err}", allow_module_level=True)
    try:
        mujoco.Physics.from_xml_string("<mujoco><worldbody/></mujoco>").render(16, 16)
    except Exception:
        pytest.skip(f"no OpenGL rendering with MUJOCO_GL={os.environ['MUJOCO_GL']}", allow_module_level=True)
