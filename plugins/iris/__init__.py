"""The ``iris`` backbone (IRIS: a VQ-VAE tokenizer and a GPT imagining token by token) and its
actor-critic policy ``iris-ac``.

Registers through the same ``wmzoo`` entry-point hook a third-party package uses.
"""

from __future__ import annotations

from wmzoo.hookspecs import BackboneEntry, BehaviourCheck, PolicyEntry, WidthKnob, hookimpl

from .actor_critic import PRESETS as POLICY_PRESETS
from .actor_critic import IrisActorCritic, IrisActorCriticSpec
from .model import PRESETS, RUN_PRESETS, IrisSpec, IrisWorldModel


@hookimpl
def wmzoo_backbones() -> list[BackboneEntry]:
    return [
        BackboneEntry(
            name="iris",
            behaviour_check=BehaviourCheck(updates=200),
            observations="image",  # the VQ tokenizer reads one image (the default, said for clarity)
            spec=IrisSpec,
            presets=PRESETS,
            build=IrisWorldModel,
            default_policy="iris-ac",
            description="IRIS: VQ-VAE tokens and a causal GPT with a KV cache, K + 1 calls per imagined step",
            paper="Micheli et al. 2023 (IRIS), section 2, appendices A-B; REM (Cohen et al. 2024) appendix A.4 for rem-config",
            run_presets=RUN_PRESETS,
            width=WidthKnob(("embed_dim",), multiple=8),
            paper_envs=("atari-*",),
        )
    ]


@hookimpl
def wmzoo_policies() -> list[PolicyEntry]:
    return [
        PolicyEntry(
            name="iris-ac",
            spec=IrisActorCriticSpec,
            presets=POLICY_PRESETS,
            build=IrisActorCritic,
            description="IRIS actor-critic: CNN + LSTM on reconstructed frames, REINFORCE with a value "
            "baseline on lambda-returns, entropy bonus, LSTM burn-in on real context",
        )
    ]


__all__ = [
    "POLICY_PRESETS",
    "PRESETS",
    "RUN_PRESETS",
    "IrisActorCritic",
    "IrisActorCriticSpec",
    "IrisSpec",
    "IrisWorldModel",
    "wmzoo_backbones",
    "wmzoo_policies",
]
