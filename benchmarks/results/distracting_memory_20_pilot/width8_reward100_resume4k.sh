#!/usr/bin/env bash
# issue 29: the width-8 reward_scale=100 pilot resumed from 1,000 to 4,000 updates (100,000 decision rows seen)
set -euo pipefail
cd "${1:-/work/dm8rs}"  # the pilot's work folder
export OMP_NUM_THREADS=1
date
cp -r s4wm/evaluate s4wm/evaluate-1000-pilot
wmzoo run --resume --logdir s4wm --steps 4000 --no-progress
date
for protocol in reward imagination; do
  wmzoo evaluate --checkpoint s4wm/checkpoint.safetensors --protocol $protocol --data data --episodes 1000 --out s4wm/evaluate-4000
done
python probe.py 8 s4wm/checkpoint.safetensors data
date
