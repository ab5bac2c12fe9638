"""Packaging: every package folder is installed, and core code never names a backbone."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {".".join(p.parent.relative_to(ROOT / "wmzoo").parts).join(["wmzoo.", ""]).rstrip(".")
             for p in (ROOT / "wmzoo").rglob("__init__.py")}
    found |= {".".join(("wmzoo_plugins", *p.parent.relative_to(ROOT / "plugins").parts))
              for p in (ROOT / "plugins").rglob("__init__.py")}
    assert found == listed


def test_core_code_never_names_a_backbone():
    """No string literal in core code is a backbone's name (optionally with a :preset), so
    nothing can branch on one; the CLI's and config's defaults are the only exceptions."""
    names = ("rssm", "s4wm", "tssm-xl", "iris", "rem", "delta-iris", "tokenwm")
    pattern = re.compile(r"^(" + "|".join(map(re.escape, names)) + r")(:[\w-]+)?$", re.IGNORECASE)
    allowed = {"cli.py", "config.py"}
    offenders = []
    for path in (ROOT / "wmzoo").rglob("*.py"):
        if path.name in allowed:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if pattern.match(node.value.strip()):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:60]!r}")
    assert offenders == []


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def resolve_extra(name: str, extras: dict[str, list[str]]) -> set[str]:
    """The extras ``name`` installs, itself included, following ``wmzoo[a,b]`` references."""
    found, todo = set(), [name]
    while todo:
        extra = todo.pop()
        if extra in found:
            continue
        found.add(extra)
        for requirement in extras.get(extra, []):
            match = re.fullmatch(r"wmzoo\[([\w,-]+)\]", requirement.replace(" ", ""))
            if match:
                todo.extend(match.group(1).split(","))
    return found


def test_resolve_extra_follows_references():
    extras = {"a": ["wmzoo[b, c]"], "b": ["x>=1"], "c": ["wmzoo[a]"], "d": ["y"]}
    assert resolve_extra("a", extras) == {"a", "b", "c"}


def test_every_backbone_has_an_extra_that_installs_its_papers_environments():
    """``pip install "wmzoo[<backbone>]"`` installs the extra of every env its paper evaluates on."""
    from wmzoo.registry import default_registry

    extras, registry = _extras(), default_registry()
    assert len(registry.bundled("backbone")) >= 7, "wmzoo's own backbones are not all registered"
    for name in registry.bundled("backbone"):  # a third party's backbone, installed beside, has its own extras
        entry = registry.backbone(name)
        assert name in extras, f"backbone {name} has no extra in pyproject.toml"
        assert entry.paper_envs, f"backbone {name} names no paper_envs"
        envs = [registry.env(env) for env in entry.paper_envs]  # an unknown name raises
        assert registry.paper_envs(entry) == list(dict.fromkeys(envs))
        missing = {e.extra for e in envs} - resolve_extra(name, extras)
        assert missing == set(), f"wmzoo[{name}] lacks {missing}, the extras of its paper's envs"
        assert registry.backbone_extra(name) == f"wmzoo[{name}]"
        assert f'"wmzoo[{name}]"' in registry.backbone_hint(name)


def test_every_env_entry_names_an_extra_that_exists():
    from wmzoo.registry import default_registry

    extras = _extras()
    for entry in default_registry().tables["env"].values():
        if entry.requires:
            assert entry.extra in extras, f"env {entry.name}: extra {entry.extra!r} is not in pyproject.toml"
            assert extras[entry.extra], f"env {entry.name}: extra {entry.extra!r} installs nothing"


def test_all_installs_every_extra_but_the_tools():
    # libero: heavy (robosuite, robomimic) and no simulator adapter yet, so `all` leaves it out
    tools = {"all", "dev", "cluster", "docs", "trackers", "libero"}
    assert resolve_extra("all", _extras()) == set(_extras()) - tools | {"all"}
