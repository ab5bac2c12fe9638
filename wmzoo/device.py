"""Devices, precision and compilation: the one place wmzoo decides where and how tensors compute.

Core level, next to :mod:`wmzoo.optim`: the trainer, evaluation, the memory protocols and the
bench harness all resolve ``--device`` / ``train.device`` through :func:`resolve_device`, enter
``train.precision`` through :func:`autocast`, and compile through :func:`compile_world_model`.
Nothing here names a backbone.

- **Device**: ``cpu``, ``cuda`` (``cuda:N``), ``mps`` or ``auto`` (CUDA when this machine has a
  GPU, else the CPU). A CUDA device on a machine without one is one line.
- **Precision** ``fp32`` or ``bf16``: bf16 is *mixed* precision, ``torch.autocast`` to bfloat16
  on CPU and CUDA alike. Weights, gradients and optimizer states stay float32; matrix products
  and convolutions run in bf16; the losses are read back as float32 before the backward pass
  (:func:`wmzoo.optim.step_components`), and the ops autocast keeps in float32 (softmax,
  log-softmax, cross-entropy, norms on CUDA; plugins pin their two-hot and KL reductions
  themselves). Imagination runs under one autocast region for the whole rollout, and autocast
  caches the bf16 copy of every float32 leaf weight for the length of a region, so each weight is
  cast once per imagination, not once per imagined step.
- **Compile** (``train.compile``): :func:`compile_world_model` wraps a world model's ``loss`` and
  ``imagine_step`` in ``torch.compile``. A backbone whose code does not compile falls back to eager
  execution with one ``wmzoo: warning:`` line naming it and the reason (a run never fails for it).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import nn

from wmzoo.errors import WmzooError

Precision = Literal["fp32", "bf16"]
PRECISIONS: tuple[str, ...] = ("fp32", "bf16")
DEVICE_NAMES = "cpu, cuda, cuda:N, mps or auto"


def device_name(name: str) -> str:
    """``name`` with ``auto`` made concrete (``cuda`` when this machine has a CUDA GPU, else
    ``cpu``); nothing is checked (:func:`resolve_device` does)."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def resolve_device(name: str, what: str = "train.device") -> torch.device:
    """The torch device ``name`` (``what`` names the field or flag in errors): one this machine
    has, else one line. ``auto``: CUDA where there is a GPU, else the CPU. A data-parallel rank
    takes its own GPU for ``cuda`` (:func:`wmzoo.distributed.local_device`)."""
    from wmzoo import distributed

    sep = "=" if "." in what else " "
    try:
        device = torch.device(device_name(name))
    except (RuntimeError, ValueError):
        raise WmzooError(f"{what}{sep}{name!r} is not a device; use {DEVICE_NAMES}") from None
    if device.type not in ("cpu", "cuda", "mps"):
        raise WmzooError(f"{what}{sep}{name}: wmzoo runs on {DEVICE_NAMES}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise WmzooError(f"{what}{sep}{name}: this machine has no CUDA GPU; use {what}{sep}cpu (or auto)")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise WmzooError(f"{what}{sep}{name}: this machine has {torch.cuda.device_count()} CUDA GPUs")
    if device.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise WmzooError(f"{what}{sep}{name}: this machine has no MPS device; use {what}{sep}cpu (or auto)")
    return distributed.local_device(device)


def check_precision(precision: str, what: str = "train.precision") -> Precision:
    if precision not in PRECISIONS:
        sep = "=" if "." in what else " "
        raise WmzooError(f"{what}{sep}{precision!r}: choose {' or '.join(PRECISIONS)}")
    return precision  # type: ignore[return-value]


def autocast(device: torch.device | str, precision: str) -> contextlib.AbstractContextManager[Any]:
    """The autocast region of ``precision`` on ``device``: bf16 mixed precision, or nothing for
    fp32 (a region that is off, so a nested bf16 region of a plugin stays its own)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    kind = torch.device(device).type
    return torch.autocast(kind if kind in ("cpu", "cuda") else "cpu", dtype=torch.bfloat16)


def float32(value: Any) -> Any:
    """Floating tensors of ``value`` (a tensor, or a dict / list / tuple / dataclass of them) as
    float32: what leaves an autocast region for code that runs outside it."""
    import dataclasses

    if isinstance(value, torch.Tensor):
        return value.float() if value.is_floating_point() and value.dtype != torch.float32 else value
    if isinstance(value, dict):
        return {k: float32(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(float32(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: float32(getattr(value, f.name))
                                             for f in dataclasses.fields(value) if f.init})
    return value


# --------------------------------------------------------------------------- compile

COMPILED_METHODS: tuple[str, ...] = ("loss", "imagine_step")


class _Compiled:
    """A method run through ``torch.compile``; on the first failure to compile it warns once and
    runs eagerly from then on (``failed`` holds the reason)."""

    def __init__(self, owner: str, name: str, eager: Callable[..., Any]) -> None:
        self.owner, self.name, self.eager = owner, name, eager
        self.compiled = torch.compile(eager)
        self.failed: str | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.failed is not None:
            return self.eager(*args, **kwargs)
        try:
            return self.compiled(*args, **kwargs)
        except WmzooError:
            raise
        except Exception as exc:  # noqa: BLE001 - dynamo and inductor raise many types
            if not _is_compile_error(exc):
                raise
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            self.failed = f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]
            print(f"wmzoo: warning: train.compile: {self.owner}.{self.name} does not compile "
                  f"({self.failed}); it runs eagerly", file=sys.stderr)
            return self.eager(*args, **kwargs)


def _is_compile_error(exc: BaseException) -> bool:
    """Whether ``exc`` came from torch.compile's machinery rather than the model's own code."""
    module = type(exc).__module__ or ""
    if module.startswith(("torch._dynamo", "torch._inductor", "torch.fx", "torch._subclasses")):
        return True
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    return any(("torch/_dynamo" in f.filename or "torch/_inductor" in f.filename) for f in frames)


def compile_world_model(world_model: nn.Module, label: str | None = None) -> None:
    """Run ``world_model``'s ``loss`` and ``imagine_step`` through ``torch.compile`` (in place: the
    instance's methods are replaced; its weights and ``state_dict`` are untouched). A method that
    does not compile warns once and runs eagerly (:class:`_Compiled`)."""
    owner = label or type(world_model).__name__
    for name in COMPILED_METHODS:
        method = getattr(world_model, name)
        if isinstance(method, _Compiled):
            continue
        setattr(world_model, name, _Compiled(owner, name, method))


def compile_failures(world_model: nn.Module) -> dict[str, str]:
    """The compiled methods of ``world_model`` that fell back to eager, with the reason."""
    return {name: m.failed for name in COMPILED_METHODS
            if isinstance(m := world_model.__dict__.get(name), _Compiled) and m.failed is not None}


def is_compiled(world_model: nn.Module) -> bool:
    return any(isinstance(world_model.__dict__.get(name), _Compiled) for name in COMPILED_METHODS)
