"""The plugin registry: find plugins through entry points, list and create things by name.

Like timm's ``list_models``/``create_model`` on top of pluggy's plugin manager (as pytest and
datasette load theirs)::

    from wmzoo import registry
    registry.list_backbones("s4*")            # names, wildcard filter
    wm = registry.create_world_model("rssm", env_info, preset="tiny", overrides={"deter": 128})

Every entry point in the group ``wmzoo`` is loaded in its own ``try``: a plugin that fails to
import is recorded (name, distribution, reason, install hint) and listed as unavailable, and every
other plugin keeps working. ``WMZOO_DISABLE_PLUGIN_AUTOLOAD=1`` loads no entry points;
``WMZOO_BLOCK_PLUGINS=a,b`` skips the named ones.
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib.util
import os
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any

import pluggy

from wmzoo import hookspecs
from wmzoo.errors import MissingDependencyError, SpecError, UnknownNameError, WmzooError
from wmzoo.hookspecs import BackboneEntry, EnvEntry, PolicyEntry
from wmzoo.interfaces import EnvInfo, Policy, WorldModel
from wmzoo.specs import PolicySpec, WorldModelSpec, from_preset

ENTRY_POINT_GROUP = "wmzoo"


@dataclass(frozen=True)
class PluginFailure:
    """An entry point that could not be loaded."""

    name: str
    dist: str
    reason: str

    @property
    def hint(self) -> str:
        if self.dist == "wmzoo":
            return f'pip install "wmzoo[{self.name}]"'
        if self.dist:
            return f"pip install --upgrade {self.dist}"
        return f"check the package that provides the entry point '{self.name}'"


@dataclass(frozen=True)
class Listing:
    """One row of ``wmzoo list``."""

    name: str
    kind: str  # "backbone" | "env" | "policy"
    available: bool
    reason: str = ""
    description: str = ""


class Registry:
    """A pluggy plugin manager plus the tables built from its hooks."""

    def __init__(self, pm: pluggy.PluginManager, failures: list[PluginFailure]) -> None:
        self.pm = pm
        self.failures = failures
        self._tables: dict[str, dict[str, Any]] | None = None

    # -- building -----------------------------------------------------------------------
    def register(self, plugin: object, name: str | None = None) -> None:
        """Register an in-process plugin object (tests, notebooks); tables are rebuilt."""
        self.pm.register(plugin, name=name)
        self._tables = None

    def unregister(self, plugin: object) -> None:
        self.pm.unregister(plugin)
        self._tables = None

    def _collect(self, hook_name: str) -> dict[str, Any]:
        table: dict[str, Any] = {}
        hook = getattr(self.pm.hook, hook_name)
        for impl in hook.get_hookimpls():  # registration order: later plugins win
            for entry in impl.function() or []:
                if entry.name in table:
                    warnings.warn(
                        f"{hook_name}: '{entry.name}' registered twice; plugin "
                        f"'{impl.plugin_name}' replaces the earlier one",
                        stacklevel=2,
                    )
                table[entry.name] = entry
        return table

    @property
    def tables(self) -> dict[str, dict[str, Any]]:
        if self._tables is None:
            self._tables = {
                "backbone": self._collect("wmzoo_backbones"),
                "policy": self._collect("wmzoo_policies"),
                "env": self._collect("wmzoo_envs"),
            }
        return self._tables

    # -- lookup -------------------------------------------------------------------------
    def backbone(self, name: str) -> BackboneEntry:
        return self._lookup("backbone", name)

    def policy(self, name: str) -> PolicyEntry:
        return self._lookup("policy", name)

    def env(self, name: str) -> EnvEntry:
        for entry in self.tables["env"].values():
            if entry.matches(name):
                return entry
        raise UnknownNameError(_unknown("environment", name, self.env_names()))

    def _lookup(self, kind: str, name: str) -> Any:
        table = self.tables[kind]
        if name in table:
            return table[name]
        for failure in self.failures:
            if failure.name == name:
                raise MissingDependencyError(
                    f"{kind} '{name}' is unavailable: {failure.reason}; try: {failure.hint}"
                )
        raise UnknownNameError(_unknown(kind, name, list(table)))

    def env_names(self) -> list[str]:
        names: list[str] = []
        for entry in self.tables["env"].values():
            names.extend(entry.examples if entry.name.endswith("*") else (entry.name, *entry.aliases))
        return names

    # -- listing ------------------------------------------------------------------------
    def listings(self) -> list[Listing]:
        rows: list[Listing] = []
        for kind in ("backbone", "env", "policy"):
            for name, entry in sorted(self.tables[kind].items()):
                ok, reason = (True, "")
                if kind == "env":
                    ok, reason = env_availability(entry)
                rows.append(Listing(name, kind, ok, reason, entry.description))
                if kind == "env":  # a family's named examples, and aliases, are runnable names too
                    for other in (*entry.examples, *entry.aliases):
                        rows.append(Listing(other, kind, ok, reason, f"see {name}"))
        for failure in self.failures:
            reason = f"{failure.reason}; try: {failure.hint}"
            rows.append(Listing(failure.name, "backbone", False, reason))
        return rows


def env_availability(entry: EnvEntry) -> tuple[bool, str]:
    """Whether the modules an env needs are importable, without importing them."""
    for module in entry.requires:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return False, f'missing module {module}: pip install "wmzoo[{entry.extra}]"'
    return True, ""


def _unknown(kind: str, name: str, known: Iterable[str]) -> str:
    known = sorted(set(known))
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    if close:
        return f"unknown {kind} '{name}'; did you mean: {', '.join(close)}?"
    listed = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
    return f"unknown {kind} '{name}'; known: {listed} (see: wmzoo list)"


def build_registry(
    autoload: bool | None = None, block: Iterable[str] | None = None
) -> Registry:
    """Create a plugin manager and load every entry point of the group ``wmzoo``."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs.WmzooSpecs)
    if autoload is None:
        autoload = os.environ.get("WMZOO_DISABLE_PLUGIN_AUTOLOAD", "") in ("", "0")
    if block is None:
        block = [b for b in os.environ.get("WMZOO_BLOCK_PLUGINS", "").split(",") if b]
    blocked = set(block)
    failures: list[PluginFailure] = []
    if autoload:
        for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            if ep.name in blocked or pm.get_plugin(ep.name) is not None:
                continue
            dist = ep.dist.name if ep.dist is not None else ""
            try:
                plugin = ep.load()
                pm.register(plugin, name=ep.name)
            except Exception as exc:  # noqa: BLE001 - any import error makes it unavailable
                first = str(exc).splitlines()[0] if str(exc) else ""
                failures.append(PluginFailure(ep.name, dist, f"{type(exc).__name__}: {first}"))
    return Registry(pm, failures)


@lru_cache(maxsize=1)
def default_registry() -> Registry:
    """The process-wide registry, built on first use (never at import)."""
    return build_registry()


# --------------------------------------------------------------------------- convenience API


def list_backbones(pattern: str = "*") -> list[str]:
    return fnmatch.filter(sorted(default_registry().tables["backbone"]), pattern)


def list_policies(pattern: str = "*") -> list[str]:
    return fnmatch.filter(sorted(default_registry().tables["policy"]), pattern)


def list_envs(pattern: str = "*") -> list[str]:
    return fnmatch.filter(sorted(default_registry().env_names()), pattern)


def world_model_spec(
    backbone: str, preset_name: str = "tiny", overrides: Mapping[str, Any] | None = None
) -> WorldModelSpec:
    """The backbone's preset with nested ``overrides`` applied and validated."""
    entry = default_registry().backbone(backbone)
    return from_preset(  # type: ignore[return-value]
        entry.spec, entry.presets, preset_name, overrides or {}, f"backbone '{backbone}'", "model"
    )


def policy_spec(
    policy: str, preset_name: str = "tiny", overrides: Mapping[str, Any] | None = None
) -> PolicySpec:
    """The policy's preset with nested ``overrides`` applied and validated."""
    entry = default_registry().policy(policy)
    return from_preset(  # type: ignore[return-value]
        entry.spec, entry.presets, preset_name, overrides or {}, f"policy '{policy}'", "policy"
    )


# What the core reads from every built world model besides its methods (see WorldModel).
WORLD_MODEL_ATTRIBUTES = ("spec", "env", "feature_shape", "stateful_training")


def build_world_model(backbone: str, spec: WorldModelSpec, env: EnvInfo) -> WorldModel:
    """The backbone's world model for a validated ``spec``: the one place the core builds one.

    A :class:`~wmzoo.errors.SpecError` from the plugin (values it cannot build), or any other
    exception of its ``build``, becomes one line naming the backbone; so does a world model that
    lacks an attribute the core reads."""
    entry = default_registry().backbone(backbone)
    what = f"backbone '{backbone}'"
    wm = _build(what, entry.build, spec, env)
    missing = [name for name in WORLD_MODEL_ATTRIBUTES if not hasattr(wm, name)]
    if not isinstance(wm, WorldModel) or missing:
        problem = f"is a {type(wm).__name__}" if not isinstance(wm, WorldModel) else f"lacks {', '.join(missing)}"
        raise WmzooError(f"{what}: its build returned a world model that {problem}; a world model "
                         "subclasses wmzoo.interfaces.WorldModel and sets spec, env and feature_shape "
                         "in __init__ (see CONTRIBUTING.md)")
    shape = wm.feature_shape
    if not (isinstance(shape, tuple) and shape and all(isinstance(d, int) and d > 0 for d in shape)):
        raise WmzooError(f"{what}: feature_shape must be a non-empty tuple of positive ints, got {shape!r}")
    return wm


def build_policy(policy: str, spec: PolicySpec, feature_shape: tuple[int, ...], env: EnvInfo) -> Policy:
    """The policy for a validated ``spec`` on world-model features of ``feature_shape``."""
    entry = default_registry().policy(policy)
    built = _build(f"policy '{policy}'", entry.build, spec, feature_shape, env)
    if not isinstance(built, Policy):
        raise WmzooError(f"policy '{policy}': its build returned a {type(built).__name__}, "
                         "not a wmzoo.interfaces.Policy")
    return built


def _build(what: str, build: Callable[..., Any], *args: Any) -> Any:
    try:
        return build(*args)
    except SpecError as exc:  # named once: a plugin's message may already say whose it is
        raise SpecError(str(exc) if str(exc).startswith(what) else f"{what}: {exc}") from None
    except WmzooError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's build may fail in any way; one line
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise WmzooError(
            f"{what} could not be built from these values ({type(exc).__name__}: {first}); "
            "check the --set values against `wmzoo spec`"
        ) from exc


def create_world_model(
    backbone: str,
    env: EnvInfo,
    preset: str = "tiny",
    overrides: Mapping[str, Any] | None = None,
) -> WorldModel:
    """Build a backbone's world model by name (timm's ``create_model``)."""
    return build_world_model(backbone, world_model_spec(backbone, preset, overrides), env)


def create_policy(
    policy: str,
    feature_shape: tuple[int, ...],
    env: EnvInfo,
    preset: str = "tiny",
    overrides: Mapping[str, Any] | None = None,
) -> Policy:
    """Build a policy by name for world-model features of ``feature_shape``."""
    return build_policy(policy, policy_spec(policy, preset, overrides), feature_shape, env)


def make_env(name: str, *, seed: int | None = None, size: int = 64, train: bool = True) -> Any:
    """A ``gymnasium.Env`` by wmzoo name (``atari-pong``, ``crafter``, ``minigrid-empty-5x5``)."""
    entry = default_registry().env(name)
    ok, reason = env_availability(entry)
    if not ok:
        raise MissingDependencyError(f"environment '{name}' is unavailable: {reason}")
    try:
        return entry.make(name, seed=seed, size=size, train=train)
    except WmzooError:
        raise
    except ImportError as exc:
        raise MissingDependencyError(
            f"environment '{name}' failed to import {exc.name or exc}: "
            f'pip install "wmzoo[{entry.extra}]"'
        ) from None


def env_info(env: Any, name: str) -> EnvInfo:
    """Shapes of a made env, for building models."""
    space = env.action_space
    obs_shape = tuple(env.observation_space.shape)
    if hasattr(space, "n"):
        return EnvInfo(name=name, obs_shape=obs_shape, num_actions=int(space.n), discrete=True)
    return EnvInfo(name=name, obs_shape=obs_shape, num_actions=int(space.shape[0]), discrete=False)
