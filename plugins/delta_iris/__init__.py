"""The ``delta-iris`` backbone (Δ-IRIS: a context-aware autoencoder of Δ-tokens and a GPT over
I-tokens, actions and Δ-tokens) and its actor-critic policy ``delta-iris-ac``.

Registers through the same ``wmzoo`` entry-point hook a third-party package uses.
"""

from __future__ import annotations

from wmzoo.hookspecs import BackboneEntry, BehaviourCheck, PolicyEntry, WidthKnob, hookimpl

from .actor_critic import PRESETS as POLICY_PRESETS
from .actor_critic import DeltaIrisActorCritic, DeltaIrisActorCriticSpec
from .model import PRESETS, RUN_PRESETS, DeltaIrisSpec, DeltaIrisWorldModel
from .tokenizer import ATARI, DeltaTokenizer, DeltaTokenizerSpec, FrameCnnSpec, FrameDecoder, FrameEncoder


@hookimpl
def wmzoo_backbones() -> list[BackboneEntry]:
    return [
        BackboneEntry(
            name="delta-iris",
            behaviour_check=BehaviourCheck(updates=200),
            observations="image",  # the VQ tokenizer reads one image (the default, said for clarity)
            spec=DeltaIrisSpec,
            presets=PRESETS,
            build=DeltaIrisWorldModel,
            default_policy="delta-iris-ac",
            description="Δ-IRIS: K = 4 context-aware Δ-tokens per frame and a GPT over I-tokens, actions "
            "and Δ-tokens, K calls per imagined step",
            paper="Micheli et al. 2024 (Δ-IRIS), section 2, appendices A-C",
            run_presets=RUN_PRESETS,
            width=WidthKnob(("embed_dim",), multiple=8),
            paper_envs=("crafter", "atari-*"),
        )
    ]


@hookimpl
def wmzoo_policies() -> list[PolicyEntry]:
    return [
        PolicyEntry(
            name="delta-iris-ac",
            spec=DeltaIrisActorCriticSpec,
            presets=POLICY_PRESETS,
            build=DeltaIrisActorCritic,
            description="Δ-IRIS actor-critic: CNN + LSTM on frames, REINFORCE with a baseline on "
            "λ-returns of an EMA target critic (two-hot on Crafter), LSTM burn-in on real frames",
        )
    ]


__all__ = [
    "ATARI",
    "POLICY_PRESETS",
    "PRESETS",
    "RUN_PRESETS",
    "DeltaIrisActorCritic",
    "DeltaIrisActorCriticSpec",
    "DeltaIrisSpec",
    "DeltaIrisWorldModel",
    "DeltaTokenizer",
    "DeltaTokenizerSpec",
    "FrameCnnSpec",
    "FrameDecoder",
    "FrameEncoder",
    "wmzoo_backbones",
    "wmzoo_policies",
]
