"""The ``tssm-xl`` backbone: TSSM on a Transformer-XL with a cache of ``m`` steps (s4wm's TSSM-XL).

Registers through the same ``wmzoo`` entry-point hook a third-party package uses.
"""

from __future__ import annotations

from wmzoo.hookspecs import BackboneEntry, BehaviourCheck, WidthKnob, hookimpl

from .model import PRESETS, RUN_PRESETS, TSSMXL, TSSMXLSpec, TSSMXLWorldModel
from .transformer_xl import TransformerXL


@hookimpl
def wmzoo_backbones() -> list[BackboneEntry]:
    return [
        BackboneEntry(
            name="tssm-xl",
            behaviour_check=BehaviourCheck(updates=800, overrides={"optim": {"lr": 0.001}}),
            observations="any",  # wmzoo.nn.obs: images, vectors and dicts (docs/architecture.md)
            spec=TSSMXLSpec,
            presets=PRESETS,
            build=TSSMXLWorldModel,
            default_policy="dreamer",
            description="TSSM world model on a Transformer-XL (cache of m steps), trained segment by segment",
            paper="Deng et al. 2023 (s4wm) TSSM-XL, appendix D.2, tables 7-8; Chen et al. 2021 (TransDreamer); Dai et al. 2019",
            run_presets=RUN_PRESETS,
            width=WidthKnob(("d_model", "d_ff", "hidden"), multiple=8),
            paper_envs=("distracting-memory-100", "multi-doors-keys-3", "memory-maze-9x9", "two-rooms"),
        )
    ]


__all__ = [
    "PRESETS",
    "RUN_PRESETS",
    "TSSMXL",
    "TSSMXLSpec",
    "TSSMXLWorldModel",
    "TransformerXL",
    "wmzoo_backbones",
]
