"""The speed and memory harness behind ``wmzoo bench``.

Times, in one process and side by side, either the world-model **train** step (forward loss,
backward, optimiser step of every component) or the **imagine** loop (observe a context, then the
generic imagination engine, acting uniformly at random or, with ``actions="policy"``, with the
backbone's default policy at the preset, its forward pass timed in every step) of any registered
backbone, on synthetic data of an environment's shape, after warm-up iterations. Throughput is frames per
second: ``B·T`` trained frames per train step, ``B·H`` imagined frames per imagination (the
``T``-step context is observed once beforehand and not timed).
A backbone that trains statefully (``stateful_training``: RSSM with truncated BPTT, TSSM-XL) goes
through a sequence longer than its spec's ``seq_len`` in consecutive segments of that length, the
carry passed on and one update per segment, as it trains on long episodes.
Peak memory is the resident set size sampled every 5 ms while the backbone runs (and, on CUDA,
``torch.cuda.max_memory_allocated``).

**Alternated rounds.** Every configuration compared (each backbone at each variant) is built
first, warmed up, then timed in ``rounds`` rounds in this one process, ``iters`` iterations each
per round, the order of the configurations reversed every other round (:func:`alternate`), so a
change of load on the machine falls on all of them. A record's throughput is at its median
seconds per iteration over the rounds; ``ratio`` (against the first configuration) and
``vs_first`` (against its backbone's first variant) are the medians of the per-round ratios, with
``ratio_min``/``ratio_max`` their spread; ``round_seconds`` keeps every round. Peak memory is
sampled while the configuration runs, all configurations alive (their parameters and optimizer
states count in every one's peak RSS; ``rss_increase_mb`` is its own increase).

**How close to the limit.** Each configuration's floating-point operations per iteration are
counted once, untimed, with :class:`torch.utils.flop_counter.FlopCounterMode` (matrix products,
convolutions, attention, their backward; not elementwise work, normalisations, FFTs or the
optimizer's arithmetic), on its backbone's first variant (the same arithmetic in every variant).
The CPU's (or GPU's) peak is a large square matrix product in each precision timed (float32;
bfloat16 for ``bf16``), timed in every round beside the configurations with the same threads:
``flops_per_s`` is the achieved rate at the median seconds, ``fraction_of_peak`` the median over
rounds of the round's achieved rate over the round's matmul rate (:func:`efficiency`).

Every backbone is built as the trainer builds it (:class:`wmzoo.train.agent.Agent`: the world
model, its default policy, their optimizers), on ``device``, at each of ``precisions`` (fp32,
bf16 mixed precision) and, with ``compile``, also with its loss and imagination step compiled
(:mod:`wmzoo.device`): the variants of one backbone side by side, ``vs_first`` their throughput
relative to the backbone's first. ``overrides`` (``--set``) apply to every backbone timed.

**Components** (train mode, ``components=True``): after the timed iterations, as many again
with the world model's parts timed apart (the timed figure is never instrumented):

- each world-model component of ``WorldModel.components()`` (``tokenizer``, ``world_model``;
  ``model`` for a one-component backbone): the forward time of its modules (module hooks on every
  module whose parameters all belong to it, outermost call counted), its loss's own backward pass,
  and its optimizer step. The forward time without gradient (e.g. a tokenizer encoding the
  batch for the world model) is reported apart as ``<name>.no_grad``;
- ``start_states``: building the batch's imagination start states where the backbone defers
  them (``TrainOutput.starts``; else they are built inside the loss and counted there);
- ``policy``: one policy update, as the trainer runs it (imagination from those start states
  under the policy, and its learning step), on top of the world-model update;
- ``other``: the world-model update's time not in a component (code outside any component's
  modules: loss arithmetic, the shared backward's bookkeeping).

The **env** mode times an environment alone under random actions, the way the online trainer
steps it (:func:`wmzoo.envs.vector.make_vector_env`, same-step autoreset): one env in this process
(``single``), then ``N`` envs one after another in this process (``sync``) and in ``N`` processes
(``async``). Throughput is env steps per second, all envs together; peak memory is this
process's only (async workers are not counted).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch import nn

from wmzoo.atomic import write_text_atomic
from wmzoo.config import check_fits_in_memory
from wmzoo.device import check_precision, compile_failures, resolve_device
from wmzoo.errors import WmzooError, split_names
from wmzoo.imagination import ActFn, imagine, random_actions
from wmzoo.interfaces import Batch, EnvInfo, Policy, WorldModel, map_state
from wmzoo.registry import default_registry, env_info, make_env, policy_spec, world_model_spec
from wmzoo.specs import PolicySpec, RunSpec, TrainSpec, WorldModelSpec, parse_override, set_path, validate
from wmzoo.testing import synthetic_batch

if TYPE_CHECKING:
    from wmzoo.train.agent import Agent

Mode = Literal["train", "imagine"]
Actions = Literal["random", "policy"]
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
    precision: str = "fp32"  # fp32, or bf16 mixed precision (autocast)
    compiled: bool = False  # loss and imagination step through torch.compile
    compile_failed: dict[str, str] = field(default_factory=dict)  # compiled methods that ran eagerly, why
    vs_first: float = 1.0  # throughput relative to this backbone's first variant (fp32 eager)
    overrides: list[str] = field(default_factory=list)  # --set given to every backbone
    # train mode with components: seconds per iteration of each part (see the module docstring)
    components: dict[str, float] = field(default_factory=dict)
    actions: str = ""  # imagine: who acted, "random" (uniform) or "policy" (the backbone's default policy)
    observations: str = ""  # the env timed and its observation spec, e.g. "gym-cartpole: state float32 [4]"
    # alternated rounds (module docstring): seconds per iteration in each round, the ratio of
    # throughput to the first configuration's (median over rounds, and its spread)
    rounds: int = 1
    round_seconds: list[float] = field(default_factory=list)
    ratio: float = 1.0
    ratio_min: float = 1.0
    ratio_max: float = 1.0
    # how close to the limit: FLOPs per iteration (FlopCounterMode), achieved FLOP/s, the peak of
    # a large matmul in the same precision (median over rounds) and the median per-round fraction
    flops: float = 0.0
    flops_per_s: float = 0.0
    peak_flops_per_s: float = 0.0
    fraction_of_peak: float = 0.0


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


def parse_backbones(text: str, default_preset: str) -> list[tuple[str, str, str]]:
    """``"rssm:paper,s4wm"`` -> ``[("rssm:paper", "rssm", "paper"), ("s4wm", "s4wm", default)]``."""
    out = []
    for item in split_names(text, "--backbones"):
        name, _, preset = item.partition(":")
        out.append((item, name, preset or default_preset))
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
    precisions: Sequence[str] = ("fp32",),
    compile: bool = False,
    overrides: Sequence[str] = (),
    components: bool = False,
    actions: Actions = "random",
    rounds: int = 3,
) -> list[BenchRecord]:
    """Measure every ``NAME[:PRESET]`` of ``backbones`` in this process, each at every variant
    (:func:`variants`), all of them in ``rounds`` alternated rounds (:func:`alternate`).
    ``overrides``: ``--set KEY=VALUE`` for every backbone (``model.`` keys, or bare ones, for the
    world model; ``policy.`` keys for its policy). ``actions`` (imagine): uniformly ``random`` ones, or the backbone's default ``policy`` acting
    on the imagined features (its forward pass timed with the world model's, as the official
    IRIS and REM codes time imagination)."""
    if mode not in ("train", "imagine"):
        raise WmzooError(f"--mode {mode!r}: choose train or imagine")
    if actions not in ("random", "policy"):
        raise WmzooError(f"--actions {actions!r}: choose random or policy")
    if rounds < 1:
        raise WmzooError(f"--rounds {rounds}: give at least 1 (alternated rounds of every configuration)")
    resolve_device(device, "--device")
    for precision in precisions:
        check_precision(precision, "--precision")
    items = parse_backbones(backbones, preset)
    model_sets, policy_sets = split_overrides(overrides)
    specs = [(label, name, p, world_model_spec(name, p, model_sets)) for label, name, p in items]  # bad names first
    for _, name, p, _ in specs:
        bench_policy_spec(name, p, policy_sets)  # bad policy fields before anything is timed
    infos = [bench_env(name) for name in bench_envs(env)]
    return bench_specs(specs, mode, batch, seq_len, horizon, iters, warmup, infos, device, decode,
                       precisions, compile, policy_sets, components, list(overrides), actions, rounds)


def bench_envs(env: str | None) -> list[str | None]:
    """The envs of ``--env`` in train and imagine modes: one name, or a comma list to time every
    backbone on each of them side by side in the same alternated rounds (a vector env beside a
    pixel one: the CNN's cost as a ratio that a change of load between them cannot move)."""
    if env is None:
        return [None]
    return split_names(env, "--env", unique=True)


def split_overrides(overrides: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``--set`` of the bench as nested world-model and policy overrides: ``model.KEY`` (or a bare
    ``KEY``) and ``policy.KEY``, as ``wmzoo run --set`` spells them; ``train.`` keys are refused
    (the bench's own flags set the device, precision and compilation)."""
    model: dict[str, Any] = {}
    policy: dict[str, Any] = {}
    for text in overrides:
        key, value = parse_override(text)
        root, _, rest = key.partition(".")
        if root == "train" or key == "seed":
            raise WmzooError(f"--set {text}: the bench takes model. and policy. fields (--device, "
                             "--precision and --compile set how it runs)")
        if root == "policy" and rest:
            set_path(policy, rest, value)
        else:
            set_path(model, rest if root == "model" and rest else key, value)
    return model, policy


def bench_policy_spec(backbone: str, preset: str, overrides: dict[str, Any] | None = None) -> PolicySpec:
    """The spec of ``backbone``'s default policy at ``preset`` (its ``tiny`` one where it has no
    preset of that name) with ``overrides``."""
    registry = default_registry()
    policy = registry.backbone(backbone).default_policy
    name = preset if preset in registry.policy(policy).presets else "tiny"
    return policy_spec(policy, name, overrides)


def variants(precisions: Sequence[str], compile: bool) -> list[tuple[str, bool]]:
    """``(precision, compiled)`` of each variant timed, side by side: fp32 first (the baseline),
    then the other precisions asked for, then each of them compiled when ``compile``."""
    eager = ["fp32", *(p for p in dict.fromkeys(precisions) if p != "fp32")]
    return [(p, False) for p in eager] + ([(p, True) for p in eager] if compile else [])


def bench_specs(
    items: list[tuple[str, str, str, WorldModelSpec]],
    mode: Mode,
    batch: int,
    seq_len: int,
    horizon: int,
    iters: int,
    warmup: int,
    info: EnvInfo | Sequence[EnvInfo],
    device: str = "cpu",
    decode: bool = False,
    precisions: Sequence[str] = ("fp32",),
    compile: bool = False,
    policy_overrides: dict[str, Any] | None = None,
    components: bool = False,
    overrides: list[str] | None = None,
    actions: Actions = "random",
    rounds: int = 1,
) -> list[BenchRecord]:
    """:func:`run_bench` on resolved world-model specs ``(label, backbone, preset, spec)`` (a
    study's cells: their presets with the study's ``--set`` and width fields): every
    configuration built and warmed up, then timed in ``rounds`` alternated rounds (module
    docstring). ``info``: the env whose shapes every configuration takes, or several: every
    backbone on each, side by side (``--env A,B``)."""
    infos = [info] if isinstance(info, EnvInfo) else list(info)
    for info in infos:
        for _, name, p, spec in items:  # sizes that cannot fit, before anything is allocated or timed
            check_fits_in_memory(bench_run(name, p, spec, info, device, "fp32", False, policy_overrides), info,
                                 batch * (seq_len + (horizon if mode == "imagine" else 0)))
    units: list[_Unit] = []
    for info, (label, name, p, spec) in itertools.product(infos, items):
        first = None
        for precision, compiled in variants(precisions, compile):
            run = bench_run(name, p, spec, info, device, precision, compiled, policy_overrides)
            unit = _Unit(label, run, mode, batch, seq_len, horizon, info, decode, actions)
            if first is None:  # the same arithmetic in every variant of a backbone: counted once
                unit.flops = count_flops(unit.step)
            unit.first = first = first or unit
            unit.flops = first.flops
            units.append(unit)
    peaks = {precision: MatmulPeak(units[0].agent.device, precision) for precision in
             dict.fromkeys(u.run.train.precision for u in units)}
    for unit in units:
        # a compiled variant compiles on its first call and may recompile once for dynamic shapes
        for _ in range(max(warmup, 2) if unit.run.train.compile else warmup):
            unit.step()
    for peak in peaks.values():
        peak.calibrate()
    timed: list[Callable[[], Any]] = [*units, *peaks.values()]
    dev = units[0].agent.device
    samplers: dict[int, list[RssSampler]] = {}
    cuda_mb: dict[int, float] = {}

    @contextlib.contextmanager
    def sampled(i: int) -> Iterator[None]:
        _sync(dev)
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        with RssSampler() as rss:
            yield
        samplers.setdefault(i, []).append(rss)
        if dev.type == "cuda":
            cuda_mb[i] = max(cuda_mb.get(i, 0.0), torch.cuda.max_memory_allocated(dev) / 2**20)

    seconds, _ = alternate(timed, rounds, iters, around=sampled, sync=functools.partial(_sync, dev))
    peak_seconds = {precision: seconds[len(units) + k] for k, precision in enumerate(peaks)}
    records = []
    for i, unit in enumerate(units):
        peak = peaks[unit.run.train.precision]
        record = unit.record(seconds[i], samplers[i], iters)
        record.peak_cuda_mb, record.flops = cuda_mb.get(i, 0.0), unit.flops
        record.ratio, record.ratio_min, record.ratio_max = ratio_stats(seconds[0], seconds[i])
        record.vs_first = ratio_stats(seconds[units.index(unit.first)], seconds[i])[0]
        record.flops_per_s, record.peak_flops_per_s, record.fraction_of_peak = efficiency(
            unit.flops, seconds[i], peak.flops, peak_seconds[unit.run.train.precision])
        record.overrides = list(overrides or [])
        if components and mode == "train" and not unit.run.train.compile:  # a compiled loss: one fused graph
            record.components = _component_times(unit.agent, unit.data, iters, unit.info)
        records.append(record)
    del units, timed
    _release_memory()
    return records


def alternate(
    units: Sequence[Callable[[], Any]], rounds: int, iters: int,
    clock: Callable[[], float] = time.perf_counter,
    around: Callable[[int], contextlib.AbstractContextManager[Any]] | None = None,
    sync: Callable[[], None] = lambda: None,
) -> tuple[list[list[float]], list[list[int]]]:
    """Seconds per call of each of ``units`` in each of ``rounds`` rounds, ``iters`` calls of a
    unit timed together per round; round ``r`` runs the units in their order when ``r`` is even,
    in the reverse order when odd (so neither a load that grows nor one that shrinks during a
    round favours the units that come first). Also returns each round's order. ``around(i)``:
    a context entered around unit ``i``'s timed calls (untimed itself: the clock is read inside)."""
    seconds = [[0.0] * rounds for _ in units]
    orders = []
    for r in range(rounds):
        order = list(range(len(units)))[:: -1 if r % 2 else 1]
        orders.append(order)
        for i in order:
            with around(i) if around else contextlib.nullcontext():
                sync()
                t0 = clock()
                for _ in range(iters):
                    units[i]()
                sync()
                seconds[i][r] = (clock() - t0) / iters
    return seconds, orders


def ratio_stats(base: Sequence[float], seconds: Sequence[float]) -> tuple[float, float, float]:
    """Median, min and max over rounds of the throughput ratio of a unit taking ``seconds`` per
    iteration against one taking ``base`` in the same round (the same frames per iteration)."""
    ratios = [b / s for b, s in zip(base, seconds)]
    return statistics.median(ratios), min(ratios), max(ratios)


def efficiency(flops: float, seconds: Sequence[float], peak_flops: float,
               peak_seconds: Sequence[float]) -> tuple[float, float, float]:
    """``(achieved FLOP/s, peak FLOP/s, fraction of peak)``: ``flops`` per iteration at the median of
    the rounds' ``seconds`` per iteration; the peak a matmul of ``peak_flops`` per call at the median
    of its ``peak_seconds``; the fraction the median over rounds of each round's ratio of the two."""
    if not seconds:
        return 0.0, 0.0, 0.0
    achieved = flops / statistics.median(seconds)
    peak = peak_flops / statistics.median(peak_seconds)
    fraction = statistics.median((flops / s) / (peak_flops / p) for s, p in zip(seconds, peak_seconds))
    return achieved, peak, fraction


def count_flops(step: Callable[[], Any]) -> float:
    """Floating-point operations of one call of ``step`` (:class:`torch.utils.flop_counter.FlopCounterMode`:
    matrix products, convolutions, attention and their backward), from one extra, untimed call."""
    from torch.utils.flop_counter import FlopCounterMode

    # The counter's module tracking can trip over a step's autograd graph (a module handed a tensor
    # that requires grad without a grad_fn, e.g. REM's prediction tokens: a view of a parameter
    # made under no_grad); the same formulas are then applied by a plain dispatch mode without
    # module tracking (:class:`_DispatchFlops`), and a step that cannot be counted is 0 (shown as
    # "-"), never a failed bench.
    for counting in (lambda: FlopCounterMode(display=False), _DispatchFlops):
        try:
            with counting() as counter:
                step()
            return float(counter.get_total_flops())
        except Exception:  # noqa: BLE001 - any failure of the counter's own hooks
            continue
    return 0.0


class _DispatchFlops(TorchDispatchMode):
    """``torch.utils.flop_counter``'s formulas (its ``flop_registry``: matrix products,
    convolutions, attention, their backward) summed over every op dispatched, without
    :class:`~torch.utils.flop_counter.FlopCounterMode`'s module tracking."""

    def __init__(self) -> None:
        super().__init__()
        from torch.utils.flop_counter import flop_registry

        self.registry, self.total = flop_registry, 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = self.registry.get(func._overloadpacket)
        if formula is not None:
            self.total += formula(*args, **kwargs, out_val=out)
        return out

    def get_total_flops(self) -> int:
        return self.total


class MatmulPeak:
    """The peak FLOP/s of ``device`` in ``precision``: a square matrix product large enough to
    run at the BLAS's best (2048 on a CPU, 8192 on a GPU), in float32 or, for ``bf16``, bfloat16,
    repeated so one call takes about ``target`` seconds (:meth:`calibrate`).

    Without ``size`` the side doubles from 256 up to that largest one while the next product is
    expected to take under ``budget`` seconds: a precision the processor only emulates (bfloat16
    on a CPU without AVX512-BF16 or AMX runs ~50× slower than float32) is measured on a smaller
    product instead of taking minutes per call; a native one reaches the largest side."""

    def __init__(self, device: torch.device, precision: str, size: int = 0, target: float = 0.1,
                 budget: float = 1.0) -> None:
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        gen = torch.Generator(device="cpu").manual_seed(0)
        largest = size or (8192 if device.type == "cuda" else 2048)
        self.device, self.target, self.reps = device, target, 1
        self.n = largest if size else min(256, largest)
        while True:
            self.a, self.b = (torch.randn(self.n, self.n, generator=gen).to(device, dtype) for _ in range(2))
            if self.n >= largest or self._seconds() * 8 > budget:  # doubling the side: 8× the work
                break
            self.n *= 2

    @property
    def flops(self) -> float:
        return 2.0 * self.n**3 * self.reps

    def _seconds(self) -> float:
        """Seconds of one call after a warm-up call."""
        self()
        _sync(self.device)
        t0 = time.perf_counter()
        self()
        _sync(self.device)
        return time.perf_counter() - t0

    def calibrate(self) -> None:
        self.reps = max(1, round(self.target / max(self._seconds(), 1e-9)))

    def __call__(self) -> None:
        for _ in range(self.reps):
            torch.mm(self.a, self.b)


def bench_run(name: str, preset: str, spec: WorldModelSpec, info: EnvInfo, device: str, precision: str,
              compiled: bool, policy_overrides: dict[str, Any] | None = None) -> RunSpec:
    """The run the bench builds its :class:`~wmzoo.train.agent.Agent` from: ``spec``, the
    backbone's default policy, and a trainer spec that sets only the device, precision and
    compilation."""
    policy = bench_policy_spec(name, preset, policy_overrides)
    train = TrainSpec(device=device, precision=precision, compile=compiled, threads=0)  # type: ignore[arg-type]
    return validate(RunSpec, {  # type: ignore[return-value]
        "backbone": name, "env": info.name, "preset": preset, "model": spec, "train": train,
        "policy_name": default_registry().backbone(name).default_policy, "policy": policy,
    })


class _Unit:
    """One configuration timed: its agent built as the trainer builds it, on synthetic data, and
    the step timed (a train update or an imagination); called to run one step."""

    def __init__(self, label: str, run: RunSpec, mode: Mode, batch: int, seq_len: int, horizon: int,
                 info: EnvInfo, decode: bool, actions: Actions) -> None:
        from wmzoo.train.agent import Agent

        torch.manual_seed(0)
        self.label, self.run, self.mode, self.actions, self.info = label, run, mode, actions, info
        self.batch, self.seq_len, self.horizon = batch, seq_len, horizon
        self.agent = Agent(run, info)
        self.data = synthetic_batch(info, batch, seq_len, self.agent.device)
        wm = self.agent.world_model
        if mode == "train":
            self.step = _train_step(self.agent, self.data)
        else:
            self.step = _imagine_step(self.agent, self.data, horizon, info, decode, actions)
        self.segment = train_segments(wm, seq_len)[0][1] if mode == "train" else 0
        self.flops = 0.0
        self.first: _Unit = self

    def __call__(self) -> None:
        self.step()

    def record(self, seconds: list[float], samplers: list[RssSampler], iters: int) -> BenchRecord:
        dev, wm, run = self.agent.device, self.agent.world_model, self.run
        median = statistics.median(seconds)
        frames = self.batch * (self.seq_len if self.mode == "train" else self.horizon)
        return BenchRecord(
            backbone=self.label, preset=run.preset, mode=self.mode, batch_size=self.batch, seq_len=self.seq_len,
            horizon=self.horizon if self.mode == "imagine" else 0, params=sum(x.numel() for x in wm.parameters()),
            throughput=frames / median, seconds_per_iter=median,
            peak_rss_mb=round(max(r.peak for r in samplers), 1),
            rss_increase_mb=round(max(r.peak - r.start for r in samplers), 1),
            peak_cuda_mb=0.0, iters=iters, device=str(dev), threads=torch.get_num_threads(), segment=self.segment,
            precision=run.train.precision, compiled=run.train.compile, compile_failed=compile_failures(wm),
            actions=self.actions if self.mode == "imagine" else "", rounds=len(seconds), round_seconds=list(seconds),
            observations=f"{self.info.name}: {self.info.describe_obs()}",
        )


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


def _train_step(agent: Agent, data: Batch) -> Callable[[], None]:
    """One world-model update of the trainer (:meth:`Agent.train_world_model`: loss, one shared
    backward, each component's step) over ``data``, in carried segments for a stateful backbone;
    start states a backbone defers are not built (no policy trains here)."""
    segments = train_segments(agent.world_model, data.shape[1])

    def step() -> None:
        carry = None
        for start, stop in segments:
            out = agent.train_world_model(data.slice(start, stop), carry, starts=False)
            carry = out.carry

    return step


def _imagine_step(agent: Agent, data: Batch, horizon: int, info: EnvInfo, decode: bool,
                  actions: Actions = "random") -> Callable[[], None]:
    """Observe the context once (untimed), then time imagination from a fresh copy of its state
    (a backbone may update its state's buffers in place, e.g. a preallocated key/value cache),
    all in the agent's precision. ``actions="policy"``: the agent's policy acts, from its initial
    state (a recurrent policy is not burnt in on the context first: the same work per step)."""
    wm = agent.world_model
    wm.eval()
    if actions == "policy":
        agent.policy.eval()
        policy: Policy | ActFn = agent.policy
    else:
        policy = random_actions(info.num_actions, info.discrete)
    with torch.no_grad(), agent.autocast():
        start = wm.observe(data)

    def step() -> None:
        with agent.autocast():
            imagine(wm, policy, map_state(torch.clone, start), horizon, decode=decode)

    return step


class ComponentTimer:
    """Forward seconds of each world-model component while :meth:`recording`: hooks on every
    module whose parameters all belong to one component of ``WorldModel.components()``; only the
    outermost hooked call counts (a module inside another is in its time), under
    ``<name>.forward`` with gradient and ``<name>.no_grad`` without."""

    def __init__(self, world_model: WorldModel, device: torch.device) -> None:
        owner = {id(p): name for name, (params, _) in world_model.components().items() for p in params}
        self.device, self.depth, self.t0, self.current = device, 0, 0.0, ""
        self.times: dict[str, float] | None = None
        self.handles = []
        for module in world_model.modules():
            names = {owner.get(id(p)) for p in module.parameters()}
            if len(names) != 1 or None in names:
                continue
            (name,) = names
            self.handles.append(module.register_forward_pre_hook(functools.partial(self._enter, name)))
            self.handles.append(module.register_forward_hook(self._exit, always_call=True))

    def _enter(self, name: str, module: nn.Module, args: Any) -> None:
        if self.times is None:
            return
        if self.depth == 0:
            _sync(self.device)
            self.t0, self.current = time.perf_counter(), name
        self.depth += 1

    def _exit(self, module: nn.Module, args: Any, output: Any) -> None:
        if self.times is None:
            return
        self.depth -= 1
        if self.depth == 0:
            _sync(self.device)
            key = f"{self.current}.{'forward' if torch.is_grad_enabled() else 'no_grad'}"
            self.times[key] = self.times.get(key, 0.0) + time.perf_counter() - self.t0

    @contextlib.contextmanager
    def recording(self, times: dict[str, float]) -> Iterator[None]:
        self.times, self.depth = times, 0
        try:
            yield
        finally:
            self.times = None

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _component_times(agent: Agent, data: Batch, iters: int, info: EnvInfo) -> dict[str, float]:
    """Seconds per iteration of each part of a training update (module docstring), averaged
    over ``iters`` instrumented updates: the world-model update as the trainer runs it, but each
    component's loss backpropagated on its own (the same gradients where their graphs are
    disjoint, as the token backbones' tokenizer and world model are), then the deferred start
    states and one policy update."""
    wm, dev, optimizers = agent.world_model, agent.device, agent.optimizers
    segments = train_segments(wm, data.shape[1])
    P = agent.policy.spec
    own = synthetic_batch(info, P.max_starts, P.segment, dev, seed=1) if P.segment else None
    timer = ComponentTimer(wm, dev)
    times: dict[str, float] = {}
    update = 0.0

    def timed(key: str, fn: Callable[[], Any]) -> Any:
        _sync(dev)
        t0 = time.perf_counter()
        result = fn()
        _sync(dev)
        times[key] = times.get(key, 0.0) + time.perf_counter() - t0
        return result

    try:
        for _ in range(iters):
            carry = None
            for i, (start, stop) in enumerate(segments):
                wm.train()
                t0 = time.perf_counter()
                with timer.recording(times), agent.autocast():
                    out = wm.loss(data.slice(start, stop), carry)
                if i < len(segments) - 1:
                    out.discard_starts()
                elif out.starts is not None:  # deferred: built for the policy, timed apart
                    paused = time.perf_counter()
                    with agent.autocast():
                        timed("start_states", out.imagination_start)
                    t0 += time.perf_counter() - paused
                losses = {name: out.losses[name].float() for name in optimizers}
                for opt in optimizers.values():
                    opt.zero_grad()
                graded = [name for name, loss in losses.items() if loss.requires_grad]
                for j, name in enumerate(graded):
                    timed(f"{name}.backward", functools.partial(losses[name].backward, retain_graph=j < len(graded) - 1))
                for name, opt in optimizers.items():
                    timed(f"{name}.step", functools.partial(opt.step, losses[name], backward=False))
                _sync(dev)
                update += time.perf_counter() - t0
                carry = out.carry
            timed("policy", functools.partial(agent.train_policy, out, segments=own))
    finally:
        timer.remove()
    parts = {key: value / iters for key, value in sorted(times.items())}
    counted = sum(v for k, v in parts.items() if k not in ("start_states", "policy"))
    parts["other"] = max(update / iters - counted, 0.0)
    return parts


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
    width = max(24, *(len(r.env) + 2 for r in records))  # dmc-proprio-cartpole-swingup is 28
    rows = [f"{'env':<{width}}{'vector':<8}{'envs':>5}{'steps':>8}{'steps/s':>11}{'ratio':>8}"]
    for r in records:
        rows.append(
            f"{r.env:<{width}}{r.vector:<8}{r.envs:>5}{r.steps:>8}{r.throughput:>11.1f}"
            f"{r.throughput / base:>8.2f}"
        )
    return "\n".join(rows)


def variant_name(record: BenchRecord) -> str:
    """``fp32``, ``bf16``, ``fp32+compile``, ...: how a record's backbone ran (``+policy``: it
    imagined under its own policy)."""
    policy = "+policy" if record.actions == "policy" else ""
    return record.precision + ("+compile" if record.compiled else "") + policy


def format_table(records: list[BenchRecord]) -> str:
    """A plain table with each configuration's throughput relative to the first one (``ratio``:
    median [min, max] over the alternated rounds) and to its backbone's first variant (``vs
    fp32``), its achieved GFLOP/s and fraction of the matmul peak; then, where components were
    timed, milliseconds per iteration of each part (each component: forward with and without
    gradient, backward, step)."""
    if not records:
        return ""
    head = (f"{'backbone':<22}{'variant':<14}{'mode':<9}{'B':>4}{'T':>6}{'H':>4}{'params':>12}{'frames/s':>12}"
            f"{'ratio [min, max]':>21}{'vs fp32':>9}{'GFLOP/s':>10}{'% peak':>8}{'peak RSS MB':>13}{'segment':>9}")
    r0 = records[0]
    several_envs = len({r.observations.split(":")[0] for r in records}) > 1  # --env A,B: name each row's
    if several_envs:
        head += "  observations"
    rows = [f"{r0.rounds} round(s) alternated (order reversed every other round), {r0.iters} timed "
            f"iteration(s) each per round, {r0.threads} thread(s); frames/s at the median; ratios: "
            "median [min, max] of the rounds; % peak: of a large matmul in the same precision", head]
    for r in records:
        spread = f"{r.ratio:.2f} [{r.ratio_min:.2f}, {r.ratio_max:.2f}]"
        rows.append(
            f"{r.backbone:<22}{variant_name(r):<14}{r.mode:<9}{r.batch_size:>4}{r.seq_len:>6}{r.horizon:>4}"
            f"{r.params:>12,}{r.throughput:>12.1f}{spread:>21}{r.vs_first:>9.2f}"
            + (f"{r.flops_per_s / 1e9:>10.2f}{100 * r.fraction_of_peak:>8.1f}" if r.flops else f"{'-':>10}{'-':>8}")
            + f"{r.peak_rss_mb:>13.0f}{r.segment or '':>9}"
            + (f"  {r.observations}" if several_envs else "")
        )
    failed = [f"{r.backbone} {variant_name(r)}: {name} ran eagerly ({why})"
              for r in records for name, why in r.compile_failed.items()]
    timed = [r for r in records if r.components]
    if timed:
        names = list(dict.fromkeys(n for r in timed for n, _ in component_totals(r.components)))
        names.sort(key=lambda n: LAST_PARTS.index(n) if n in LAST_PARTS else -1)
        rows += ["", "ms per iteration: " + "; ".join(COMPONENT_HELP), f"{'backbone':<22}{'variant':<14}{'update':>9}"
                 + "".join(f"{n:>14}" for n in names)]
        for r in timed:
            totals = dict(component_totals(r.components))
            rows.append(f"{r.backbone:<22}{variant_name(r):<14}{r.seconds_per_iter * 1e3:>9.1f}"
                        + "".join(f"{totals[n] * 1e3:>14.1f}" if n in totals else f"{'-':>14}" for n in names))
    if failed:
        rows += ["", *failed]
    return "\n".join(rows)


COMPONENT_HELP = (
    "update = the timed world-model update",
    "each component = its modules' forward (with and without gradient) + its loss's backward + its step",
    "start_states, policy: on top of the update",
)


def component_totals(parts: dict[str, float]) -> tuple[tuple[str, float], ...]:
    """``{"tokenizer.forward": s, "tokenizer.backward": s, ..., "policy": s}`` summed per part."""
    totals: dict[str, float] = {}
    for key, value in parts.items():
        name = key.split(".", 1)[0]
        totals[name] = totals.get(name, 0.0) + value
    order = sorted(totals, key=lambda n: LAST_PARTS.index(n) if n in LAST_PARTS else -1)
    return tuple((n, totals[n]) for n in order)


LAST_PARTS = ("other", "start_states", "policy")  # after the world-model components


def write_json(path: str | Path, records: list[BenchRecord] | list[EnvBenchRecord]) -> Path:
    return write_text_atomic(path, json.dumps([asdict(r) for r in records], indent=2))
