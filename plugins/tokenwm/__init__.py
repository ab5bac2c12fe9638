"""The ``tokenwm`` backbone (TokenWM: a set of tokens as the recurrent latent state, a memory
bank, a perceiver decoder) and its policies: ``tokenwm-bc`` (imitation, the paper's) and
``tokenwm-ac`` (actor-critic in imagination).

Registers through the same ``wmzoo`` entry-point hook a third-party package uses.
"""

from __future__ import annotations

from wmzoo.hookspecs import BackboneEntry, BehaviourCheck, PolicyEntry, RunPreset, WidthKnob, hookimpl

from .blocks import Attention, CrossBlock, FeedForward, FiLM, FiLMBlock, PerceiverReadout, ViTEncoder, push
from .model import PRESETS, TokenWMSpec, TokenWMWorldModel
from .policy import IMITATION as IMITATION_PRESETS
from .policy import PRESETS as POLICY_PRESETS
from .policy import TokenWMImitationPolicy, TokenWMImitationSpec, TokenWMPolicy, TokenWMPolicySpec


@hookimpl
def wmzoo_backbones() -> list[BackboneEntry]:
    return [
        BackboneEntry(
            name="tokenwm",
            behaviour_check=BehaviourCheck(updates=600, overrides={"optim": {"lr": 0.001}}),
            observations="any",  # wmzoo.nn.obs: images, vectors and dicts (docs/architecture.md)
            spec=TokenWMSpec,
            presets=PRESETS,
            build=TokenWMWorldModel,
            default_policy="tokenwm-ac",
            imitation_policy="tokenwm-bc",
            description="TokenWM: N_h state tokens, FiLM prior, cross-attention posterior, memory bank of "
            "past states, perceiver decoder; deterministic (L2 information bottleneck)",
            paper="Zhai, Zhang, Navab, Recurrent World Model with Tokenized Latent States (TokenWM), section 3, table 2",
            # table 2: 16,000 training steps (imitation updates: wmzoo run --imitation DIR)
            run_presets={"paper-imitation": RunPreset(model="paper", policy="paper", train="paper",
                                                      schedule={"steps": 16_000})},
            width=WidthKnob(("dim", "encoder_dim", "decoder_hidden", "head_hidden"), multiple=8),
            paper_envs=("minigrid-memory-s7", "babyai-goto-local"),
        )
    ]


@hookimpl
def wmzoo_policies() -> list[PolicyEntry]:
    return [
        PolicyEntry(
            name="tokenwm-ac",
            spec=TokenWMPolicySpec,
            presets=POLICY_PRESETS,
            build=TokenWMPolicy,
            description="DreamerV3's actor-critic learning with TokenWM's policy network (3.6): perceiver "
            "queries over the state tokens h*, then MLPs",
        ),
        PolicyEntry(
            name="tokenwm-bc",
            spec=TokenWMImitationSpec,
            presets=IMITATION_PRESETS,
            build=TokenWMImitationPolicy,
            description="behaviour cloning with TokenWM's policy network (3.6), instruction-conditioned, "
            "trained jointly with the world model (eq. 1; wmzoo run --imitation)",
        ),
    ]


__all__ = [
    "IMITATION_PRESETS",
    "POLICY_PRESETS",
    "PRESETS",
    "Attention",
    "CrossBlock",
    "FeedForward",
    "FiLM",
    "FiLMBlock",
    "PerceiverReadout",
    "TokenWMImitationPolicy",
    "TokenWMImitationSpec",
    "TokenWMPolicy",
    "TokenWMPolicySpec",
    "TokenWMSpec",
    "TokenWMWorldModel",
    "ViTEncoder",
    "push",
    "wmzoo_backbones",
    "wmzoo_policies",
]
