#!/usr/bin/env bash
# issue 29 stage 0, third pilot: S4WM on distracting-memory-8 with model.reward_scale=100 (declared deviation)
set -euo pipefail
cd "${1:-/work/dm8rs}"  # the work folder (data: /work/dm8/data linked as data)
export OMP_NUM_THREADS=1
date
wmzoo run --offline data --backbone s4wm --preset small --seed 0 --steps 1000 --logdir s4wm --no-progress \
  --set train.image_size=40 --set model.cnn_stages=3 --set model.cnn_depth=16 --set train.windows=episodes \
  --set model.kl.balance=0.8 --set model.kl.free=0.0 --set model.optim.lr=0.001 --set train.log_every=10 \
  --set model.seq_len=20 --set model.batch_size=25 --set train.threads=1 --set model.reward_scale=100
date
for protocol in reward imagination; do
  wmzoo evaluate --checkpoint s4wm/checkpoint.safetensors --protocol $protocol --data data --episodes 1000 --out s4wm/evaluate
done
date
