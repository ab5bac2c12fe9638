"""A third-party backbone, installed as a user would: ``pip install`` writes a ``.dist-info`` whose
``entry_points.txt`` is all the registry looks at. Each check runs wmzoo in a subprocess with the
install folder on ``PYTHONPATH`` (this process's registry is already built and cached).

Covers ``examples/third_party_backbone`` (``gru-wm``: listed, passes ``check_backbone``, trains
through ``wmzoo run``) and a plugin that fails to import (listed unavailable with its reason;
every other plugin keeps working; ``wmzoo run`` fails with one line and exit code 2).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "third_party_backbone"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("setuptools") is None,
    reason="pip install --no-build-isolation needs setuptools in this environment (pip install setuptools)",
)


def pip_install(source: Path, target: Path) -> Path:
    """Build ``source`` into a wheel and install it into ``target``, as ``pip install`` does."""
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(source)],
        check=True, env=env,
    )
    return target


def wmzoo(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m wmzoo.cli ARGS`` (or ``python ARGS`` when ``args[0]`` is ``-c`` or ``-m``) seeing ``site``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WMZOO_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    env.setdefault("OMP_NUM_THREADS", "1")  # 2-core CI machines: see tests/conftest.py
    argv = list(args) if args[0] in ("-c", "-m") else ["-m", "wmzoo.cli", *args]
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, cwd=cwd)


def listing(result: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)  # backbones, and plugins that failed before providing one
    return {row["name"]: row for row in rows if row["kind"] in ("backbone", "plugin")}


@pytest.fixture(scope="module")
def gru_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example installed into a fresh folder (built from a copy: pip's in-tree build would
    leave ``build/`` and ``*.egg-info`` in the checkout)."""
    tmp = tmp_path_factory.mktemp("third_party")
    source = shutil.copytree(
        EXAMPLE, tmp / "src", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    site = pip_install(source, tmp / "site")
    assert (site / "wmzoo_example_gru").is_dir()
    return site


def test_installed_backbone_is_listed(gru_site: Path, tmp_path: Path) -> None:
    rows = listing(wmzoo(gru_site, "list", "--format", "json", cwd=tmp_path))
    assert {"name": "gru-wm", "kind": "backbone", "available": True}.items() <= rows["gru-wm"].items()
    assert rows["rssm"]["available"] is True


def test_installed_backbone_passes_check_backbone(gru_site: Path, tmp_path: Path) -> None:
    code = (
        "from wmzoo.registry import build_world_model, world_model_spec\n"
        "from wmzoo.testing import CHECK_ENV, check_backbone, check_parallel_equals_recurrent\n"
        "check_backbone('gru-wm')\n"
        "check_parallel_equals_recurrent(build_world_model('gru-wm', world_model_spec('gru-wm', 'tiny'), CHECK_ENV))"
    )
    result = wmzoo(gru_site, "-c", code, cwd=tmp_path)
    assert result.returncode == 0, result.stderr


@pytest.mark.slow  # 800 training updates of the example, about 2 minutes on a busy 2-core machine
def test_installed_backbone_passes_the_behaviour_check_at_its_declared_budget(gru_site: Path, tmp_path: Path) -> None:
    # Catches: the example (a correct plugin) failing the published behaviour check at its
    # documented defaults, or a third party unable to set its own budget (SCHEDULES lived in
    # wmzoo's tests).
    code = "from wmzoo.testing import check_behaviour; print(check_behaviour('gru-wm'))"
    result = wmzoo(gru_site, "-c", code, cwd=tmp_path)
    assert result.returncode == 0, result.stderr


@pytest.mark.slow  # a pytest subprocess over wmzoo's packaging and reference tests
def test_wmzoos_own_tests_pass_with_a_third_party_backbone_installed(gru_site: Path, tmp_path: Path) -> None:
    # Catches: wmzoo's tests of what it ships (every backbone's extra, every plugin README) failing
    # for a user who has a third party's backbone installed beside it ("gru-wm has no extra").
    root = Path(__file__).resolve().parents[1]
    tests = [f"{root}/tests/test_packaging.py", f"{root}/tests/test_reference.py::test_every_backbone_has_a_page_from_its_readme"]
    result = wmzoo(gru_site, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests, cwd=root)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "gru-wm" in wmzoo(gru_site, "list", "--kind", "backbones", cwd=tmp_path).stdout


@pytest.mark.heavy  # end to end, ~15 s: CI's second step
def test_installed_backbone_trains_through_the_cli(gru_site: Path, tmp_path: Path) -> None:
    logdir = tmp_path / "run"
    result = wmzoo(
        gru_site, "run", "--backbone", "gru-wm", "--env", "minigrid-empty-5x5", "--preset", "tiny",
        "--steps", "230", "--logdir", str(logdir), "--no-progress", cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert (logdir / "checkpoint.safetensors").stat().st_size > 0
    assert (logdir / "imagination.gif").read_bytes()[:4] == b"GIF8"


def test_plugin_that_fails_to_import_is_unavailable(tmp_path: Path) -> None:
    source = tmp_path / "brokenbone"
    source.mkdir()
    (source / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = ["setuptools>=64"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "brokenbone-plugin"
        version = "0.1.0"

        [project.entry-points.wmzoo]
        brokenbone = "brokenbone_plugin"

        [tool.setuptools]
        py-modules = ["brokenbone_plugin"]
        """))
    (source / "brokenbone_plugin.py").write_text('raise ImportError("needs foo")\n')
    site = pip_install(source, tmp_path / "site")

    rows = listing(wmzoo(site, "list", "--format", "json", cwd=tmp_path))
    assert rows["brokenbone"]["available"] is False
    assert "needs foo" in rows["brokenbone"]["reason"]
    assert rows["rssm"]["available"] is True

    result = wmzoo(site, "run", "--backbone", "brokenbone", "--no-progress", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "unavailable" in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["brokenbone", "site"]  # no run folder
