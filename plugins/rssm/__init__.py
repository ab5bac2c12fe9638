"""The ``rssm`` backbone: DreamerV3's RSSM with truncated BPTT (the s4wm paper's RSSM-TBTT).

Registers through the same ``wmzoo`` entry-point hook a third-party package uses.
"""

from __future__ import annotations

from wmzoo.hookspecs import BackboneEntry, BehaviourCheck, WidthKnob, hookimpl

from .model import (
    PRESETS,
    RUN_PRESETS,
    RSSM,
    LayerNormGRUCell,
    RSSMSpec,
    RSSMWorldModel,
)


@hookimpl
def wmzoo_backbones() -> list[BackboneEntry]:
    return [
        BackboneEntry(
            name="rssm",
            behaviour_check=BehaviourCheck(updates=800, overrides={"optim": {"lr": 0.001}}),
            observations="any",  # wmzoo.nn.obs: images, vectors and dicts (docs/architecture.md)
            spec=RSSMSpec,
            presets=PRESETS,
            build=RSSMWorldModel,
            default_policy="dreamer",
            description="DreamerV3 RSSM (LayerNorm GRU, 32x32 categorical latents) with truncated BPTT",
            paper="Hafner et al. 2023 (DreamerV3); RSSM-TBTT baseline of Deng et al. 2023 (s4wm), tables 7-8",
            run_presets=RUN_PRESETS,
            width=WidthKnob(("deter", "hidden")),
            # the baseline of the s4wm and TokenWM papers: their memory tasks
            paper_envs=("minigrid-memory-s7", "distracting-memory-100", "multi-doors-keys-3", "memory-maze-9x9",
                        "two-rooms"),
        )
    ]


__all__ = [
    "PRESETS",
    "RUN_PRESETS",
    "RSSM",
    "LayerNormGRUCell",
    "RSSMSpec",
    "RSSMWorldModel",
    "wmzoo_backbones",
]
