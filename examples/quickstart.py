"""wmzoo's Python API in a page: list, build, imagine, train, evaluate.

    python examples/quickstart.py            # about a minute on a laptop CPU
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from wmzoo import registry
from wmzoo.config import run_spec
from wmzoo.eval.rollout import evaluate, load_agent
from wmzoo.imagination import imagine
from wmzoo.train.loop import train_online

# 1. What is installed: backbones, policies, environments (plugins found through entry points).
print("backbones:", registry.list_backbones())
print("policies: ", registry.list_policies())
print("minigrid: ", registry.list_envs("minigrid-*"))

# 2. Build an environment and a world model by name; specs are validated pydantic models.
env = registry.make_env("minigrid-empty-5x5", seed=0)
info = registry.env_info(env, "minigrid-empty-5x5")
wm = registry.create_world_model("rssm", info, preset="tiny", overrides={"deter": 96})
policy = registry.create_policy("dreamer", wm.feature_shape, info, preset="tiny")
print(f"rssm tiny: {sum(p.numel() for p in wm.parameters()):,} parameters, features {wm.feature_shape}")

# 3. Filter a real observation, then imagine 5 steps with the (untrained) policy.
obs, _ = env.reset(seed=0)
state = wm.observe_step(
    wm.initial_state(1), torch.as_tensor(obs)[None], torch.zeros(1, dtype=torch.long), torch.ones(1, dtype=torch.bool)
)
trajectory = imagine(wm, policy, state, horizon=5, decode=True)
print("imagined rewards:", trajectory.rewards[:, 0].tolist())
env.close()

# 4. Train online (the same loop as `wmzoo run`), then evaluate the checkpoint.
run = run_spec("rssm", "minigrid-empty-5x5", "tiny", overrides=["train.steps=300"])
logdir = Path(tempfile.mkdtemp()) / "quickstart"
checkpoint = train_online(run, logdir, show_progress=False)
agent = load_agent(checkpoint)
returns = [r.ret for r in evaluate(agent, episodes=3, max_steps=100)]
print(f"checkpoint {checkpoint}; eval returns {returns}; GIF {logdir / 'imagination.gif'}")
