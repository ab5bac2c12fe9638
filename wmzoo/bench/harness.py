"""The speed and memory harness behind ``wmzoo bench``.

Times, in one process and side by side, either the world-model **train** step (forward loss,
backward, optimiser step of every component) or the **imagine** loop (observe a context, then the
generic imagination engine with a uniformly random policy) of any registered backbone, on
synthetic data of an environment's shape, after warm-up iterations. Throughput is frames per
second: ``B·T`` trained frames per train step, ``B·H`` imagined frames per imagination (the
``T``-step context is observed once beforehand and not timed).
A backbone that trains statefully (``stateful_training``: RSSM with truncated BPTT, TSSM-XL) goes
through a sequence longer than its spec's ``seq_len`` in consecutive segments of that length, the
carry passed on and one update per segment, as it trains on long episodes.
Peak memory is the resident set size sampled every 5 ms while the backbone runs (and, on CUDA,
``torch.cuda.max_memory_allocated``).

The **env** mode times an environment alone under random actions, the way the online trainer
steps it (:func:`wmzoo.envs.vector.make_vector_env`, same-step autoreset): one env in this process
(``single``), then ``N`` envs one after another in this process (``sync``) and in ``N`` processes
(``async``). Throughput is env steps per second, all envs together; peak memory is this
process's only (async workers are not counted).
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from wmzoo.atomic import write_text_atomic
from wmzoo.errors import WmzooError
from wmzoo.imagination import imagine, random_actions
from wmzoo.interfaces import Batch, EnvInfo, map_state
from wmzoo.optim import step_components, world_model_optimizers
from wmzoo.registry import build_world_model, env_info, make_env, world_model_spec
from wmzoo.specs import WorldModelSpec

Mode = Literal["train", "imagine"]
SYNTHETIC_ENV = EnvInfo(name="synthetic-64x64", obs_shape=(3, 64, 64), num_actions=6)


@dataclass
class BenchRecord:
    backbone: str  # as given, e.g. "rssm:paper"
    preset: str
    mode: str
    batch_size: int
    seq_len: int
    horizon: int
    params: int
    throughput: float  # frames per second
    seconds_per_iter: float
    peak_rss_mb: float
    rss_increase_mb: float
    peak_cuda_mb: float
    iters: int
    device: str
    threads: int
    segment: int = 0  # train: steps per update when the backbone trains in segments (TBTT), else T


@dataclass
class EnvBenchRecord:
    env: str
    mode: str  # "env"
    vector: str  # "single", "sync" or "async"
    envs: int
    steps: int  # timed env steps, all envs together
    throughput: float  # env steps per second, all envs together
    seconds: float
    peak_rss_mb: float  # this process only


class RssSampler:
    """Peak resident set size of this process while the ``with`` block runs (5 ms sampling)."""

    def __init__(self) -> None:
        self.peak = self.start = _rss_mb()
        self._stop = threading.Event()

    def __enter__(self) -> RssSampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _rss_mb())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_mb())


def _rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def synthetic_batch(env: EnvInfo, batch: int, seq_len: int, device: torch.device, seed: int = 0) -> Batch:
    """Random frames, actions and rewards of ``env``'s shape; episodes start at column 0."""
    g = torch.Generator().manual_seed(seed)
    if env.discrete:
        action = torch.randint(env.num_actions, (batch, seq_len), generator=g)
    else:
        action = torch.rand(batch, seq_len, env.num_actions, generator=g) * 2 - 1
    is_first = torch.zeros(batch, seq_len, dtype=torch.bool)
    is_first[:, 0] = True
    return Batch(
        obs=torch.randint(0, 256, (batch, seq_len, *env.obs_shape), dtype=torch.uint8, generator=g),
        action=action,
        reward=torch.randn(batch, seq_len, generator=g),
        terminal=torch.rand(batch, seq_len, generator=g) < 0.001,
        is_first=is_first,
    ).to(device)


def parse_backbones(text: str, default_preset: str) -> list[tuple[str, str, str]]:
    """``"rssm:paper,s4wm"`` -> ``[("rssm:paper", "rssm", "paper"), ("s4wm", "s4wm", default)]``."""
    out = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        name, _, preset = item.partition(":")
        out.append((item, name, preset or default_preset))
    if not out:
        raise WmzooError("--backbones: give at least one NAME[:PRESET]")
    return out


def bench_env(name: str | None) -> EnvInfo:
    if name is None:
        return SYNTHETIC_ENV
    env = make_env(name)
    try:
        return env_info(env, name)
    finally:
        env.close()


def run_bench(
    backbones: str,
    mode: Mode,
    preset: str = "tiny",
    batch: int = 16,
    seq_len: int = 64,
    horizon: int = 15,
    iters: int = 5,
    warmup: int = 1,
    env: str | None = None,
    device: str = "cpu",
    decode: bool = False,
) -> list[BenchRecord]:
    """Measure every ``NAME[:PRESET]`` of ``backbones`` in this process, one after the other."""
    if mode not in ("train", "imagine"):
        raise WmzooError(f"--mode {mode!r}: choose train or imagine")
    items = parse_backbones(backbones, preset)
    specs = [(label, name, p, world_model_spec(name, p)) for label, name, p in items]  # bad names first
    return bench_specs(specs, mode, batch, seq_len, horizon, iters, warmup, bench_env(env), device, decode)


def bench_specs(
    items: list[tuple[str, str, str, WorldModelSpec]],
    mode: Mode,
    batch: int,
    seq_len: int,
    horizon: int,
    iters: int,
    warmup: int,
    info: EnvInfo,
    device: str = "cpu",
    decode: bool = False,
) -> list[BenchRecord]:
    """:func:`run_bench` on resolved world-model specs ``(label, backbone, preset, spec)`` (a
    study's cells: their presets with the study's ``--set`` and width fields)."""
    dev = torch.device(device)
    records = []
    for label, name, p, spec in items:
        torch.manual_seed(0)
        wm = build_world_model(name, spec, info).to(dev)
        params = sum(x.numel() for x in wm.parameters())
        data = synthetic_batch(info, batch, seq_len, dev)
        step = _train_step(wm, data) if mode == "train" else _imagine_step(wm, data, horizon, info, decode)
        segment = train_segments(wm, seq_len)[0][1] if mode == "train" else 0
        for _ in range(warmup):
            step()
        _sync(dev)
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        with RssSampler() as rss:
            t0 = time.perf_counter()
            for _ in range(iters):
                step()
            _sync(dev)
            seconds = (time.perf_counter() - t0) / iters
        frames = batch * (seq_len if mode == "train" else horizon)
        records.append(BenchRecord(
            backbone=label, preset=p, mode=mode, batch_size=batch, seq_len=seq_len,
            horizon=horizon if mode == "imagine" else 0, params=params,
            throughput=frames / seconds, seconds_per_iter=seconds,
            peak_rss_mb=round(rss.peak, 1), rss_increase_mb=round(rss.peak - rss.start, 1),
            peak_cuda_mb=torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else 0.0,
            iters=iters, device=str(dev), threads=torch.get_num_threads(), segment=segment,
        ))
        del wm, data, step
        _release_memory()
    return records


def _release_memory() -> None:
    """Return freed heap to the OS between backbones, so one backbone's peak does not count
    against the next one's (glibc keeps freed arenas otherwise)."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def train_segments(wm, seq_len: int) -> list[tuple[int, int]]:
    """The ``[start, stop)`` windows one train step covers: the whole sequence at once, or, for a
    backbone that trains statefully (truncated BPTT, Transformer-XL segments), consecutive segments
    of its spec's ``seq_len`` with the carry passed on and one update each, as such a backbone
    trains on a long episode (s4wm paper, figure 3: "RSSM-TBTT is much more memory-efficient")."""
    if not wm.stateful_training or seq_len <= wm.spec.seq_len:
        return [(0, seq_len)]
    size = wm.spec.seq_len
    return [(start, min(start + size, seq_len)) for start in range(0, seq_len, size)]


def _train_step(wm, data: Batch):
    optimizers = world_model_optimizers(wm.components())
    wm.train()
    segments = train_segments(wm, data.shape[1])

    def step() -> None:
        carry = None
        for start, stop in segments:
            out = wm.loss(data.slice(start, stop), carry)
            step_components(optimizers, out.losses)
            carry = out.carry

    return step


def _imagine_step(wm, data: Batch, horizon: int, info: EnvInfo, decode: bool):
    """Observe the context once (untimed), then time imagination from a fresh copy of its state
    (a backbone may update its state's buffers in place, e.g. a preallocated key/value cache)."""
    wm.eval()
    policy = random_actions(info.num_actions, info.discrete)
    with torch.no_grad():
        start = wm.observe(data)

    @torch.no_grad()
    def step() -> None:
        imagine(wm, policy, map_state(torch.clone, start), horizon, decode=decode)

    return step


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_env_bench(
    env: str, envs: int = 2, steps: int = 500, warmup: int = 10, seed: int = 0
) -> list[EnvBenchRecord]:
    """Env steps per second of ``env`` under random actions: one env, then ``envs`` envs in this
    process (sync) and in their own processes (async); ``steps`` timed vector steps each, after
    a reset and ``warmup`` untimed ones."""
    from wmzoo.envs.vector import action_samplers, make_vector_env

    if envs < 1 or steps < 1 or warmup < 0:
        raise WmzooError("--envs and --steps must be at least 1, --warmup at least 0")
    configs = [("single", 1, "sync")]
    if envs > 1:
        configs += [("sync", envs, "sync"), ("async", envs, "async")]
    records = []
    for label, n, kind in configs:
        vec = make_vector_env(env, n, seed=seed, mode=kind)  # type: ignore[arg-type]
        try:
            samplers = action_samplers(vec, seed)
            vec.reset(seed=seed)
            for _ in range(warmup):
                vec.step(np.stack([space.sample() for space in samplers]))
            with RssSampler() as rss:
                t0 = time.perf_counter()
                for _ in range(steps):
                    vec.step(np.stack([space.sample() for space in samplers]))
                seconds = time.perf_counter() - t0
        finally:
            vec.close()
        records.append(EnvBenchRecord(
            env=env, mode="env", vector=label, envs=n, steps=n * steps,
            throughput=n * steps / seconds, seconds=seconds, peak_rss_mb=round(rss.peak, 1),
        ))
    return records


def format_env_table(records: list[EnvBenchRecord]) -> str:
    """Env steps per second of each configuration, relative to the first (one env)."""
    if not records:
        return ""
    base = records[0].throughput
    rows = [f"{'env':<24}{'vector':<8}{'envs':>5}{'steps':>8}{'steps/s':>11}{'ratio':>8}"]
    for r in records:
        rows.append(
            f"{r.env:<24}{r.vector:<8}{r.envs:>5}{r.steps:>8}{r.throughput:>11.1f}"
            f"{r.throughput / base:>8.2f}"
        )
    return "\n".join(rows)


def format_table(records: list[BenchRecord]) -> str:
    """A plain table with each backbone's throughput relative to the first one."""
    if not records:
        return ""
    base = records[0].throughput
    head = f"{'backbone':<22}{'mode':<9}{'B':>4}{'T':>6}{'H':>4}{'params':>12}{'frames/s':>12}{'ratio':>8}{'peak RSS MB':>13}{'segment':>9}"
    rows = [head]
    for r in records:
        rows.append(
            f"{r.backbone:<22}{r.mode:<9}{r.batch_size:>4}{r.seq_len:>6}{r.horizon:>4}{r.params:>12,}"
            f"{r.throughput:>12.1f}{r.throughput / base:>8.2f}{r.peak_rss_mb:>13.0f}{r.segment or '':>9}"
        )
    return "\n".join(rows)


def write_json(path: str | Path, records: list[BenchRecord] | list[EnvBenchRecord]) -> Path:
    return write_text_atomic(path, json.dumps([asdict(r) for r in records], indent=2))
