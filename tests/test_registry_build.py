"""The one place the core builds world models and policies (``registry.build_world_model`` /
``build_policy``): a plugin's build failure, or a world model lacking what the core reads, is one
line naming the backbone, never a traceback from deep inside the trainer."""

from __future__ import annotations

import pytest

from wmzoo import BackboneEntry, SpecError, WmzooError, hookimpl
from wmzoo.interfaces import EnvInfo
from wmzoo.registry import create_world_model, default_registry
from wmzoo_plugins.rssm import PRESETS, RSSMSpec, RSSMWorldModel

ENV = EnvInfo(name="check", obs_shape=(3, 32, 32), num_actions=3)


def _without_feature_shape(spec, env):
    wm = RSSMWorldModel(spec, env)
    del wm.feature_shape  # a plugin that forgot to set it
    return wm


def _raises(error: Exception):
    def build(spec, env):
        raise error
    return build


class _Plugin:
    @hookimpl
    def wmzoo_backbones(self):
        builds = {
            "no-feature-shape": _without_feature_shape,
            "raises-spec-error": _raises(SpecError("heads=3 does not divide width 32")),
            "raises-runtime-error": _raises(RuntimeError("shape mismatch\nsecond line")),
            "returns-none": lambda spec, env: None,
        }
        return [BackboneEntry(name=n, spec=RSSMSpec, presets=PRESETS, build=b) for n, b in builds.items()]


@pytest.fixture
def broken():
    plugin = _Plugin()
    default_registry().register(plugin, name="test-broken-builds")
    yield
    default_registry().unregister(plugin)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        # catches the core reading wm.feature_shape as an AttributeError traceback
        ("no-feature-shape", "backbone 'no-feature-shape': its build returned a world model that lacks feature_shape"),
        # catches a SpecError printed without saying whose build refused the value
        ("raises-spec-error", "backbone 'raises-spec-error': heads=3 does not divide width 32"),
        # catches any other build failure escaping as a multi-line traceback
        ("raises-runtime-error", "backbone 'raises-runtime-error' could not be built (RuntimeError: shape mismatch); check the --set "
                                 "values against `wmzoo spec`; if they are valid, its plugin failed (WMZOO_TRACEBACK=1 "
                                 "prints where)"),
        ("returns-none", "backbone 'returns-none': its build returned a world model that is a NoneType"),
    ],
)
def test_build_failures_are_one_line_naming_the_backbone(broken, name, message):
    with pytest.raises(WmzooError) as info:
        create_world_model(name, ENV)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_spec_error_of_a_bundled_backbone_names_field_and_fix():
    with pytest.raises(SpecError, match=r"^backbone 'rssm': cnn_stages=6: a 32x32 image .* between 1 and 5$"):
        create_world_model("rssm", ENV, overrides={"cnn_stages": 6})


def test_a_plugin_build_failure_prints_its_traceback_only_when_asked(broken, monkeypatch, capsys):
    # Catches: the traceback a plugin author needs lost (the chained cause dropped), or printed
    # to every user by default instead of the one line.
    from wmzoo.cli import main

    argv = ["bench", "--backbones", "raises-runtime-error:tiny", "--mode", "train", "--iters", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1 and "WMZOO_TRACEBACK=1" in err
    monkeypatch.setenv("WMZOO_TRACEBACK", "1")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: shape mismatch" in err and "in build" in err and "raise error" in err
    assert err.rstrip().splitlines()[-1].startswith("wmzoo: error: backbone 'raises-runtime-error' could not be built")
