"""The plugin API: pluggy hook specifications and the entries they return.

A plugin is any importable object (usually a module) with functions marked ``@hookimpl`` named
like the specs below, advertised through an entry point in the group ``wmzoo``::

    # pyproject.toml of a third-party package
    [project.entry-points.wmzoo]
    mybackbone = "my_package.plugin"

    # my_package/plugin.py
    from wmzoo import BackboneEntry, hookimpl

    @hookimpl
    def wmzoo_backbones():
        return [BackboneEntry(name="mybackbone", spec=MySpec, presets=PRESETS, build=MyModel)]

wmzoo's own backbones, environments and policies register through exactly this mechanism.
Hooks are always called with keyword arguments; every hook here collects lists from all plugins.
The registry checks each returned entry against the field annotations of its dataclass below
(:func:`wmzoo.registry.entry_problems`), so they must say what a field holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import gymnasium

    from wmzoo.interfaces import EnvInfo, Policy, WorldModel
    from wmzoo.specs import PolicySpec, WorldModelSpec

PROJECT = "wmzoo"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@dataclass(frozen=True)
class RunPreset:
    """What one ``--preset NAME`` selects: a preset of the world model, of the policy and of the
    trainer, and the backbone's changes to that trainer preset (``schedule``: TrainSpec fields,
    e.g. REM table 3's one update per env step; ``--set`` still wins)."""

    model: str
    policy: str
    train: str
    schedule: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WidthKnob:
    """How a backbone is grown or shrunk to a parameter budget (``wmzoo study``'s ``params:``).

    ``fields`` are dotted fields of the backbone's spec; the first is *the* width. For a width
    ``w``, every field is set to its preset value × ``w / (the preset's width)``, rounded to a
    multiple of ``multiple`` (at least ``multiple``): ``WidthKnob(("retnet.d_model",
    "retnet.d_ff"), multiple=16)`` keeps REM's FFN four times its width and the width a multiple
    of 16 (so of any head count up to 8 with even head sizes). The study searches ``w`` for the
    world-model parameter count closest to the budget."""

    fields: tuple[str, ...]
    multiple: int = 1


@dataclass(frozen=True)
class BehaviourCheck:
    """What :func:`wmzoo.testing.check_behaviour` gives a backbone's ``tiny`` preset to learn the
    reward-sign task: ``updates`` on it and ``overrides`` of the spec (e.g. ``{"optim": {"lr":
    1e-3}}``). Measured by the plugin's author; a model that needs more is not wrong."""

    updates: int = 800
    overrides: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BackboneEntry:
    """A world-model backbone.

    ``presets`` must hold ``tiny``, ``small`` and ``paper`` instances of ``spec``;
    ``build(spec, env)`` returns the :class:`~wmzoo.interfaces.WorldModel` (raising
    :class:`~wmzoo.errors.SpecError` for values it cannot build).

    ``run_presets`` declares the ``--preset`` names beyond the standard ones, each a
    :class:`RunPreset`. Every backbone has, without declaring them, ``tiny``, ``small`` and
    ``paper`` (that preset of the world model, the policy and the trainer) and the trainer's
    variants (``paper-atari100k``: the ``paper`` world model and policy, the trainer's
    ``paper-atari100k``). A declared name adds a run preset (s4wm's ``paper-2d``: its
    ``paper-2d`` world model with the ``paper`` policy and trainer) or replaces a standard one
    (REM's ``paper`` with its own schedule). Nothing is inferred from the spelling of a name.

    ``imitation_policy`` is the policy ``wmzoo run --imitation`` trains by default (``bc``,
    behaviour cloning on the features; a backbone may register its own, as TokenWM does).

    ``width`` (optional) is the :class:`WidthKnob` a parameter-matched study turns; a backbone
    without one runs at its preset's size and the study's report says so.

    ``behaviour_check`` is the budget its ``tiny`` preset needs for the behaviour contract
    (:class:`BehaviourCheck`; default 800 updates at the preset's own rate).

    ``paper_envs`` names the environments (or families, ``atari-*``) its paper evaluates on;
    the extra of the plugin's distribution named like the backbone installs them
    (``pip install "wmzoo[rem]"``), and ``wmzoo list`` says so.

    ``observations`` is the observation specs it models (:class:`~wmzoo.interfaces.EnvInfo`):
    ``"image"`` (the default: a pixel env's one ``image`` entry, what every backbone written before
    the observation spec models; the token backbones' tokenizers) or ``"any"`` (images, vectors and
    dicts of them, e.g. through :mod:`wmzoo.nn.obs`). The registry refuses any other env in one
    line before building, and ``wmzoo list`` shows it.
    """

    name: str
    spec: type[WorldModelSpec]
    presets: Mapping[str, WorldModelSpec]
    build: Callable[[WorldModelSpec, EnvInfo], WorldModel]
    default_policy: str = "dreamer"
    imitation_policy: str = "bc"
    description: str = ""
    paper: str = ""
    run_presets: Mapping[str, RunPreset] = field(default_factory=dict)
    width: WidthKnob | None = None
    paper_envs: tuple[str, ...] = ()
    behaviour_check: BehaviourCheck = field(default_factory=BehaviourCheck)
    observations: str = "image"


@dataclass(frozen=True)
class PolicyEntry:
    """A policy (agent trained in imagination). ``build(spec, feature_shape, env)``."""

    name: str
    spec: type[PolicySpec]
    presets: Mapping[str, PolicySpec]
    build: Callable[[PolicySpec, tuple[int, ...], EnvInfo], Policy]
    description: str = ""


@dataclass(frozen=True)
class EnvMemory:
    """How much memory one environment demands, for reports that sweep it (score against memory
    length: ``wmzoo study report``).

    ``task`` groups the settings of one task (``bsuite-memory-len``: every length of it);
    ``steps`` is how many steps back the information lies at the latest point the task asks for
    it (BSuite Memory Length ``L``: the context bit of step 0 is asked for after ``L`` steps; 0 for
    a fully observable control); ``memoryless`` is the best expected score of any policy without
    memory, by score name (``{"mean_return": 0.0}``: the final observation says nothing of the
    bit), where it is known exactly; the report adds it as a baseline.
    """

    task: str
    steps: int
    memoryless: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class EnvEntry:
    """An environment, or a family of them when ``name`` ends with ``*`` (``minigrid-*``).

    ``make(name, seed=..., size=..., train=...)`` returns a ``gymnasium.Env`` whose observations
    fit the observation spec (:class:`~wmzoo.interfaces.EnvInfo`: uint8 ``(3, size, size)``
    images, float32 vectors, or a dict of them) and whose actions are discrete or continuous in
    ``[-1, 1]``. ``requires`` lists the modules it imports, so availability is known without
    importing them; ``extra`` is the ``pip install "wmzoo[extra]"`` that provides them.
    ``memory(name)``, where given, says how much memory the concrete env ``name`` demands
    (:class:`EnvMemory`, or ``None`` for a setting that is not a memory test); it must not import
    the env's package.
    """

    name: str
    make: Callable[..., gymnasium.Env]
    requires: tuple[str, ...] = ()
    extra: str = ""
    description: str = ""
    aliases: tuple[str, ...] = ()
    examples: tuple[str, ...] = field(default=())  # concrete names of a family, for listings
    memory: Callable[[str], EnvMemory | None] | None = None

    def matches(self, name: str) -> bool:
        if self.name.endswith("*"):
            return name.startswith(self.name[:-1]) and len(name) > len(self.name) - 1
        return name == self.name or name in self.aliases


class WmzooSpecs:
    """Hook specifications (collected by the plugin manager)."""

    @hookspec
    def wmzoo_backbones(self) -> list[BackboneEntry]:  # type: ignore[empty-body]
        """Return the world-model backbones this plugin provides."""

    @hookspec
    def wmzoo_policies(self) -> list[PolicyEntry]:  # type: ignore[empty-body]
        """Return the policies (agents trained in imagination) this plugin provides."""

    @hookspec
    def wmzoo_envs(self) -> list[EnvEntry]:  # type: ignore[empty-body]
        """Return the environments (or families of them) this plugin provides."""



__all__ = [
    "BackboneEntry",
    "EnvEntry",
    "PolicyEntry",
    "RunPreset",
    "WmzooSpecs",
    "hookimpl",
    "hookspec",
]

