"""One process of tests/train/test_distributed.py: ``k`` updates of an agent on fixed batches.

Run as a rank of a gloo group (``RANK``/``WORLD_SIZE``/``MASTER_*`` set, as torchrun sets them),
it trains on its own half of a fixed batch; run alone (``WORLD_SIZE`` unset), on the whole batch.
The world model's latent is the mode, not a sample (no randomness in the loss), so the two are
comparable to float tolerance. Writes the parameters and the gradient norms to ``argv[1]``.

Every world-model component steps through ``Agent.train_world_model`` (``step_components``) and
every policy optimizer through ``Optimizer.step(loss)`` (how ``Policy.learn`` steps), on a
quadratic loss of each row, so both places optimizers step are covered.
"""

from __future__ import annotations

import sys

import torch

torch.set_num_threads(1)

from wmzoo import distributed  # noqa: E402
from wmzoo.config import run_spec  # noqa: E402
from wmzoo.interfaces import Batch  # noqa: E402
from wmzoo.registry import env_info, make_env  # noqa: E402
from wmzoo.train.agent import Agent  # noqa: E402

ROWS, T, UPDATES = 4, 6, 3  # the whole batch: ROWS rows, split between the ranks


def fixed_batch(info) -> Batch:  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(123)
    first = torch.zeros(ROWS, T, dtype=torch.bool)
    first[:, 0] = True
    return Batch(
        obs=torch.randint(0, 256, (ROWS, T, *info.obs_shape), generator=g, dtype=torch.uint8),
        action=torch.randint(0, info.num_actions, (ROWS, T), generator=g),  # a discrete env
        reward=torch.randn(ROWS, T, generator=g), terminal=torch.zeros(ROWS, T, dtype=torch.bool), is_first=first,
    )


def main(out: str) -> None:
    distributed.setup("cpu")
    import wmzoo_plugins.rssm.model as rssm_model

    mode = rssm_model.sample_latent
    rssm_model.sample_latent = lambda logits, sample=True: mode(logits, False)  # the mode: a loss without noise
    # clip far below the gradient norms, so clipping before the all-reduce would change the step
    run = run_spec("rssm", "minigrid-empty-5x5", "tiny", overrides=[
        "model.batch_size=2", f"model.seq_len={T}", "model.optim.clip=0.01", "policy.actor_optim.clip=0.01"])
    env = make_env(run.env, size=run.train.image_size)
    info = env_info(env, run.env)
    env.close()
    torch.manual_seed(0)
    agent = Agent(run, info)
    distributed.broadcast_state(agent)
    batch = fixed_batch(info)
    n, r = distributed.world_size(), distributed.rank()
    rows = slice(r * ROWS // n, (r + 1) * ROWS // n)
    mine = Batch(**{k: getattr(batch, k)[rows] for k in ("obs", "action", "reward", "terminal", "is_first")})
    g = torch.Generator().manual_seed(7)
    targets = {name: torch.randn(ROWS, sum(p.numel() for p in opt.params), generator=g)[rows]
               for name, opt in agent.policy.optimizers().items()}
    norms: list[dict[str, float]] = []
    for update in range(UPDATES):
        trained = agent.train_world_model(mine, update=update)
        step = {k: v for k, v in trained.metrics.items() if k.endswith("grad_norm")}
        for name, opt in agent.policy.optimizers().items():
            flat = torch.cat([p.reshape(-1) for p in opt.params])
            loss = ((flat - targets[name]) ** 2).sum(-1).mean()  # mean over this rank's rows
            step[f"policy/{name}"] = opt.step(loss)
        norms.append(step)
    params = {k: v.detach().clone() for k, v in agent.named_parameters()}
    torch.save({"params": params, "norms": norms}, out)
    distributed.teardown()


if __name__ == "__main__":
    main(sys.argv[1])
