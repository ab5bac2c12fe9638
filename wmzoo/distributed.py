"""Data-parallel training on ``torch.distributed`` (launched by torchrun; gloo on CPU, NCCL on GPU).

Core level, next to :mod:`wmzoo.optim`, which is the one place gradients are averaged: every
:class:`~wmzoo.optim.Optimizer` step all-reduces its parameters' gradients (and its loss, so every
rank takes the same skip decision) before clipping, so every world-model component and every
policy is data-parallel without a plugin knowing. Nothing here names a backbone or needs a GPU.

A process is a rank of a data-parallel run when torchrun's ``WORLD_SIZE`` is above 1 and
:func:`setup` initialised the default process group; otherwise every function here is the
one-process identity (rank 0 of 1).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import Tensor, nn

# seeds of rank r are offset by r · SEED_STRIDE (envs, collector, replay sampling, torch): far
# above the offsets a run adds itself (updates done, 1000 · episodes), so ranks never share one
SEED_STRIDE = 1_000_003


def active() -> bool:
    """Whether this process is one rank of several (an initialised process group of size > 1)."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def is_main() -> bool:
    """Rank 0: the one process that logs and writes the run's files (checkpoint, run.yaml, GIF)."""
    return rank() == 0


def rank_seed(seed: int) -> int:
    """``seed`` offset by this rank, so ranks collect and sample differently."""
    return seed + SEED_STRIDE * rank()


def launched() -> int:
    """The world size torchrun gave this process (``WORLD_SIZE``; 1 when not under torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def setup(device: str) -> None:
    """Join the process group torchrun describes (``env://``): NCCL for a CUDA ``device`` (a
    concrete name: :func:`wmzoo.device.device_name` makes ``auto`` one), gloo otherwise; each rank
    on GPU ``LOCAL_RANK``. Nothing when not under torchrun."""
    if launched() <= 1 or dist.is_initialized():
        return
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def local_device(device: torch.device) -> torch.device:
    """A rank's device: ``cuda`` without an index is the rank's own GPU (``LOCAL_RANK``)."""
    if device.type == "cuda" and device.index is None and active():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


def average_gradients(params: Sequence[nn.Parameter], loss: Tensor | None) -> Tensor | None:
    """All-reduce (average) the gradients of ``params`` over the ranks in place, and return the
    ranks' mean ``loss``; one collective for all of them (one flat buffer).

    A parameter without a gradient on a rank counts as a zero gradient there, and keeps no
    gradient only where no rank gave it one (as one process on the ranks' concatenated batch).
    The identity in one process."""
    if not active() or not params:
        return loss
    device = params[0].device
    flat = [p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), device=device, dtype=p.dtype)
            for p in params]
    has = torch.tensor([p.grad is not None for p in params], device=device, dtype=flat[0].dtype)
    value = torch.zeros(1, device=device, dtype=flat[0].dtype) if loss is None else loss.detach().reshape(1).to(flat[0].dtype)
    buffer = torch.cat([*flat, has, value])
    dist.all_reduce(buffer)
    buffer /= world_size()
    given = (buffer[-1 - len(params) : -1] > 0).tolist()
    offset = 0
    for p, any_rank in zip(params, given):
        n = p.numel()
        if any_rank:
            p.grad = buffer[offset : offset + n].view_as(p).to(p.dtype).clone()
        offset += n
    return None if loss is None else buffer[-1].to(loss.dtype)


def all_true(flag: bool) -> bool:
    """Whether ``flag`` holds on every rank (a decision the ranks must take together)."""
    if not active():
        return flag
    t = torch.tensor([int(flag)], dtype=torch.int64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def broadcast_state(module: nn.Module) -> None:
    """Rank 0's parameters and buffers on every rank (one starting point)."""
    if not active():
        return
    for tensor in module.state_dict().values():
        if isinstance(tensor, Tensor):
            dist.broadcast(tensor, 0)
