"""What keeping freed memory in malloc's heap (``wmzoo.cli.keep_freed_memory``, on in every ``wmzoo``
command) is worth, in one process, alternated rounds.

glibc's malloc settings are process-wide, so the two arms are two settings of the same process,
switched before each timed call (with ``malloc_trim`` between): ``system`` is glibc's own
behaviour at its steady state (its dynamic mmap threshold at its 32 MiB ceiling, trim at twice
that), ``keep`` is wmzoo's (both at :data:`wmzoo.cli.FREED_MEMORY_KEPT`). Each arm runs one
untimed call after the switch (the heap fills or empties), then one timed call; the order swaps
every round. Units are ``benchmarks/official_speed.py``'s wmzoo sides::

    python benchmarks/malloc_keep.py delta-iris:world_model_update_fp32 rem:imagination --rounds 5

Linux with glibc only (elsewhere it says so in one line, exit 2; so does an unknown unit).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import official_speed  # noqa: E402

from wmzoo.atomic import write_text_atomic  # noqa: E402
from wmzoo.cli import FREED_MEMORY_KEPT, M_MMAP_THRESHOLD, M_TRIM_THRESHOLD  # noqa: E402

ARMS = {"system": (32 << 20, 64 << 20), "keep": (FREED_MEMORY_KEPT, FREED_MEMORY_KEPT)}


def unit(name: str, batch: int) -> Callable[[], None]:
    """``backbone:unit`` → wmzoo's side of that unit in official_speed.py (``delta-iris``, ``rssm``,
    ``iris``, ``rem``; ``paper`` presets)."""
    backbone, _, what = name.partition(":")
    if backbone not in ("delta-iris", "rssm", "iris", "rem"):
        raise ValueError(f"unknown backbone {backbone!r} in {name!r}; one of delta-iris, rssm, iris, rem")
    if what not in official_speed.UNITS:
        raise ValueError(f"{backbone} has no unit {what!r}; one of {', '.join(official_speed.UNITS)}")
    if backbone == "delta-iris":
        units, _ = official_speed.wmzoo_delta_iris_units(batch, 26)
    elif backbone == "rssm":
        units, _ = official_speed.wmzoo_rssm_units(batch, 64)
    else:
        agent = official_speed.wmzoo_agent(backbone)
        units, _ = official_speed.wmzoo_units(agent, batch, agent.world_model.spec.seq_len)
    if what not in units:
        raise ValueError(f"{backbone} has no unit {what!r}; one of {', '.join(units)}")
    return units[what][0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("units", nargs="+", help="backbone:unit, e.g. delta-iris:world_model_update")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, help="write every round here")
    args = p.parse_args(argv)
    try:
        libc = ctypes.CDLL(None)
        mallopt, trim = libc.mallopt, libc.malloc_trim
    except (OSError, AttributeError):
        print("error: this C library has no mallopt (glibc only)", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)

    def timed(f: Callable[[], None], arm: str) -> float:
        mmap, trim_at = ARMS[arm]
        mallopt(M_MMAP_THRESHOLD, mmap), mallopt(M_TRIM_THRESHOLD, trim_at), trim(0)
        f()
        start = time.perf_counter()
        f()
        return time.perf_counter() - start

    rows = []
    for name in args.units:
        try:
            f = unit(name, args.batch)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        seconds: dict[str, list[float]] = {"system": [], "keep": []}
        for r in range(args.rounds):
            for arm in ("system", "keep") if r % 2 == 0 else ("keep", "system"):
                seconds[arm].append(timed(f, arm))
        ratios = [s / k for s, k in zip(seconds["system"], seconds["keep"])]
        row = {"unit": name, "batch": args.batch, "threads": args.threads, "rounds": args.rounds,
               "round_seconds": seconds, "speedup": statistics.median(ratios),
               "speedup_min": min(ratios), "speedup_max": max(ratios)}
        rows.append(row)
        print(f"{name:<40} B {args.batch}  system {statistics.median(seconds['system']):6.2f} s  keep "
              f"{statistics.median(seconds['keep']):6.2f} s  speed-up {row['speedup']:.2f} "
              f"[{row['speedup_min']:.2f}, {row['speedup_max']:.2f}]  ({args.rounds} rounds)", flush=True)
    if args.json:
        write_text_atomic(args.json, json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
