"""``gru-wm``: an example third-party wmzoo backbone, registered through the ``wmzoo`` entry point
of this package's ``pyproject.toml`` exactly as wmzoo's bundled backbones are."""

from __future__ import annotations

from wmzoo import BackboneEntry, hookimpl

from .model import PRESETS, GRUSpec, GRUWorldModel


@hookimpl
def wmzoo_backbones() -> list[BackboneEntry]:
    return [
        BackboneEntry(
            name="gru-wm",
            spec=GRUSpec,
            presets=PRESETS,
            build=GRUWorldModel,
            default_policy="dreamer",
            description="deterministic GRU world model (example third-party backbone)",
            paper="none (after PlaNet's deterministic path, Hafner et al. 2019, and "
            "World Models, Ha & Schmidhuber 2018)",
        )
    ]


__all__ = ["PRESETS", "GRUSpec", "GRUWorldModel", "wmzoo_backbones"]
