"""Offline datasets: ``wmzoo data generate`` records episodes into train/val/test splits.

The s4wm paper learns its world models "from an offline dataset collected by a scripted policy for
each environment" (section 5.1): 10K episodes for each 2D task split 8K/1K/1K, 30K for each 3D
task split 28K/1K/1K (appendix A). A dataset here is a folder::

    DIR/manifest.json         what was generated (env, size, seed, split) and, per episode, its file,
                              sha256 checksum, row count and split
    DIR/train/ DIR/val/ DIR/test/
        env.json              the env's shapes (read by ``wmzoo run --offline``)
        {order}-{stream}-{index}-{rows}.npz   one episode per chunk file

Every episode is one chunk file of :mod:`wmzoo.data.store` (rows as in :mod:`wmzoo.interfaces`:
``n`` steps are ``n + 1`` rows), so :class:`~wmzoo.data.Replay` and ``wmzoo run --offline DIR``
read a split directly. The episodes of a split form one stream (chunk ``index`` = the episode's
place in the split), as the online replay's worker streams do. Besides the row arrays a file holds
what the env reports per observation: ``phase`` (0 context, 1 query) from ``info["phase"]``,
``probe_<name>`` from ``info["probe"]`` and ``info_<key>`` for every numeric ``info[key]``
(``info_teleport_to``: -1 where absent). Row ``t``'s extras come from the info returned with
``obs[t]`` (reset for row 0, step ``t - 1`` after).

Episode ``i`` resets the env with seed ``seed + i`` (and seeds the random policy with it), and
files are written with fixed zip timestamps, so the same arguments give byte-identical files.
Episodes come from the env's scripted policy (:mod:`wmzoo.envs.scripted`) when it has one, else
from a uniformly random policy. Files are written atomically; re-running the command keeps the
episodes whose checksums verify and generates the rest, so an interrupted run resumes.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import signal
import time
import warnings
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wmzoo.atomic import TMP_SUFFIX, atomic_path, write_text_atomic
from wmzoo.data.store import FIELDS, ChunkName, read_chunk
from wmzoo.errors import WmzooError
from wmzoo.interfaces import EnvInfo

FORMAT = "wmzoo-dataset-1"
MANIFEST = "manifest.json"
SPLITS = ("train", "val", "test")
PAPER_SPLIT = (0.8, 0.1, 0.1)
"""Appendix A: 8K/1K/1K of 10K episodes for the 2D tasks."""
PHASES = ("context", "query")
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed member timestamps: byte-identical files per seed
_MANIFEST_EVERY_S = 10.0  # how often a long run records its progress in the manifest
_START_METHOD = "forkserver"
"""Workers fork from a fresh single-threaded server that imported this module once: no inherited
torch threads, locks or GL contexts (plain ``fork`` of the CLI process can deadlock), and no
per-worker re-import of torch (``spawn``)."""


# --------------------------------------------------------------------------- splits


def parse_split(text: str) -> tuple[float, float, float]:
    """``"0.8,0.1,0.1"`` or ``"28,1,1"`` -> the train/val/test fractions (normalised to sum 1);
    one-line error when malformed."""
    try:
        parts = tuple(float(p) for p in text.split(","))
    except ValueError:
        parts = ()
    return normalise_split(parts, text)


def normalise_split(parts: Sequence[float], text: str | None = None) -> tuple[float, float, float]:
    """Three non-negative train/val/test weights (train > 0) as fractions summing to 1."""
    text = ",".join(map(str, parts)) if text is None else text
    if len(parts) != 3 or not all(np.isfinite(parts)) or min(parts) < 0 or parts[0] <= 0:
        raise WmzooError(
            f"--split {text}: expected three non-negative numbers train,val,test with train > 0, "
            "e.g. 0.8,0.1,0.1 or 28,1,1"
        )
    total = sum(parts)
    return tuple(p / total for p in parts)  # type: ignore[return-value]


def split_counts(episodes: int, split: Sequence[float]) -> dict[str, int]:
    """Episodes per split: val and test get ``split * episodes`` rounded half up, train the rest
    (10K at 0.8,0.1,0.1 -> 8000/1000/1000, the paper's sizes)."""
    val, test = (int(np.floor(episodes * f + 0.5)) for f in split[1:])
    while val + test >= episodes and val + test > 0:  # keep at least one training episode
        if test >= val:
            test -= 1
        else:
            val -= 1
    return {"train": episodes - val - test, "val": val, "test": test}


def split_of(index: int, counts: dict[str, int]) -> tuple[str, int]:
    """The split of episode ``index`` and its place in it: train first, then val, then test."""
    for name in SPLITS:
        if index < counts[name]:
            return name, index
        index -= counts[name]
    raise IndexError(index)


def stream_id(env: str, seed: int, split: str) -> str:
    """The split's stream id (32 hex digits), a function of the arguments so files are
    reproducible."""
    return hashlib.md5(f"{env}|{seed}|{split}".encode()).hexdigest()


# --------------------------------------------------------------------------- recording


def record_episode(
    env: Any, seed: int | None, max_steps: int | None = None
) -> tuple[dict[str, np.ndarray], bool]:
    """One episode of ``env`` from ``reset(seed=seed)`` as row arrays plus per-row extras.

    Actions come from the env's scripted policy when it has one (the episode then stops after
    ``context_length + query_length`` rows at the latest), else uniformly at random from the
    action space seeded with ``seed`` (``seed=None``: the env's next episode, the action space's
    generator continued). ``max_steps`` caps the steps (rows: one more). Returns the arrays and
    whether the policy was scripted.
    """
    from wmzoo.envs.scripted import scripted_task

    task = scripted_task(env)
    obs, info = env.reset(seed=seed)
    if task is None and seed is not None:
        env.action_space.seed(seed)
    limit = task.context_length + task.query_length if task is not None else None
    frames, infos, actions, rewards, terminals = [obs], [info], [], [], []
    while True:
        action = task.scripted_action() if task is not None else env.action_space.sample()
        obs, reward, terminated, truncated, info = env.step(action)
        frames.append(obs)
        infos.append(info)
        actions.append(action)
        rewards.append(reward)
        terminals.append(terminated)
        if terminated or truncated or (limit is not None and len(frames) >= limit):
            break
        if max_steps is not None and len(actions) >= max_steps:
            break
    action = np.asarray(actions)
    action = action.astype(np.int64) if action.dtype.kind in "iub" else action.astype(np.float32)
    data = {
        "obs": np.stack(frames).astype(np.uint8, copy=False),
        # the final observation's row: zero action, zero reward, not terminal (interfaces.py)
        "action": np.concatenate([action, np.zeros_like(action[:1])]),
        "reward": np.asarray([*rewards, 0.0], np.float32),
        "terminal": np.asarray([*terminals, False], np.bool_),
        "is_first": np.arange(len(frames)) == 0,
    }
    return {**data, **_info_arrays(infos)}, task is not None


def _info_arrays(infos: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Per-row arrays of what the env reports: phase, probe targets, numeric info values."""
    out: dict[str, np.ndarray] = {}
    if any("phase" in i for i in infos):
        phases = [i.get("phase") for i in infos]
        bad = [p for p in phases if p not in PHASES and p not in (0, 1)]
        if bad:
            raise WmzooError(f"info['phase'] must be one of {PHASES} (or 0/1), got {bad[0]!r}")
        out["phase"] = np.asarray([PHASES.index(p) if isinstance(p, str) else p for p in phases], np.uint8)
    if any("probe" in i for i in infos):
        if not all("probe" in i for i in infos):
            raise WmzooError("the env gives info['probe'] on some steps only; it must give it on every step")
        for name in infos[0]["probe"]:
            out[f"probe_{name}"] = np.stack([np.asarray(i["probe"][name]) for i in infos])
    keys = sorted({k for i in infos for k, v in i.items() if _numeric(v) and k not in ("phase", "probe")})
    for key in keys:
        values = [i.get(key) for i in infos]
        present = [v for v in values if v is not None]
        if not all(_numeric(v) for v in present):
            continue  # a key that is not numeric on every step is not recorded
        if all(isinstance(v, (bool, np.bool_)) for v in present):
            out[f"info_{key}"] = np.asarray([bool(v) if v is not None else False for v in values])
        elif all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in present):
            out[f"info_{key}"] = np.asarray([-1 if v is None else v for v in values], np.int64)
        else:
            out[f"info_{key}"] = np.asarray([np.nan if v is None else v for v in values], np.float32)
    return out


def _numeric(value: Any) -> bool:
    return isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating))


def write_episode(path: Path, data: dict[str, np.ndarray]) -> str:
    """Write ``data`` as an ``.npz`` chunk atomically (deflated members with fixed timestamps, so
    equal data gives equal bytes) and return the file's sha256."""
    keys = [*FIELDS, *sorted(k for k in data if k not in FIELDS)]
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as archive:
            for key in keys:
                member = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_TIME)
                member.compress_type = zipfile.ZIP_DEFLATED
                with archive.open(member, "w", force_zip64=True) as out:
                    np.lib.format.write_array(out, np.ascontiguousarray(data[key]), allow_pickle=False)
        digest = sha256(tmp)
    return digest


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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
    policy: str  # "scripted" or "random"
    env_info: EnvInfo
    context_length: int | None
    query_length: int | None
    files: dict[int, EpisodeFile]

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
                "env_info": asdict(self.env_info),
                "complete": self.complete,
                "files": [asdict(self.files[i]) for i in sorted(self.files)],
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
            return Manifest(args, raw["policy"], EnvInfo.from_dict(raw["env_info"]),
                            raw["context_length"], raw["query_length"], files)
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


# --------------------------------------------------------------------------- generation


def generate(
    env: str,
    episodes: int,
    out: str | Path,
    *,
    workers: int = 1,
    size: int = 64,
    seed: int = 0,
    split: Sequence[float] = PAPER_SPLIT,
    log: Any = print,
) -> Manifest:
    """Record ``episodes`` episodes of ``env`` into ``out`` (see the module docstring); resumes
    an existing dataset made with the same arguments. ``log`` receives progress lines."""
    from wmzoo.registry import env_info, make_env

    if episodes < 1 or workers < 1 or size < 8:
        raise WmzooError("--episodes and --workers must be at least 1 and --size at least 8")
    root = Path(out)
    args = Arguments(env, episodes, size, seed, normalise_split(split))
    existing = Manifest.read(root) if (root / MANIFEST).exists() else None
    if existing is not None:
        check_same(existing.args, args, root)
    probe = make_env(env, seed=seed, size=size, train=True)
    try:
        from wmzoo.envs.scripted import scripted_task

        task = scripted_task(probe)
        manifest = Manifest(
            args, "scripted" if task is not None else "random", env_info(probe, env),
            task.context_length if task is not None else None,
            task.query_length if task is not None else None, {},
        )
    finally:
        probe.close()
    if task is None:
        log(f"{env} has no scripted policy: recording a uniformly random policy")
    counts = manifest.counts
    for name in SPLITS:
        (root / name).mkdir(parents=True, exist_ok=True)
    manifest.files = _verified(root, existing, args, counts, log)
    manifest.write(root)
    _write_env_info(root, manifest.env_info)
    todo = [i for i in range(episodes) if i not in manifest.files]
    if not todo:
        log(f"{root}: all {episodes} episodes already complete (checksums verified)")
    else:
        _run(manifest, root, todo, workers, log)
    return manifest


def _run(manifest: Manifest, root: Path, todo: list[int], workers: int, log: Any) -> None:
    """Generate ``todo`` (in-process or with a pool), recording each file in the manifest; on
    Ctrl-C/SIGTERM the manifest keeps every finished episode and no partial file stays."""
    args, done = manifest.args, len(manifest.files)
    log(f"generating {len(todo)} of {args.episodes} episodes of {args.env} "
        f"({manifest.policy} policy, {workers} worker{'s' if workers > 1 else ''}) into {root}")
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    pool = None
    start = last_write = time.time()
    try:
        if workers == 1:
            _init_worker(args, str(root), ignore_sigint=False)
            results: Iterable[EpisodeFile] = map(_work, todo)
        else:
            context = multiprocessing.get_context(_START_METHOD)
            if _START_METHOD == "forkserver":
                context.set_forkserver_preload([__name__, "wmzoo.registry"])
            pool = context.Pool(workers, initializer=_init_worker, initargs=(args, str(root), True))
            results = pool.imap_unordered(_work, todo)
        for entry in results:
            manifest.files[entry.index] = entry
            if time.time() - last_write > _MANIFEST_EVERY_S:
                manifest.write(root)
                last_write = time.time()
                n = len(manifest.files) - done
                log(f"  {len(manifest.files)}/{args.episodes} episodes ({n / (last_write - start):.2f}/s)")
    except KeyboardInterrupt:
        raise WmzooError(
            f"interrupted after {len(manifest.files)} of {args.episodes} episodes; "
            "run the same command again to continue"
        ) from None
    finally:  # whatever happened: stop the workers, keep what is finished, drop partial files
        signal.signal(signal.SIGTERM, previous)
        if pool is not None:
            pool.terminate()
            pool.join()
        if "env" in _WORKER:
            _WORKER.pop("env").close()
        manifest.write(root)
        _clean_tmp(root)
    elapsed = max(time.time() - start, 1e-9)
    log(f"wrote {len(todo)} episodes in {elapsed:.1f} s ({len(todo) / elapsed:.2f} episodes/s); "
        f"splits {manifest.counts}")


_WORKER: dict[str, Any] = {}


def _init_worker(args: Arguments, root: str, ignore_sigint: bool) -> None:
    """Make the worker's env once; pool workers leave Ctrl-C to the parent, which ends them."""
    from wmzoo.registry import make_env

    if ignore_sigint:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    _WORKER.update(args=args, root=Path(root), env=make_env(args.env, seed=args.seed, size=args.size))


def _work(index: int) -> EpisodeFile:
    """Record and write episode ``index`` (runs in a worker)."""
    args, root = _WORKER["args"], _WORKER["root"]
    data, _ = record_episode(_WORKER["env"], args.seed + index)
    counts = split_counts(args.episodes, args.split)
    split, position = split_of(index, counts)
    rows = len(data["reward"])
    name = ChunkName(index, stream_id(args.env, args.seed, split), position, rows).filename
    digest = write_episode(root / split / name, data)
    return EpisodeFile(index, split, f"{split}/{name}", digest, rows)


def _verified(root: Path, existing: Manifest | None, args: Arguments, counts: dict[str, int],
              log: Any) -> dict[int, EpisodeFile]:
    """The episodes on disk that are complete: listed in the manifest with a matching checksum,
    or (written after the manifest was last saved) a whole file that reads as a chunk. Anything
    else of ours is deleted so it is generated again."""
    _clean_tmp(root)
    listed = existing.files if existing is not None else {}
    found: dict[int, EpisodeFile] = {}
    for split in SPLITS:
        for path in sorted((root / split).iterdir()):
            name = ChunkName.parse(path.name)
            if name is None:
                continue
            rel = f"{split}/{path.name}"
            expected = (name.order < args.episodes
                        and split_of(name.order, counts) == (split, name.index)
                        and name.stream == stream_id(args.env, args.seed, split))
            entry = listed.get(name.order)
            ok = False
            if expected and entry is not None and entry.file == rel:
                ok = sha256(path) == entry.sha256
            elif expected:
                try:
                    read_chunk(path, name.rows)
                    entry, ok = EpisodeFile(name.order, split, rel, sha256(path), name.rows), True
                except Exception:  # noqa: BLE001 - any unreadable file is regenerated
                    ok = False
            if ok and entry is not None:
                found[name.order] = entry
            else:
                log(f"  {rel}: incomplete or corrupt, generating it again")
                path.unlink()
    return found


def _clean_tmp(root: Path) -> None:
    for split in SPLITS:
        if (root / split).is_dir():
            for path in (root / split).glob(f"*{TMP_SUFFIX}"):
                path.unlink(missing_ok=True)


def _write_env_info(root: Path, info: EnvInfo) -> None:
    from wmzoo.train.loop import write_env_info

    for split in SPLITS:
        write_env_info(root / split, info)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


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
