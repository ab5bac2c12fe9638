"""The docs site's generated pages: the spec reference lists every field of every registered
backbone (bounds, preset values, meaning), the CLI reference every command and option, links are
rewritten for the site, and ``mkdocs build --strict`` passes."""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wmzoo.cli import build_parser
from wmzoo.reference import bounds, cell, code, rewrite_links, site_pages, spec_reference
from wmzoo.registry import default_registry
from wmzoo.specs import iter_fields

ROOT = Path(__file__).resolve().parents[1]


def _section(markdown: str, heading: str) -> str:
    start = markdown.index(f"\n{heading}\n")
    end = markdown.find("\n### ", start + 1)
    return markdown[start : end if end > 0 else None]


def test_spec_reference_lists_every_field_of_every_backbone():
    # Catches: a backbone left out, a sub-spec's fields not recursed into, a field's bounds,
    # description or preset value missing or taken from another preset or backbone.
    registry = default_registry()
    reference = spec_reference(registry)
    assert len(registry.tables["backbone"]) >= 7
    for name, entry in registry.tables["backbone"].items():
        section = _section(reference, f"### {name}")
        rows = {line.split(" | ")[0].removeprefix("| "): line for line in section.splitlines() if line.startswith("| `")}
        paths = [path for path, _ in iter_fields(entry.spec)]
        assert len(paths) > 2 and len(rows) == len(paths), name
        for path, info in iter_fields(entry.spec):
            row = rows[code(f"model.{path}")]
            assert f" | {cell(bounds(info))} | " in row and row.endswith(f" | {cell(info.description or '')} |"), (name, path)
            tiny, paper = entry.presets["tiny"], entry.presets["paper"]
            for preset in (tiny, paper):
                value = preset
                for part in path.split("."):
                    value = getattr(value, part)
                assert code(list(value) if isinstance(value, tuple) else value) in row.split(" | "), (name, path)


def test_bounds_read_as_a_person_writes_them():
    from wmzoo.specs import TrainSpec

    assert bounds(TrainSpec.model_fields["envs"]) == "≥ 1, ≤ 256"
    assert bounds(TrainSpec.model_fields["train_ratio"]) == "> 0"
    assert bounds(TrainSpec.model_fields["device"]) == ""


def _commands(parser: argparse.ArgumentParser, name: str):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child, child_parser in action.choices.items():
                yield from _commands(child_parser, f"{name} {child}")


def test_cli_reference_lists_every_command_and_option():
    # Catches: a nested sub-command (data generate, study run) or an option left out.
    parser = build_parser()
    reference = site_pages(default_registry(), parser)["reference/cli.md"]
    commands = list(_commands(parser, "wmzoo"))
    assert len(commands) > 12
    for name, sub in commands[1:]:
        assert f"# `{name}`" in reference, name
    for name, sub in commands:
        for action in sub._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in reference, (name, flag)
    assert "| `--set KEY=VALUE` | override a spec field" in reference


def test_links_are_rewritten_for_the_site():
    pages = ["index.md", "datasets.md", "backbones/rem.md", "reference/specs.md"]
    readme = ("See [the datasets](docs/datasets.md#splits), [an example](examples/study.yaml), [x](https://a.b/c),"
              " [up](#quickstart), [`model.py`](model.py).\n```\n[kept](docs/datasets.md)\n```\n")
    assert rewrite_links(readme, "README.md", "index.md", pages) == (
        "See [the datasets](datasets.md#splits), an example (`examples/study.yaml`), [x](https://a.b/c),"
        " [up](#quickstart), `model.py`.\n```\n[kept](docs/datasets.md)\n```\n"
    )
    plugin = "[the design](../../docs/datasets.md), [model.py](model.py)"
    assert rewrite_links(plugin, "plugins/rem/README.md", "backbones/rem.md", pages) == (
        "[the design](../datasets.md), `plugins/rem/model.py`\n"
    )


def test_every_backbone_has_a_page_from_its_readme():
    registry = default_registry()
    pages = site_pages(registry, build_parser())
    for name in registry.bundled("backbone"):  # a third party's README lives in its own package
        page = pages[f"backbones/{name}.md"]
        readme = (ROOT / "plugins" / name.replace("-", "_") / "README.md").read_text()
        assert page.startswith(readme.splitlines()[0] + "\n") and readme.splitlines()[2] in page, name
        assert f'"wmzoo[{name}]"' in page and f"(../reference/specs.md#{name})" in page


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
                    reason='mkdocs and mkdocs-material are not installed (pip install "wmzoo[docs]")')
def test_mkdocs_build_strict(tmp_path):
    mkdocs = [sys.executable, "-m", "mkdocs"]
    result = subprocess.run([*mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                            capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin",
                                                                 "HOME": str(tmp_path)}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    specs = (tmp_path / "site" / "reference" / "specs" / "index.html").read_text()
    assert specs.count("<table>") >= len(default_registry().tables["backbone"])
    assert (tmp_path / "site" / "backbones" / "tssm-xl" / "index.html").is_file()
    shutil.rmtree(tmp_path / "site")
