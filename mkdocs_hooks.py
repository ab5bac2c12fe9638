"""mkdocs hooks (``mkdocs.yml``): the generated pages of :mod:`wmzoo.reference` and the navigation."""

from __future__ import annotations

from typing import Any

from mkdocs.structure.files import File, Files

from wmzoo.cli import build_parser
from wmzoo.reference import navigation, site_pages
from wmzoo.registry import default_registry


def on_config(config: Any) -> Any:
    config["nav"] = navigation(default_registry())
    return config


def on_files(files: Files, config: Any) -> Files:
    for path, content in site_pages(default_registry(), build_parser()).items():
        files.append(File.generated(config, path, content=content))
    return files
