"""``wmzoo bench`` of a bundled backbone as it was at another commit, beside the current one, in
one process (alternated rounds): the plugin folder ``plugins/NAME`` at ``--commit`` is copied out
of git into a temporary package and its backbones registered as ``<backbone>-old``.

    python benchmarks/bench_old_plugin.py --plugin tokenwm --commit 9b3a63f -- \\
        --backbones tokenwm-old:small,tokenwm:small,rssm:small --mode train --batch 8 --seq-len 32 \\
        --iters 1 --rounds 7 --threads 1 --no-components

Everything after ``--`` is ``wmzoo bench``'s command line. The old plugin builds on the current
core (``wmzoo``), so it measures the plugin's own change.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plugin", required=True, help="folder under plugins/, e.g. tokenwm")
    p.add_argument("--commit", required=True, help="the commit to take it from")
    p.add_argument("bench", nargs=argparse.REMAINDER, help="-- then wmzoo bench's arguments")
    args = p.parse_args(argv)
    bench = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    listing = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", args.commit, f"plugins/{args.plugin}/"],
                             capture_output=True, text=True)
    if listing.returncode or not listing.stdout.strip():
        p.error(f"no plugins/{args.plugin} at commit {args.commit!r}")
    folder = Path(tempfile.mkdtemp())
    package = folder / f"{args.plugin}_old"
    package.mkdir()
    for path in listing.stdout.split():
        if path.endswith(".py"):
            text = subprocess.run(["git", "-C", str(ROOT), "show", f"{args.commit}:{path}"], capture_output=True,
                                  text=True, check=True).stdout
            (package / Path(path).name).write_text(text)
    sys.path.insert(0, str(folder))
    old = importlib.import_module(package.name)

    from wmzoo import hookimpl
    from wmzoo.cli import main as wmzoo_main
    from wmzoo.registry import default_registry

    class Old:
        @hookimpl
        def wmzoo_backbones(self):  # type: ignore[no-untyped-def]
            return [dataclasses.replace(e, name=f"{e.name}-old") for e in old.wmzoo_backbones()]

    default_registry().register(Old(), name=package.name)
    return wmzoo_main(["bench", *bench])


if __name__ == "__main__":
    raise SystemExit(main())
