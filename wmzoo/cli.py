"""``wmzoo``: list, run, eval, imagine, bench, aggregate, spec, data generate, evaluate, study.

Every user error (unknown name, bad value, missing optional dependency, corrupt checkpoint,
interrupted run) prints one line ``wmzoo: error: ...`` and exits with code 2.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wmzoo.errors import WmzooError, split_names
from wmzoo.limits import IMAGINE_FRAMES, TEMPERATURES
from wmzoo.outputs import AGGREGATE_JSON, BENCH_JSON, EVAL_JSON, IMAGE, check_output

if TYPE_CHECKING:
    from wmzoo.specs import RunSpec

EPILOG = """examples:
  wmzoo list
  wmzoo run --backbone rssm --env minigrid-memory-s7 --preset tiny --logdir runs/mem
  wmzoo run --logdir runs/mem --resume
  wmzoo run --offline data/dm100 --env distracting-memory-100 --steps 1000 --logdir runs/dm
  wmzoo run --logdir runs/dm --resume --steps 2000
  wmzoo data generate --env babyai-goto-local --episodes 1000 --size 32 --out data/gotolocal
  wmzoo run --backbone tokenwm --imitation data/gotolocal --steps 2000 --logdir runs/bc
  wmzoo data import-libero libero_spatial/*.hdf5 --out data/libero-spatial --size 64
  wmzoo eval --checkpoint runs/mem/checkpoint.safetensors --episodes 5
  wmzoo imagine --checkpoint runs/mem/checkpoint.safetensors --out mem.gif
  wmzoo bench --backbones rssm:tiny,rssm:small --mode train --batch 4 --seq-len 64
  wmzoo bench --mode env --env crafter --envs 2
  wmzoo aggregate results/*.json --json summary.json
  wmzoo spec --backbone rssm --preset paper
  wmzoo data generate --env distracting-memory-100 --episodes 10000 --size 40 --out data/dm100
  wmzoo evaluate --checkpoint runs/dm/checkpoint.safetensors --protocol reward --data data/dm100
  wmzoo study init study.yaml
  wmzoo study run study.yaml --out studies/mine --jobs 2
  wmzoo study report studies/mine
"""


DEVICE_HELP = "cpu, cuda, cuda:N, mps or auto (cuda where there is a GPU); default: where it trained"


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2), like every other wmzoo error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="wmzoo", description="Interchangeable world-model backbones for model-based RL.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="backbones, environments and policies, with availability")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--kind", metavar="KIND",
                   help="backbone(s), env(s) or environment(s), policy/policies, or plugin(s): those that failed")

    p = sub.add_parser("run", help="train a backbone on an environment (online, or --offline)")
    p.add_argument("--backbone", help="backbone name (default: rssm)")
    p.add_argument("--env", help="environment name (default: minigrid-empty-5x5; with --offline: the recorded one)")
    p.add_argument("--preset", help="tiny (CPU minutes, default), small (CPU hour) or paper")
    p.add_argument("--policy", help="policy plugin (default: the backbone's own)")
    p.add_argument("--steps", type=int, help="the run's length (train.steps): env steps online, world-model "
                   "updates with --offline or --imitation (they take no env steps); the progress bar counts the same")
    p.add_argument("--seed", type=int)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a spec field, e.g. model.deter=512, train.train_ratio=32")
    p.add_argument("--config", help="YAML file of fields (same keys as run.yaml)")
    p.add_argument("--logdir", help="run folder (default: runs/<backbone>-<env>-<preset>)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --logdir (an offline one on its recorded data)")
    p.add_argument("--offline", metavar="DIR", help="train only the world model on recorded episodes in DIR")
    p.add_argument("--imitation", metavar="DIR",
                   help="train the world model and an imitation policy together on the demonstrations "
                   "of the dataset DIR (wmzoo data generate; TokenWM's eq. 1)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--device", help="cpu, cuda, cuda:N, mps or auto (cuda where there is a GPU); same as "
                   "--set train.device=D (default: cpu)")
    p.add_argument("--precision", choices=("fp32", "bf16"),
                   help="bf16: mixed precision (autocast); same as --set train.precision=P (default: fp32)")
    p.add_argument("--compile", action="store_true", default=None,
                   help="torch.compile the world model's loss and imagination step (--set train.compile=true)")
    p.add_argument("--nproc", type=int, metavar="N",
                   help="data-parallel on N processes (launches torchrun; gloo on CPU, NCCL on GPU): each "
                   "collects into its own replay, gradients are averaged, global batch = N x model.batch_size")

    p = sub.add_parser("eval", help="returns of a checkpoint's policy in its real environment")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--episodes", type=int, default=5)
    p.add_argument("--max-steps", type=int, default=27_000,
                   help="cap on steps per episode (default: Atari's 108,000 frames at frame skip 4)")
    p.add_argument("--sample", action="store_true", help="sample actions instead of the greedy mode")
    p.add_argument("--temperature", type=float, default=None, metavar="T",
                   help=f"sample at temperature T, {TEMPERATURES[0]:g} to {TEMPERATURES[1]:g} (implies --sample; REM and "
                   "IRIS evaluate at 0.5; greedy: leave out --temperature and --sample)")
    p.add_argument("--seed", type=int, default=10_000)
    p.add_argument("--random", action="store_true",
                   help="also evaluate a uniformly random policy on the same env and seeds, reported beside")
    p.add_argument("--json", dest="json_path", help="also write the results as JSON here")
    p.add_argument("--device", help=DEVICE_HELP)

    p = sub.add_parser("imagine", help="real frames beside imagined ones from the same start and actions")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--out", required=True, help="FILE.gif (animation) or FILE.png (strip)")
    p.add_argument("--context", type=int, default=8, help="real frames observed before imagining")
    p.add_argument("--horizon", type=int, default=32, help="imagined frames")
    p.add_argument("--seed", type=int, default=20_000)
    p.add_argument("--device", help=DEVICE_HELP)

    p = sub.add_parser("bench", help="time world-model training or imagination, or env stepping, side by side",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--backbones", help="NAME[:PRESET],... e.g. rssm:paper,s4wm:paper (train, imagine)")
    p.add_argument("--mode", required=True, choices=("train", "imagine", "env"),
                   help="env: env steps/s of --env under random actions, 1 env vs --envs in-process and in processes")
    p.add_argument("--preset", default="tiny", help="preset for names without :PRESET")
    p.add_argument("--batch", type=int, default=16, help="sequences per batch (train) or imagined in parallel "
                   "(imagine); the same for every backbone timed, whatever its preset's batch_size (default: 16)")
    p.add_argument("--seq-len", type=int, default=64, help="training length (train) or context (imagine); the same "
                   "for every backbone timed, whatever its preset's seq_len (default: 64)")
    p.add_argument("--horizon", type=int, default=15, help="imagined steps (imagine)")
    p.add_argument("--iters", type=int, default=5, help="timed iterations of every configuration per round")
    p.add_argument("--rounds", type=int, default=3,
                   help="train, imagine: alternated rounds, every configuration (backbone x variant) timed in "
                   "each, the order reversed every other round; ratios are the median [min, max] of the rounds "
                   "and the JSON keeps every round (round_seconds). The table also gives each configuration's "
                   "GFLOP/s (torch.utils.flop_counter: matmuls, convolutions, attention) and %% peak, its "
                   "fraction of a large matmul's FLOP/s timed in the same rounds, threads and precision")
    p.add_argument("--warmup", type=int, default=1, help="untimed iterations first")
    p.add_argument("--env", help="take obs/action shapes from this env (default: 3x64x64, 6 actions), or "
                   "from each of a comma list, every backbone timed on each side by side (train, imagine: "
                   "gym-cartpole,minatar-breakout); the env to time (env)")
    p.add_argument("--envs", type=int, default=2, help="env: environments stepped together")
    p.add_argument("--steps", type=int, default=500, help="env: timed steps of every environment")
    p.add_argument("--device", default="cpu", help=DEVICE_HELP.replace("where it trained", "cpu"))
    p.add_argument("--precision", default="fp32", metavar="P[,P]",
                   help="fp32, bf16 (mixed precision: autocast), or both side by side: fp32,bf16")
    p.add_argument("--compile", action="store_true",
                   help="also time every backbone with its loss and imagination step torch.compile'd, beside eager")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a field of every backbone timed, as wmzoo run --set: model.deter=512 "
                   "(or deter=512), policy.horizon=10")
    p.add_argument("--no-components", action="store_true",
                   help="train: skip timing each part (tokenizer, world model, start states, policy) apart")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--decode", action="store_true", help="imagine: also decode every imagined frame")
    p.add_argument("--actions", choices=("random", "policy"), default="random",
                   help="imagine: who acts, uniformly random actions or the backbone's default policy "
                   "(its forward pass timed in every imagined step)")
    p.add_argument("--json", dest="json_path", help="write the records as JSON here")

    p = sub.add_parser("aggregate", help="mean, median, IQM, optimality gap with bootstrap CIs over eval JSON files")
    p.add_argument("files", nargs="+", metavar="FILE", help="`wmzoo eval --json` files: one run on one env each")
    p.add_argument("--reps", type=int, default=50_000, help="stratified bootstrap replicates")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--json", dest="json_path", help="also write the table as JSON here")

    p = sub.add_parser("spec", help="print a backbone's resolved spec and every field's meaning")
    p.add_argument("--backbone", default="rssm")
    p.add_argument("--env", help="environment whose shapes the parameter counts use (default: minigrid-empty-5x5)")
    p.add_argument("--policy")
    p.add_argument("--preset", default="tiny")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")

    p = sub.add_parser("data", help="offline datasets: generate train/val/test episodes, or import LIBERO's")
    data_sub = p.add_subparsers(dest="data_command", required=True)
    p = data_sub.add_parser("generate", help="record episodes with the env's scripted (else random) policy")
    p.add_argument("--env", required=True, help="environment name, e.g. distracting-memory-100")
    p.add_argument("--episodes", type=int, required=True, help="episodes in all (paper: 10000 2D, 30000 3D)")
    p.add_argument("--out", required=True, help="dataset folder (re-run the same command to resume)")
    p.add_argument("--workers", type=int, default=1, help="processes recording episodes")
    p.add_argument("--size", type=int, default=64, help="image size (paper: 64 for 3D, 40 for 2D)")
    p.add_argument("--seed", type=int, default=0, help="episode i is reset with seed + i")
    p.add_argument("--split", default="0.8,0.1,0.1", help="train,val,test fractions (default: the paper's)")

    p = data_sub.add_parser("import-libero", help="LIBERO's HDF5 demonstrations as a dataset (needs h5py)")
    p.add_argument("files", nargs="+", metavar="FILE", help="LIBERO .hdf5 demonstration files (one per task)")
    p.add_argument("--out", required=True, help="dataset folder (re-run the same command to resume)")
    p.add_argument("--env", help="the LIBERO suite, e.g. libero-spatial (default: read from the files)")
    p.add_argument("--size", type=int, default=64, help="image size (default: 64)")
    p.add_argument("--camera", default="agentview_rgb", help="obs key of the images (default: agentview_rgb; "
                   "LIBERO also has eye_in_hand_rgb)")
    p.add_argument("--seed", type=int, default=0, help="shuffles the demonstrations before splitting")
    p.add_argument("--split", default="0.8,0.1,0.1", help="train,val,test fractions (the paper trains on all: 1,0,0)")
    p.add_argument("--align", default="libero", choices=("libero", "causal"),
                   help="row t's action: the file's action t (libero, default) or t+1, the one taken after "
                   "frame t (causal; LIBERO stores each frame after its action)")
    p.add_argument("--image-convention", default="auto", choices=("auto", "opengl", "opencv"),
                   help="opengl: frames stored upside down, flipped on import; auto: as the file records "
                   "(opengl where it says nothing)")

    p = sub.add_parser("evaluate", help="the s4wm paper's memory metrics of a checkpoint on a dataset")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--protocol", required=True, choices=("imagination", "recall", "reward", "reasoning", "probing"))
    p.add_argument("--data", required=True, help="dataset folder of wmzoo data generate")
    p.add_argument("--split", default="test", choices=("train", "val", "test"))
    p.add_argument("--episodes", type=int, help="evaluate the first N episodes of the split (default: all)")
    p.add_argument("--out", help="folder for the JSON (and plot); default: next to the checkpoint")
    p.add_argument("--context", type=int, metavar="N",
                   help="observed frames per episode where the dataset has no context phase (a non-memory env)")
    p.add_argument("--device", help=DEVICE_HELP)

    p = sub.add_parser("study", help="comparison studies: backbones x environments x seeds, and their report")
    study_sub = p.add_subparsers(dest="study_command", required=True)
    p = study_sub.add_parser("init", help="write a commented example study YAML")
    p.add_argument("file", nargs="?", default="study.yaml", help="where to write it (default: study.yaml)")
    p = study_sub.add_parser("run", help="run every cell not yet done (re-run to resume)")
    p.add_argument("spec", metavar="SPEC", help="the study YAML")
    p.add_argument("--out", required=True, help="study folder: one run directory per cell, the report")
    p.add_argument("--jobs", type=int, default=1, help="cells run at once (default: 1)")
    p.add_argument("--threads", type=int, metavar="N",
                   help="torch threads of each cell (train.threads, OMP_NUM_THREADS; default: cores / --jobs)")
    p.add_argument("--executor", default="local", choices=("local", "submitit"),
                   help="local processes, or SLURM through submitit (pip install 'wmzoo[cluster]')")
    p.add_argument("--submitit", dest="submitit", action="append", default=[], metavar="KEY=VALUE",
                   help="submitit parameter, e.g. slurm_partition=gpu, timeout_min=600 (cluster=local: "
                   "submitit's local executor, no SLURM)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-report", action="store_true", help="do not write the report at the end")
    for key, example in (("rows", "S4WM,RSSM-TBTT"), ("envs", "crafter"), ("seeds", "3,4")):
        p.add_argument(f"--{key}", metavar=key[:-1].upper() + "[,...]",
                       help=f"run only the cells of these {key} (e.g. {example}); the others wait for a later run")
    p = study_sub.add_parser("report", help="report.md, figures and report.json of a study folder")
    p.add_argument("out", metavar="DIR", help="the study folder (--out of study run)")
    p.add_argument("--reps", type=int, default=10_000, help="stratified bootstrap replicates")
    p.add_argument("--no-bench", action="store_true", help="skip the efficiency table (wmzoo bench)")
    p.add_argument("--no-video", action="store_true", help="skip the side-by-side imagination video")
    return parser


FREED_MEMORY_KEPT = 1 << 30  # bytes: blocks up to this size come from, and go back to, malloc's heap
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (glibc's malloc.h)


def keep_freed_memory(limit: int = FREED_MEMORY_KEPT) -> bool:
    """Have glibc's malloc keep freed blocks of up to ``limit`` bytes for reuse (``mallopt``'s
    mmap and trim thresholds) instead of handing them back to the kernel.

    By default glibc maps every block over its mmap threshold (adjusted as the program runs, at
    most 32 MiB) separately and unmaps it when freed, so the next activation map of that size is
    fresh pages the kernel zeroes on first touch: a copy of a 52 MB map took 36.7 ms that way
    and 4.5 ms in memory already touched. Kept, Δ-IRIS's ``paper-atari`` world-model update runs
    1.13× faster in float32 and 1.23× in bfloat16, REM's imagination 1.11× (one thread,
    ``benchmarks/malloc_keep.py``); a process holds on to up to ``limit`` bytes of freed memory.
    Off with ``WMZOO_MALLOC=system``. Returns whether it was set (not on another C library)."""
    if os.environ.get("WMZOO_MALLOC", "keep") == "system" or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:  # the C library this process already runs on (no search: this runs at every command's start)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, limit)) and bool(mallopt(M_TRIM_THRESHOLD, limit))


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # a signal that came while _main was finishing (its finally block)
        print("wmzoo: error: interrupted", file=sys.stderr)
        return 2


def _main(argv: list[str] | None) -> int:
    # MKL's buffer cache keeps every per-step weight gradient of a long recurrent backward pass
    # alive (measured: RSSM paper, T = 200, 2 threads: 6.98 GB peak with it, 0.97 GB without).
    # It is read when MKL first allocates, so it must be set before any torch work.
    os.environ.setdefault("MKL_DISABLE_FAST_MM", "1")
    keep_freed_memory()
    # a job a script starts in the background inherits SIGINT ignored: wmzoo still stops on it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # SIGTERM is caught from here on, argument parsing included (before: the interpreter's own
    # start-up and this module's imports, ~0.1 s in which nothing has been read or written)
    previous = _terminate_as_interrupt()
    # a rank other than 0 of a data-parallel run (torchrun's RANK) names itself in its errors
    rank = f"[rank {os.environ['RANK']}] " if os.environ.get("RANK", "0") != "0" else ""
    command = ""
    try:
        args = build_parser().parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)
        command = args.command
        if getattr(args, "seed", None) is not None:  # every command's --seed, as run's seed
            from wmzoo.specs import RunSpec, check_option

            check_option(args.seed, RunSpec, "seed", "--seed")
        return COMMANDS[args.command](args) or 0
    except WmzooError as exc:
        if os.environ.get("WMZOO_TRACEBACK") and exc.__cause__ is not None:  # a plugin author's view of it
            traceback.print_exception(exc.__cause__, file=sys.stderr)
        print(f"wmzoo: error: {rank}{exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wmzoo: error: interrupted", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `wmzoo list | head`
        sys.stderr.close()
        return 0
    except OSError as exc:  # a full disk, a folder that is a file, no permission: one line
        print(f"wmzoo: error: {describe_os_error(exc, command)}", file=sys.stderr)
        return 2
    except Exception:
        if not _TERMINATED:
            raise
        print("wmzoo: error: interrupted", file=sys.stderr)  # e.g. a C extension's import cut short
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if "wmzoo.distributed" in sys.modules:
            sys.modules["wmzoo.distributed"].teardown()


_TERMINATED: list[int] = []
"""Non-empty once this process got SIGTERM: whatever fails after it is the interruption."""


def _terminate_as_interrupt() -> Any:
    """SIGTERM as Ctrl-C for the whole command (building, loading, writing): one line, exit code
    2, every write finished or undone (:mod:`wmzoo.atomic`), instead of a silent death at
    -15. Returns the previous handler (``None`` outside the main thread, where none can be set)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def interrupt(signum: int, frame: Any) -> None:
        _TERMINATED.append(signum)
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, interrupt)


AFTER_A_FULL_DISK = {
    "run": " (the last checkpoint written is intact) and --resume",
    "data": " and run the same command again to resume (the episodes written are kept)",
}
"""What a command keeps when a write fails for space, and how to continue (default: run it again)."""


def describe_os_error(exc: OSError, command: str = "") -> str:
    """One line for an I/O error of ``command``: what failed, on which path, and what to do."""
    where = f" {exc.filename}" if exc.filename else ""
    what = exc.strerror or str(exc)
    after = AFTER_A_FULL_DISK.get(command, " and run the command again")
    hint = {
        errno.ENOSPC: f"free some space{after}",
        errno.EDQUOT: f"free some space{after}",
        errno.EFBIG: f"allow larger files (another filesystem, or a higher `ulimit -f`){after}",
        errno.EACCES: "choose a folder you may write to",
        errno.EROFS: "choose a folder on a writable filesystem",
        errno.ENOTDIR: "a path component is a file, not a folder: choose another path",
        errno.EISDIR: "the path is a folder: give a file name",
        errno.ENOENT: "check the path",
        errno.EEXIST: "it is a file, not a folder: choose another path",
    }.get(exc.errno or 0, "check the path and the disk")
    return f"{what}:{where}; {hint}"


# --------------------------------------------------------------------------- commands


def cmd_list(args: argparse.Namespace) -> int:
    from wmzoo.registry import default_registry, parse_kind

    wanted = parse_kind(args.kind) if args.kind is not None else None
    rows = [r for r in default_registry().listings() if wanted in (None, r.kind)]
    if wanted == "plugin" and not rows and args.format == "table":
        print("plugins that failed: none (every installed wmzoo plugin loaded)")
        return 0
    if args.format == "json":
        print(json.dumps([r.__dict__ for r in rows], indent=2))
        return 0
    headers = {"backbone": "backbones:", "env": "environments:", "policy": "policies:",
               "plugin": "plugins that failed:"}
    for kind, header in headers.items():
        group = [r for r in rows if r.kind == kind]
        if not group:
            continue
        print(header)
        width = max(24, *(len(r.name) for r in group))  # the group's longest name keeps its columns aligned
        for r in group:
            status = "ok" if r.available else f"unavailable: {r.reason}"
            print(f"  {r.name:<{width}} {status:<14} {r.description if r.available else ''}".rstrip())
            if r.observations:
                print(f"  {'':<{width}} {'':<14} observations: {r.observations}")
            if kind == "backbone" and r.plugin:
                source = f"{r.plugin} ({r.distribution})" if r.distribution else f"{r.plugin} (registered in-process)"
                print(f"  {'':<{width}} {'':<14} plugin: {source}")
            if r.hint:
                print(f"  {'':<{width}} {'':<14} {r.hint}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from wmzoo import distributed
    from wmzoo.config import check_fits_in_memory, run_spec
    from wmzoo.device import device_name, resolve_device
    from wmzoo.train.imitation import train_imitation
    from wmzoo.train.loop import train_offline, train_online

    overrides = list(args.overrides)
    if args.steps is not None:
        overrides.append(f"train.steps={args.steps}")
    if args.device is not None:
        resolve_device(args.device, "--device")
        overrides.append(f"train.device={args.device}")
    if args.precision is not None:
        overrides.append(f"train.precision={args.precision}")
    if args.compile:
        overrides.append("train.compile=true")
    if args.offline and args.imitation:
        raise WmzooError("--offline trains a world model alone, --imitation a world model and a policy: pass one")
    quiet = not args.no_progress
    nproc = _processes(args)
    if args.resume:
        run, logdir, data, imitation = _resumed_run(args, overrides)
        _check_parallel(run, nproc, logdir, resume=True)
        if nproc > distributed.launched():
            return _launch(nproc, argv_of(args), logdir)
        distributed.setup(device_name(run.train.device))
        quiet = quiet and distributed.is_main()
        if imitation:
            path = train_imitation(run, data, logdir, updates=run.train.steps, resume=True, show_progress=quiet)
        elif data is None:
            path = train_online(run, logdir, resume=True, show_progress=quiet)
        else:
            path = train_offline(run, data, logdir, updates=run.train.steps, resume=True, show_progress=quiet)
        if distributed.is_main():
            print(f"checkpoint: {path}")
        return 0
    env, data = args.env, args.offline or args.imitation
    if data and env is None:  # the recorded env, so eval and imagine use the same one
        from wmzoo.data.dataset import recorded_env_info, training_dir

        recorded = recorded_env_info(training_dir(data))
        env = recorded.name if recorded is not None else None
    run = run_spec(args.backbone, env, args.preset, args.policy, args.seed, args.config, overrides,
                   imitation=bool(args.imitation))
    check_fits_in_memory(run)
    logdir = Path(args.logdir or f"runs/{run.backbone}-{run.env}-{run.preset}")
    _check_parallel(run, nproc, logdir, resume=False)
    if nproc > distributed.launched():
        return _launch(nproc, argv_of(args), logdir)
    distributed.setup(device_name(run.train.device))
    quiet = quiet and distributed.is_main()
    if args.imitation:
        path = train_imitation(run, Path(args.imitation), logdir, updates=run.train.steps, show_progress=quiet)
    elif args.offline:
        path = train_offline(run, Path(args.offline), logdir, updates=run.train.steps, show_progress=quiet)
    else:
        path = train_online(run, logdir, show_progress=quiet)
    if not distributed.is_main():
        return 0
    print(f"checkpoint: {path}")
    print(f"imagination: {logdir / 'imagination.gif'}")
    print(f"tensorboard: tensorboard --logdir {logdir / 'tb'}")
    return 0


def _processes(args: argparse.Namespace) -> int:
    """The processes a run asks for: ``--nproc``, else torchrun's ``WORLD_SIZE`` (1 alone)."""
    from wmzoo import distributed

    launched = distributed.launched()
    if args.nproc is None:
        return launched
    if args.nproc < 1:
        raise WmzooError(f"--nproc {args.nproc}: must be at least 1 (the data-parallel processes)")
    if launched > 1 and args.nproc != launched:
        raise WmzooError(f"--nproc {args.nproc} under torchrun with {launched} processes; pass one of them")
    return args.nproc


def _check_parallel(run: RunSpec, nproc: int, logdir: Path, resume: bool) -> None:
    """One line, before any process is launched or file written, when ``run`` cannot train on
    ``nproc`` processes: a device every rank would share, or a resumed run recorded with another
    number of processes."""
    import torch

    from wmzoo import distributed
    from wmzoo.device import device_name
    from wmzoo.train.checkpoint import load_checkpoint
    from wmzoo.train.rundir import CHECKPOINT, check_world_size

    device = run.train.device
    if nproc > 1:
        try:
            kind = torch.device(device_name(device))  # auto: cuda where there is a GPU
        except (RuntimeError, ValueError):
            kind = None  # the Agent names a bad device
        if kind is not None and (kind.type not in ("cpu", "cuda") or kind.index is not None):
            raise WmzooError(
                f"--nproc {nproc} with train.device={device}: data-parallel runs use train.device=cpu "
                "(gloo) or train.device=cuda (NCCL, one GPU per process)"
            )
    if resume and distributed.is_main():
        check_world_size(logdir, load_checkpoint(logdir / CHECKPOINT)["progress"], nproc)


def argv_of(args: argparse.Namespace) -> list[str]:
    """The command line this process was started with, less ``--nproc N`` (what :func:`_launch`
    hands each rank, which reads its world size from torchrun)."""
    argv, out = list(getattr(args, "argv", None) or sys.argv[1:]), []
    skip = False
    for item in argv:
        if skip:
            skip = False
        elif item == "--nproc":
            skip = True
        elif not item.startswith("--nproc="):
            out.append(item)
    return out


def _launch(nproc: int, argv: list[str], logdir: Path) -> int:
    """``wmzoo run --nproc N``: the same command under torchrun on this machine, N processes
    (one thread each unless train.threads or OMP_NUM_THREADS say otherwise); exit code 2 when
    a rank failed, with one line: the ranks' own error line, or, for a rank lost to a signal
    (killed, out of memory), which rank and the checkpoint to resume from. torchrun's tracebacks
    are kept from the user (:mod:`wmzoo.launcher`)."""
    import subprocess

    from wmzoo.launcher import RankOutput, lost_rank_line

    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
               "--nproc-per-node", str(nproc), "-m", "wmzoo.cli", *argv]
    launcher = subprocess.Popen(command, env=env, stderr=subprocess.PIPE)
    assert launcher.stderr is not None
    output = RankOutput(launcher.stderr, sys.stderr.buffer)
    stopped = False  # the user's Ctrl-C or SIGTERM: the ranks' own lines say what they saved

    def forward(signum: int, frame: Any) -> None:
        nonlocal stopped
        stopped = True
        launcher.send_signal(signal.SIGTERM)

    # SIGTERM reaches torchrun, which passes it to every rank: each flushes its replay and rank 0
    # writes the checkpoint, as in one process (Ctrl-C reaches them all from the terminal)
    previous = signal.signal(signal.SIGTERM, forward)
    try:
        while True:
            try:
                code = launcher.wait()
                break
            except KeyboardInterrupt:
                stopped = True
                continue  # the ranks got it too; wait for their checkpoint
    finally:
        signal.signal(signal.SIGTERM, previous)
        output.join()
    if code == 0:
        return 0
    lost = output.failure is not None and output.failure.exitcode < 0 and not stopped
    if lost or not output.errors:
        raise WmzooError(lost_rank_line(output.failure, nproc, logdir))
    for line in dict.fromkeys(output.errors):
        print(line, file=sys.stderr)
    return 2


def _resumed_run(args: argparse.Namespace, overrides: list[str]) -> tuple[RunSpec, Path, Path | None, bool]:
    """The run recorded in ``--logdir`` with the ``--set`` fields that may change on resume, the
    data of an offline or imitation run (``--offline`` / ``--imitation``, else the recorded one;
    ``None``: an online run) and whether it is an imitation run; anything else is refused before
    a file is written."""
    from wmzoo.config import resume_spec
    from wmzoo.specs import RESUMABLE_TRAIN_FIELDS, load_config
    from wmzoo.train.rundir import recorded_data

    if not args.logdir:
        raise WmzooError("--resume needs --logdir (the folder of the run to continue)")
    logdir = Path(args.logdir)
    recorded = recorded_data(logdir)
    fixed = [f"--{name}" for name in ("backbone", "env", "preset", "policy", "seed", "config")
             if getattr(args, name) is not None]
    moved = args.offline or args.imitation
    if moved is not None and recorded is None:  # an offline run may name its data (moved)
        fixed.append("--offline" if args.offline else "--imitation")
    if fixed:
        raise WmzooError(
            f"--resume continues the run recorded in {logdir / 'run.yaml'}; {', '.join(fixed)} cannot "
            f"change on resume (--steps and --set train.{{{','.join(RESUMABLE_TRAIN_FIELDS)}}} can)"
        )
    if not (logdir / "checkpoint.safetensors").is_file():
        raise WmzooError(f"--resume: {logdir} holds no checkpoint.safetensors to continue from")
    saved = load_config(logdir / "run.yaml", what="--resume: ")
    imitation = bool(recorded and recorded.get("mode") == "imitation")
    where = recorded and (recorded["root"] if imitation else recorded["data"])
    data = Path(moved) if moved is not None else Path(where) if where else None
    return resume_spec(saved, overrides, source=str(logdir / "run.yaml")), logdir, data, imitation


def cmd_eval(args: argparse.Namespace) -> int:
    from wmzoo.atomic import write_text_atomic
    from wmzoo.eval.rollout import evaluate, load_agent, summarize

    if args.episodes < 1 or args.max_steps < 1:
        raise WmzooError("--episodes and --max-steps must be at least 1")
    low, high = TEMPERATURES
    if args.temperature is not None and not low <= args.temperature <= high:
        raise WmzooError(f"--temperature {args.temperature}: must be between {low:g} and {high:g} (1: the "
                         "policy's own distribution; for greedy actions leave out --temperature and --sample)")
    if args.json_path:
        check_output(args.json_path, EVAL_JSON, "--json")
    agent = load_agent(args.checkpoint, args.device)
    sample = args.sample or args.temperature is not None
    temperature = 1.0 if args.temperature is None else args.temperature

    def progress(i: int, r: Any) -> None:  # each episode as it ends: a long evaluation is not silent
        unlocked = "" if r.achievements is None else f", {len(r.achievements)} achievements"
        print(f"episode {i + 1} of {args.episodes}: return {r.ret:.3f} (length {r.length}{unlocked})", flush=True)

    results = evaluate(agent, args.episodes, args.max_steps, seed=args.seed, sample=sample, temperature=temperature,
                       on_episode=progress)
    summary = summarize(agent.run.env, results)
    _print_summary(summary, len(results), "")
    baseline = None
    if args.random:
        uniform = evaluate(agent, args.episodes, args.max_steps, seed=args.seed, uniform=True)
        baseline = {**summarize(agent.run.env, uniform), "episodes": [r.__dict__ for r in uniform]}
        _print_summary(baseline, len(uniform), "random policy, same seeds: ")
    if args.json_path:
        run = agent.run
        payload = {"checkpoint": str(args.checkpoint), "env": run.env, "backbone": run.backbone,
                   "preset": run.preset, "seed": run.seed,
                   "sample": sample, "temperature": temperature, **summary,
                   "episodes": [r.__dict__ for r in results]}
        if baseline is not None:
            payload["random"] = baseline
        write_text_atomic(args.json_path, json.dumps(payload, indent=2))
    return 0


def _print_summary(summary: dict[str, Any], episodes: int, prefix: str) -> None:
    print(f"{prefix}mean return over {episodes} episodes: {summary['mean_return']:.3f}")
    if "human_normalized_score" in summary:
        print(f"{prefix}human-normalised score: {summary['human_normalized_score']:.3f}")
    if "crafter_score" in summary:
        rates = ", ".join(f"{name} {rate:.0f}%" for name, rate in summary["success_rates"].items())
        print(f"{prefix}Crafter score: {summary['crafter_score']:.2f}% (success rates: {rates})")
    if "success_rate" in summary:
        print(f"{prefix}success rate: {summary['success_rate']:.1f}% of {episodes} episodes")


def cmd_imagine(args: argparse.Namespace) -> int:
    from wmzoo.eval.rollout import load_agent, play_episode
    from wmzoo.train.logger import write_rollout
    from wmzoo.train.rundir import imagine_open_loop

    if not args.out.lower().endswith((".gif", ".png")):
        raise WmzooError(f"--out {args.out}: the file must end in .gif or .png")
    if args.context < 1 or args.horizon < 1:
        raise WmzooError("--context and --horizon must be at least 1")
    if args.context + args.horizon > IMAGINE_FRAMES:
        raise WmzooError(f"--context {args.context} + --horizon {args.horizon}: at most {IMAGINE_FRAMES:,} frames in all "
                         "(each is an env step played, a frame decoded and a frame of the image)")
    check_output(args.out, IMAGE, "--out")
    agent = load_agent(args.checkpoint, args.device)
    batch = play_episode(agent, args.context + args.horizon, seed=args.seed)
    real, model = imagine_open_loop(agent, batch, args.context)
    path = write_rollout(args.out, real, model, args.context)
    layout = "left: real, right: the model's" if path.suffix.lower() == ".gif" else "top: real, bottom: the model's"
    print(f"wrote {path}: {len(real)} frames ({layout}); the first {args.context} reconstructed, then imagined")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from wmzoo.bench.harness import format_env_table, format_table, run_bench, run_env_bench, write_json
    from wmzoo.specs import PolicySpec, TrainSpec, WorldModelSpec, check_option

    if args.json_path:
        check_output(args.json_path, BENCH_JSON, "--json")
    if args.mode == "env":
        if not args.env:
            raise WmzooError("--mode env needs --env NAME (the environment to time)")
        if "," in args.env:
            raise WmzooError(f"--env {args.env}: --mode env times one env (a comma list is for train and imagine)")
        check_option(args.envs, TrainSpec, "envs", "--envs")
        env_records = run_env_bench(args.env, args.envs, args.steps, warmup=args.warmup)
        print(format_env_table(env_records))
        if args.json_path:
            print(f"wrote {write_json(args.json_path, env_records)}")
        return 0
    if not args.backbones:
        raise WmzooError(f"--mode {args.mode} needs --backbones NAME[:PRESET],...")
    check_option(args.batch, WorldModelSpec, "batch_size", "--batch")
    check_option(args.seq_len, WorldModelSpec, "seq_len", "--seq-len")
    check_option(args.horizon, PolicySpec, "horizon", "--horizon")
    if args.iters < 1:
        raise WmzooError("--iters must be at least 1")
    if args.threads < 0 or args.warmup < 0:
        raise WmzooError("--threads and --warmup must be at least 0 (--threads 0: torch's default)")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    precisions = split_names(args.precision, "--precision")
    records = run_bench(
        args.backbones, args.mode, args.preset, args.batch, args.seq_len, args.horizon,
        args.iters, args.warmup, args.env, args.device, args.decode, precisions, args.compile,
        args.overrides, components=not args.no_components, actions=args.actions, rounds=args.rounds,
    )
    print(format_table(records))
    if args.json_path:
        print(f"wrote {write_json(args.json_path, records)}")
    return 0


def cmd_aggregate(args: argparse.Namespace) -> int:
    from wmzoo.atomic import write_text_atomic
    from wmzoo.eval.metrics import aggregate_eval_files, format_aggregate

    if args.reps < 1:
        raise WmzooError("--reps must be at least 1")
    if args.json_path:
        check_output(args.json_path, AGGREGATE_JSON, "--json")
    groups = aggregate_eval_files(args.files, reps=args.reps, seed=args.seed)
    print(format_aggregate(groups))
    print(f"(95% stratified bootstrap confidence intervals, {args.reps} replicates; Agarwal et al., 2021)")
    if args.json_path:
        print(f"wrote {write_text_atomic(args.json_path, json.dumps(groups, indent=2))}")
    return 0


def cmd_spec(args: argparse.Namespace) -> int:
    import yaml

    from wmzoo.config import run_presets, run_spec
    from wmzoo.registry import default_registry
    from wmzoo.specs import RESUMABLE_TRAIN_FIELDS, TrainSpec, field_help

    run = run_spec(args.backbone, args.env, args.preset, args.policy, None, None, args.overrides)
    print(yaml.safe_dump(json.loads(run.model_dump_json()), sort_keys=False).rstrip())
    registry = default_registry()
    entry = registry.backbone(run.backbone)
    print(f"\n# run presets of {run.backbone} (--preset NAME: world model / policy / trainer presets):")
    for name, combo in sorted(run_presets(entry).items()):
        schedule = f", trainer changes {dict(combo.schedule)}" if combo.schedule else ""
        print(f"#   {name}: {combo.model} / {combo.policy} / {combo.train}{schedule}")
    print(f"\n# parameters on {run.env} at {run.train.image_size}x{run.train.image_size}:")
    for name, count in parameter_counts(run).items():
        print(f"#   {name}: {count:,}")
    print("\n# fields (--set KEY=VALUE): the value resolved above, then the field's own default where the "
          "preset changes it, and its bounds; * may change on --resume")
    for line in field_help(entry.spec, "model.", run.model):
        print(f"#   {line}")
    for line in field_help(registry.policy(run.policy_name).spec, "policy.", run.policy):
        print(f"#   {line}")
    resumable = {f"train.{name}" for name in RESUMABLE_TRAIN_FIELDS}
    for line in field_help(TrainSpec, "train.", run.train):
        print(f"# {'*' if line.split(' ', 1)[0] in resumable else ' '} {line}")
    return 0


def parameter_counts(run: RunSpec) -> dict[str, int]:
    """Trainable parameters of each world-model component and of the policy, built for the run's
    env (the env is made once for its shapes)."""
    from wmzoo.registry import build_policy, build_world_model, env_info, make_env

    env = make_env(run.env, size=run.train.image_size)
    try:
        info = env_info(env, run.env)
    finally:
        env.close()
    wm = build_world_model(run.backbone, run.model, info)
    counts = {f"world model / {name}": sum(p.numel() for p in params) for name, (params, _) in wm.components().items()}
    policy = build_policy(run.policy_name, run.policy, wm.feature_shape, info)
    counts[f"policy {run.policy_name}"] = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    return counts


def cmd_data(args: argparse.Namespace) -> int:
    from wmzoo.data.generate import generate
    from wmzoo.data.splits import parse_split

    if args.data_command == "import-libero":
        from wmzoo.data.libero import import_libero

        import_libero(args.files, args.out, env=args.env, size=args.size, camera=args.camera, seed=args.seed,
                      split=parse_split(args.split), align=args.align, image_convention=args.image_convention)
        return 0
    generate(args.env, args.episodes, args.out, workers=args.workers, size=args.size,
             seed=args.seed, split=parse_split(args.split))
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from wmzoo.device import resolve_device
    from wmzoo.eval.memory import evaluate_memory

    if args.device is not None:
        resolve_device(args.device, "--device")  # before the dataset is read
    if args.episodes is not None and args.episodes < 1:
        raise WmzooError("--episodes must be at least 1")
    if args.context is not None and args.context < 1:
        raise WmzooError("--context must be at least 1")
    out = Path(args.out) if args.out else Path(args.checkpoint).resolve().parent / "evaluate"
    evaluate_memory(args.checkpoint, args.protocol, args.data, out, split=args.split, episodes=args.episodes,
                    context=args.context, device=args.device)
    return 0


def cmd_study(args: argparse.Namespace) -> int:
    from wmzoo.atomic import write_text_atomic
    from wmzoo.specs import load_config, parse_override
    from wmzoo.study.spec import EXAMPLE, study_from_dict

    if args.study_command == "init":
        if Path(args.file).exists():
            raise WmzooError(f"{args.file} exists; give another file name (nothing was overwritten)")
        print(f"wrote {write_text_atomic(args.file, EXAMPLE)}: edit it, then `wmzoo study run {args.file} --out DIR`")
        return 0
    if args.study_command == "report":
        from wmzoo.study.report import write_report

        path = write_report(args.out, reps=args.reps, bench=not args.no_bench, video=not args.no_video)
        print(f"wrote {path}")
        return 0
    from wmzoo.study.run import SELECT_KEYS, run_study

    raw = load_config(args.spec, what="study ")
    study = study_from_dict(raw, f"study {args.spec}: ")
    parameters = dict(parse_override(item) for item in args.submitit)
    only = {key: split_names(getattr(args, key), f"--{key}", unique=True)
            for key in SELECT_KEYS if getattr(args, key) is not None}
    records = run_study(study, raw, args.out, jobs=args.jobs, executor=args.executor, threads=args.threads,
                        show_progress=not args.no_progress, submitit_parameters=parameters, only=only)
    done = sum(r.get("state") == "done" for r in records)
    chosen = " chosen" if only else ""
    print(f"{done} of {len(records)}{chosen} cells done in {args.out}/cells")
    if not args.no_report and done:
        from wmzoo.study.report import write_report

        print(f"wrote {write_report(args.out)}")
    return 0 if done == len(records) else 1


COMMANDS = {
    "list": cmd_list, "run": cmd_run, "eval": cmd_eval, "imagine": cmd_imagine,
    "bench": cmd_bench, "spec": cmd_spec, "aggregate": cmd_aggregate, "data": cmd_data, "evaluate": cmd_evaluate,
    "study": cmd_study,
}

if __name__ == "__main__":
    sys.exit(main())
