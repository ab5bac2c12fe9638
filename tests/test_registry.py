"""The plugin registry: entry-point loading, failures isolated, lookup and suggestions."""

from __future__ import annotations

import sys
import types
from importlib.metadata import EntryPoint

import pytest

from wmzoo import registry as reg
from wmzoo.errors import MissingDependencyError, UnknownNameError
from wmzoo.hookspecs import BackboneEntry, hookimpl


def _fake_entry_points(monkeypatch, eps):
    monkeypatch.setattr(reg, "entry_points", lambda group: [e for e in eps if e.group == group])


@pytest.fixture()
def broken_and_good_plugins(monkeypatch):
    good = types.ModuleType("wmzoo_test_good_plugin")

    @hookimpl
    def wmzoo_backbones():
        return [BackboneEntry(name="goodbone", spec=object, presets={}, build=lambda s, e: None,
                              description="a test backbone")]

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
    assert rows["brokenbone"].kind == "backbone"
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


def test_in_process_registration_and_duplicate_warning():
    r = reg.build_registry(autoload=False)

    class One:
        @hookimpl
        def wmzoo_backbones(self):
            return [BackboneEntry(name="dup", spec=object, presets={}, build=lambda s, e: 1)]

    class Two:
        @hookimpl
        def wmzoo_backbones(self):
            return [BackboneEntry(name="dup", spec=object, presets={}, build=lambda s, e: 2)]

    r.register(One())
    assert r.backbone("dup").build(None, None) == 1
    r.register(Two())
    with pytest.warns(UserWarning, match="'dup' registered twice"):
        assert r.backbone("dup").build(None, None) == 2  # the later registration wins


def test_unknown_names_suggest_close_matches():
    r = reg.default_registry()
    with pytest.raises(UnknownNameError, match=r"unknown backbone 'rsm'; did you mean: rssm\b"):
        r.backbone("rsm")
    with pytest.raises(UnknownNameError, match=r"did you mean: .*crafter"):
        r.env("crafterr")
    with pytest.raises(UnknownNameError, match="known: dreamer"):
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
