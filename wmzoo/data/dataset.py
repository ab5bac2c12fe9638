"""Folders of recorded episodes: offline datasets and what describes them.

The s4wm paper learns its world models "from an offline dataset collected by a scripted policy for
each environment" (section 5.1): 10K episodes for each 2D task split 8K/1K/1K, 30K for each 3D
task split 28K/1K/1K (appendix A). A dataset (written by :mod:`wmzoo.data.generate`) is a folder::

    DIR/manifest.json         what was generated (env, size, seed, split) and, per episode, its file,
                              sha256 checksum, row count and split
    DIR/train/ DIR/val/ DIR/test/
        env.json              the env's shapes (read by ``wmzoo run --offline``)
        {order}-{stream}-{index}-{rows}.npz   one episode per chunk file

Every episode is one chunk file of :mod:`wmzoo.data.store` (rows as in :mod:`wmzoo.interfaces`:
``n`` steps are ``n + 1`` rows, extras as in :mod:`wmzoo.data.record`), so
:class:`~wmzoo.data.Replay` and ``wmzoo run --offline DIR`` read a split directly. The episodes of
a split form one stream (chunk ``index`` = the episode's place in the split), as the online
replay's worker streams do. An online run's replay folder carries an ``env.json`` too.

This module holds the manifest and its checksums, ``env.json``, and reading: which folder of
chunk files ``--offline`` trains on, and a split's episodes with every array.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wmzoo.atomic import write_text_atomic
from wmzoo.data.splits import SPLITS, split_counts
from wmzoo.errors import WmzooError
from wmzoo.interfaces import EnvInfo

FORMAT = "wmzoo-dataset-1"
MANIFEST = "manifest.json"
ENV_INFO = "env.json"


# --------------------------------------------------------------------------- the manifest


@dataclass(frozen=True)
class Arguments:
    """What defines a dataset; a re-run must pass the same (``--workers`` may differ)."""

    env: str
    episodes: int
    size: int
    seed: int
    split: tuple[float, float, float]


@dataclass(frozen=True)
class EpisodeFile:
    """One manifest entry."""

    index: int
    split: str
    file: str  # relative to the dataset root
    sha256: str
    rows: int


@dataclass
class Manifest:
    args: Arguments
    policy: str  # "scripted", "expert" (demonstrations, e.g. BabyAI's bot), "random" or "human"
    env_info: EnvInfo
    context_length: int | None
    query_length: int | None
    files: dict[int, EpisodeFile]
    source: dict[str, Any] | None = None
    """What an imported dataset was made from (``wmzoo data import-libero``: the files, the
    options, each episode's demonstration); ``None`` for a generated one. A re-run must match it."""
    env_version: int = 1
    """The env's ``data_version`` when its episodes were recorded (:func:`data_version`): a
    dataset of another version is read as it is, but not resumed (its seeds draw other episodes)."""

    @property
    def counts(self) -> dict[str, int]:
        return split_counts(self.args.episodes, self.args.split)

    @property
    def complete(self) -> bool:
        return len(self.files) == self.args.episodes

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": FORMAT,
                **asdict(self.args),
                "counts": self.counts,
                "policy": self.policy,
                "context_length": self.context_length,
                "query_length": self.query_length,
                "env_info": self.env_info.to_dict(),
                "complete": self.complete,
                "files": [asdict(self.files[i]) for i in sorted(self.files)],
                **({"source": self.source} if self.source is not None else {}),
                "env_version": self.env_version,
            },
            indent=1,
        )

    @staticmethod
    def read(root: Path) -> Manifest:
        """The manifest of the dataset in ``root``; one-line errors when missing or corrupt."""
        path = root / MANIFEST
        if not path.is_file():
            raise WmzooError(f"{root} is not a dataset (no {MANIFEST}); create one with: wmzoo data generate")
        try:
            raw = json.loads(path.read_text())
            if raw.get("format") != FORMAT:
                raise ValueError(f"format {raw.get('format')!r}, expected {FORMAT!r}")
            args = Arguments(raw["env"], int(raw["episodes"]), int(raw["size"]), int(raw["seed"]),
                             tuple(float(x) for x in raw["split"]))  # type: ignore[arg-type]
            files = {int(f["index"]): EpisodeFile(**f) for f in raw["files"]}
            source = raw.get("source")
            if source is not None and not isinstance(source, dict):
                raise ValueError(f"source is {type(source).__name__}, not an object")
            version = raw.get("env_version", 1)  # manifests before the field: version 1
            if not _is_version(version):
                raise ValueError(f"env_version {version!r} is not a positive integer")
            return Manifest(args, raw["policy"], EnvInfo.from_dict(raw["env_info"]),
                            raw["context_length"], raw["query_length"], files, source, version)
        except (ValueError, KeyError, TypeError) as exc:
            raise WmzooError(f"{path} is corrupt ({type(exc).__name__}: {exc}); regenerate the dataset") from None

    def write(self, root: Path) -> None:
        write_text_atomic(root / MANIFEST, self.to_json())


def check_same(old: Arguments, new: Arguments, root: Path) -> None:
    """One-line error naming the first argument that differs from the existing dataset's."""
    for name in ("env", "episodes", "size", "seed", "split"):
        a, b = getattr(old, name), getattr(new, name)
        if (not np.allclose(a, b, rtol=0, atol=1e-9)) if name == "split" else a != b:
            show = (lambda v: ",".join(f"{x:g}" for x in v)) if name == "split" else str
            raise WmzooError(
                f"{root} holds a dataset generated with --{name} {show(a)}, not {show(b)}; "
                "pass the same arguments to resume it or choose another --out"
            )


def _is_version(value: Any) -> bool:
    """Whether ``value`` is a data version: a positive ``int`` (not a ``bool``)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def data_version(env: Any) -> int:
    """The version of the episodes ``env`` records for a seed: its unwrapped env's
    ``data_version`` (1 where it declares none). An env raises it when a change makes a seed
    record different episodes, so that a dataset recorded before is not resumed with other ones."""
    version = getattr(env.unwrapped, "data_version", 1)
    if not _is_version(version):
        raise WmzooError(f"{type(env.unwrapped).__name__}.data_version is {version!r}; "
                         "it must be a positive integer")
    return version


def sha256(path: Path) -> str:
    """The file's sha256 as hex digits (the manifest's checksum)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --------------------------------------------------------------------------- env.json


def write_env_info(directory: Path, info: EnvInfo) -> None:
    """Record the env of the episodes in ``directory`` (``<directory>/env.json``)."""
    write_text_atomic(directory / ENV_INFO, json.dumps(info.to_dict()))


def recorded_env_info(data: str | Path) -> EnvInfo | None:
    """The env of recorded episodes (``env.json`` of a dataset's train split or of a run's
    replay folder; else the manifest's ``env_info`` of the dataset that folder belongs to), or
    ``None`` when the recorder wrote neither."""
    meta = training_dir(data) / ENV_INFO
    if not meta.is_file():
        for root in (Path(data), training_dir(data).parent):  # a dataset root, or one of its splits
            if (root / MANIFEST).is_file():
                return Manifest.read(root).env_info
        return None
    try:
        info = EnvInfo.from_dict(json.loads(meta.read_text()))
    except (ValueError, TypeError) as exc:  # TypeError: JSON that is not an object
        raise WmzooError(
            f"{meta}: not a valid env.json ({exc}); delete it to use the env's "
            "own shapes, or record the data again"
        ) from None
    return info


# --------------------------------------------------------------------------- reading


def training_dir(path: str | Path) -> Path:
    """``wmzoo run --offline`` accepts a dataset root: its ``train`` split; any other folder of
    chunk files is used as is."""
    path = Path(path)
    return path / "train" if (path / MANIFEST).is_file() else path


def iter_episodes(root: str | Path, split: str = "test", limit: int | None = None
                  ) -> Iterator[dict[str, np.ndarray]]:
    """The first ``limit`` episodes of ``split`` (all when ``None``), one at a time, with every
    array; each file's checksum is verified against the manifest first."""
    root = Path(root)
    if split not in SPLITS:
        raise WmzooError(f"--split {split}: expected one of {', '.join(SPLITS)}")
    manifest = Manifest.read(root)
    entries = [e for _, e in sorted(manifest.files.items()) if e.split == split]
    if not entries:
        raise WmzooError(f"{root}: the {split} split holds no episodes ({manifest.counts[split]} planned)")
    if not manifest.complete:
        warnings.warn(f"{root}: dataset incomplete ({len(manifest.files)} of {manifest.args.episodes} "
                      "episodes); run wmzoo data generate again to finish it", stacklevel=2)
    for entry in entries[:limit]:
        path = root / entry.file
        if not path.is_file() or sha256(path) != entry.sha256:
            raise WmzooError(f"{path}: missing or its checksum differs from {MANIFEST}; "
                             "re-run wmzoo data generate with the same arguments to repair it")
        with np.load(path, allow_pickle=False) as f:
            yield {key: f[key] for key in f.files}


def load_episodes(root: str | Path, split: str = "test", limit: int | None = None
                  ) -> tuple[Manifest, list[dict[str, np.ndarray]]]:
    """The manifest and :func:`iter_episodes` as a list."""
    return Manifest.read(Path(root)), list(iter_episodes(root, split, limit))
