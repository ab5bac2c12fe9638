"""What a run does about NaN and inf.

Every optimizer the trainer steps is a :class:`wmzoo.optim.Optimizer`, which skips a step whose
loss or gradient is not finite and leaves everything as it was. Here the trainer watches them:
:class:`NonFiniteGuard` warns about each skipped step and says when to stop the run (one line)
after ``train.max_nonfinite`` skipped steps in a row of one optimizer; :func:`nonfinite_tensors` lets
:func:`wmzoo.train.rundir.save_run` refuse to write a checkpoint that is not finite, so the last
finite one is never overwritten.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel
from tqdm import tqdm

from wmzoo.optim import Optimizer
from wmzoo.specs import OptimSpec, RunSpec


class NonFiniteGuard:
    """Counts the steps each of ``optimizers`` skipped and stops after ``limit`` in a row of one.

    Call :meth:`check` after every update. An optimizer's run of skipped steps ends with its
    next applied step; updates in which it does not step (a policy trained every few updates)
    neither extend nor end it. ``explain(optimizer)`` completes the stop line: where the last
    checkpoint is and what to change.
    """

    def __init__(self, optimizers: Mapping[str, Optimizer], limit: int,
                 explain: Callable[[Optimizer], str]) -> None:
        self.optimizers, self.limit, self.explain = dict(optimizers), limit, explain
        self.seen = {name: (opt.updates, opt.skipped) for name, opt in self.optimizers.items()}
        self.in_a_row = dict.fromkeys(self.optimizers, 0)

    def check(self, update: int, metrics: Mapping[str, float]) -> tuple[int, str]:
        """After update number ``update`` (``metrics``: its logged scalars, which name the loss
        terms): warn about each skipped step. Returns how many were skipped, and the line to stop
        the run with once an optimizer has skipped ``limit`` steps in a row (else "")."""
        skipped = []
        for name, opt in self.optimizers.items():
            applied, failed = opt.updates - self.seen[name][0], opt.skipped - self.seen[name][1]
            self.seen[name] = (opt.updates, opt.skipped)
            if applied:
                self.in_a_row[name] = 0
            if failed:
                self.in_a_row[name] += failed
                skipped.append(name)
        if not skipped:
            return 0, ""
        terms = [k for k, v in metrics.items() if not math.isfinite(v) and k not in self.optimizers
                 and not k.endswith(("grad_norm", "/loss"))]
        detail = f" (non-finite: {', '.join(terms[:4])}{', ...' if len(terms) > 4 else ''})" if terms else ""
        what = ", ".join(f"loss '{name}' {self.optimizers[name].skip_reason}" for name in skipped) + detail
        worst = max(skipped, key=self.in_a_row.__getitem__)
        if self.in_a_row[worst] >= self.limit:
            return len(skipped), (
                f"update {update}: loss '{worst}' {self.optimizers[worst].skip_reason}{detail} for "
                f"{self.in_a_row[worst]} steps in a row (train.max_nonfinite = {self.limit}); "
                f"{self.explain(self.optimizers[worst])}"
            )
        tqdm.write(f"wmzoo: warning: update {update}: {what}; step skipped "
                   f"({self.in_a_row[worst]} in a row, the run stops at {self.limit})", file=sys.stderr)
        return len(skipped), ""


def nonfinite_tensors(tree: Any, path: str = "") -> list[str]:
    """Paths (``a/b/c``) of the floating tensors in a nested dict/list ``tree`` that hold NaN or
    inf."""
    if isinstance(tree, torch.Tensor):
        finite = not (tree.is_floating_point() or tree.is_complex()) or bool(torch.isfinite(tree).all())
        return [] if finite else [path]
    if isinstance(tree, Mapping):
        items: Any = tree.items()
    elif isinstance(tree, (list, tuple)):
        items = enumerate(tree)
    else:
        return []
    return [bad for key, value in items for bad in nonfinite_tensors(value, f"{path}/{key}" if path else str(key))]


def kept_checkpoint(path: Path) -> str:
    """Where the last (finite) checkpoint of a run stopped for non-finite values is."""
    return f"the last finite checkpoint is kept at {path}" if path.is_file() else "no checkpoint was written yet"


def nonfinite_hint(run: RunSpec, optim: OptimSpec | None = None, resumable: bool = False) -> str:
    """How to get past non-finite losses: the ``--set`` path of ``optim`` (else of every optimizer
    spec of the run) whose rate to lower or clip to tighten; or, for a ``resumable`` run (a
    training run, online or offline), ``--resume`` (other batches)."""
    paths = {id(spec): path for part in ("model", "policy") for path, spec in _optim_specs(getattr(run, part), part)}
    path = paths.get(id(optim))
    if path:
        where = f"--set {path}.lr=... or {path}.clip=..."
    else:
        where = f"--set <optimizer>.lr=... or <optimizer>.clip=...; optimizers: {', '.join(paths.values())}"
    resume = ", or try --resume from the checkpoint (other batches)" if resumable else ""
    return f"start a new run with a lower learning rate or a tighter gradient clip ({where}){resume}"


def _optim_specs(spec: BaseModel, prefix: str) -> list[tuple[str, OptimSpec]]:
    """``(path, spec)`` of every :class:`OptimSpec` inside ``spec``, nested ones included."""
    found: list[tuple[str, OptimSpec]] = []
    for name in type(spec).model_fields:
        value = getattr(spec, name)
        if isinstance(value, OptimSpec):
            found.append((f"{prefix}.{name}", value))
        elif isinstance(value, BaseModel):
            found += _optim_specs(value, f"{prefix}.{name}")
    return found
