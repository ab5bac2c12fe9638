#!/usr/bin/env bash
# issue 29 stage 0: S4WM alone on distracting-memory-20, 1,000 updates of 500 rows (10 episodes x 50 rows)
set -euo pipefail
mkdir -p "${1:-dm20}"
cd "${1:-dm20}"  # the work folder (data, run) given as the first argument
export OMP_NUM_THREADS=1
date
[ -f data/manifest.json ] && [ -d data/test ] || wmzoo data generate --env distracting-memory-20 --episodes 10000 --size 40 --out data --seed 0
date
wmzoo run --offline data --backbone s4wm --preset small --seed 0 --steps 1000 --logdir s4wm --no-progress \
  --set train.image_size=40 --set model.cnn_stages=3 --set model.cnn_depth=16 --set train.windows=episodes \
  --set model.kl.balance=0.8 --set model.kl.free=0.0 --set model.optim.lr=0.001 --set train.log_every=10 \
  --set model.seq_len=50 --set model.batch_size=10 --set train.threads=1
date
for protocol in reward imagination; do
  wmzoo evaluate --checkpoint s4wm/checkpoint.safetensors --protocol $protocol --data data --episodes 1000 --out s4wm/evaluate
done
date
