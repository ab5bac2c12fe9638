"""The agent: a backbone's world model, a policy, and the world model's optimizers.

Built from a :class:`~wmzoo.specs.RunSpec` (whose model and policy specs are already validated)
through the registry's build functions, so nothing here knows which backbone or policy it holds.
This is what a checkpoint stores and restores.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from wmzoo.device import autocast, compile_world_model, float32, resolve_device
from wmzoo.errors import SpecError, WmzooError
from wmzoo.imagination import frozen, imagine
from wmzoo.interfaces import (
    Batch, EnvInfo, State, TrainOutput, Trajectory, WorldModel, index_state, map_obs, reset_state,
)
from wmzoo.optim import Optimizer, step_components, world_model_optimizers
from wmzoo.registry import build_policy, build_world_model
from wmzoo.specs import RunSpec
from wmzoo.train.checkpoint import tensor_mismatch
from wmzoo.train.nonfinite import nonfinite_tensors


def step_logged(optimizers: dict[str, Optimizer], losses: dict[str, Tensor], update: int | None = None
                ) -> dict[str, float]:
    """:func:`~wmzoo.optim.step_components`, and the scalars every update logs: each loss as
    ``<name>/loss``, the gradient norm of each component that stepped as ``<name>/grad_norm``."""
    norms = step_components(optimizers, losses, update)
    return {**{f"{name}/grad_norm": norm for name, norm in norms.items()},
            **{f"{name}/loss": float(loss.detach()) for name, loss in losses.items()}}


class Agent(nn.Module):
    def __init__(self, run: RunSpec, env: EnvInfo) -> None:
        super().__init__()
        self.run, self.env, self.policy_name = run, env, run.policy_name
        self.world_model = build_world_model(run.backbone, run.model, env)
        self.policy = build_policy(run.policy_name, run.policy, self.world_model.feature_shape, env)
        self.optimizers = world_model_optimizers(self.world_model.components())
        if run.policy.segment and type(self.world_model).imagination_starts is WorldModel.imagination_starts:
            raise SpecError(
                f"policy.segment={run.policy.segment}: backbone '{run.backbone}' cannot start "
                "imagination from segments of its own (no WorldModel.imagination_starts); set policy.segment=0"
            )
        for name, opt in self.policy.optimizers().items():
            if not isinstance(opt, Optimizer):
                raise WmzooError(
                    f"policy '{run.policy_name}': its optimizer '{name}' is {type(opt).__name__}, "
                    "not a wmzoo.optim.Optimizer (a policy steps through one, so that non-finite "
                    "steps are skipped and counted)"
                )
        self.device = resolve_device(run.train.device)
        self.precision = run.train.precision
        self.to(self.device)
        if run.train.compile:
            compile_world_model(self.world_model, run.backbone)
        self._acting: dict[str, Any] | None = None

    # -- learning -----------------------------------------------------------------------
    def named_optimizers(self) -> dict[str, Optimizer]:
        """Every optimizer the agent steps: the world model's components by name, the policy's
        as ``policy/<name>`` (the prefixes of their logged scalars)."""
        return {**self.optimizers, **{f"policy/{k}": o for k, o in self.policy.optimizers().items()}}

    def train_world_model(self, batch: Batch, carry: State | None = None, update: int | None = None,
                          starts: bool = True) -> TrainOutput:
        """One update of the world-model components that have started by the trainer's 0-based
        ``update`` (``OptimSpec.start``; one shared backward pass). Every component's loss is
        logged; a gradient norm only for those that stepped. ``starts``: whether a policy will
        imagine from this batch's start states; a backbone that defers them
        (``TrainOutput.starts``) builds them only then, before the step (the loss's weights)."""
        self.world_model.train()
        with self.autocast():
            out = self.world_model.loss(batch.to(self.device), carry)
            if starts:
                out.imagination_start()
            else:
                out.discard_starts()
        out.metrics.update(step_logged(self.optimizers, out.losses, update))
        return out

    def train_policy(
        self, out: TrainOutput, generator: torch.Generator | None = None, segments: Batch | None = None,
    ) -> dict[str, float]:
        """Imagine from the world-model batch's start states (``out``), or from the last steps of
        the policy's own ``segments`` (``policy.segment > 0``), and let the policy learn."""
        grad = self.policy.imagine_with_grad  # the policy's gradient flows through the dynamics,
        freeze = frozen(self.world_model) if grad else contextlib.nullcontext()  # which it never updates
        with self.autocast(), freeze:
            trajectory = self._imagine_for_policy(out, generator, segments, grad)
            metrics = self.policy.learn(float32(trajectory))
        metrics["imagined_reward"] = float(trajectory.rewards.detach().float().mean())
        return {f"policy/{k}": v for k, v in metrics.items()}

    def _imagine_for_policy(self, out: TrainOutput, generator: torch.Generator | None, segments: Batch | None,
                            grad: bool = False) -> Trajectory:
        if segments is not None:
            self.world_model.eval()
            with torch.no_grad():
                start, cont, context = self.world_model.imagination_starts(segments.to(self.device))
        else:
            start, cont, context = out.imagination_start()
        limit = self.policy.spec.max_starts
        n = cont.shape[0]
        if limit and n > limit:
            keep = torch.randperm(n, generator=generator)[:limit].to(cont.device)
            start, cont = index_state(start, keep), cont[keep]
            context = None if context is None else context.index(keep)
        pstate = None
        if context is not None:
            with torch.no_grad():
                pstate = self.policy.burn_in(context)
        self.world_model.eval()
        return imagine(
            self.world_model, self.policy, start, self.policy.spec.horizon, start_cont=cont,
            policy_state=pstate, grad=grad,
        )

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The run's ``train.precision`` region on the agent's device (:func:`wmzoo.device.autocast`)."""
        return autocast(self.device, self.precision)

    # -- acting in real environments --------------------------------------------------
    @torch.no_grad()
    def act(
        self, obs: np.ndarray, is_first: np.ndarray, sample: bool = True, actions: np.ndarray | None = None,
        override: np.ndarray | None = None, temperature: float = 1.0, condition: torch.Tensor | None = None,
    ) -> np.ndarray:
        """Actions for ``N`` envs from their current observations ``uint8 [N, C, H, W]`` (a pixel
        env) or a dict of the spec's entries, each ``[N, ...]``.

        Keeps the world model's filter state and the policy state per env; ``is_first`` resets
        an env's states (start of a new episode). ``actions`` overrides the policy's choice
        (random prefill; with the bool mask ``override``, only for those envs: ε-greedy) while
        the filter state still follows the actions really taken. ``temperature``: sampling
        temperature of the policy (see :meth:`~wmzoo.interfaces.Policy.act`).
        """
        n = len(is_first)
        first = torch.as_tensor(is_first, device=self.device)
        if self._acting is None or self._acting["prev_action"].shape[0] != n:
            self._acting = {
                "state": self.world_model.initial_state(n),
                "pstate": self.policy.initial_state(n),
                "prev_action": torch.zeros(n, *self.env.action_shape, dtype=self.env.action_dtype, device=self.device),
            }
        acting = self._acting
        self.world_model.eval()
        acting["prev_action"][first] = 0
        with self.autocast():
            state = self.world_model.observe_step(
                acting["state"], map_obs(lambda x: torch.as_tensor(x, device=self.device), obs),
                acting["prev_action"], first,
            )
            pstate = acting["pstate"]
            if pstate:
                pstate = reset_state(pstate, self.policy.initial_state(n), first)
            extra = {"temperature": temperature} if temperature != 1.0 else {}
            given = pstate if condition is None else {**pstate, "condition": condition.to(self.device)}
            action, pstate = self.policy.act(self.world_model.features(state), given, sample=sample, **extra)
        action = float32(action)
        pstate.pop("condition", None)  # given anew at every step, never carried
        if actions is not None:
            forced = torch.as_tensor(actions, dtype=self.env.action_dtype, device=self.device)
            if override is None:
                action = forced
            else:
                mask = torch.as_tensor(override, device=self.device).view(-1, *[1] * (action.dim() - 1))
                action = torch.where(mask, forced, action)
        acting.update(state=state, pstate=pstate, prev_action=action)
        return action.cpu().numpy()

    def reset_acting(self) -> None:
        self._acting = None

    # -- checkpoint tree ---------------------------------------------------------------
    def state_tree(self) -> dict[str, Any]:
        return {
            "world_model": self.world_model.state_dict(),
            "policy": self.policy.state_dict(),
            "world_model_optim": {k: o.state_dict() for k, o in self.optimizers.items()},
            "policy_optim": {k: o.state_dict() for k, o in self.policy.optimizers().items()},
        }

    def load_state_tree(self, tree: dict[str, Any], source: str = "checkpoint") -> None:
        """Load a checkpoint's weights and optimizer states; a tree that does not fit this agent
        (missing or unexpected tensors, other shapes: another model format or preset; another
        dtype: an edited header) is one line naming the first mismatch, checked before any use.
        Checkpoints from before policies stepped through :class:`wmzoo.optim.Optimizer` (a policy
        ``updates`` buffer, raw AdamW states) load too."""
        policy = dict(tree["policy"])
        legacy = policy.pop("updates", None) if "updates" not in self.policy.state_dict() else None
        for part, saved, module in (("world_model", tree["world_model"], self.world_model), ("policy", policy, self.policy)):
            mismatch = tensor_mismatch(saved, module.state_dict())
            if mismatch is not None:
                raise WmzooError(f"{source} does not fit this wmzoo's {self.run.backbone} / {self.policy_name}: "
                                 f"{part}/{mismatch}; use a checkpoint this model wrote")
        bad = nonfinite_tensors({k: tree[k] for k in ("world_model", "policy") if k in tree})
        if bad:
            raise WmzooError(f"{source} holds NaN or inf weights ({bad[0]}, {len(bad)} tensors in all): "
                             "it was written by a diverged run; use an earlier checkpoint")
        try:
            self.world_model.load_state_dict(tree["world_model"])
            self.policy.load_state_dict(policy)
            for name, opt in self.optimizers.items():
                opt.load_state_dict(tree["world_model_optim"][name])
            for name, opt in self.policy.optimizers().items():
                state = tree["policy_optim"][name]
                if "opt" not in state:  # a raw AdamW state: its schedule position was the buffer
                    state = {"opt": state, "updates": 0 if legacy is None else int(legacy)}
                opt.load_state_dict(state)
        except (RuntimeError, KeyError, ValueError, TypeError) as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            why = "; ".join(lines)[:400] if isinstance(exc, RuntimeError) else f"{type(exc).__name__}: {exc}"
            raise WmzooError(
                f"{source} does not fit this wmzoo's {self.run.backbone} / {self.policy_name} "
                f"(another model format or preset?): {why}"
            ) from None

