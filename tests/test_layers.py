"""The import graph keeps its layers: no cycles inside ``wmzoo/``, and nothing below the trainer
(plugins, ``wmzoo/nn``, the data layer, ...) reaches up into the trainer or the CLI.

The graph is read from the source with :mod:`ast`, without importing anything:

- every ``import`` and ``from ... import`` counts, at module level or inside a function or
  method (a lazy import is how a cycle hides), except those under ``if TYPE_CHECKING:``, which
  never run;
- relative imports are resolved against the importing module's package; files under
  ``plugins/<name>/`` are the modules ``wmzoo_plugins.<name>.*`` they install as;
- ``from pkg import name`` is an edge to the submodule ``pkg.name`` when that is a module of the
  tree, else to ``pkg`` itself; ``import a.b.c`` is an edge to ``a.b.c``;
- a package is its ``__init__.py``: importing ``wmzoo.data`` is an edge to ``wmzoo.data``, whose
  own imports (its re-exports) are that module's edges, so a cycle through a re-export shows up.
  The implicit import of a module's parent packages (Python runs ``wmzoo/data/__init__.py``
  before ``wmzoo.data.replay``) is not an edge: a package's ``__init__`` importing its own
  submodules is how it re-exports them, and counting both directions would make every
  re-exporting package a cycle.

Rules: (a) the graph of ``wmzoo.*`` modules has no cycle; (b) only the trainer itself
(``wmzoo.train``), evaluation (``wmzoo.eval``, which loads trained agents), studies (``wmzoo.study``, which run and read runs), the bench
(``wmzoo.bench``, which times the trainer's own Agent) and the CLI import
``wmzoo.train`` or ``wmzoo.cli`` (anything under them), directly or through other modules: in
particular no module under ``plugins/`` or ``wmzoo/nn/`` does, nor the data layer
(``wmzoo.data``); (c) no module imports ``wmzoo.cli``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (("wmzoo", "wmzoo"), ("plugins", "wmzoo_plugins"))
"""Folders of the repository and the package names their files install as."""
TRAINER = ("wmzoo.train", "wmzoo.cli")
"""The top layers: the trainer and the CLI (the modules and everything under them)."""
ABOVE_THE_TRAINER = ("wmzoo.train", "wmzoo.eval", "wmzoo.study", "wmzoo.bench", "wmzoo.cli")
"""What may import :data:`TRAINER`; everything else, plugins included, sits below it."""


def module_files(root: Path = ROOT, sources: tuple[tuple[str, str], ...] = SOURCES) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under the ``sources`` folders of ``root``."""
    modules: dict[str, Path] = {}
    for folder, package in sources:
        for path in sorted((root / folder).rglob("*.py")):
            parts = [package, *path.relative_to(root / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement below ``node``, skipping the bodies of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _imports(ast.Module(body=[other], type_ignores=[]))
        else:
            yield from _imports(child)


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the tree that module ``name`` (file ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        found.update(t for t in targets if t in modules)
    found.discard(name)
    return found


def import_graph(root: Path = ROOT, sources: tuple[tuple[str, str], ...] = SOURCES) -> dict[str, set[str]]:
    """Module -> the modules of the tree it imports."""
    modules = module_files(root, sources)
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle as a path ``[a, b, ..., a]``, or ``None`` (depth-first search, colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle is not None:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle is not None:
                return cycle
    return None


def path_to(graph: dict[str, set[str]], start: str, goal: tuple[str, ...]) -> list[str] | None:
    """The shortest import chain from ``start`` to a module in or under ``goal``, or ``None``."""
    chains = {start: [start]}
    queue = [start]
    for node in queue:
        for nxt in sorted(graph[node]):
            if nxt not in chains:
                chains[nxt] = [*chains[node], nxt]
                if reaches(nxt, goal):
                    return chains[nxt]
                queue.append(nxt)
    return None


def reaches(module: str, goal: tuple[str, ...]) -> bool:
    return any(module == g or module.startswith(g + ".") for g in goal)


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_the_graph_sees_lazy_relative_and_package_imports(tmp_path):
    files = {
        "__init__.py": "from pkg.a import A\n",
        "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import c\n"
                "A = 1\ndef f():\n    import pkg.b\n",
        "b.py": "from . import sub\nfrom .sub.d import D\n",
        "sub/__init__.py": "",
        "sub/d.py": "from ..a import A\nfrom pkg import A as B\nD = 2\n",
        "c.py": "import os\n",
    }
    for name, text in files.items():
        (tmp_path / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / name).write_text(text)
    g = import_graph(tmp_path, (("src", "pkg"),))
    assert g == {
        "pkg": {"pkg.a"},  # the package's re-export
        "pkg.a": {"pkg.b"},  # inside a function; not pkg.c, imported under TYPE_CHECKING
        "pkg.b": {"pkg.sub", "pkg.sub.d"},  # relative: a submodule, a name of a module
        "pkg.sub": set(),
        "pkg.sub.d": {"pkg.a", "pkg"},  # relative from a subpackage; a name of the package
        "pkg.c": set(),
    }
    # d imports A through the package's re-export: a cycle through pkg/__init__.py
    assert find_cycle(g) == ["pkg", "pkg.a", "pkg.b", "pkg.sub.d", "pkg"]
    assert path_to(g, "pkg.b", ("pkg.a",)) == ["pkg.b", "pkg.sub.d", "pkg.a"]
    assert find_cycle({"x": {"y"}, "y": set()}) is None


def test_no_import_cycle_inside_wmzoo(graph):
    inside = {k: {v for v in vs if reaches(v, ("wmzoo",))} for k, vs in graph.items() if reaches(k, ("wmzoo",))}
    cycle = find_cycle(inside)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_plugins_nn_and_data_stay_below_the_trainer_and_cli(graph):
    below = sorted(m for m in graph if not reaches(m, ABOVE_THE_TRAINER))
    assert {"wmzoo_plugins.rssm.model", "wmzoo.nn.latent", "wmzoo.data.generate"} <= set(below)
    chains = [chain for m in below if (chain := path_to(graph, m, TRAINER)) is not None]
    assert not chains, "imports above their layer: " + "; ".join(" -> ".join(c) for c in chains)


def test_nothing_imports_the_cli(graph):
    importers = sorted(m for m, imported in graph.items() if "wmzoo.cli" in imported)
    assert not importers, f"{importers} import wmzoo.cli"
