"""The plugin registry: entry-point loading, failures isolated (import, hook names, hooks that raise,
malformed entries), who keeps a duplicate name, lookup and suggestions, ``wmzoo list --kind``."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import types
from collections.abc import Mapping
from importlib.metadata import EntryPoint
from typing import Any

import pytest

from wmzoo import registry as reg
from wmzoo.errors import MissingDependencyError, UnknownNameError, WmzooError
from wmzoo.hookspecs import BackboneEntry, EnvEntry, PolicyEntry, RunPreset, hookimpl
from wmzoo.specs import PolicySpec, WorldModelSpec


def _fake_entry_points(monkeypatch, eps):
    monkeypatch.setattr(reg, "entry_points", lambda group: [e for e in eps if e.group == group])


def backbone(name: str, **fields) -> BackboneEntry:
    """A valid backbone entry (the base spec, the three required presets), ``fields`` changed."""
    presets = {p: WorldModelSpec() for p in ("tiny", "small", "paper")}
    return BackboneEntry(**{"name": name, "spec": WorldModelSpec, "presets": presets,
                            "build": lambda s, e: None, **fields})


@pytest.fixture()
def broken_and_good_plugins(monkeypatch):
    good = types.ModuleType("wmzoo_test_good_plugin")

    @hookimpl
    def wmzoo_backbones():
        return [backbone("goodbone", description="a test backbone")]

    good.wmzoo_backbones = wmzoo_backbones
    monkeypatch.setitem(sys.modules, "wmzoo_test_good_plugin", good)
    broken = types.ModuleType("wmzoo_test_broken_plugin")
    monkeypatch.setitem(sys.modules, "wmzoo_test_broken_plugin", None)  # import raises
    del broken
    eps = [
        EntryPoint("goodbone", "wmzoo_test_good_plugin", "wmzoo"),
        EntryPoint("brokenbone", "wmzoo_test_broken_plugin", "wmzoo"),
        EntryPoint("elsewhere", "wmzoo_test_good_plugin", "not-wmzoo"),
    ]
    _fake_entry_points(monkeypatch, eps)


def test_failing_plugin_is_listed_unavailable_and_others_work(broken_and_good_plugins):
    r = reg.build_registry(autoload=True, block=())
    assert r.backbone("goodbone").description == "a test backbone"
    rows = {x.name: x for x in r.listings()}
    assert rows["goodbone"].available and rows["goodbone"].kind == "backbone"
    assert not rows["brokenbone"].available
    assert rows["brokenbone"].kind == "plugin"  # it failed before saying what it provides
    assert "ModuleNotFoundError" in rows["brokenbone"].reason
    assert "brokenbone" in rows["brokenbone"].reason  # the install hint names the entry point
    with pytest.raises(MissingDependencyError, match="backbone 'brokenbone' is unavailable"):
        r.backbone("brokenbone")


def test_block_and_disable_autoload(broken_and_good_plugins, monkeypatch):
    r = reg.build_registry(autoload=True, block=["goodbone"])
    assert "goodbone" not in r.tables["backbone"]
    assert r.pm.is_blocked("goodbone") is False  # blocked from loading, not a registered block
    monkeypatch.setenv("WMZOO_DISABLE_PLUGIN_AUTOLOAD", "1")
    r = reg.build_registry()
    assert r.tables["backbone"] == {} and r.failures == []


def test_in_process_registration_and_the_first_keeps_a_duplicate_name():
    # Catches: the later registration silently replacing the earlier one (the old rule).
    r = reg.build_registry(autoload=False)

    class One:
        @hookimpl
        def wmzoo_backbones(self):
            return [backbone("dup", build=lambda s, e: 1)]

    class Two:
        @hookimpl(tryfirst=True)  # pluggy's call order must not decide it
        def wmzoo_backbones(self):
            return [backbone("dup", build=lambda s, e: 2), backbone("other", build=lambda s, e: 3)]

    r.register(One(), name="one")
    assert r.backbone("dup").build(None, None) == 1
    r.register(Two(), name="two")
    assert r.backbone("dup").build(None, None) == 1  # the first registered keeps it
    assert r.backbone("other").build(None, None) == 3  # the later plugin's other entries work
    [failure] = r.failures
    assert (failure.name, failure.kind, failure.stage) == ("two", "plugin", "duplicate")
    assert "backbone 'dup' is also provided by plugin 'one'" in failure.reason
    assert "unregister one of the two" in failure.hint


def test_unknown_names_suggest_close_matches():
    r = reg.default_registry()
    with pytest.raises(UnknownNameError, match=r"unknown backbone 'rsm'; did you mean: rssm\b"):
        r.backbone("rsm")
    with pytest.raises(UnknownNameError, match=r"did you mean: .*crafter"):
        r.env("crafterr")
    with pytest.raises(UnknownNameError, match="known: bc, delta-iris-ac, dreamer, iris-ac"):
        r.policy("zzzzzz")


def test_builtins_register_through_entry_points():
    names = {ep.name: ep.value for ep in reg.entry_points(group="wmzoo")}
    assert names["rssm"] == "wmzoo_plugins.rssm"
    assert names["envs"] == "wmzoo.envs.plugin"
    assert names["dreamer"] == "wmzoo.agents.dreamer"
    assert "rssm" in reg.list_backbones("r*")
    assert reg.list_backbones("zz*") == []
    assert "dreamer" in reg.list_policies()
    assert {"crafter", "memory-maze", "atari-pong"} <= set(reg.list_envs())


def test_env_availability_reports_the_extra(monkeypatch):
    from wmzoo.hookspecs import EnvEntry

    entry = EnvEntry(name="x", make=lambda *a, **k: None, requires=("wmzoo_no_such_module",), extra="atari")
    ok, reason = reg.env_availability(entry)
    assert not ok and reason == 'missing module wmzoo_no_such_module: pip install "wmzoo[atari]"'


def test_install_hints_name_the_backbone_extra_that_includes_a_missing_env():
    # Catches: `wmzoo list` not naming a backbone's extra, an env's hint not saying which backbone
    # extras include it, or a backbone of an unknown distribution given a `wmzoo[...]` it lacks.
    missing = EnvEntry(name="fake-*", make=lambda *a, **k: None, requires=("wmzoo_no_such_module",),
                       extra="fakesuite", examples=("fake-one",))
    other = EnvEntry(name="other", make=lambda *a, **k: None, extra="othersuite")
    r = reg.build_registry(autoload=False)
    r.register(plugin_of("wmzoo_envs", missing, other), name="envs")
    r.register(plugin_of("wmzoo_backbones", backbone("fakebone", paper_envs=("fake-one", "other"))), name="dist")
    r.register(plugin_of("wmzoo_backbones", backbone("loosebone", paper_envs=("fake-*",))), name="loose")
    r.register(plugin_of("wmzoo_backbones", backbone("plainbone")), name="plain")
    r.dists["dist"] = "fakepkg"  # as an entry point of the distribution fakepkg would set it
    assert [e.name for e in r.paper_envs(r.backbone("fakebone"))] == ["fake-*", "other"]
    rows = {(x.name, x.kind): x for x in r.listings()}
    assert rows[("fakebone", "backbone")].hint == 'its paper\'s envs (fake-one, other): pip install "fakepkg[fakebone]"'
    # no distribution: the hint names the envs' own extras
    assert rows[("loosebone", "backbone")].hint == 'its paper\'s envs (fake-*): pip install "wmzoo[fakesuite]"'
    assert rows[("plainbone", "backbone")].hint == ""
    assert rows[("fake-one", "env")].reason == (
        'missing module wmzoo_no_such_module: pip install "wmzoo[fakesuite]" (also in fakepkg[fakebone])'
    )
    assert rows[("other", "env")].available


# --------------------------------------------------------------------------- failures isolated


class FooSpec(WorldModelSpec):
    width: int = 8


FOO_PRESETS = {p: FooSpec() for p in ("tiny", "small", "paper")}


def plugin_of(hook: str, *items, name: str = "foo_pkg"):
    """An in-process plugin whose hook ``hook`` returns ``items`` (a callable: its result)."""
    plugin = types.SimpleNamespace()
    result = items[0] if len(items) == 1 and callable(items[0]) else (lambda: list(items))
    setattr(plugin, hook, hookimpl(result))
    return plugin


def good_registry() -> reg.Registry:
    r = reg.build_registry(autoload=False)
    r.register(plugin_of("wmzoo_backbones", backbone("goodbone")), name="good")
    return r


def test_a_hook_that_raises_is_one_failure_and_everything_else_works():
    # Catches: a plugin's exception escaping `tables` (every lookup of every backbone breaks),
    # the raising plugin's other hooks being dropped with it, or a traceback in the reason.
    r = good_registry()

    class Raising:
        @hookimpl
        def wmzoo_backbones(self):
            raise ValueError("no weights configured\n  second line of a long message")

        @hookimpl
        def wmzoo_envs(self):
            return [EnvEntry(name="raiser-env", make=lambda *a, **k: None)]

    r.register(Raising(), name="raiser")
    assert r.backbone("goodbone").name == "goodbone"
    assert r.env("raiser-env").name == "raiser-env"
    [failure] = r.failures
    assert (failure.name, failure.kind, failure.stage) == ("raiser", "plugin", "hook")
    assert failure.reason == "wmzoo_backbones() raised ValueError: no weights configured"
    rows = {(x.name, x.kind): x for x in r.listings()}
    assert not rows[("raiser", "plugin")].available
    with pytest.raises(MissingDependencyError) as info:
        r.backbone("raiser")
    assert str(info.value).startswith(
        "backbone 'raiser' is unavailable: plugin 'raiser' failed: wmzoo_backbones() raised ValueError"
    )
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        (lambda: backbone("single"), "wmzoo_backbones() returned a BackboneEntry, expected a list of BackboneEntry"),
        (lambda: "rssm", "wmzoo_backbones() returned a str, expected a list of BackboneEntry"),
        (lambda: 3, "wmzoo_backbones() returned an int, expected a list of BackboneEntry"),
        (lambda: (backbone("half") if i == 0 else 1 / 0 for i in range(2)),  # raises half-way
         "wmzoo_backbones() raised ZeroDivisionError: division by zero"),
        (lambda: [backbone("ok"), PolicyEntry("p", PolicySpec, {}, len)],
         "wmzoo_backbones() item 1 is a PolicyEntry, expected a BackboneEntry"),
        (lambda: [backbone(3)], "wmzoo_backbones() item 0: name is an int, expected str"),
        (lambda: [backbone("")], "wmzoo_backbones() item 0: name is empty"),
    ],
)
def test_a_hook_that_returns_no_list_of_entries_is_a_failure(result, reason):
    # Catches: a single entry or a string iterated as if it were a list (the old `for entry in
    # impl.function()`), an AttributeError on `entry.name`, a nameless entry crashing the listing.
    r = good_registry()
    r.register(plugin_of("wmzoo_backbones", result), name="foo_pkg")
    assert r.backbone("goodbone")
    [failure] = r.failures
    assert (failure.name, failure.kind) == ("foo_pkg", "plugin")
    assert failure.reason.startswith(reason), failure.reason
    assert sorted(r.tables["backbone"]) in (["goodbone"], ["goodbone", "ok"])


def test_a_hook_that_returns_none_provides_nothing():
    r = good_registry()
    r.register(plugin_of("wmzoo_backbones", lambda: None), name="nothing")
    assert r.failures == [] and list(r.tables["backbone"]) == ["goodbone"]


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"presets": {**FOO_PRESETS, "tiny": PolicySpec()}}, "presets['tiny'] is a PolicySpec, expected FooSpec"),
        ({"presets": {**FOO_PRESETS, "small": WorldModelSpec()}}, "presets['small'] is a WorldModelSpec, expected FooSpec"),
        ({"presets": {"tiny": FooSpec()}}, "presets lack small, paper (required: tiny, small, paper)"),
        ({"presets": [FooSpec()]}, "presets is a list, expected Mapping[str, FooSpec]"),
        ({"presets": {**FOO_PRESETS, "paper": FooSpec.model_construct(batch_size=0, seq_len=8, width=8)}},
         "presets['paper'] is invalid: batch_size: Input should be greater than or equal to 1 (got 0)"),
        ({"spec": PolicySpec}, "spec is the class PolicySpec, expected a subclass of WorldModelSpec"),
        ({"spec": FooSpec()}, "spec is a FooSpec, expected a subclass of WorldModelSpec"),
        ({"build": "FooModel"}, "build is a str, expected a callable"),
        ({"default_policy": None}, "default_policy is None, expected str"),
        ({"description": 3, "build": None}, "build is None, expected a callable; description is an int, expected str"),
        # run presets: a RunPreset each, naming the entry's own presets, a trainer preset, a valid schedule
        ({"run_presets": {"long": {"model": "paper"}}}, "run_presets['long'] is a dict, expected RunPreset"),
        ({"run_presets": {"long": RunPreset("paper", 1, "paper")}}, "run_presets['long'].policy is an int, expected str"),
        ({"run_presets": {"long": RunPreset("paper-2d", "paper", "paper")}},
         "run_presets['long'].model 'paper-2d' is not one of its presets (tiny, small, paper)"),
        ({"run_presets": {"long": RunPreset("paper", "paper", "huge")}},
         "run_presets['long'].train 'huge' is not a trainer preset (tiny, small, paper, paper-atari100k)"),
        ({"run_presets": {"long": RunPreset("paper", "paper", "paper", {"step": 10})}},
         "run_presets['long'].schedule is invalid: step: unknown field; did you mean steps?"),
        ({"run_presets": {"long": RunPreset("paper", "paper", "paper", {"steps": -1})}},
         "run_presets['long'].schedule is invalid: steps: Input should be greater than or equal to 1 (got -1)"),
    ],
)
def test_a_malformed_entry_is_one_failure_naming_the_field(fields, problem):
    # Catches: a malformed entry accepted (it fails later, deep in `wmzoo run`, with a traceback),
    # or rejected with its plugin's good entries and every other plugin's.
    r = good_registry()
    good_too = backbone("foo-ok", spec=FooSpec, presets=FOO_PRESETS)
    bad = backbone("foo", **{"spec": FooSpec, "presets": FOO_PRESETS, **fields})
    r.register(plugin_of("wmzoo_backbones", good_too, bad), name="foo_pkg")
    assert sorted(r.tables["backbone"]) == ["foo-ok", "goodbone"]
    [failure] = r.failures
    assert (failure.name, failure.kind, failure.stage, failure.source) == ("foo", "backbone", "entry", "foo_pkg")
    assert failure.reason == f"backbone 'foo' from plugin 'foo_pkg': {problem}"
    with pytest.raises(MissingDependencyError) as info:
        r.backbone("foo")
    assert str(info.value).startswith(f"backbone 'foo' is unavailable: plugin 'foo_pkg' gives a malformed entry: {problem}")


@pytest.mark.parametrize(
    ("hook", "entry", "problem"),
    [
        ("wmzoo_policies", PolicyEntry("pol", PolicySpec, {"tiny": PolicySpec()}, len), "presets lack small, paper"),
        ("wmzoo_policies", PolicyEntry("pol", PolicySpec, {"tiny": FooSpec(), "small": PolicySpec(), "paper": PolicySpec()}, len),
         "presets['tiny'] is a FooSpec, expected PolicySpec"),
        ("wmzoo_envs", EnvEntry("myenv", make=len, requires=["ale_py"]), "requires is a list, expected tuple[str, ...]"),
        ("wmzoo_envs", EnvEntry("myenv", make=len, aliases=("a", 2)), "aliases[1] is an int, expected str"),
        ("wmzoo_envs", EnvEntry("myenv", make=None), "make is None, expected a callable"),
        ("wmzoo_envs", EnvEntry("myenv", make=len, memory=4), "memory is an int, expected"),
    ],
)
def test_malformed_policies_and_envs_too(hook, entry, problem):
    r = good_registry()
    r.register(plugin_of(hook, entry), name="foo_pkg")
    [failure] = r.failures
    assert failure.kind == ("policy" if hook == "wmzoo_policies" else "env")
    assert problem in failure.reason
    lookup = r.policy if hook == "wmzoo_policies" else r.env
    with pytest.raises(MissingDependencyError, match="is unavailable: plugin 'foo_pkg' gives a malformed entry"):
        lookup(entry.name)


def test_a_field_added_to_an_entry_is_checked_from_its_annotation():
    # Catches: validation by a hand-written field list that skips a field added later
    # (`run_presets`) instead of reading the dataclass's fields and annotations.
    @dataclasses.dataclass(frozen=True)
    class NewerEntry(BackboneEntry):
        run_presets: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
        tags: tuple[str, ...] = ()

    etype = reg.EntryType("backbone", "wmzoo_backbones", NewerEntry, ("tiny", "small", "paper"))
    fine = NewerEntry("x", FooSpec, FOO_PRESETS, len, run_presets={"paper": {"train_ratio": 640}}, tags=("a",))
    assert reg.entry_problems(fine, etype) == []
    bad = dataclasses.replace(fine, run_presets={"paper": 640}, tags=("a", 1))
    assert reg.entry_problems(bad, etype) == [
        "run_presets['paper'] is an int, expected Mapping[str, Any]", "tags[1] is an int, expected str",
    ]


def test_a_malformed_entry_with_a_taken_name_is_listed_by_its_plugin():
    # Catches: two `wmzoo list --format json` rows named `goodbone` (one ok, one unavailable),
    # which a reader keyed by name would see as unavailable.
    r = good_registry()
    r.register(plugin_of("wmzoo_backbones", backbone("goodbone", build=3)), name="foo_pkg")
    assert r.backbone("goodbone").build is not None
    [failure] = r.failures
    assert (failure.name, failure.kind) == ("foo_pkg", "plugin")
    assert failure.reason == "backbone 'goodbone' from plugin 'foo_pkg': build is an int, expected a callable"


def test_every_bundled_entry_is_valid():
    # Catches: the validator rejecting a real plugin's entry (a false positive makes rssm unavailable).
    assert reg.default_registry().failures == []
    assert {"rssm", "s4wm", "tssm-xl", "rem", "iris", "delta-iris"} <= set(reg.list_backbones())


# --------------------------------------------------------------------------- hook names


def _module(name: str, monkeypatch, **functions) -> types.ModuleType:
    module = types.ModuleType(name)
    for key, value in functions.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)
    return module


@pytest.mark.parametrize(
    ("functions", "reason"),
    [
        ({"wmzoo_backbone": hookimpl(lambda: [])},
         "hook wmzoo_backbone() is not a wmzoo hook; did you mean wmzoo_backbones?"),
        ({"wmzoo_backbones": hookimpl(lambda: []), "wmzoo_env": hookimpl(lambda: [])},
         "hook wmzoo_env() is not a wmzoo hook; did you mean wmzoo_envs?"),
        ({"wmzoo_backbones": lambda: []},
         "wmzoo_backbones() is not marked @hookimpl (from wmzoo import hookimpl)"),
        ({}, "defines no wmzoo hook (known: wmzoo_backbones, wmzoo_envs, wmzoo_policies)"),
        ({"wmzoo_backbones": hookimpl(lambda config: [])},
         "hookimpl definition: <lambda>(config) Argument(s) {'config'} are declared in the hookimpl "
         "but can not be found in the hookspec"),
    ],
)
def test_a_misspelled_hook_makes_its_plugin_a_failure(monkeypatch, functions, reason):
    # Catches: a misspelled hook silently providing nothing (pluggy only complains in
    # `check_pending`), or `check_pending` raising for everyone instead of failing one plugin.
    good = _module("wmzoo_test_good", monkeypatch, wmzoo_backbones=hookimpl(lambda: [backbone("goodbone")]))
    _module("wmzoo_test_typo", monkeypatch, **functions)
    _fake_entry_points(monkeypatch, [EntryPoint("good", "wmzoo_test_good", "wmzoo"),
                                     EntryPoint("typo", "wmzoo_test_typo", "wmzoo")])
    r = reg.build_registry(autoload=True, block=())
    assert r.pm.get_plugin("good") is good and not r.pm.has_plugin("typo")
    r.pm.check_pending()  # nothing unknown is left registered
    assert list(r.tables["backbone"]) == ["goodbone"]
    [failure] = r.failures
    assert (failure.name, failure.kind, failure.stage) == ("typo", "plugin", "hook")
    assert failure.reason.startswith(reason), failure.reason
    with pytest.raises(MissingDependencyError, match=r"plugin 'typo' failed: .*hook"):
        r.backbone("typo")


def test_registering_an_in_process_plugin_with_a_misspelled_hook_raises():
    r = good_registry()
    plugin = plugin_of("wmzoo_policie", lambda: [])
    with pytest.raises(WmzooError, match=r"plugin 'p': hook wmzoo_policie\(\) is not a wmzoo hook; did you mean wmzoo_policies\?"):
        r.register(plugin, name="p")
    assert not r.pm.is_registered(plugin)


# --------------------------------------------------------------------------- who keeps a name


@dataclasses.dataclass
class FakeEntryPoint:
    """An entry point of a distribution (``importlib.metadata.EntryPoint`` with ``dist`` set)."""

    name: str
    value: str
    dist_name: str
    group: str = "wmzoo"

    @property
    def dist(self) -> types.SimpleNamespace:
        return types.SimpleNamespace(name=self.dist_name)

    def load(self) -> Any:
        return importlib.import_module(self.value)


@pytest.mark.parametrize("reverse", [False, True])
def test_the_first_plugin_in_a_fixed_order_keeps_a_duplicate_name(monkeypatch, reverse):
    # Catches: the winner depending on install order (the order entry points are found in),
    # or a third party replacing a bundled backbone by choosing an entry-point name sorted first.
    for module, build in [("wmzoo_test_bundled", 1), ("wmzoo_test_alpha", 2), ("wmzoo_test_zeta", 3)]:
        entries = [backbone("dup", build=lambda s, e, b=build: b), backbone("shared", build=lambda s, e, b=build: b)]
        _module(module, monkeypatch, wmzoo_backbones=hookimpl(lambda entries=entries[:1 + (build == 2)]: entries))
    _module("wmzoo_test_zeta2", monkeypatch, wmzoo_backbones=hookimpl(lambda: [backbone("z2"), backbone("shared")]))
    eps = [
        FakeEntryPoint("zzz-bundled", "wmzoo_test_bundled", "wmzoo"),
        FakeEntryPoint("alpha", "wmzoo_test_alpha", "alpha-dist"),
        FakeEntryPoint("zeta", "wmzoo_test_zeta", "zeta-dist"),
        FakeEntryPoint("zeta", "wmzoo_test_zeta2", "other-zeta-dist"),  # the same entry-point name
    ]
    _fake_entry_points(monkeypatch, eps[::-1] if reverse else eps)
    r = reg.build_registry(autoload=True, block=())
    assert r.backbone("dup").build(None, None) == 1  # wmzoo's own first, whatever the entry-point names
    assert "z2" in r.tables["backbone"]  # "other-zeta-dist" < "zeta-dist": its "zeta" loaded
    assert r.backbone("shared").build(None, None) == 2  # then by entry-point name: "alpha" < "zeta"
    reasons = {(f.name, f.dist): f.reason for f in r.failures}
    assert reasons == {
        ("zeta", "zeta-dist"): "entry point 'zeta' = wmzoo_test_zeta (zeta-dist) has the name of the one "
        "from other-zeta-dist, which was loaded first; this one is ignored",
        ("alpha", "alpha-dist"): "backbone 'dup' is also provided by plugin 'zzz-bundled' (wmzoo), which was "
        "loaded first and keeps it; this one from plugin 'alpha' (alpha-dist) is ignored",
        ("zeta", "other-zeta-dist"): "backbone 'shared' is also provided by plugin 'alpha' (alpha-dist), which "
        "was loaded first and keeps it; this one from plugin 'zeta' (other-zeta-dist) is ignored",
    }
    hints = {f.dist: f.hint for f in r.failures}
    assert hints["alpha-dist"] == "uninstall one of the two, or skip this one: WMZOO_BLOCK_PLUGINS=alpha"
    # `wmzoo list` names the plugin and distribution that kept each name
    rows = {(x.name, x.kind): x for x in r.listings()}
    assert [(rows[(n, "backbone")].plugin, rows[(n, "backbone")].distribution) for n in ("dup", "shared", "z2")] == [
        ("zzz-bundled", "wmzoo"), ("alpha", "alpha-dist"), ("zeta", "other-zeta-dist")]


# --------------------------------------------------------------------------- --kind


@pytest.mark.parametrize(
    ("typed", "kind"),
    [("backbone", "backbone"), ("Backbones", "backbone"), ("env", "env"), ("envs", "env"),
     ("environment", "env"), ("environments", "env"), ("policy", "policy"), ("policies", "policy"),
     ("plugin", "plugin"), ("plugins", "plugin")],
)
def test_kind_accepts_what_a_user_types(typed, kind):
    assert reg.parse_kind(typed) == kind


def test_list_kind_through_the_cli(capsys):
    # Catches: `--kind backbones` or `--kind environment` rejected, or an unknown kind listing all.
    from wmzoo.cli import main

    assert main(["list", "--kind", "backbones", "--format", "json"]) == 0
    assert {row["kind"] for row in json.loads(capsys.readouterr().out)} == {"backbone"}
    assert main(["list", "--kind", "environment"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("environments:\n") and "rssm" not in out
    assert main(["list", "--kind", "backbnoes"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (
        "wmzoo: error: unknown kind 'backbnoes'; known: backbone, env, policy, plugin "
        "(plurals and environment(s) work too)\n"
    )


def test_list_names_the_plugin_that_provides_each_backbone(capsys):
    # Catches: `wmzoo list` not saying which plugin (entry point, distribution) provides a
    # backbone, so a name two plugins provide cannot be traced to the one that kept it.
    from wmzoo.cli import main

    assert main(["list", "--kind", "backbone", "--format", "json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert (rows["rssm"]["plugin"], rows["rssm"]["distribution"]) == ("rssm", "wmzoo")
    assert (rows["tssm-xl"]["plugin"], rows["tssm-xl"]["distribution"]) == ("tssm-xl", "wmzoo")
    assert main(["list", "--kind", "backbone"]) == 0
    out = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(out) if line.split() and line.split()[0] == "rssm")
    assert out[at + 2].strip() == "plugin: rssm (wmzoo)"


def test_envs_list_in_natural_order_and_plugins_say_when_none_failed(capsys):
    # Catches: names sorted as text (memory-maze-11x11 ... 15x15 before 9x9), and `wmzoo list
    # --kind plugins` printing nothing at all when every plugin loaded.
    from wmzoo.cli import main

    assert reg.natural_key("memory-maze-9x9") < reg.natural_key("memory-maze-11x11")
    assert sorted(["a-10", "a-9", "b-1", "a-100"], key=reg.natural_key) == ["a-9", "a-10", "a-100", "b-1"]
    assert main(["list", "--kind", "env"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    mazes = [n for n in names if n.startswith("memory-maze-") and n.endswith("x" + n.rsplit("x", 1)[-1])]
    assert mazes == sorted(mazes, key=reg.natural_key) and mazes[0] == "memory-maze-9x9", mazes
    if not reg.default_registry().failures:
        assert main(["list", "--kind", "plugins"]) == 0
        assert "none" in capsys.readouterr().out


def test_a_hook_calling_sys_exit_is_one_failure():
    # Catches: a plugin's `sys.exit()` (SystemExit is not an Exception) ending every wmzoo command.
    r = good_registry()

    class Exiting:
        @hookimpl
        def wmzoo_backbones(self):
            raise SystemExit("bye")

    r.register(Exiting(), name="exiter")
    assert r.backbone("goodbone").name == "goodbone"
    [failure] = r.failures
    assert failure.reason == "wmzoo_backbones() raised SystemExit: bye"


def test_check_behaviour_uses_the_budget_the_entry_declares(monkeypatch):
    # Catches: check_behaviour ignoring the entry's BehaviourCheck (its updates or its spec
    # overrides), which a third party sets instead of editing wmzoo's tests.
    import wmzoo.testing as testing
    from wmzoo.hookspecs import BehaviourCheck

    seen = {}
    registry = reg.default_registry()
    entry = registry.backbone("rssm")
    monkeypatch.setitem(registry.tables["backbone"], "rssm", dataclasses.replace(
        entry, behaviour_check=BehaviourCheck(updates=7, overrides={"optim": {"lr": 0.002}})))
    monkeypatch.setattr(testing, "check_reward_sign",
                        lambda wm, updates: seen.update(updates=updates, lr=wm.spec.optim.lr) or (1.0, -1.0))
    assert testing.check_behaviour("rssm") == (1.0, -1.0)
    assert seen == {"updates": 7, "lr": 0.002}
    assert BehaviourCheck().updates == 800  # CONTRIBUTING's documented default


@pytest.mark.parametrize(("direct_url", "hint"), [
    ('{"url": "file:///home/me/my%20plugin", "dir_info": {"editable": true}}',
     "fix plugin 'mine' in /home/me/my plugin (see CONTRIBUTING.md, 'When a plugin fails')"),
    ('{"url": "file:///home/me/my-plugin", "dir_info": {}}', "pip install --upgrade my-plugin, or report it to its authors"),
    (None, "pip install --upgrade my-plugin, or report it to its authors"),
])
def test_a_malformed_entry_of_an_editable_install_points_at_its_checkout(tmp_path, monkeypatch, direct_url, hint):
    # Catches: "pip install --upgrade" told to the plugin's own author, whose checkout is where
    # the fix goes; or a regular install (no direct_url.json, or not editable) sent to a folder.
    from wmzoo.registry import PluginFailure

    info = tmp_path / "my_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugin\nVersion: 1.0\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(direct_url)
    monkeypatch.syspath_prepend(str(tmp_path))
    failure = PluginFailure(name="foo", dist="my-plugin", reason="presets['tiny'] is wrong", kind="backbone",
                            stage="entry", plugin="mine")
    assert failure.hint == hint
