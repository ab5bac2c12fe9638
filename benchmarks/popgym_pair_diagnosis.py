"""Where a trained agent of the POPGym pair study fails on RepeatPrevious: its world model's
imagination or its policy.

RepeatPrevious asks, at row ``t``, for the suit observed ``lag`` rows earlier (``lag`` 3 for the
easy task: the card dealt 4 cards ago, the current one counted); ``reward[t]`` is +1/48 when
``action[t]`` is that suit, −1/48 otherwise, 0 before there is a card to recall. On episodes of
a dataset (``wmzoo data generate --env popgym-repeat-previous-easy``: real observations, random
actions) this reads, from the posterior start state of every row as training builds them
(``WorldModel.loss(...).imagination_start()``):

- **world model**: for each of the 4 actions, the reward imagined for it; the argmax over actions
  against the answer, at the start and for ``--horizon`` imagined steps on (the policy sampling
  the actions, the answers of imagined rows read from the decoded observations);
- **policy**: its greedy action at the start state against the answer, how often it picks each
  action, and the spread of its logits over states (a policy that ignores the state has none);
- **where the answer is**: a linear probe (softmax regression fitted on the first half of the
  episodes, scored on the other half) of the answer from what the policy reads
  (``WorldModel.features``) and from each entry of the start state: the answer can be in the
  model's state without being in the features its policy is given.

::

    wmzoo data generate --env popgym-repeat-previous-easy --episodes 40 --out /tmp/pgdata --seed 50000 --split 1,0,39
    python benchmarks/popgym_pair_diagnosis.py --data /tmp/pgdata --checkpoint A.safetensors B.safetensors --json out.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from wmzoo.atomic import write_text_atomic
from wmzoo.data.dataset import load_episodes
from wmzoo.errors import WmzooError
from wmzoo.eval.rollout import load_agent
from wmzoo.interfaces import Batch


def episodes_batch(data: Path, split: str) -> Batch:
    """The split's episodes as one batch ``[N, T]`` (T: the shortest episode's rows)."""
    _, episodes = load_episodes(data, split)
    T = min(len(e["reward"]) for e in episodes)
    stack = lambda key: torch.as_tensor(np.stack([e[key][:T] for e in episodes]))  # noqa: E731
    obs = {key.removeprefix("obs."): stack(key) for key in episodes[0] if key.startswith("obs.")}
    return Batch(obs=obs, action=stack("action"), reward=stack("reward"), terminal=stack("terminal"),
                 is_first=stack("is_first"))


def probe_accuracy(x: Tensor, y: Tensor, train: Tensor, classes: int, steps: int = 300) -> float:
    """Held-out accuracy of a softmax regression from ``x [N, D]`` to ``y [N]`` fitted (L-BFGS,
    standardised inputs, weight decay 1e-4) on the rows where ``train``, scored on the others."""
    x = x.flatten(1).float()
    mean, std = x[train].mean(0), x[train].std(0) + 1e-6
    x = (x - mean) / std
    torch.manual_seed(0)
    layer = torch.nn.Linear(x.shape[1], classes)
    opt = torch.optim.LBFGS(layer.parameters(), max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(layer(x[train]), y[train]) + 1e-4 * layer.weight.square().sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    with torch.no_grad():
        return float((layer(x[~train]).argmax(1) == y[~train]).float().mean())


@torch.no_grad()
def diagnose(checkpoint: Path, batch: Batch, lag: int, horizon: int, seed: int = 0) -> dict[str, Any]:
    agent = load_agent(checkpoint)
    wm, policy = agent.world_model, agent.policy
    wm.eval()
    torch.manual_seed(seed)
    B, T = batch.shape
    observation = batch.obs.get("observation") if isinstance(batch.obs, dict) else None
    if observation is None or observation.shape[-1] != agent.env.num_actions:
        raise WmzooError(f"{checkpoint}: the data is not a RepeatPrevious dataset of its env (a one-hot "
                         "'observation' of one entry per action); record one with wmzoo data generate")
    suit = observation.argmax(-1)  # [B, T]
    start, _, _ = wm.loss(batch).imagination_start()
    n = next(iter(start.values())).shape[0]
    if n != B * T:
        raise WmzooError(f"{checkpoint}: {n} start states for {B} x {T} rows; this needs one per row "
                         "(start_stride 1)")
    rows = torch.arange(n) % T
    scored = (batch.reward != 0).flatten()  # rows with a card to recall
    actions = agent.env.num_actions
    per_action = lambda state: torch.stack(  # noqa: E731
        [wm.imagine_step(state, torch.full((n,), a, dtype=torch.long)).reward for a in range(actions)], 1)
    # the suits of rows t - lag .. t, then each imagined row's decoded suit
    seen = [torch.where(rows >= j, suit.flatten().roll(j), -1) for j in range(lag, -1, -1)]
    imagined, state = [], start
    for h in range(horizon + 1):
        predicted = per_action(state)
        answer = seen[h]
        ok = scored & (answer >= 0) if h == 0 else answer >= 0
        imagined.append(float((predicted.argmax(1) == answer)[ok].float().mean()))
        action, _ = policy.act(wm.features(state), {}, sample=True)
        state = wm.imagine_step(state, action).state
        seen.append(wm.decode(state)["observation"].argmax(-1))
    features = wm.features(start)
    greedy, _ = policy.act(features, {}, sample=False)
    answer = seen[0]
    logits = policy.actor(features)
    logits = getattr(logits, "logits", logits)
    episode_half = (torch.arange(n) // T) < B // 2
    probes = {"features": probe_accuracy(features[scored], answer[scored], episode_half[scored], actions)}
    for key, value in start.items():
        if value.dim() >= 2 and value.shape[1:].numel() >= 8:
            probes[f"state.{key}"] = probe_accuracy(value[scored], answer[scored], episode_half[scored], actions)
    return {
        "checkpoint": str(checkpoint), "backbone": agent.run.backbone, "seed": agent.run.seed,
        "probe_of_the_answer_held_out": probes,
        "rows_scored": int(scored.sum()),
        "world_model_argmax_correct_by_imagined_step": imagined,
        "policy_greedy_correct": float((greedy == answer)[scored].float().mean()),
        "policy_greedy_actions": torch.bincount(greedy[scored], minlength=actions).tolist(),
        "policy_logit_std_over_states": [float(x) for x in logits.std(0)],
        "policy_logit_mean": [float(x) for x in logits.mean(0)],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="a popgym-repeat-previous dataset (wmzoo data generate)")
    p.add_argument("--split", default="test")
    p.add_argument("--checkpoint", type=Path, nargs="+", required=True)
    p.add_argument("--lag", type=int, default=3, help="rows back the answer was observed (easy: 3)")
    p.add_argument("--horizon", type=int, default=7, help="imagined steps scored after the start")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    try:
        batch = episodes_batch(args.data, args.split)
        results = [diagnose(c, batch, args.lag, args.horizon) for c in args.checkpoint]
    except WmzooError as exc:
        p.exit(2, f"error: {exc}\n")
    print("| checkpoint | world model: imagined argmax = answer, step 0 / min over steps 1.. | "
          "policy greedy = answer | greedy actions | policy logit std over states | linear probe of the answer |")
    print("|---|---|---|---|---|---|")
    for r in results:
        wm_acc = r["world_model_argmax_correct_by_imagined_step"]
        print(f"| {r['backbone']} seed {r['seed']} | {wm_acc[0]:.3f} / {min(wm_acc[1:]):.3f} | "
              f"{r['policy_greedy_correct']:.3f} | {r['policy_greedy_actions']} | "
              f"{', '.join(f'{x:.2f}' for x in r['policy_logit_std_over_states'])} | "
              f"{', '.join(f'{k} {v:.3f}' for k, v in r['probe_of_the_answer_held_out'].items())} |")
    if args.json:
        write_text_atomic(args.json, json.dumps({"data": str(args.data), "lag": args.lag, "rows": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
