"""A core class of wmzoo as it was at another commit against the current one, on the trainer's
whole update (the world-model step, then the policy imagining from its start states and learning),
alternated rounds in one process (:func:`wmzoo.bench.harness.alternate`).

    python benchmarks/bench_old_class.py --module wmzoo.nn.distributions --cls OneHotCategoricalST \\
        --commit 1bde85b --backbone rssm --set tbtt=true --batch 16 --seq-len 8 --rounds 7

The old class's methods and properties are swapped onto the current class around each timed call,
so every other line of code is today's: it measures that class's change alone. ``--env``: the env
whose observation and action spaces the synthetic batch takes (default: the POPGym pair study's).
Prints one JSON line: seconds per update (median over rounds) and new/old throughput, median
[min, max] over rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import types
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]


def old_class(module: str, cls: str, commit: str) -> type:
    """``module.cls`` executed from its source at ``commit`` (its imports resolve to today's wmzoo)."""
    path = module.replace(".", "/") + ".py"
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{path}"], capture_output=True, text=True)
    if source.returncode:
        raise SystemExit(f"no {path} at commit {commit!r}: {source.stderr.strip()}")
    old = types.ModuleType(f"{module}_old")
    exec(compile(source.stdout, f"{commit}:{path}", "exec"), old.__dict__)  # noqa: S102 - the project's own source
    return getattr(old, cls)


def main(argv: list[str] | None = None) -> int:
    import importlib

    from wmzoo.bench.harness import alternate, bench_env, bench_run, ratio_stats
    from wmzoo.registry import world_model_spec
    from wmzoo.specs import parse_override
    from wmzoo.testing import synthetic_batch
    from wmzoo.train.agent import Agent

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--module", required=True, help="e.g. wmzoo.nn.distributions")
    p.add_argument("--cls", required=True, help="the class in it, e.g. OneHotCategoricalST")
    p.add_argument("--commit", required=True, help="the commit to take the old class from")
    p.add_argument("--backbone", default="rssm")
    p.add_argument("--preset", default="tiny")
    p.add_argument("--env", default="popgym-repeat-previous-easy")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="model spec override")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=8)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--iters", type=int, default=3, help="updates timed together per round and side")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)

    current = getattr(importlib.import_module(args.module), args.cls)
    names = [k for k, v in vars(current).items() if callable(v) or isinstance(v, property)]
    old = old_class(args.module, args.cls, args.commit)
    sides = {"old": {k: vars(old)[k] for k in names if k in vars(old)}, "new": {k: vars(current)[k] for k in names}}

    torch.set_num_threads(args.threads)
    info = bench_env(args.env)
    overrides: dict[str, Any] = {"seq_len": args.seq_len, "batch_size": args.batch}
    overrides.update(parse_override(item) for item in args.set)
    spec = world_model_spec(args.backbone, args.preset, overrides)
    agent = Agent(bench_run(args.backbone, args.preset, spec, info, "cpu", "fp32", False), info)
    data = synthetic_batch(info, args.batch, args.seq_len, agent.device)
    generator = torch.Generator().manual_seed(0)

    def unit(side: str):
        def update() -> None:
            for k, v in sides[side].items():
                setattr(current, k, v)
            agent.train_policy(agent.train_world_model(data), generator)
        return update

    units = [unit("old"), unit("new")]
    for u in units:  # warm-up
        u()
    seconds, _ = alternate(units, args.rounds, args.iters)
    unit("new")()  # leave the current class as it is
    median, low, high = ratio_stats(seconds[0], seconds[1])
    print(json.dumps({"module": args.module, "cls": args.cls, "commit": args.commit, "backbone": args.backbone,
                      "preset": args.preset, "env": args.env, "overrides": overrides, "threads": args.threads,
                      "rounds": args.rounds, "iters": args.iters, "old_s": statistics.median(seconds[0]),
                      "new_s": statistics.median(seconds[1]), "new_vs_old": [median, low, high],
                      "round_s": {"old": seconds[0], "new": seconds[1]}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
