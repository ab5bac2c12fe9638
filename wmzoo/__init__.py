"""wmzoo: interchangeable world-model backbones for model-based reinforcement learning."""

from wmzoo.errors import MissingDependencyError, SpecError, UnknownNameError, WmzooError
from wmzoo.hookspecs import BackboneEntry, BehaviourCheck, EnvEntry, EnvMemory, PolicyEntry, RunPreset, WidthKnob, hookimpl

__version__ = "0.1.0"

__all__ = [
    "BackboneEntry",
    "BehaviourCheck",
    "EnvEntry",
    "EnvMemory",
    "MissingDependencyError",
    "PolicyEntry",
    "RunPreset",
    "SpecError",
    "UnknownNameError",
    "WidthKnob",
    "WmzooError",
    "__version__",
    "hookimpl",
]
