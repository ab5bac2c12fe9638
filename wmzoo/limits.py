"""Bounds on command-line values that are not fields of a spec (a spec field's bounds live on the
field: :func:`wmzoo.specs.check_option` reads them). Kept free of heavy imports: ``wmzoo.cli``
reads them before it imports torch."""

from __future__ import annotations

TEMPERATURES = (1e-3, 1e3)
"""The sampling temperatures ``wmzoo eval --temperature`` and a study's ``eval.temperature`` take:
logits divided by less overflow float32 (and sample as the greedy action would anyway); leave the
temperature out for greedy actions."""

IMAGINE_FRAMES = 10_000
"""The most frames ``wmzoo imagine`` plays and draws (``--context + --horizon``); also the bound
of a run's ``train.gif_horizon`` and of a study's ``eval.context``."""
