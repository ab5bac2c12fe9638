"""The documentation site's generated pages (``mkdocs.yml`` builds them through ``docs/hooks.py``).

Nothing here is written by hand, so nothing drifts from the code:

- ``reference/cli.md``: every command and option of the ``wmzoo`` argparse parser;
- ``reference/specs.md``: every field of every registered backbone's spec (its type, bounds, its
  value in each preset, its description), of every policy's, and of the trainer's;
- ``backbones/<name>.md``: one page per registered backbone, from its plugin's ``README.md``;
- ``index.md`` and ``contributing.md``: the repository's README and CONTRIBUTING.

Links between the repository's Markdown files are rewritten for the site: one to a page of the
site points at it; one to any other file of the repository becomes its path in code type.
"""

from __future__ import annotations

import argparse
import importlib.resources
import posixpath
import re
import sys
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from wmzoo.hookspecs import BackboneEntry
from wmzoo.specs import TRAIN_PRESETS, Spec, TrainSpec, bounds, iter_fields

ROOT = Path(__file__).resolve().parents[1]
STANDARD_PRESETS = ("tiny", "small", "paper")
# Hand-written pages: where each comes from in the repository (docs/ itself is the site's folder).
COPIED = {"index.md": "README.md", "contributing.md": "CONTRIBUTING.md"}


# --------------------------------------------------------------------------- Markdown helpers


def cell(text: Any) -> str:
    """Text safe inside a Markdown table cell: one line, ``|`` and ``<`` escaped."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;")


def code(text: Any) -> str:
    """``text`` in code type inside a table cell (``|`` escaped; a backtick inside is widened)."""
    value = " ".join(str(text).split()).replace("|", "\\|")
    return f"`` {value} ``" if "`" in value else f"`{value}`"


def table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


# --------------------------------------------------------------------------- the CLI


def cli_reference(parser: argparse.ArgumentParser) -> str:
    """Every command of ``parser`` (nested sub-commands too): usage, what it does, its options."""
    lines = ["# CLI reference", "", f"Generated from `{parser.prog}`'s argparse parser.", "",
             parser.description or "", ""]
    lines += _command(parser, parser.prog, "", level=2)
    if parser.epilog:
        lines += ["## Examples", "", "```text", parser.epilog.strip(), "```", ""]
    return "\n".join(lines)


def _command(parser: argparse.ArgumentParser, name: str, summary: str, level: int) -> list[str]:
    lines = [f"{'#' * level} `{name}`", ""] if level > 2 else []
    if summary:
        lines += [summary[0].upper() + summary[1:] + ".", ""]
    usage = parser.format_usage().removeprefix("usage: ").strip()
    lines += ["```text", usage, "```", ""]
    options = [a for a in parser._actions if not isinstance(a, (argparse._SubParsersAction, argparse._HelpAction))]
    if options:
        rows = [(code(_flags(a)), cell(_about(a))) for a in options]
        lines += table(("option", "meaning"), rows) + [""]
    for sub in parser._actions:
        if isinstance(sub, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in sub._choices_actions}
            for child, child_parser in sub.choices.items():
                lines += _command(child_parser, f"{name} {child}", helps.get(child, ""), min(level + 1, 4))
    return lines


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.metavar or action.dest
    metavar = "" if action.nargs == 0 else " " + (action.metavar or action.dest.upper())
    return ", ".join(action.option_strings) + metavar


def _about(action: argparse.Action) -> str:
    parts = [action.help or ""]
    if action.choices is not None:
        parts.append(f"one of: {', '.join(map(str, action.choices))}")
    if action.required:
        parts.append("required")
    if action.nargs == "+":
        parts.append("one or more")
    if action.default not in (None, False, [], argparse.SUPPRESS) and action.nargs != 0:
        parts.append(f"default: {action.default}")
    if isinstance(action, argparse._AppendAction):
        parts.append("repeatable")
    return "; ".join(p for p in parts if p)


# --------------------------------------------------------------------------- specs


def type_name(annotation: Any) -> str:
    """``int``, ``'async' | 'sync'``, ``tuple of ('tensorboard' | 'wandb' | 'mlflow')``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin in (tuple, list) and args:
        item = args[0]
        inner = type_name(item)
        return f"list of ({inner})" if " " in inner else f"list of {inner}"
    if isinstance(annotation, type):
        return "None" if annotation is type(None) else annotation.__name__
    return re.sub(r"\b(?:\w+\.)+(?=\w)", "", repr(annotation))


def _default(info: FieldInfo) -> Any:
    if info.default is not PydanticUndefined:
        return info.default
    return info.default_factory() if info.default_factory is not None else "required"  # type: ignore[call-arg]


def _value(spec: Spec | None, path: str) -> Any:
    node: Any = spec
    for part in path.split("."):
        node = getattr(node, part)
    return list(node) if isinstance(node, tuple) else node


def spec_table(cls: type[Spec], presets: Mapping[str, Spec], prefix: str) -> list[str]:
    """One row per leaf field of ``cls``: name, type, bounds, value in each preset, meaning."""
    names = [p for p in STANDARD_PRESETS if p in presets] + sorted(set(presets) - set(STANDARD_PRESETS))
    rows = []
    for path, info in iter_fields(cls):
        values = [code(_value(presets[name], path)) for name in names] if presets else [code(_default(info))]
        rows.append((code(prefix + path), cell(type_name(info.annotation)), cell(bounds(info)), *values,
                     cell(info.description or "")))
    return table(("field", "type", "bounds", *(names or ["default"]), "meaning"), rows)


def spec_reference(registry: Any) -> str:
    """Every field of every registered backbone's, policy's and the trainer's spec."""
    lines = ["# Spec reference", "",
             "Generated from the pydantic specs of every registered backbone and policy. Set a field "
             "with `wmzoo run --set model.FIELD=VALUE` (`policy.`, `train.` likewise) or in a "
             "`--config` file; `wmzoo spec --backbone B --preset P` prints the resolved spec. A "
             "value outside its bounds is one line naming the field, the value and the range.", ""]
    lines += ["## Backbones", ""]
    for name, entry in sorted(registry.tables["backbone"].items()):
        lines += [f"### {name}", "", f"`{entry.spec.__name__}` — {cell(entry.description)}", "",
                  f"Default policy: `{entry.default_policy}`. Page: [{name}](../backbones/{name}.md).", ""]
        lines += spec_table(entry.spec, entry.presets, "model.") + [""]
    lines += ["## Policies", ""]
    for name, entry in sorted(registry.tables["policy"].items()):
        lines += [f"### {name}", "", f"`{entry.spec.__name__}` — {cell(entry.description)}", ""]
        lines += spec_table(entry.spec, entry.presets, "policy.") + [""]
    lines += ["## Trainer", "", f"`{TrainSpec.__name__}` — {cell(TrainSpec.__doc__ or '')}", ""]
    lines += spec_table(TrainSpec, TRAIN_PRESETS, "train.") + [""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- backbones


def readme_of(entry: BackboneEntry) -> str:
    """The ``README.md`` of the package that defines the backbone's spec ("" if it has none)."""
    package = sys.modules[entry.spec.__module__].__package__ or ""
    try:
        return (importlib.resources.files(package) / "README.md").read_text(encoding="utf-8") if package else ""
    except (FileNotFoundError, ModuleNotFoundError, NotADirectoryError):
        return ""


def backbone_page(registry: Any, name: str, readme: str | None = None) -> str:
    """A backbone's page: what the registry knows of it, then its plugin's README (``readme``:
    that README with its links already rewritten)."""
    entry = registry.backbone(name)
    readme = readme_of(entry) if readme is None else readme
    title, _, body = readme.partition("\n") if readme.startswith("# ") else (f"# {name}", "", readme)
    presets = ", ".join(f"`{p}`" for p in sorted(entry.presets))
    facts = [f"- **what**: {entry.description}" if entry.description else "",
             f"- **paper**: {entry.paper}" if entry.paper else "",
             f"- **default policy**: `{entry.default_policy}`",
             f"- **world-model presets**: {presets}; every field: [spec reference](../reference/specs.md#{name})",
             f"- **install**: {registry.backbone_hint(name)}" if registry.backbone_hint(name) else ""]
    body = shift_headings(body)
    return "\n".join([title, "", *[f for f in facts if f], "", body.strip(), ""])


def shift_headings(markdown: str) -> str:
    """Keep a README's own ``#`` title the page's only one: its other level-1 headings become level 2."""
    out, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        out.append("#" + line if not fenced and re.match(r"#\s", line) else line)
    return "\n".join(out)


# --------------------------------------------------------------------------- links


LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)")


def rewrite_links(markdown: str, source: str, page: str, pages: Iterable[str]) -> str:
    """Links of the repository file ``source`` for the site page ``page`` (both POSIX paths from the
    repository root / the site's root): to a site page, relative to ``page``; to another file of
    the repository, its path in code type; anchors and absolute URLs as they are."""
    site = {f"docs/{p}": p for p in pages} | {src: dst for dst, src in COPIED.items()}
    here = posixpath.dirname(source)

    def fix(match: re.Match[str]) -> str:
        text, target = match.groups()
        if re.match(r"[a-z]+:|#", target):
            return match.group(0)
        path, _, anchor = target.partition("#")
        repo_path = posixpath.normpath(posixpath.join(here, path))
        if repo_path in site:
            link = posixpath.relpath(site[repo_path], posixpath.dirname(page) or ".")
            return f"[{text}]({link}{'#' + anchor if anchor else ''})"
        return text if text.startswith("`") else f"{text} (`{repo_path}`)" if text != path else f"`{repo_path}`"

    out, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        out.append(line if fenced else LINK.sub(fix, line))
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- the site


def site_pages(registry: Any, parser: argparse.ArgumentParser, root: Path = ROOT) -> dict[str, str]:
    """Every generated page of the site, by its path under the site's root."""
    hand_written = sorted(p.relative_to(root / "docs").as_posix() for p in (root / "docs").rglob("*.md"))
    backbones = sorted(registry.tables["backbone"])
    generated = {"reference/cli.md": cli_reference(parser), "reference/specs.md": spec_reference(registry)}
    pages = [*hand_written, *COPIED, *generated, *(f"backbones/{name}.md" for name in backbones)]
    for page, source in COPIED.items():
        generated[page] = rewrite_links((root / source).read_text(encoding="utf-8"), source, page, pages)
    for name in backbones:
        entry = registry.backbone(name)
        package_dir = Path(sys.modules[entry.spec.__module__].__file__ or "").parent
        try:
            source = package_dir.relative_to(root).as_posix() + "/README.md"
        except ValueError:  # installed elsewhere: its links have nowhere to point in this site
            source = f"{name}/README.md"
        page = f"backbones/{name}.md"
        generated[page] = backbone_page(registry, name, rewrite_links(readme_of(entry), source, page, pages))
    return generated


def navigation(registry: Any, root: Path = ROOT) -> list[Any]:
    """The site's navigation: the README, the guides of ``docs/`` (by their titles), CONTRIBUTING,
    one page per backbone, the references."""
    guides = []
    for path in sorted((root / "docs").rglob("*.md")):
        first = path.read_text(encoding="utf-8").lstrip().splitlines()[:1]
        title = first[0].lstrip("#").strip() if first and first[0].startswith("# ") else path.stem
        guides.append({title: path.relative_to(root / "docs").as_posix()})
    return [
        {"Home": "index.md"},
        *guides,
        {"Writing a backbone": "contributing.md"},
        {"Backbones": [{name: f"backbones/{name}.md"} for name in sorted(registry.tables["backbone"])]},
        {"Reference": [{"CLI": "reference/cli.md"}, {"Specs": "reference/specs.md"}]},
    ]
