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
