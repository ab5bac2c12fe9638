"""Broken third-party plugins, installed as ``pip`` would lay them out (a package folder and a
``.dist-info`` with ``entry_points.txt`` in a folder on ``PYTHONPATH``), seen through the real CLI
in a subprocess (this process's registry is built and cached already):

- ``raisebone``: its ``wmzoo_backbones`` hook raises when called;
- ``malformed``: returns a good backbone (``okbone``), a malformed one (``badbone``: presets of the
  policy kind, ``default_policy`` not a str) and a second ``rssm`` that must not replace wmzoo's;
- ``typobone``: defines ``wmzoo_backbone`` (the hook is ``wmzoo_backbones``).

``wmzoo list`` lists each as unavailable with a one-line reason, the other backbones and ``okbone``
work, a short ``wmzoo run --backbone rssm`` trains, and naming a broken one fails with one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("minigrid")

PLUGINS = {
    "raisebone": ("raisebone-pkg", """\
        from wmzoo import hookimpl

        @hookimpl
        def wmzoo_backbones():
            raise ValueError("RAISEBONE_HOME is not set")
        """),
    "malformed": ("malformed-pkg", """\
        from wmzoo import BackboneEntry, hookimpl
        from wmzoo.specs import PolicySpec
        from wmzoo_plugins.rssm import PRESETS, RSSMSpec, RSSMWorldModel

        def not_wmzoo_rssm(spec, env):
            raise RuntimeError("the duplicate rssm was built instead of wmzoo's")

        @hookimpl
        def wmzoo_backbones():
            return [
                BackboneEntry(name="okbone", spec=RSSMSpec, presets=PRESETS, build=RSSMWorldModel),
                BackboneEntry(name="badbone", spec=RSSMSpec, build=RSSMWorldModel, default_policy=3,
                              presets={**PRESETS, "tiny": PolicySpec()}),
                BackboneEntry(name="rssm", spec=RSSMSpec, presets=PRESETS, build=not_wmzoo_rssm),
            ]
        """),
    "typobone": ("typobone-pkg", """\
        from wmzoo import hookimpl

        @hookimpl
        def wmzoo_backbone():
            return []
        """),
    "exitbone": ("exitbone-pkg", """\
        raise SystemExit("no display found")  # sys.exit at import: not an Exception
        """),
}

# the smallest online run the trainer allows (tests/train/test_schedule.py's settings, shorter)
TINY_RUN = ["train.steps=20", "train.prefill=10", "train.log_every=1000", "train.checkpoint_every=1000",
            "train.gif_horizon=2", "model.batch_size=2", "model.seq_len=8", "train.train_ratio=4"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The three plugins laid out as installed distributions in one folder."""
    site = tmp_path_factory.mktemp("broken_plugins")
    for entry_point, (dist, code) in PLUGINS.items():
        package = f"{entry_point}_pkg"
        (site / package).mkdir()
        (site / package / "__init__.py").write_text(textwrap.dedent(code))
        info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[wmzoo]\n{entry_point} = {package}\n")
    return site


def wmzoo(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m wmzoo.cli ARGS`` with ``site`` on ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WMZOO_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    env.setdefault("OMP_NUM_THREADS", "1")  # 2-core CI machines: see tests/conftest.py
    return subprocess.run([sys.executable, "-m", "wmzoo.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd)


def test_list_shows_each_broken_plugin_as_unavailable(site: Path, tmp_path: Path) -> None:
    # Catches: one broken plugin breaking `wmzoo list` for everyone (a traceback, exit 1), a
    # failure missing from the listing, a malformed entry listed "ok", or the duplicate rssm
    # taking the name from wmzoo's.
    result = wmzoo(site, "list", "--format", "json", cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    rows = {(r["name"], r["kind"]): r for r in json.loads(result.stdout)}
    for name in ("rssm", "okbone", "s4wm"):
        assert rows[(name, "backbone")]["available"] is True, name
    unavailable = {key: row["reason"] for key, row in rows.items() if not row["available"] and key[1] != "env"}
    assert unavailable == {
        ("raisebone", "plugin"): "wmzoo_backbones() raised ValueError: RAISEBONE_HOME is not set; "
        "try: pip install --upgrade raisebone-pkg, or report it to its authors",
        ("badbone", "backbone"): "backbone 'badbone' from plugin 'malformed': presets['tiny'] is a PolicySpec, "
        "expected RSSMSpec; default_policy is an int, expected str; "
        "try: pip install --upgrade malformed-pkg, or report it to its authors",
        ("malformed", "plugin"): "backbone 'rssm' is also provided by plugin 'rssm' (wmzoo), which was loaded "
        "first and keeps it; this one from plugin 'malformed' (malformed-pkg) is ignored; "
        "try: uninstall one of the two, or skip this one: WMZOO_BLOCK_PLUGINS=malformed",
        ("typobone", "plugin"): "hook wmzoo_backbone() is not a wmzoo hook; did you mean wmzoo_backbones?; "
        "try: pip install --upgrade typobone-pkg, or report it to its authors",
        ("exitbone", "plugin"): "SystemExit: no display found; try: pip install --upgrade exitbone-pkg",
    }

    table = wmzoo(site, "list", cwd=tmp_path)
    assert table.returncode == 0 and table.stderr == "", table.stderr
    print(table.stdout)  # the listing a user sees (pytest -s)
    lines = table.stdout.splitlines()
    assert "Traceback" not in table.stdout
    assert lines[lines.index("plugins that failed:") + 1:] == [
        f"  {name:<24} unavailable: {rows[(name, 'plugin')]['reason']}"
        for name in ("exitbone", "malformed", "raisebone", "typobone")  # by name
    ]
    assert any(line.startswith("  badbone ") and "unavailable: backbone 'badbone'" in line for line in lines)

    plugins = wmzoo(site, "list", "--kind", "plugins", "--format", "json", cwd=tmp_path)
    assert {r["name"] for r in json.loads(plugins.stdout)} == {"exitbone", "raisebone", "typobone", "malformed"}


def test_other_backbones_still_train(site: Path, tmp_path: Path) -> None:
    # Catches: the broken plugins breaking `wmzoo run` for the bundled backbones, or the
    # duplicate `rssm` (whose build raises) being the one that runs.
    logdir = tmp_path / "run"
    args = ["run", "--backbone", "rssm", "--env", "minigrid-empty-5x5", "--preset", "tiny",
            "--logdir", str(logdir), "--no-progress"]
    result = wmzoo(site, *args, *[x for o in TINY_RUN for x in ("--set", o)], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (logdir / "checkpoint.safetensors").stat().st_size > 0
    spec = wmzoo(site, "spec", "--backbone", "okbone", cwd=tmp_path)  # the malformed plugin's good entry
    assert spec.returncode == 0 and "backbone: okbone" in spec.stdout, spec.stderr


@pytest.mark.parametrize(
    ("backbone", "message"),
    [
        ("raisebone", "backbone 'raisebone' is unavailable: plugin 'raisebone' failed: "
                      "wmzoo_backbones() raised ValueError: RAISEBONE_HOME is not set; try: pip install"),
        ("badbone", "backbone 'badbone' is unavailable: plugin 'malformed' gives a malformed entry: "
                    "presets['tiny'] is a PolicySpec, expected RSSMSpec;"),
        ("typobone", "backbone 'typobone' is unavailable: plugin 'typobone' failed: "
                     "hook wmzoo_backbone() is not a wmzoo hook; did you mean wmzoo_backbones?"),
    ],
)
def test_running_a_broken_backbone_is_one_line(site: Path, tmp_path: Path, backbone: str, message: str) -> None:
    # Catches: a traceback (or an "unknown backbone" that hides why) instead of the failure's reason.
    result = wmzoo(site, "run", "--backbone", backbone, "--no-progress", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"wmzoo: error: {message}") and result.stderr.count("\n") == 1, result.stderr
    assert list(tmp_path.iterdir()) == []  # no run folder
