"""Issue 29 diagnosis: is the cue kept along the episode (linear cue-colour probe after r rows),
and is the reward's information in the final features (a linear probe of the decision reward)?"""
import json, sys
from pathlib import Path
import numpy as np, torch
sys.path.insert(0, "/work/main/benchmarks")
import distracting_memory as dm

width = int(sys.argv[1]); ckpt = Path(sys.argv[2]); data = Path(sys.argv[3])
dm.ENV = f"distracting-memory-{width}"
from wmzoo.envs.memory_tasks_2d import DISTRACTING_MEMORY
context, query = DISTRACTING_MEMORY[width]
rows = sorted(set(dm.probe_rows(context, 5)) | {context + query})
torch.set_num_threads(1)
res = dm.cue_probe(ckpt, data, rows, train_episodes=2000)
for r, p in zip(rows, res):
    print(f"rows {r:3d}: cue probe test {100*p['cue_probe_accuracy']:.1f}% train {100*p['cue_probe_train_accuracy']:.1f}% majority {100*p.get('majority_share', float('nan')):.1f}%")
