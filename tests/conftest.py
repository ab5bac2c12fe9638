"""Shared test settings: one torch thread (2-core CI machines; threads that oversubscribe the
cores slow torch down tenfold), MKL without its buffer cache, and software rendering for
Memory Maze."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("MKL_DISABLE_FAST_MM", "1")  # as the CLI does (see wmzoo/cli.py main)

import torch  # noqa: E402

torch.set_num_threads(1)
