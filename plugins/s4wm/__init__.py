"""The ``s4wm`` backbone: S4WM, the S4-based world model of Deng et al. (2023).

Registers through the same ``wmzoo`` entry-point hook a third-party package uses.
"""

from __future__ import annotations

from wmzoo.hookspecs import BackboneEntry, BehaviourCheck, WidthKnob, hookimpl

from .model import PRESETS, RUN_PRESETS, S4WMSpec, S4WMWorldModel
from .s4 import S4Block, S4Blocks, S4DLayer


@hookimpl
def wmzoo_backbones() -> list[BackboneEntry]:
    return [
        BackboneEntry(
            name="s4wm",
            behaviour_check=BehaviourCheck(updates=800, overrides={"optim": {"lr": 0.001}}),
            observations="any",  # wmzoo.nn.obs: images, vectors and dicts (docs/architecture.md)
            spec=S4WMSpec,
            presets=PRESETS,
            build=S4WMWorldModel,
            default_policy="dreamer",
            description="S4WM: stack of S4 blocks (diagonal S4D) over 32x32 categorical latents, "
            "parallel training, recurrent imagination",
            paper="Deng et al. 2023, Facing Off World Model Backbones (s4wm), section 4, appendix B.1, tables 7-8",
            run_presets=RUN_PRESETS,
            width=WidthKnob(("d_model", "d_ff", "hidden")),
            paper_envs=("distracting-memory-100", "multi-doors-keys-3", "memory-maze-9x9", "two-rooms"),
        )
    ]


__all__ = [
    "PRESETS",
    "RUN_PRESETS",
    "S4Block",
    "S4Blocks",
    "S4DLayer",
    "S4WMSpec",
    "S4WMWorldModel",
    "wmzoo_backbones",
]
