"""``wmzoo data generate``: record a dataset (:mod:`wmzoo.data.dataset`) with a pool of workers.

Episode ``i`` resets the env with seed ``seed + i`` (and seeds the random policy with it), and
files are written with fixed zip timestamps (:func:`wmzoo.data.record.write_episode`), so the same
arguments give byte-identical files. Files are written atomically; re-running the command keeps
the episodes whose checksums verify and generates the rest, so an interrupted run resumes.
"""

from __future__ import annotations

import multiprocessing
import queue
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from wmzoo.atomic import remove_temporaries
from wmzoo.data.dataset import (
    MANIFEST,
    Arguments,
    EpisodeFile,
    Manifest,
    check_same,
    data_version,
    sha256,
    write_env_info,
)
from wmzoo.data.record import record_episode, write_episode
from wmzoo.data.splits import PAPER_SPLIT, SPLITS, normalise_split, split_counts, split_of, stream_id
from wmzoo.data.store import ChunkName, read_chunk
from wmzoo.errors import WmzooError
from wmzoo.outputs import check_output_folder
from wmzoo.specs import TrainSpec, check_option

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
    only: str | None = None,
) -> Manifest:
    """Record ``episodes`` episodes of ``env`` into ``out`` (see the module docstring); resumes
    an existing dataset made with the same arguments. ``log`` receives progress lines. ``only``:
    record that split's episodes alone (the same files as a full run; e.g. a test split to
    compute baselines on; a later call without it completes the dataset)."""
    from wmzoo.registry import env_info, make_env

    if episodes < 1:
        raise WmzooError("--episodes must be at least 1")
    check_option(size, TrainSpec, "image_size", "--size")  # a run's bounds: up to 512 pixels, 256 envs
    check_option(workers, TrainSpec, "envs", "--workers")
    root = check_output_folder(out, MANIFEST, "--out")
    args = Arguments(env, episodes, size, seed, normalise_split(split))
    existing = Manifest.read(root) if (root / MANIFEST).exists() else None
    if existing is not None:
        if existing.source is not None:
            raise WmzooError(f"{root} holds a dataset imported from {existing.source.get('kind')} files, "
                             "not a generated one; choose another --out")
        check_same(existing.args, args, root)
    probe = make_env(env, seed=seed, size=size, train=True)
    try:
        from wmzoo.envs.scripted import expert_policy, scripted_task

        task = scripted_task(probe)
        policy = "scripted" if task is not None else "expert" if expert_policy(probe) is not None else "random"
        manifest = Manifest(
            args, policy, env_info(probe, env),
            task.context_length if task is not None else None,
            task.query_length if task is not None else None, {}, env_version=data_version(probe),
        )
    finally:
        probe.close()
    if existing is not None and existing.env_version != manifest.env_version:
        return _other_version(root, existing, manifest.env_version, log)
    if policy == "random":
        log(f"{env} has no scripted policy or expert: recording a uniformly random policy")
    todo = prepare(root, manifest, existing, log)
    if only is not None:
        todo = [i for i in todo if split_of(i, manifest.counts)[0] == only]
    if not todo:
        log(f"{root}: all {episodes} episodes already complete (checksums verified)")
    else:
        _run(manifest, root, todo, workers, log)
    return manifest


def _other_version(root: Path, existing: Manifest, version: int, log: Any) -> Manifest:
    """A dataset recorded by another version of its env's episodes (:func:`data_version`):
    used as it is when complete and every checksum verifies; otherwise refused, since its seeds
    would now record other episodes. Nothing in ``root`` is changed either way."""
    args = existing.args
    bad = [e for e in existing.files.values() if not (root / e.file).is_file() or sha256(root / e.file) != e.sha256]
    what = (f"version {existing.env_version} of {args.env}'s episodes; this wmzoo records version {version}, "
            "where the same seeds can give other episodes")
    if existing.complete and not bad:
        log(f"{root}: all {args.episodes} episodes already complete (checksums verified; recorded by {what})")
        return existing
    raise WmzooError(f"{root} holds {len(existing.files) - len(bad)} verified of {args.episodes} episodes, recorded "
                     f"by {what}: choose another --out to generate the dataset anew (nothing in {root} was changed)")


def prepare(root: Path, manifest: Manifest, existing: Manifest | None, log: Any) -> list[int]:
    """Lay out the dataset folder ``root`` for ``manifest`` (whose ``files`` this fills): the
    split folders, the episodes already on disk that verify (:func:`_verified`; anything else of
    ours is deleted), the manifest and every split's ``env.json``. Returns the episodes still to
    write. Shared by ``wmzoo data generate`` and the importers (:mod:`wmzoo.data.libero`)."""
    for name in SPLITS:
        (root / name).mkdir(parents=True, exist_ok=True)
    manifest.files = _verified(root, existing, manifest.args, manifest.counts, log)
    manifest.write(root)
    for split in SPLITS:
        write_env_info(root / split, manifest.env_info)
    return [i for i in range(manifest.args.episodes) if i not in manifest.files]


@contextmanager
def recording(manifest: Manifest, root: Path, todo: list[int], what: str, log: Any, detail: str = ""
              ) -> Iterator[Callable[[EpisodeFile], None]]:
    """Record finished episode files in the manifest through the function this yields (the
    manifest is saved every few seconds, with a progress line). On Ctrl-C/SIGTERM, and whatever
    else ends the block, the manifest keeps every finished episode and no partial file stays;
    an interruption is one error line saying how to continue. ``what``: "generating",
    "importing"; ``detail`` follows the policy in the first progress line."""
    args, done = manifest.args, len(manifest.files)
    log(f"{what} {len(todo)} of {args.episodes} episodes of {args.env} ({manifest.policy} policy{detail}) into {root}")
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    start = last_write = time.time()

    def add(entry: EpisodeFile) -> None:
        nonlocal last_write
        manifest.files[entry.index] = entry
        if time.time() - last_write > _MANIFEST_EVERY_S:
            manifest.write(root)
            last_write = time.time()
            n = len(manifest.files) - done
            log(f"  {len(manifest.files)}/{args.episodes} episodes ({n / (last_write - start):.2f}/s)")

    try:
        yield add
    except KeyboardInterrupt:
        raise WmzooError(
            f"interrupted after {len(manifest.files)} of {args.episodes} episodes; "
            "run the same command again to continue"
        ) from None
    finally:  # whatever happened: keep what is finished, drop partial files
        signal.signal(signal.SIGTERM, previous)
        manifest.write(root)
        _clean_tmp(root)
    elapsed = max(time.time() - start, 1e-9)
    log(f"wrote {len(todo)} episodes in {elapsed:.1f} s ({len(todo) / elapsed:.2f} episodes/s); "
        f"splits {manifest.counts}")


def write_episode_file(root: Path, args: Arguments, index: int, data: dict[str, np.ndarray]) -> EpisodeFile:
    """Write episode ``index`` of the dataset ``root`` (its split's stream, its place in the
    split; :func:`wmzoo.data.record.write_episode`) and return its manifest entry."""
    split, position = split_of(index, split_counts(args.episodes, args.split))
    rows = len(data["reward"])
    name = ChunkName(index, stream_id(args.env, args.seed, split), position, rows).filename
    digest = write_episode(root / split / name, data)
    return EpisodeFile(index, split, f"{split}/{name}", digest, rows)


def _run(manifest: Manifest, root: Path, todo: list[int], workers: int, log: Any) -> None:
    """Generate ``todo`` (in-process, or split among ``workers`` processes of our own), recording
    each file in the manifest (:func:`recording`).

    Worker processes, not a ``multiprocessing.Pool``: a pool's ``terminate()`` takes its task
    queue's lock, and a worker killed while holding it (SIGTERM sent to the whole process group,
    as ``timeout`` and shells do) leaves that lock taken forever, so the parent hung after saying
    it was interrupted. Here each worker records its own share of ``todo`` and sends back the
    entries; on any exit the parent kills the workers and waits for them, holding no lock of
    theirs."""
    args = manifest.args
    workers = min(workers, len(todo)) or 1
    workers_text = f", {workers} worker{'s' if workers > 1 else ''}"
    with recording(manifest, root, todo, "generating", log, workers_text) as add:
        if workers == 1:
            _init_worker(args, str(root), ignore_signals=False)
            try:
                for index in todo:
                    add(_work(index))
            finally:
                _WORKER.pop("env").close()
            return
        context = multiprocessing.get_context(_START_METHOD)
        if _START_METHOD == "forkserver":
            context.set_forkserver_preload([__name__, "wmzoo.registry"])
        results = context.Queue()
        processes = [context.Process(target=_worker, args=(args, str(root), todo[i::workers], results), daemon=True)
                     for i in range(workers)]
        try:
            for process in processes:
                process.start()
            for _ in todo:
                add(_next_result(results, processes))
        finally:  # stop the workers before recording() removes partial files
            for process in processes:
                if process.is_alive():
                    process.kill()
            for process in processes:
                if process.pid is not None:
                    process.join()
            results.close()
            results.cancel_join_thread()  # what a killed worker left in the pipe is not waited for


def _next_result(results: Any, processes: list[Any]) -> EpisodeFile:
    """The next entry a worker sent (a worker's exception is raised here); one line when a worker
    died without sending one."""
    while True:
        try:
            item = results.get(timeout=1.0)
        except queue.Empty:
            dead = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
            if dead:
                raise WmzooError(f"a process recording episodes died (exit code {dead[0]}); run the same "
                                 "command again to continue from the episodes already written") from None
            continue
        if isinstance(item, BaseException):
            raise item
        return item


def _worker(args: Arguments, root: str, indices: list[int], results: Any) -> None:
    """A worker process: record ``indices`` and send each entry (or the exception that stopped it)."""
    _init_worker(args, root, ignore_signals=True)
    try:
        for index in indices:
            results.put(_work(index))
    except Exception as exc:  # noqa: BLE001 - the parent raises it as the pool did
        results.put(exc)
    finally:
        _WORKER.pop("env").close()


_WORKER: dict[str, Any] = {}


def _init_worker(args: Arguments, root: str, ignore_signals: bool) -> None:
    """Make the worker's env once; worker processes leave Ctrl-C and SIGTERM to the parent, which
    kills them (SIGKILL) when it stops."""
    from wmzoo.registry import make_env

    if ignore_signals:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _WORKER.update(args=args, root=Path(root), env=make_env(args.env, seed=args.seed, size=args.size))


def _work(index: int) -> EpisodeFile:
    """Record and write episode ``index`` (runs in a worker)."""
    args, root = _WORKER["args"], _WORKER["root"]
    data, _ = record_episode(_WORKER["env"], args.seed + index)
    return write_episode_file(root, args, index, data)


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


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
