"""The plugin registry: find plugins through entry points, list and create things by name.

Like timm's ``list_models``/``create_model`` on top of pluggy's plugin manager (as pytest and
datasette load theirs)::

    from wmzoo import registry
    registry.list_backbones("s4*")            # names, wildcard filter
    wm = registry.create_world_model("rssm", env_info, preset="tiny", overrides={"deter": 128})

A plugin's failure never breaks the others: an entry point that fails to import, a plugin with a
hook wmzoo does not define (``wmzoo_backbone``), a hook that raises or returns something else than
a list of entries, and an entry whose fields have the wrong types each become a
:class:`PluginFailure`, listed by ``wmzoo list`` as unavailable with a one-line reason and a hint.
Plugins load in a fixed order (wmzoo's own first, then by entry-point name); the first plugin to
provide a name keeps it and every later one is reported. ``WMZOO_DISABLE_PLUGIN_AUTOLOAD=1`` loads
no entry points; ``WMZOO_BLOCK_PLUGINS=a,b`` skips the named ones.
"""

from __future__ import annotations

import builtins
import dataclasses
import difflib
import fnmatch
import importlib.util
import json
import os
import re
import sys
import types
import typing
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any

import numpy as np
import pluggy
from pydantic import ValidationError

from wmzoo import hookspecs, interfaces, specs
from wmzoo.errors import MissingDependencyError, SpecError, UnknownNameError, WmzooError
from wmzoo.hookspecs import BackboneEntry, EnvEntry, PolicyEntry, RunPreset
from wmzoo.interfaces import IMAGE, EnvInfo, ObsEntry, Policy, WorldModel
from wmzoo.specs import PolicySpec, Spec, WorldModelSpec, describe_error, from_preset, validate

ENTRY_POINT_GROUP = "wmzoo"
BUNDLED_DIST = "wmzoo"

# What ``wmzoo list --kind`` accepts, and the kind it means. "plugin" rows are plugins that failed
# before saying what they provide (import, unknown hook, a hook that raised).
KINDS: dict[str, str] = {
    "backbone": "backbone", "backbones": "backbone",
    "env": "env", "envs": "env", "environment": "env", "environments": "env",
    "policy": "policy", "policies": "policy",
    "plugin": "plugin", "plugins": "plugin",
}


def natural_key(name: str) -> list[Any]:
    """Sort key that orders the numbers inside names by value: ``memory-maze-9x9`` before
    ``memory-maze-11x11``."""
    return [(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name)]


def parse_kind(text: str) -> str:
    """The kind a user typed (``backbones``, ``environment``, ...), or a one-line error."""
    kind = KINDS.get(text.strip().lower())
    if kind is None:
        raise UnknownNameError(
            f"unknown kind '{text}'; known: backbone, env, policy, plugin "
            "(plurals and environment(s) work too)"
        )
    return kind


@dataclass(frozen=True)
class EntryType:
    """One kind of entry: the hook that returns it, its dataclass, the presets it must have."""

    kind: str
    hook: str
    cls: type
    required_presets: tuple[str, ...] = ()


ENTRY_TYPES: tuple[EntryType, ...] = (
    EntryType("backbone", "wmzoo_backbones", BackboneEntry, ("tiny", "small", "paper")),
    EntryType("policy", "wmzoo_policies", PolicyEntry, ("tiny", "small", "paper")),
    EntryType("env", "wmzoo_envs", EnvEntry),
)
# A mapping field whose values must be instances of the class in another field of the same entry.
INSTANCES_OF = {"presets": "spec"}


def editable_location(dist: str) -> str | None:
    """The folder a distribution is installed from in editable mode (``pip install -e``, PEP 610's
    ``direct_url.json``), or ``None`` (a regular install, or not installed)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        text = distribution(dist).read_text("direct_url.json")
    except PackageNotFoundError:
        return None
    try:
        info = json.loads(text or "{}")
    except ValueError:
        return None
    if not isinstance(info, dict) or not (info.get("dir_info") or {}).get("editable"):
        return None
    url = urllib.parse.urlparse(str(info.get("url", "")))
    return urllib.parse.unquote(url.path) if url.scheme == "file" else None


@dataclass(frozen=True)
class PluginFailure:
    """A plugin, or one entry of it, that could not be used.

    ``kind`` is ``"plugin"`` when the failure is the plugin's (``name`` is then its entry-point
    name), else the entry's kind (``name`` is the entry's). ``stage`` is where it failed:
    ``import``, ``hook`` (an unknown hook, or a hook that raised or returned no list), ``entry``
    (a malformed entry) or ``duplicate`` (a name an earlier plugin provides).
    """

    name: str
    dist: str
    reason: str
    kind: str = "plugin"
    stage: str = "import"
    plugin: str = ""  # the plugin at fault, when ``name`` is an entry's

    @property
    def source(self) -> str:
        """The name of the plugin at fault."""
        return self.plugin or self.name

    @property
    def hint(self) -> str:
        """What the user can do about it."""
        if self.stage == "import":
            if self.dist == BUNDLED_DIST:
                return f'pip install "wmzoo[{self.name}]"'
            if self.dist:
                return f"pip install --upgrade {self.dist}"
            return f"check the package that provides the entry point '{self.name}'"
        if self.stage == "duplicate":
            if self.dist:
                return f"uninstall one of the two, or skip this one: WMZOO_BLOCK_PLUGINS={self.source}"
            return f"unregister one of the two, or rename the entry of plugin '{self.source}'"
        if self.dist == BUNDLED_DIST:
            return "a bug in wmzoo: please report it"
        where = editable_location(self.dist) if self.dist else None
        if where:  # its author's own checkout (pip install -e): the fix is there, not an upgrade
            return f"fix plugin '{self.source}' in {where} (see CONTRIBUTING.md, 'When a plugin fails')"
        if self.dist:
            return f"pip install --upgrade {self.dist}, or report it to its authors"
        return f"fix plugin '{self.source}' (see CONTRIBUTING.md, 'When a plugin fails')"

    def message(self, kind: str, name: str) -> str:
        """The one-line error for looking up ``name`` of ``kind`` that this failure hides."""
        if self.kind == "plugin":
            why = f"plugin '{self.name}' failed: {self.reason}"
        elif self.stage == "entry":  # the reason without its "backbone 'x' from plugin 'p': "
            why = f"plugin '{self.source}' gives a malformed entry: {self.reason.split(': ', 1)[-1]}"
        else:
            why = self.reason
        return f"{kind} '{name}' is unavailable: {why}; try: {self.hint}"


@dataclass(frozen=True)
class Listing:
    """One row of ``wmzoo list``."""

    name: str
    kind: str  # "backbone" | "env" | "policy" | "plugin" (a plugin that failed)
    available: bool
    reason: str = ""
    description: str = ""
    hint: str = ""  # a backbone's: the extra that installs the environments its paper evaluates on
    observations: str = ""  # a backbone's: the observation specs it models (BackboneEntry.observations)
    plugin: str = ""  # the plugin that provides it: its entry-point name (or in-process registration name)
    distribution: str = ""  # the plugin's distribution ("wmzoo" for a bundled one; "" in-process)


class Registry:
    """A pluggy plugin manager plus the tables built from its hooks."""

    def __init__(
        self,
        pm: pluggy.PluginManager,
        failures: list[PluginFailure],
        dists: Mapping[str, str] | None = None,
    ) -> None:
        self.pm = pm
        self.load_failures = list(failures)
        self.dists = dict(dists or {})  # plugin name -> distribution, for entry-point plugins
        self._tables: dict[str, dict[str, Any]] | None = None
        self._owners: dict[tuple[str, str], str] = {}  # (kind, name) -> the plugin that provides it
        self._entry_failures: list[PluginFailure] = []

    # -- building -----------------------------------------------------------------------
    def register(self, plugin: object, name: str | None = None) -> None:
        """Register an in-process plugin object (tests, notebooks); tables are rebuilt.

        A hook wmzoo does not define raises :class:`WmzooError` (and nothing is registered).
        """
        name = self.pm.register(plugin, name=name)
        if name is None:  # a blocked name: pluggy registers nothing
            return
        problem = hook_problem(self.pm, plugin)
        if problem:
            self.pm.unregister(plugin)
            raise WmzooError(f"plugin '{name}': {problem}")
        self._tables = None

    def unregister(self, plugin: object) -> None:
        """Remove a plugin registered with :meth:`register`; tables are rebuilt."""
        self.pm.unregister(plugin)
        self._tables = None

    def _build(self) -> None:
        """Call every hookimpl in plugin order, keep valid entries, record what fails."""
        rank = {name: i for i, (name, _) in enumerate(self.pm.list_name_plugin())}
        tables: dict[str, dict[str, Any]] = {}
        failures: list[PluginFailure] = []
        owners: dict[tuple[str, str], str] = {}
        for etype in ENTRY_TYPES:
            table: dict[str, Any] = tables.setdefault(etype.kind, {})
            owner: dict[str, str] = {}
            impls = getattr(self.pm.hook, etype.hook).get_hookimpls()
            for impl in sorted(impls, key=lambda i: rank.get(i.plugin_name, len(rank))):
                plugin, dist = impl.plugin_name, self.dists.get(impl.plugin_name, "")
                try:
                    entries = hook_entries(impl.function, etype)
                except (Exception, SystemExit) as exc:  # noqa: BLE001 - a plugin's bug makes it unavailable
                    failures.append(PluginFailure(plugin, dist, _raised(f"{etype.hook}()", exc), stage="hook"))
                    continue
                for i, entry in enumerate(entries):
                    problems = entry_problems(entry, etype)
                    name = getattr(entry, "name", None)
                    if not isinstance(entry, etype.cls):
                        reason = f"{etype.hook}() item {i} is {_a(entry)}, expected a {etype.cls.__name__}"
                        failures.append(PluginFailure(plugin, dist, reason, stage="hook"))
                    elif not (isinstance(name, str) and name):  # no name to list it by
                        reason = f"{etype.hook}() item {i}: {'; '.join(problems)}"
                        failures.append(PluginFailure(plugin, dist, reason, stage="hook"))
                    elif problems:
                        reason = f"{etype.kind} '{name}' from plugin '{plugin}': {'; '.join(problems)}"
                        failures.append(PluginFailure(name, dist, reason, etype.kind, "entry", plugin))
                    elif name in table:
                        first = owner[name]
                        reason = (
                            f"{etype.kind} '{name}' is also provided by plugin '{first}'"
                            f"{_dist(self.dists.get(first, ''))}, which was loaded first and keeps it; "
                            f"this one from plugin '{plugin}'{_dist(dist)} is ignored"
                        )
                        failures.append(PluginFailure(plugin, dist, reason, stage="duplicate", plugin=plugin))
                    else:
                        table[name] = entry
                        owner[name] = plugin
                        owners[(etype.kind, name)] = plugin
        # a malformed entry whose name a valid one has is listed by its plugin's name instead
        self._entry_failures = [
            dataclasses.replace(f, name=f.source, kind="plugin", plugin="")
            if f.stage == "entry" and f.name in tables[f.kind] else f
            for f in failures
        ]
        self._tables = tables
        self._owners = owners

    @property
    def tables(self) -> dict[str, dict[str, Any]]:
        """``{"backbone": {name: entry}, "policy": ..., "env": ...}`` of the valid entries."""
        if self._tables is None:
            self._build()
        assert self._tables is not None
        return self._tables

    @property
    def failures(self) -> list[PluginFailure]:
        """Every failure: at load time, then in the hooks and their entries."""
        _ = self.tables
        return [*self.load_failures, *self._entry_failures]

    # -- lookup -------------------------------------------------------------------------
    def backbone(self, name: str) -> BackboneEntry:
        return self._lookup("backbone", name)

    def policy(self, name: str) -> PolicyEntry:
        return self._lookup("policy", name)

    def env(self, name: str) -> EnvEntry:
        """The entry of ``name``: an exact name or alias first, else the family with the longest
        prefix (``dmc-proprio-*`` before ``dmc-*``)."""
        found = [entry for entry in self.tables["env"].values() if entry.matches(name)]
        if found:
            return max(found, key=lambda e: (not e.name.endswith("*"), len(e.name)))
        self._raise_if_failed("env", "environment", name)
        raise UnknownNameError(_unknown("environment", name, self.env_names()))

    def _lookup(self, kind: str, name: str) -> Any:
        table = self.tables[kind]
        if name in table:
            return table[name]
        self._raise_if_failed(kind, kind, name)
        raise UnknownNameError(_unknown(kind, name, list(table)))

    def _raise_if_failed(self, kind: str, what: str, name: str) -> None:
        """A failure named ``name`` (of this kind, or a whole plugin) explains the lookup."""
        for failure in self.failures:
            if failure.name == name and failure.kind in (kind, "plugin"):
                raise MissingDependencyError(failure.message(what, name))

    def env_names(self) -> list[str]:
        names: list[str] = []
        for entry in self.tables["env"].values():
            names.extend(entry.examples if entry.name.endswith("*") else (entry.name, *entry.aliases))
        return names

    # -- extras -------------------------------------------------------------------------
    def paper_envs(self, backbone: BackboneEntry) -> list[EnvEntry]:
        """The env entries a backbone's ``paper_envs`` name (each once; unknown names left out)."""
        found: list[EnvEntry] = []
        for name in backbone.paper_envs:
            entry = self.tables["env"].get(name) or next(
                (e for e in self.tables["env"].values() if e.matches(name)), None)
            if entry is not None and entry not in found:
                found.append(entry)
        return found

    def bundled(self, kind: str) -> list[str]:
        """The names of ``kind`` that wmzoo's own distribution registers (not a third party's),
        for checks of what wmzoo ships (its extras, its plugin READMEs)."""
        return sorted(name for name in self.tables[kind]
                      if self.dists.get(self._owners.get((kind, name), ""), "") == BUNDLED_DIST)

    def backbone_extra(self, name: str) -> str:
        """``wmzoo[rem]``: the extra of the backbone's distribution named like it, which installs
        its paper's environments; "" for a backbone with none (no paper_envs, no distribution)."""
        entry = self.tables["backbone"].get(name)
        dist = self.dists.get(self._owners.get(("backbone", name), ""), "")
        return f"{dist}[{name}]" if entry is not None and entry.paper_envs and dist else ""

    def backbone_hint(self, name: str) -> str:
        """What installs the environments of a backbone's paper, for ``wmzoo list``."""
        entry = self.backbone(name)
        envs = ", ".join(entry.paper_envs)
        extra = self.backbone_extra(name)
        if extra:
            return f'its paper\'s envs ({envs}): pip install "{extra}"'
        extras = sorted({e.extra for e in self.paper_envs(entry) if e.extra})
        return f'its paper\'s envs ({envs}): pip install "wmzoo[{",".join(extras)}]"' if extras else ""

    def env_availability(self, entry: EnvEntry) -> tuple[bool, str]:
        """:func:`env_availability`, the hint also naming the backbone extras that install it."""
        ok, reason = env_availability(entry)
        if ok or not entry.extra:
            return ok, reason
        extras = sorted({extra for name, backbone in self.tables["backbone"].items()
                         if (extra := self.backbone_extra(name))
                         and any(e.extra == entry.extra for e in self.paper_envs(backbone))})
        return ok, f"{reason} (also in {', '.join(extras)})" if extras else reason

    # -- listing ------------------------------------------------------------------------
    def listings(self) -> list[Listing]:
        """Every entry with its availability, then every failure (unavailable, with a hint)."""
        rows: list[Listing] = []
        for kind in ("backbone", "env", "policy"):
            for name, entry in sorted(self.tables[kind].items(), key=lambda item: natural_key(item[0])):
                ok, reason, hint = (True, "", "")
                if kind == "env":
                    ok, reason = self.env_availability(entry)
                if kind == "backbone":
                    hint = self.backbone_hint(name)
                observations = OBSERVATIONS.get(getattr(entry, "observations", ""), "") if kind == "backbone" else ""
                plugin = self._owners.get((kind, name), "")
                dist = self.dists.get(plugin, "")
                rows.append(Listing(name, kind, ok, reason, entry.description, hint, observations, plugin, dist))
                if kind == "env":  # a family's named examples, and aliases, are runnable names too
                    for other in (*entry.examples, *entry.aliases):
                        rows.append(Listing(other, kind, ok, reason, f"see {name}", plugin=plugin, distribution=dist))
        for failure in sorted(self.failures, key=lambda f: (f.name, f.reason)):
            reason = f"{failure.reason}; try: {failure.hint}"
            rows.append(Listing(failure.name, failure.kind, False, reason))
        return rows


# --------------------------------------------------------------------------- plugin checks


def hook_problem(pm: pluggy.PluginManager, plugin: object) -> str:
    """Why a registered plugin's hooks are wrong (a hook wmzoo does not define, or none), or ""."""
    known = sorted(name for name, caller in vars(pm.hook).items() if caller.has_spec())
    callers = pm.get_hookcallers(plugin) or []
    problems = []
    for caller in callers:
        impls = [i for i in caller.get_hookimpls() if i.plugin is plugin and not i.optionalhook]
        if not caller.has_spec() and impls:
            close = difflib.get_close_matches(caller.name, known, n=1, cutoff=0.6)
            suggestion = f"did you mean {close[0]}?" if close else f"known: {', '.join(known)}"
            problems.append(f"hook {caller.name}() is not a wmzoo hook; {suggestion}")
    if not callers:
        unmarked = [n for n in known if callable(getattr(plugin, n, None))]
        if unmarked:
            problems.append(f"{unmarked[0]}() is not marked @hookimpl (from wmzoo import hookimpl)")
        else:
            problems.append(f"defines no wmzoo hook (known: {', '.join(known)})")
    return "; ".join(problems)


def hook_entries(function: Callable[[], Any], etype: EntryType) -> list[Any]:
    """Call one hookimpl and return its items; raises when it raises or returns no list."""
    result = function()
    if result is None:  # nothing to provide
        return []
    if isinstance(result, (str, bytes, Mapping, etype.cls)) or not isinstance(result, Iterable):
        raise NotAListError(f"returned {_a(result)}, expected a list of {etype.cls.__name__}")
    return list(result)


class NotAListError(TypeError):
    """A hook returned something other than a list (or other iterable) of entries."""


def entry_problems(entry: object, etype: EntryType) -> list[str]:
    """What is wrong with one entry, one short phrase per bad field (empty: it is valid).

    Every field is checked against its annotation in the entry's dataclass (``str``,
    ``tuple[str, ...]``, ``type[WorldModelSpec]``, ``Mapping[str, ...]``, ``Callable``), so a
    field added to an entry is covered; ``name`` must not be empty, ``presets`` must hold the
    entry type's required presets, each an instance of the entry's ``spec`` valid for it.
    """
    if not isinstance(entry, etype.cls):
        return [f"is {_a(entry)}, expected a {etype.cls.__name__}"]
    hints = _annotations(etype.cls)
    problems: list[str] = []
    valid: set[str] = set()  # fields checked so far and found right
    for f in dataclasses.fields(etype.cls):
        value, expected = getattr(entry, f.name), hints[f.name]
        other = INSTANCES_OF.get(f.name)
        of_class = getattr(entry, other) if other in valid else None
        if isinstance(of_class, type):
            expected = Mapping[str, of_class]  # presets: instances of this entry's own spec
        problem = _check(value, expected, f.name)
        if problem is None and f.name == "name" and not value:
            problem = "name is empty"
        if problem is None and f.name == "observations" and value not in OBSERVATIONS:
            problem = f"observations {value!r} is not one of {', '.join(map(repr, OBSERVATIONS))}"
        if problem is None and isinstance(of_class, type):
            problem = _preset_problem(value, of_class, etype.required_presets)
        if problem is None and f.name == "run_presets" and "presets" in valid:
            problem = _run_presets_problem(value, entry.presets)  # type: ignore[attr-defined]
        if problem is None and f.name == "width" and value is not None and "presets" in valid:
            problem = _width_problem(value, entry.presets)  # type: ignore[attr-defined]
        if problem:
            problems.append(problem)
        else:
            valid.add(f.name)
    return problems


def _width_problem(width: Any, presets: Mapping[str, Any]) -> str | None:
    """A width knob names integer fields of every preset, the first one positive."""
    if not width.fields or not isinstance(width.multiple, int) or width.multiple < 1:
        return "width needs at least one field and a multiple >= 1"
    for key, preset in presets.items():
        for name in width.fields:
            value: Any = preset
            for part in str(name).split("."):
                value = getattr(value, part, None)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                return f"width field {name!r} is not a positive integer field of presets[{key!r}]"
    return None


def _preset_problem(presets: Mapping[str, Any], spec: type, required: tuple[str, ...]) -> str | None:
    missing = [name for name in required if name not in presets]
    if missing:
        return f"presets lack {', '.join(missing)} (required: {', '.join(required)})"
    for key, preset in presets.items():
        if isinstance(preset, Spec):
            try:
                spec.model_validate(preset.model_dump())  # type: ignore[attr-defined]
            except ValidationError as exc:
                return f"presets[{key!r}] is invalid: {describe_error(exc)}"
    return None


def _run_presets_problem(run_presets: Mapping[str, RunPreset], presets: Mapping[str, Any]) -> str | None:
    """A backbone's run presets name its own world-model presets, a trainer preset and a schedule
    of valid trainer fields (the policy preset is checked by :func:`wmzoo.testing.check_backbone`:
    the policy is another entry)."""
    for key, combo in run_presets.items():
        where = f"run_presets[{key!r}]"
        if not isinstance(combo, RunPreset):  # a subclass of the entry may declare other values
            continue
        if combo.model not in presets:
            return f"{where}.model {combo.model!r} is not one of its presets ({', '.join(presets)})"
        if combo.train not in specs.TRAIN_PRESETS:
            return f"{where}.train {combo.train!r} is not a trainer preset ({', '.join(specs.TRAIN_PRESETS)})"
        try:
            specs.TrainSpec.model_validate(specs.merge(specs.TRAIN_PRESETS[combo.train].model_dump(), dict(combo.schedule)))
        except ValidationError as exc:
            return f"{where}.schedule is invalid: {describe_error(exc, cls=specs.TrainSpec)}"
    return None


class _Opaque(type):
    def __getattr__(cls, name: str) -> type:
        return cls


class _Unresolved(metaclass=_Opaque):
    """Stands for a name imported only for type checkers (``gymnasium.Env``): not checked."""


class _Names(dict):  # type: ignore[type-arg]
    """Names for evaluating an entry's string annotations; unknown ones are :class:`_Unresolved`."""

    def __init__(self, *scopes: Mapping[str, Any]) -> None:
        super().__init__()
        self.scopes = scopes

    def __missing__(self, key: str) -> Any:
        for scope in self.scopes:
            if key in scope:
                return scope[key]
        return getattr(builtins, key, _Unresolved)


@lru_cache(maxsize=None)
def _annotations(cls: type) -> dict[str, Any]:
    """Each field's annotation of an entry dataclass, evaluated (``Any`` where that fails)."""
    module = vars(sys.modules[cls.__module__])
    names = _Names(module, vars(specs), vars(interfaces))
    hints: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        try:
            hints[f.name] = eval(f.type, {}, names) if isinstance(f.type, str) else f.type  # noqa: S307
        except Exception:  # noqa: BLE001 - an annotation we cannot read is not checked
            hints[f.name] = Any
    return hints


def _check(value: Any, expected: Any, where: str) -> str | None:
    """Whether ``value`` fits the annotation ``expected``: None, or what is wrong."""
    origin, args = typing.get_origin(expected), typing.get_args(expected)
    wrong = f"{where} is {_a(value)}, expected {_show(expected)}"
    if expected is Any or expected is _Unresolved:
        return None
    if origin in (typing.Union, types.UnionType):
        return None if any(_check(value, arm, where) is None for arm in args) else wrong
    if origin is type:
        base = args[0] if args else object
        if base is _Unresolved or (isinstance(value, type) and issubclass(value, base)):
            return None
        return f"{where} is {_a(value)}, expected a subclass of {_show(base)}"
    if origin is Callable:
        return None if callable(value) else f"{where} is {_a(value)}, expected a callable"
    if isinstance(origin, type) and issubclass(origin, Mapping):
        if not isinstance(value, Mapping):
            return wrong
        key_type, value_type = args or (Any, Any)
        for key, item in value.items():
            problem = _check(key, key_type, f"a key of {where}") or _check(item, value_type, f"{where}[{key!r}]")
            if problem:
                return problem
        return None
    if origin is tuple:
        if not isinstance(value, tuple):
            return wrong
        item_types = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else list(args)
        if args and len(item_types) != len(value):
            return wrong
        return next((p for i, (item, t) in enumerate(zip(value, item_types))
                     if (p := _check(item, t, f"{where}[{i}]"))), None)
    if isinstance(origin, type):
        return None if isinstance(value, origin) else wrong
    if isinstance(expected, type) and dataclasses.is_dataclass(expected):
        if not isinstance(value, expected):
            return wrong
        hints = _annotations(expected)
        return next((p for f in dataclasses.fields(expected)
                     if (p := _check(getattr(value, f.name), hints[f.name], f"{where}.{f.name}"))), None)
    if isinstance(expected, type):
        if expected in (int, float) and isinstance(value, bool):
            return wrong
        if expected is float and isinstance(value, int):
            return None
        return None if isinstance(value, expected) else wrong
    return None  # Literal and other forms: not checked


def _a(value: Any) -> str:
    """``a PolicySpec``, ``the class Foo``, ``None``: what a value is, for messages."""
    if value is None:
        return "None"
    if isinstance(value, type):
        return f"the class {value.__name__}"
    name = type(value).__name__
    return f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"


def _show(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return re.sub(r"\b(?:\w+\.)+(?=\w)", "", repr(annotation))


def _dist(dist: str) -> str:
    return f" ({dist})" if dist else ""


def _raised(what: str, exc: BaseException) -> str:
    """``wmzoo_backbones() raised ValueError: first line`` (or ``... returned ...``)."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    if isinstance(exc, NotAListError):
        return f"{what} {text}"
    return f"{what} raised {type(exc).__name__}: {text}".rstrip(": ")


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


def plugin_order(ep: Any) -> tuple[bool, str, str, str]:
    """The order entry points load in: wmzoo's own first, then by name, distribution, target.

    Independent of install order, so which plugin keeps a name two provide is reproducible.
    """
    dist = ep.dist.name if ep.dist is not None else ""
    return (dist != BUNDLED_DIST, ep.name, dist, ep.value)


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
    dists: dict[str, str] = {}  # every entry point tried, to its distribution
    if autoload:
        for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=plugin_order):
            if ep.name in blocked:
                continue
            dist = ep.dist.name if ep.dist is not None else ""
            if ep.name in dists:
                reason = (
                    f"entry point '{ep.name}' = {ep.value}{_dist(dist)} has the name of the one from "
                    f"{dists[ep.name] or 'another package'}, which was loaded first; this one is ignored"
                )
                failures.append(PluginFailure(ep.name, dist, reason, stage="duplicate"))
                continue
            dists[ep.name] = dist
            try:
                plugin = ep.load()
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - any import error (a sys.exit too) makes it unavailable
                first = str(exc).splitlines()[0] if str(exc) else ""
                failures.append(PluginFailure(ep.name, dist, f"{type(exc).__name__}: {first}"))
                continue
            try:
                pm.register(plugin, name=ep.name)
                problem = hook_problem(pm, plugin)
            except pluggy.PluginValidationError as exc:  # a hook's arguments are not the spec's
                problem = " ".join(str(exc).splitlines()[1:]) or str(exc)
                failures.append(PluginFailure(ep.name, dist, problem, stage="hook"))
                continue
            except Exception as exc:  # noqa: BLE001 - e.g. one module under two entry-point names
                failures.append(PluginFailure(ep.name, dist, _raised("registering", exc), stage="hook"))
                continue
            if problem:
                pm.unregister(plugin)
                failures.append(PluginFailure(ep.name, dist, problem, stage="hook"))
    return Registry(pm, failures, dists)


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


OBSERVATIONS = {"any": "images, vectors and dicts of them", "image": "one image only"}
"""The values of :attr:`BackboneEntry.observations`, as ``wmzoo list`` shows them."""


def check_observations(backbone: str, entry: BackboneEntry, env: EnvInfo) -> None:
    """One line when ``env``'s observation spec is one the backbone does not model (a backbone
    that takes one image, given vectors or a dict), naming the backbones that do."""
    if entry.observations == "image" and not env.pixel:
        others = sorted(n for n, e in default_registry().tables["backbone"].items() if e.observations == "any")
        raise SpecError(f"backbone '{backbone}' models one image observation; env {env.name!r} gives "
                        f"{env.describe_obs()}: use an image env, or a backbone that takes any observations "
                        f"({', '.join(others)})")


def build_world_model(backbone: str, spec: WorldModelSpec, env: EnvInfo) -> WorldModel:
    """The backbone's world model for a validated ``spec``: the one place the core builds one.

    An env whose observation spec the backbone does not model (:func:`check_observations`), a
    :class:`~wmzoo.errors.SpecError` from the plugin (values it cannot build), or any other
    exception of its ``build``, becomes one line naming the backbone; so does a world model that
    lacks an attribute the core reads."""
    entry = default_registry().backbone(backbone)
    check_observations(backbone, entry, env)
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
            f"{what} could not be built ({type(exc).__name__}: {first}); check the --set values against "
            "`wmzoo spec`; if they are valid, its plugin failed (WMZOO_TRACEBACK=1 prints where)"
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
    ok, reason = default_registry().env_availability(entry)
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
    """Shapes of a made env, for building models: its observation spec from its observation
    space (:func:`obs_space_of`) and its actions."""
    space = env.action_space
    obs_space = obs_space_of(env.observation_space, name)
    if hasattr(space, "n"):
        return EnvInfo(name, None, num_actions=int(space.n), discrete=True, obs_space=obs_space)
    return EnvInfo(name, None, num_actions=int(space.shape[0]), discrete=False, obs_space=obs_space)


def obs_space_of(space: Any, name: str) -> tuple[tuple[str, ObsEntry], ...]:
    """The observation spec of a Gymnasium observation space: a ``Box`` uint8 ``(C, H, W)`` is a
    pixel env's one ``image`` entry; a ``Dict`` names its entries, each an image (``Box`` uint8
    ``(C, H, W)``) or a vector (``Box`` ``(D,)``, stored float32). Anything else (a ``Tuple``,
    ``Text``, ``Discrete``, a vector outside a ``Dict``) is one line naming the space."""
    from gymnasium import spaces

    def entry(key: str, box: Any) -> ObsEntry | None:
        if not isinstance(box, spaces.Box):
            return None
        if len(box.shape) == 3 and box.dtype == np.uint8:
            return ObsEntry(tuple(int(n) for n in box.shape), "uint8")
        if len(box.shape) == 1 and np.issubdtype(box.dtype, np.floating):
            return ObsEntry((int(box.shape[0]),), "float32")
        return None

    if isinstance(space, spaces.Dict):
        found = {key: entry(key, sub) for key, sub in space.spaces.items()}
        bad = [f"{key}: {space.spaces[key]}" for key, value in found.items() if value is None]
        if found and not bad:
            return tuple(found.items())
    else:
        image = entry(IMAGE, space)
        if image is not None and image.kind == "image":
            return ((IMAGE, image),)
    raise WmzooError(
        f"environment '{name}': its observation space {space} is not one wmzoo models; an env gives "
        "an image (Box uint8 [C, H, W]) or a Dict of named images and vectors (Box float32 [D])"
    )
