#!/usr/bin/env bash
# The GPU checks of issue 35, as one script to run when a GPU is lent (see benchmarks/README.md):
#
#   bash benchmarks/gpu_check.sh [--device cuda] [--out DIR] [--seconds N] [--only A,B] [--dry-run]
#
# 1. imagine  the REM paper's imagination comparison (its Figure 1: REM imagines 15.4x faster than
#             IRIS, on an RTX 4090): REM against IRIS, `paper` presets, 32 sequences imagined 20
#             steps from 20 context frames, fp32 and bf16 side by side, alternated rounds.
# 2. train    every bundled backbone's `small` world-model update, fp32 and bf16, eager and
#             torch.compile'd, alternated rounds (`wmzoo bench --mode train --compile`).
# 3. nccl     two data-parallel ranks (`wmzoo run --nproc 2`, NCCL), RSSM tiny online; skipped,
#             saying so, on a machine with fewer than two GPUs (NCCL refuses two ranks on one GPU).
#
# Each check writes its JSON (and its log) under --out (default benchmarks/results/gpu_check) and
# runs under `timeout`, its share of --seconds (default 540), so the script ends inside a lease.
# --dry-run prints the commands and runs nothing. Exit 2 on a bad argument, 1 when a check failed.
set -u
device=cuda; out=benchmarks/results/gpu_check; seconds=540; only=imagine,train,nccl; dry=0
die() { echo "gpu_check.sh: error: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --device) [ $# -ge 2 ] || die "--device needs a value (cuda, cuda:N)"; device=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a folder"; out=$2; shift 2 ;;
    --seconds) [ $# -ge 2 ] || die "--seconds needs a number"; seconds=$2; shift 2 ;;
    --only) [ $# -ge 2 ] || die "--only needs a list of imagine, train, nccl"; only=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[[ "$seconds" =~ ^[0-9]+$ ]] && [ "$seconds" -ge 30 ] || die "--seconds $seconds: a whole number of seconds, at least 30"
for check in ${only//,/ }; do
  case "$check" in imagine|train|nccl) ;; *) die "--only: unknown check $check (imagine, train, nccl)" ;; esac
done
wants() { [[ ",$only," == *",$1,"* ]]; }
# shares of --seconds: imagine 30 %, train 55 %, nccl 15 %
share() { echo $(( seconds * $1 / 100 )); }
python=${PYTHON:-python3}
status=0
run() {  # run NAME SECONDS COMMAND...: the command under timeout, its output in OUT/NAME.log
  local name=$1 limit=$2; shift 2
  echo "\$ timeout $limit $*"
  [ "$dry" = 1 ] && return 0
  mkdir -p "$out"
  timeout -s TERM "$limit" "$@" 2>&1 | tee "$out/$name.log"
  local code=${PIPESTATUS[0]}
  [ "$code" = 0 ] || { echo "gpu_check.sh: $name exited $code (its log: $out/$name.log)"; status=1; }
}
if [ "$dry" = 0 ]; then
  $python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
    || { echo "gpu_check.sh: error: no CUDA GPU here (torch.cuda.is_available() is False); run it where a GPU is lent" >&2; exit 2; }
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
if wants imagine; then
  run imagine "$(share 30)" $python -m wmzoo.cli bench --mode imagine --backbones iris:paper,rem:paper \
    --device "$device" --precision fp32,bf16 --batch 32 --horizon 20 --seq-len 20 --rounds 3 --iters 3 \
    --json "$out/imagine_paper.json"
fi
if wants train; then
  run train "$(share 55)" $python -m wmzoo.cli bench --mode train \
    --backbones rssm:small,s4wm:small,tssm-xl:small,iris:small,rem:small,delta-iris:small,tokenwm:small \
    --device "$device" --precision fp32,bf16 --compile --rounds 3 --iters 3 --no-components \
    --json "$out/train_small.json"
fi
if wants nccl; then
  gpus=$([ "$dry" = 1 ] && echo 2 || $python -c "import torch; print(torch.cuda.device_count())")
  if [ "$gpus" -ge 2 ]; then
    run nccl "$(share 15)" $python -m wmzoo.cli run --backbone rssm --env distracting-memory-8 --preset tiny \
      --nproc 2 --device "$device" --steps 1000 --logdir "$out/nccl_run" --no-progress
  else
    echo "gpu_check.sh: nccl skipped: this machine has $gpus GPU (two ranks need two GPUs)" | tee -a "$out/nccl.log"
  fi
fi
exit $status
