"""NaN and inf in training: skipped steps are counted, too many in a row stop the run with one
line, and no checkpoint is ever written non-finite (the last good one survives and resumes)."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from torch import nn

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from wmzoo.cli import main
from wmzoo.config import run_spec
from wmzoo.errors import WmzooError
from wmzoo.interfaces import EnvInfo
from wmzoo.optim import Optimizer
from wmzoo.specs import OptimSpec
from wmzoo.train.agent import Agent
from wmzoo.train.checkpoint import load_checkpoint
from wmzoo.train.nonfinite import NonFiniteGuard, nonfinite_tensors
from wmzoo.train.rundir import CHECKPOINT, save_run

PREFILL = 200  # tiny; rssm tiny then does one update per env step


def _optimizer() -> Optimizer:
    return Optimizer(nn.Linear(2, 1).parameters(), OptimSpec(lr=1e-3))


def _step(opt: Optimizer, finite: bool) -> None:
    param = opt.params[0]
    opt.step(param.sum() * (1.0 if finite else math.nan))


def test_the_run_of_skipped_steps_resets_after_a_finite_step_and_stops_at_the_limit() -> None:
    """Catches a counter that never resets (it would stop at update 4), one that resets on updates
    where the optimizer did not step (a policy trained every other update would never stop), and
    a stop line without the update, the loss or the count."""
    model, policy = _optimizer(), _optimizer()
    guard = NonFiniteGuard({"model": model, "policy/actor": policy}, limit=3, explain=lambda opt: "EXPLAINED")
    for update, finite in enumerate([False, False, True, False, False], start=1):
        _step(model, finite)
        assert guard.check(update, {"model/loss": 0.0}) == (0 if finite else 1, "")
    _step(model, False)
    skipped, stop = guard.check(6, {"model/loss": math.nan, "reward": math.nan, "recon": 1.0})
    assert skipped == 1 and stop == (
        "update 6: loss 'model' is NaN (non-finite: reward) for 3 steps in a row "
        "(train.max_nonfinite = 3); EXPLAINED"
    )
    # the policy steps every other update: the updates in between neither reset nor extend its run
    guard = NonFiniteGuard({"model": model, "policy/actor": policy}, limit=3, explain=lambda opt: "")
    stops = []
    for update in range(1, 7):
        _step(model, True)
        if update % 2:
            _step(policy, False)
        stops.append(guard.check(update, {})[1])
    assert stops[:4] == ["", "", "", ""] and stops[4].startswith("update 5: loss 'policy/actor' is NaN for 3 steps")


@pytest.fixture(scope="module")
def agent() -> Agent:
    run = run_spec("rssm", "minigrid-empty-5x5", "tiny")
    return Agent(run, EnvInfo(name="minigrid-empty-5x5", obs_shape=(3, 64, 64), num_actions=7))


@pytest.mark.parametrize("where", ["weight", "adam moment"])
def test_save_refuses_a_non_finite_state_and_keeps_the_previous_file(tmp_path, agent, where) -> None:
    """Catches a checkpoint written (or its file replaced) with a NaN weight or optimizer moment:
    the run's only good checkpoint would be lost and --resume / eval would fail later."""
    param = next(agent.world_model.parameters())
    opt = agent.optimizers["model"]
    param.grad = torch.ones_like(param)
    opt.opt.step()  # Adam moments exist
    path = save_run(tmp_path, agent, {"updates": 7})
    good = path.read_bytes()
    target = param if where == "weight" else opt.opt.state[param]["exp_avg"]
    kept = target.detach().clone()
    try:
        with torch.no_grad():
            target.view(-1)[0] = math.nan
        with pytest.raises(WmzooError) as refused:
            save_run(tmp_path, agent, {"updates": 8})
    finally:
        with torch.no_grad():
            target.copy_(kept)
    message = str(refused.value)
    assert message.startswith("update 8: the agent's state is not finite ('")
    assert ("world_model/" if where == "weight" else "world_model_optim/model/opt/state/0/exp_avg") in message
    assert f"the last finite checkpoint is kept at {path}" in message and "optimizers: model.optim, policy.actor_optim" in message
    assert path.read_bytes() == good and sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT]
    assert load_checkpoint(path)["progress"]["updates"] == 7


def test_nonfinite_tensors_names_only_floating_tensors_that_are_not_finite() -> None:
    """Catches a check that misses inf (only NaN), nested lists, or trips on integer tensors."""
    tree = {"a": {"w": torch.tensor([1.0, math.inf])}, "b": [torch.zeros(2), torch.tensor([math.nan])],
            "c": torch.tensor([3]), "d": 1.5}
    assert nonfinite_tensors(tree) == ["a/w", "b/1"]


def test_nan_loss_stops_the_cli_run_keeping_the_last_checkpoint_which_resumes(capsys, tmp_path, monkeypatch):
    """Through `wmzoo run`: once a checkpoint exists the world model's loss turns NaN. Catches the
    NaN reaching the weights or the checkpoint (the file must stay byte-identical and load finite),
    a run that goes on (or crashes with a traceback) instead of one line with exit 2 naming the
    update and the loss, the count missing from TensorBoard, and a checkpoint that --resume (with a
    new limit) cannot continue from."""
    from wmzoo_plugins.rssm import RSSMWorldModel

    logdir = tmp_path / "run"
    checkpoint = logdir / CHECKPOINT
    original, seen = RSSMWorldModel.loss, {}

    def loss_turning_nan(self, batch, carry=None):
        out = original(self, batch, carry)
        if checkpoint.exists():
            seen.setdefault("bytes", checkpoint.read_bytes())
            out.losses["model"] = out.losses["model"] * math.nan
            out.metrics["reward"] = math.nan
        return out

    monkeypatch.setattr(RSSMWorldModel, "loss", loss_turning_nan)
    code = main(["run", "--steps", str(PREFILL + 40), "--logdir", str(logdir), "--no-progress",
                 "--set", f"train.checkpoint_every={PREFILL + 10}", "--set", "train.max_nonfinite=4"])
    err = capsys.readouterr().err
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith("wmzoo: error:")]
    warnings = [line for line in err.splitlines() if line.startswith("wmzoo: warning:")]
    assert len(errors) == 1 and len(warnings) == 3 and len(err.splitlines()) == 4, err
    # the checkpoint at env step 210 holds 10 updates; the 11th to 14th are NaN
    assert errors[0].startswith(
        "wmzoo: error: update 14: loss 'model' is NaN (non-finite: reward) for 4 steps in a row "
        f"(train.max_nonfinite = 4); the last finite checkpoint is kept at {checkpoint}; "
        "start a new run with a lower learning rate or a tighter gradient clip "
        "(--set model.optim.lr=... or model.optim.clip=...), or try --resume from the checkpoint"
    ), errors[0]
    assert checkpoint.read_bytes() == seen["bytes"]
    tree = load_checkpoint(checkpoint)
    assert tree["progress"]["env_steps"] == PREFILL + 10 and tree["progress"]["updates"] == 10
    # the skipped steps reach TensorBoard before the stop (written at the stop, not the next log)
    events = EventAccumulator(str(logdir / "tb")).Reload()
    assert events.Scalars("train/nonfinite_steps")[-1].value == 4
    assert nonfinite_tensors(tree) == []

    monkeypatch.setattr(RSSMWorldModel, "loss", original)
    assert main(["run", "--logdir", str(logdir), "--resume", "--steps", str(PREFILL + 14), "--no-progress",
                 "--set", "train.max_nonfinite=6"]) == 0  # the limit may change on resume
    assert yaml.safe_load((logdir / "run.yaml").read_text())["train"]["max_nonfinite"] == 6
    tree = load_checkpoint(checkpoint)
    assert tree["progress"]["env_steps"] == PREFILL + 14 and tree["progress"]["updates"] == 14
    assert tree["progress"]["nonfinite"] == 0 and nonfinite_tensors(tree) == []


def test_offline_run_stops_at_a_checkpoint_whose_weights_are_not_finite(capsys, tmp_path, monkeypatch):
    """`wmzoo run --offline`, a weight turned NaN outside the optimizer (as a buffer or an EMA can
    be). Catches the offline loop bypassing the check, the NaN checkpoint replacing the finite one,
    and a traceback instead of one line naming the tensor and the kept checkpoint."""
    from wmzoo_plugins.rssm import RSSMWorldModel

    online = tmp_path / "online"
    assert main(["run", "--steps", str(PREFILL + 2), "--logdir", str(online), "--no-progress"]) == 0
    logdir = tmp_path / "offline"
    checkpoint = logdir / CHECKPOINT
    original, seen = RSSMWorldModel.loss, {}

    def loss_after_poisoning(self, batch, carry=None):
        if checkpoint.exists() and "bytes" not in seen:
            seen["bytes"] = checkpoint.read_bytes()
            with torch.no_grad():
                self.heads.reward.out.bias.view(-1)[0] = math.nan
        return original(self, batch, carry)

    monkeypatch.setattr(RSSMWorldModel, "loss", loss_after_poisoning)
    capsys.readouterr()
    code = main(["run", "--offline", str(online / "replay"), "--logdir", str(logdir), "--steps", "9",
                 "--no-progress", "--set", "train.checkpoint_every=3"])
    err = capsys.readouterr().err
    *warnings, error = err.splitlines()
    assert code == 2 and len(warnings) == 3, err  # updates 4 to 6: NaN loss, steps skipped
    assert all(line.startswith("wmzoo: warning: update ") for line in warnings)
    assert error.startswith("wmzoo: error: update 6: the agent's state is not finite "
                          "('world_model/heads.reward.out.bias' holds NaN or inf), so no checkpoint "
                          f"was written; the last finite checkpoint is kept at {checkpoint}; "), error
    assert checkpoint.read_bytes() == seen["bytes"]
    assert load_checkpoint(checkpoint)["progress"]["updates"] == 3


def test_a_policy_stepping_a_raw_torch_optimizer_is_refused(monkeypatch) -> None:
    """Catches a policy whose steps bypass wmzoo.optim.Optimizer (its NaN steps would reach the
    weights unseen) being accepted by the trainer."""
    from wmzoo.agents.dreamer import DreamerPolicy

    monkeypatch.setattr(DreamerPolicy, "optimizers", lambda self: {"actor": torch.optim.AdamW(self.actor.parameters())})
    with pytest.raises(WmzooError, match=r"^policy 'dreamer': its optimizer 'actor' is AdamW, not a wmzoo.optim.Optimizer"):
        Agent(run_spec("rssm", "minigrid-empty-5x5", "tiny"), EnvInfo(name="minigrid-empty-5x5", obs_shape=(3, 64, 64), num_actions=7))
