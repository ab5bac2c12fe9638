"""Checkpoints: one safetensors file, written atomically, loaded without executing pickled code.

A checkpoint is a nested tree of dicts, lists, numbers, strings and tensors (model and optimizer
``state_dict``s, the run spec, progress counters). Tensors go into the safetensors body under
path-like keys; the rest of the tree is JSON in the file's header metadata, with each tensor
replaced by ``{"__tensor__": key}`` and each dict stored as key/value pairs so integer keys
(optimizer states) survive. Loading parses JSON and reads raw tensor bytes: nothing is unpickled.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from wmzoo import distributed
from wmzoo.atomic import atomic_path
from wmzoo.errors import WmzooError
from wmzoo.interfaces import EnvInfo

FORMAT = "wmzoo-checkpoint-1"

HEADER_SECTIONS = ("run", "env", "progress")
"""The sections of a checkpoint's JSON header: the run spec, the env's shapes, the counters."""
STATE_SECTIONS = ("world_model", "policy", "world_model_optim", "policy_optim")
"""The sections holding tensors: weights and optimizer states."""


@dataclass
class Progress:
    """A run's counters, saved in its checkpoint and restored by ``--resume``."""

    env_steps: int = 0
    updates: int = 0
    episodes: int = 0
    credit: float = 0.0  # world-model updates owed by the train ratio
    final: int = 0  # of train.final_updates, done after the last env step
    nonfinite: int = 0  # optimizer steps skipped for a non-finite loss or gradient
    world_size: int = field(default_factory=distributed.world_size)  # data-parallel processes (--resume checks)


def check_sections(tree: Any, path: Path, sections: tuple[str, ...]) -> dict[str, Any]:
    """``tree`` when each of ``sections`` is a mapping and its ``progress`` counters are what
    :class:`Progress` holds (known names, non-negative finite numbers, whole where counted);
    otherwise one line naming the first thing missing or wrong: an edited or foreign file."""
    damaged = f"checkpoint {path} was edited or not written by `wmzoo run`"
    if not isinstance(tree, dict):
        raise WmzooError(f"{damaged}: its header is not a mapping; use an intact checkpoint")
    for name in sections:
        if not isinstance(tree.get(name), dict):
            raise WmzooError(f"{damaged}: its '{name}' section is missing or not a mapping; use an intact checkpoint")
    if "env" in sections:
        try:
            EnvInfo.from_dict(tree["env"])
        except ValueError as exc:
            raise WmzooError(f"{damaged}: its env section is wrong ({exc}); use an intact checkpoint") from None
    if "progress" in sections:
        counters = asdict(Progress())
        for name, value in tree["progress"].items():
            whole = isinstance(counters.get(name), int)
            number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            if name not in counters or not number or value < (1 if name == "world_size" else 0) or (
                    whole and value != int(value)):
                raise WmzooError(f"{damaged}: progress counter {name} = {value!r} is not one it keeps "
                                 f"({', '.join(counters)}: non-negative numbers); use an intact checkpoint")
    return tree


def _flatten(node: Any, tensors: dict[str, torch.Tensor], path: str) -> Any:
    if isinstance(node, torch.Tensor):
        key = path or "root"
        tensors[key] = node.detach().cpu().contiguous().clone()
        return {"__tensor__": key}
    if isinstance(node, dict):
        return {"__dict__": [[k, _flatten(v, tensors, f"{path}/{k}")] for k, v in node.items()]}
    if isinstance(node, (list, tuple)):
        return [_flatten(v, tensors, f"{path}/{i}") for i, v in enumerate(node)]
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    raise TypeError(f"checkpoint: cannot store {type(node).__name__} at {path or '/'}")


def _unflatten(node: Any, tensors: dict[str, torch.Tensor] | None) -> Any:
    """The tree back from its JSON skeleton; ``tensors=None`` leaves each tensor's placeholder."""
    if isinstance(node, dict):
        if "__tensor__" in node:
            return node if tensors is None else tensors[node["__tensor__"]]
        return {k: _unflatten(v, tensors) for k, v in node["__dict__"]}
    if isinstance(node, list):
        return [_unflatten(v, tensors) for v in node]
    return node


def tensor_mismatch(saved: Mapping[str, Any], held: Mapping[str, torch.Tensor]) -> str | None:
    """What is wrong with the first entry of a saved ``state_dict`` whose dtype or shape is not the
    model's (``held``), as one phrase; ``None`` when all agree. A
    safetensors header can declare an integer dtype of the same byte size for a float weight:
    the bytes then load as other numbers, which ``load_state_dict`` would cast without a word.
    Keys only one side has are left to ``load_state_dict``'s own check."""
    for key, ref in held.items():
        value = saved.get(key)
        if isinstance(value, torch.Tensor) and (value.dtype != ref.dtype or value.shape != ref.shape):
            what = "another model format or preset?" if value.shape != ref.shape else "an edited or corrupt header?"
            return f"{key} is stored as {_described(value)} where the model holds {_described(ref)} ({what})"
    return None


def _described(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).removeprefix('torch.')} {list(tensor.shape)}"


def save_checkpoint(path: str | Path, tree: dict[str, Any]) -> Path:
    """Write ``tree`` to ``path`` atomically (:func:`wmzoo.atomic.atomic_path`)."""
    path = Path(path)
    tensors: dict[str, torch.Tensor] = {}
    skeleton = _flatten(tree, tensors, "")
    with atomic_path(path) as tmp:
        try:
            save_file(tensors, str(tmp), metadata={"format": FORMAT, "tree": json.dumps(skeleton)})
        except SafetensorError as exc:  # a failed write (full disk, ...): the OSError it stands for
            raise _os_error(exc, path) from None
    return path


def _os_error(exc: SafetensorError, path: Path) -> OSError:
    """The OSError inside safetensors' ``... I/O error: No space left on device (os error 28)``
    (EIO where it names none), on the checkpoint's path, for the CLI's one line."""
    code = re.search(r"\(os error (\d+)\)", str(exc))
    number = int(code.group(1)) if code else errno.EIO
    return OSError(number, os.strerror(number) if code else str(exc).splitlines()[0], str(path))


def load_checkpoint(path: str | Path, sections: tuple[str, ...] = HEADER_SECTIONS + STATE_SECTIONS) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`; corrupt files, and trees lacking one of
    ``sections`` (default: a run's, :func:`check_sections`), raise WmzooError."""
    path = Path(path)
    if path.is_dir():
        path = path / "checkpoint.safetensors"
    if not path.is_file():
        raise WmzooError(f"checkpoint {path}: no such file (a run writes <logdir>/checkpoint.safetensors)")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            if meta.get("format") != FORMAT:
                raise WmzooError(f"checkpoint {path}: not a wmzoo checkpoint (format {meta.get('format')!r})")
            tensors = {key: f.get_tensor(key) for key in f.keys()}
        tree = _unflatten(json.loads(meta["tree"]), tensors)
    except WmzooError:
        raise
    except Exception as exc:  # noqa: BLE001 - safetensors/JSON raise many types on bad bytes
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise WmzooError(
            f"checkpoint {path} is corrupt or truncated ({reason}); use an intact checkpoint "
            "or start a new run"
        ) from None
    return check_sections(tree, path, sections)


def checkpoint_header(path: str | Path, sections: tuple[str, ...] = HEADER_SECTIONS) -> dict[str, Any]:
    """The JSON part of a checkpoint (run spec, env, progress counters; tensors left as their
    placeholders) without reading a tensor; corrupt files and missing ``sections`` raise WmzooError."""
    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        if meta.get("format") != FORMAT:
            raise WmzooError(f"checkpoint {path}: not a wmzoo checkpoint (format {meta.get('format')!r})")
        tree = _unflatten(json.loads(meta["tree"]), None)
    except WmzooError:
        raise
    except Exception as exc:  # noqa: BLE001 - as load_checkpoint
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise WmzooError(f"checkpoint {path} is corrupt or truncated ({reason})") from None
    return check_sections(tree, path, sections)
