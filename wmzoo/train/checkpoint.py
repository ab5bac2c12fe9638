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
import os
import re
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from wmzoo.atomic import atomic_path
from wmzoo.errors import WmzooError

FORMAT = "wmzoo-checkpoint-1"


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


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`; corrupt files raise WmzooError."""
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
        return _unflatten(json.loads(meta["tree"]), tensors)
    except WmzooError:
        raise
    except Exception as exc:  # noqa: BLE001 - safetensors/JSON raise many types on bad bytes
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise WmzooError(
            f"checkpoint {path} is corrupt or truncated ({reason}); use an intact checkpoint "
            "or start a new run"
        ) from None


def checkpoint_header(path: str | Path) -> dict[str, Any]:
    """The JSON part of a checkpoint (run spec, env, progress counters; tensors left as their
    placeholders) without reading a tensor; corrupt files raise WmzooError."""
    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        if meta.get("format") != FORMAT:
            raise WmzooError(f"checkpoint {path}: not a wmzoo checkpoint (format {meta.get('format')!r})")
        return _unflatten(json.loads(meta["tree"]), None)
    except WmzooError:
        raise
    except Exception as exc:  # noqa: BLE001 - as load_checkpoint
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise WmzooError(f"checkpoint {path} is corrupt or truncated ({reason})") from None
