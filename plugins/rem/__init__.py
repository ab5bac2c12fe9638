"""The ``rem`` backbone (RetNet world model with Parallel Observation Prediction) and its
latent-space actor-critic ``rem-ac`` (Cohen et al. 2024).

Registers through the same ``wmzoo`` entry-point hooks a third-party package uses.
"""

from __future__ import annotations

from wmzoo.hookspecs import BackboneEntry, BehaviourCheck, PolicyEntry, WidthKnob, hookimpl

from .model import PRESETS, RUN_PRESETS, REMSpec, REMWorldModel
from .policy import POLICY_PRESETS, REMActorCritic, REMActorCriticSpec


@hookimpl
def wmzoo_backbones() -> list[BackboneEntry]:
    return [
        BackboneEntry(
            name="rem",
            behaviour_check=BehaviourCheck(updates=200),
            observations="image",  # the VQ tokenizer reads one image (the default, said for clarity)
            spec=REMSpec,
            presets=PRESETS,
            build=REMWorldModel,
            default_policy="rem-ac",
            description="REM: VQ-VAE tokens, RetNet world model with Parallel Observation Prediction "
            "(2 world-model calls per imagined step)",
            paper="Cohen, Wang, Kang, Mannor 2024 (REM), section 2, algorithms 1-7, tables 2-7",
            run_presets=RUN_PRESETS,
            width=WidthKnob(("retnet.d_model", "retnet.d_ff", "tokenizer.embed_dim"), multiple=16),
            paper_envs=("atari-*",),
        )
    ]


@hookimpl
def wmzoo_policies() -> list[PolicyEntry]:
    return [
        PolicyEntry(
            name="rem-ac",
            spec=REMActorCriticSpec,
            presets=POLICY_PRESETS,
            build=REMActorCritic,
            description="REM's action-conditioned actor-critic on token code vectors (CNN + LSTM, "
            "REINFORCE with value baseline on λ-returns)",
        )
    ]


__all__ = [
    "POLICY_PRESETS",
    "PRESETS",
    "RUN_PRESETS",
    "REMActorCritic",
    "REMActorCriticSpec",
    "REMSpec",
    "REMWorldModel",
    "wmzoo_backbones",
    "wmzoo_policies",
]
