"""Optimizers from :class:`~wmzoo.specs.OptimSpec`: AdamW, linear warm-up, global-norm clipping."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn

from wmzoo.specs import OptimSpec


class Optimizer:
    """An AdamW optimizer that knows its spec: ``step(loss)`` does warm-up, clipping and the step.

    ``loss`` may be None when gradients were already computed by a shared backward pass.
    """

    def __init__(self, params: Iterable[nn.Parameter], spec: OptimSpec) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.spec = spec
        self.opt = torch.optim.AdamW(
            self.params, lr=spec.lr, eps=spec.eps, weight_decay=spec.weight_decay
        )
        self.updates = 0

    def zero_grad(self) -> None:
        self.opt.zero_grad(set_to_none=True)

    def step(self, loss: Tensor | None = None) -> float:
        """Backward (if ``loss``), clip to ``spec.clip``, step; returns the gradient norm."""
        if loss is not None:
            self.zero_grad()
            loss.backward()
        if self.spec.warmup:
            scale = min(1.0, (self.updates + 1) / self.spec.warmup)
            for group in self.opt.param_groups:
                group["lr"] = self.spec.lr * scale
        norm = nn.utils.clip_grad_norm_(self.params, self.spec.clip)
        self.opt.step()
        self.updates += 1
        return float(norm)

    def state_dict(self) -> dict:
        return {"opt": self.opt.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.opt.load_state_dict(state["opt"])
        self.updates = int(state["updates"])


def world_model_optimizers(components: dict[str, tuple[list[nn.Parameter], OptimSpec]]) -> dict[str, Optimizer]:
    """One :class:`Optimizer` per component of ``WorldModel.components()``."""
    return {name: Optimizer(params, spec) for name, (params, spec) in components.items()}


def step_components(optimizers: dict[str, Optimizer], losses: dict[str, Tensor]) -> dict[str, float]:
    """One update of every component: a shared backward pass over the summed losses, then each
    component's clipped step. Returns each component's gradient norm."""
    for opt in optimizers.values():
        opt.zero_grad()
    sum(losses.values()).backward()  # type: ignore[union-attr]
    return {name: opt.step() for name, opt in optimizers.items()}
