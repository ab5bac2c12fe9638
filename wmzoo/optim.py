"""Optimizers from :class:`~wmzoo.specs.OptimSpec`: AdamW with per-parameter groups, linear
warm-up then a constant or cosine rate, global-norm clipping, and steps with a non-finite loss or
gradient skipped.

Core level, next to :mod:`wmzoo.specs`: the trainer, the bench harness and the policies of
plugins (which may not import :mod:`wmzoo.train`) build their optimizers here."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor, nn

from wmzoo.distributed import average_gradients
from wmzoo.specs import OptimSpec


def learning_rate(spec: OptimSpec, update: int) -> float:
    """The rate for the 0-based ``update``: linear warm-up to ``spec.lr`` over ``spec.warmup``
    updates, then constant, or cosine annealing to ``spec.min_lr_ratio · lr`` over
    ``spec.decay_steps`` updates (held there afterwards)."""
    if update < spec.warmup:
        return spec.lr * (update + 1) / spec.warmup
    if spec.schedule == "constant":
        return spec.lr
    progress = min(1.0, (update - spec.warmup) / spec.decay_steps)
    floor = spec.min_lr_ratio
    return spec.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def adamw(params: Iterable[nn.Parameter], spec: OptimSpec) -> torch.optim.AdamW:
    """AdamW over ``params`` with one group per distinct ``param._optim`` setting.

    A module may mark a parameter with ``param._optim = {"lr_scale": s, "weight_decay": w}``
    (the S4 codebase's convention for its SSM parameters); unmarked parameters use ``spec``.
    Each group keeps its ``lr_scale`` so :func:`set_learning_rate` can follow the schedule.
    """
    groups: dict[tuple[float, float], list[nn.Parameter]] = {}
    for p in params:
        if p.requires_grad:
            opts = getattr(p, "_optim", {})
            key = (float(opts.get("lr_scale", 1.0)), float(opts.get("weight_decay", spec.weight_decay)))
            groups.setdefault(key, []).append(p)
    return torch.optim.AdamW(
        [
            {"params": ps, "lr_scale": scale, "weight_decay": wd, "lr": spec.lr * scale}
            for (scale, wd), ps in groups.items()
        ],
        lr=spec.lr, eps=spec.eps, weight_decay=spec.weight_decay,
    )


def decay_linear_weights_only(*modules: nn.Module) -> None:
    """Weight decay on the weights of ``nn.Linear`` layers only: every other parameter of
    ``modules`` (biases, norms, embeddings, learned tokens) is marked ``_optim = {"weight_decay":
    0}`` for :func:`adamw`. minGPT's ``configure_optimizers`` rule, which IRIS's and REM's codes
    follow (REM table 3: "excluding biases, norms and embeddings")."""
    decayed = {id(m.weight) for module in modules for m in module.modules() if isinstance(m, nn.Linear)}
    for module in modules:
        for p in module.parameters():
            if id(p) not in decayed:
                p._optim = {**getattr(p, "_optim", {}), "weight_decay": 0.0}  # type: ignore[attr-defined]


def set_learning_rate(optimizer: torch.optim.Optimizer, spec: OptimSpec, update: int) -> None:
    """Set every group's rate to :func:`learning_rate` times the group's ``lr_scale``."""
    lr = learning_rate(spec, update)
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)


class Optimizer:
    """An AdamW optimizer that knows its spec: ``step(loss)`` does the schedule, clipping and
    the step, or skips a step whose loss or gradient is not finite.

    Every optimizer the trainer steps is one of these (the world model's components through
    :func:`step_components`, each policy's through ``Policy.optimizers()``), so this is the one
    place non-finite values are caught. A skipped step changes nothing: no parameter, no Adam
    moment or step count, no learning rate; the schedule counts applied steps (:attr:`updates`),
    so it does not advance either. The skip is counted in :attr:`skipped` and described in
    :attr:`skip_reason`; the trainer decides when too many in a row stop a run.
    """

    def __init__(self, params: Iterable[nn.Parameter], spec: OptimSpec) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.spec = spec
        self.opt = adamw(self.params, spec)
        self.updates = 0  # applied steps: the schedule's position (checkpointed)
        self.skipped = 0  # steps skipped for a non-finite loss or gradient (this process)
        self.skip_reason = ""  # why the last skipped step was skipped: "is NaN", "has a gradient ..."

    def zero_grad(self) -> None:
        self.opt.zero_grad(set_to_none=True)

    def step(self, loss: Tensor | None = None, backward: bool = True) -> float:
        """Backward (if ``loss`` and ``backward``), clip to ``spec.clip``, step; returns the
        gradient norm before clipping.

        ``backward=False`` (or no ``loss``): the gradients were already computed by a shared
        backward pass, and ``loss``, when given, is only checked. The step is skipped when the
        loss or the gradient norm is NaN or infinite (any non-finite gradient makes the norm so).
        """
        if loss is not None and backward:
            self.zero_grad()
            loss.backward()
        # data-parallel (wmzoo.distributed): the ranks' gradients and losses averaged BEFORE
        # clipping, so every rank clips, checks and steps the same; the identity in one process
        loss = average_gradients(self.params, loss)
        # the device sync of reading the norm was always paid (it is logged); the loss was
        # computed before the backward pass, so reading it waits for nothing more
        norm = float(nn.utils.clip_grad_norm_(self.params, self.spec.clip))
        value = 0.0 if loss is None else float(loss.detach())
        if not (math.isfinite(norm) and math.isfinite(value)):
            self.zero_grad()
            self.skipped += 1
            if not math.isfinite(value):
                self.skip_reason = f"is {_nonfinite_name(value)}"
            else:
                self.skip_reason = f"has a gradient norm of {_nonfinite_name(norm)} (the loss is finite)"
            return norm
        set_learning_rate(self.opt, self.spec, self.updates)
        self.opt.step()
        self.updates += 1
        return norm

    def state_dict(self) -> dict:
        return {"opt": self.opt.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        """Load a :meth:`state_dict`; ``ValueError`` naming the first moment estimate whose dtype or
        shape is not its parameter's (torch would cast or broadcast it silently)."""
        params = [p for group in self.opt.param_groups for p in group["params"]]
        for index, entry in state["opt"]["state"].items():
            if not 0 <= int(index) < len(params):
                raise ValueError(f"optimizer state of parameter {index}: the optimizer has {len(params)} parameters")
            param = params[int(index)]
            for key, value in entry.items():
                if not isinstance(value, Tensor):
                    continue
                if key == "step" and value.is_floating_point() and value.numel() == 1:
                    continue
                if key == "step" or value.dtype != param.dtype or value.shape != param.shape:
                    raise ValueError(f"optimizer state {index}/{key} is {str(value.dtype)[6:]} {list(value.shape)} "
                                     f"where its parameter is {str(param.dtype)[6:]} {list(param.shape)}")
        self.opt.load_state_dict(state["opt"])
        self.updates = int(state["updates"])


def _nonfinite_name(value: float) -> str:
    return "NaN" if math.isnan(value) else ("+inf" if value > 0 else "-inf")


def world_model_optimizers(components: dict[str, tuple[list[nn.Parameter], OptimSpec]]) -> dict[str, Optimizer]:
    """One :class:`Optimizer` per component of ``WorldModel.components()``."""
    return {name: Optimizer(params, spec) for name, (params, spec) in components.items()}


def step_components(
    optimizers: dict[str, Optimizer], losses: dict[str, Tensor], update: int | None = None
) -> dict[str, float]:
    """One update of the components that have started: a shared backward pass over their summed
    losses, then each one's clipped step, skipped where its loss or gradient is not finite (see
    :class:`Optimizer`). A component starts at the trainer's 0-based ``update`` ``spec.start``
    (``update=None``: all have); one that has not gets no gradient and no step. Returns the
    gradient norm of each component that stepped."""
    active = [n for n, opt in optimizers.items() if update is None or opt.spec.started(update)]
    for name in active:
        optimizers[name].zero_grad()
    if not active:
        return {}
    losses = {name: losses[name].float() for name in active}  # bf16 under autocast: read in float32
    total = sum(losses[name] for name in active)
    if total.requires_grad:  # type: ignore[union-attr]
        total.backward()  # type: ignore[union-attr]
    return {name: optimizers[name].step(losses[name], backward=False) for name in active}
