"""``wmzoo data generate``: record a dataset (:mod:`wmzoo.data.dataset`) with a pool of workers.

Episode ``i`` resets the env with seed ``seed + i`` (and seeds the random policy with it), and
files are written with fixed zip timestamps (:func:`wmzoo.data.record.write_episode`), so the same
arguments give byte-identical files. Files are written atomically; re-running the command keeps
the episodes whose checksums verify and generates the rest, so an interrupted run resumes.
"""

from __future__ import annotations

import multiprocessing
import signal
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from wmzoo.atomic import remove_temporaries
from wmzoo.data.dataset import (
    MANIFEST,
    Arguments,
    EpisodeFile,
    Manifest,
    check_same,
    sha256,
    write_env_info,
)
from wmzoo.data.record import record_episode, write_episode
from wmzoo.data.splits import PAPER_SPLIT, SPLITS, normalise_split, split_counts, split_of, stream_id
from wmzoo.data.store import ChunkName, read_chunk
from wmzoo.errors import WmzooError
from wmzoo.interfaces import EnvInfo

_MANIFEST_EVERY_S = 10.0  # how often a long run records its progress in the manifest
_START_METHOD = "forkserver"
"""Workers fork from a fresh single-threaded server that imported this module once: no inherited
torch threads, locks or GL contexts (plain ``fork`` of the CLI process can deadlock), and no
per-worker re-import of torch (``spawn``)."""


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
        from wmzoo.envs.scripted import expert_policy, scripted_task

        task = scripted_task(probe)
        policy = "scripted" if task is not None else "expert" if expert_policy(probe) is not None else "random"
        manifest = Manifest(
            args, policy, env_info(probe, env),
            task.context_length if task is not None else None,
            task.query_length if task is not None else None, {},
        )
    finally:
        probe.close()
    if policy == "random":
        log(f"{env} has no scripted policy or expert: recording a uniformly random policy")
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
    or (written after the manifest was last saved) a whole file that reads as a chunk of the rows
    its name says and is not a copy of another episode's file. Anything else of ours is deleted
    (after being read) so it is generated again."""
    _clean_tmp(root)
    listed = existing.files if existing is not None else {}
    taken = {entry.sha256 for entry in listed.values()}  # content already some episode's
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
                    digest = sha256(path)
                    # a copy of another episode's file is not this episode
                    ok = digest not in taken
                    entry = EpisodeFile(name.order, split, rel, digest, name.rows)
                except Exception:  # noqa: BLE001 - any unreadable file is regenerated
                    ok = False
            if ok and entry is not None:
                found[name.order] = entry
                taken.add(entry.sha256)
            else:
                log(f"  {rel}: incomplete or corrupt, generating it again")
                path.unlink()
    return found


def _clean_tmp(root: Path) -> None:
    for split in SPLITS:
        remove_temporaries(root / split)


def _write_env_info(root: Path, info: EnvInfo) -> None:
    for split in SPLITS:
        write_env_info(root / split, info)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
