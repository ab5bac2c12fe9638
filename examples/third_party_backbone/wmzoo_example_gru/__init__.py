"""``gru-wm``: an example third-party wmzoo backbone, registered through the ``wmzoo`` entry point
of this package's ``pyproject.toml`` exactly as wmzoo's bundled backbones are."""

from __future__ import annotations

from wmzoo import BackboneEntry, BehaviourCheck, hookimpl

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
            # the reward-sign behaviour check (wmzoo.testing.check_behaviour) at the tiny preset:
            # measured to learn in 800 updates at lr 1e-3, not at the preset's own 3e-4
            behaviour_check=BehaviourCheck(updates=800, overrides={"optim": {"lr": 1e-3}}),
        )
    ]


__all__ = ["PRESETS", "GRUSpec", "GRUWorldModel", "wmzoo_backbones"]
