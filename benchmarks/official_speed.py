"""wmzoo's IRIS, REM, RSSM and Δ-IRIS beside their official codes, in one process, on this CPU.

Each official code is read from a local checkout (``--iris PATH``: github.com/eloialonso/iris;
``--rem PATH``: github.com/leor-c/REM; ``--dreamerv3 PATH``: github.com/NM512/dreamerv3-torch;
``--delta-iris PATH``: github.com/vmicheli/delta-iris; nothing is downloaded) and built at its
default Atari config, the sizes of wmzoo's ``iris:paper``, ``rem:paper``, RSSM at
:data:`DREAMERV3_SIZE` and ``delta-iris:paper-atari`` (:func:`official_delta_iris` for its units:
the world-model update in bf16 as its trainer runs it and in fp32, the actor-critic update, and
its rollout alone with the target network at every imagined frame);
wmzoo's is built as its trainer builds it. Both
see the same synthetic 64×64 frames and 6 actions and the same threads; each unit of work is timed
in alternated rounds after a warm-up (:func:`wmzoo.bench.harness.alternate`: official then wmzoo,
then wmzoo then official, …, ``--iters`` calls each per round), so a load on the machine falls on
both alike; each ratio is the median [min, max] over the rounds of the round's ratio, and the JSON
keeps every round's seconds:

- **world model update** (``B × T`` frames, ``T`` the code's own segment: IRIS 20, REM 10,
  DreamerV3 64): the
  batch's tokens from the tokenizer, the world model's loss, backward, clip, AdamW step (official
  ``WorldModel.compute_loss`` as its trainer steps it; wmzoo the ``world_model`` component's loss and
  step). The tokenizer's own training is left out of both, and both encode the batch without
  gradient (the official REM's ``_get_tokens`` is ``torch.no_grad``; only its world model's
  lookup of the code vectors, shared embeddings, carries gradient).
- **imagination** (``B ×`` the actions taken): from ``B`` replay segments of ``burn_in + 1`` = 21
  frames, as each actor-critic update imagines: the burn-in frames tokenized and read by the
  actor-critic's LSTM (IRIS: their reconstructions; REM: their code vectors), then the horizon
  (IRIS 20, REM 10): each step the actor-critic's forward, a sampled action and the world model's
  next frame (official ``ActorCritic.imagine``/``ActorCriticLS.imagine``; wmzoo
  ``imagination_starts`` + ``burn_in`` + the imagination engine under ``iris-ac``/``rem-ac``
  ``paper``), without gradient. The official REM acts ``H − context + 1`` = 9 times in a horizon of
  10 (its two context blocks count), wmzoo 10: ``imagination`` credits each with its own actions
  (and gives the seconds per call), ``imagination_equal_actions`` times wmzoo acting as many times
  as the official (9), so its ratio is both per action and per call. RSSM: 15 steps from every
  posterior state of the batch (:func:`official_dreamerv3`).

The official codes need ``einops`` (both) and ``loguru`` and ``yet-another-retnet`` (REM):
``pip install einops loguru && pip install --no-deps yet-another-retnet``; the modules they import
for their training loops only (``gym``, ``torchvision``, ``cv2``, ``psutil``) are stood in for when
missing, and so is their replay buffer module (``dataset``: REM's no longer imports with current
torch; only its ``Batch`` type is read). ::

    python benchmarks/official_speed.py --iris ~/src/iris --rem ~/src/REM --threads 2 --batch 8
    python benchmarks/official_speed.py --dreamerv3 ~/src/dreamerv3-torch --threads 2 --batch 16
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import statistics
import sys
import types
from collections.abc import Callable
from pathlib import Path

import torch
import yaml

from wmzoo.atomic import write_text_atomic
from wmzoo.bench.harness import SYNTHETIC_ENV, alternate, bench_run, ratio_stats
from wmzoo.imagination import imagine
from wmzoo.registry import world_model_spec
from wmzoo.specs import merge
from wmzoo.testing import synthetic_batch
from wmzoo.train.agent import Agent

TRAINING_ONLY = ("gym", "torchvision", "cv2", "psutil", "matplotlib", "matplotlib.pyplot")  # imported, unused here
# the official codes' own top-level modules (the same names in several of them)
TOP_LEVEL = ("models", "utils", "dataset", "episode", "envs", "networks", "tools", "exploration", "data")
BURN_IN = 20  # both official configs (training.actor_critic.burn_in)
Units = dict[str, tuple[Callable[[], None], int]]  # unit -> (one call, frames it is credited with)


def params(**modules: torch.nn.Module) -> dict[str, int]:
    return {name: sum(p.numel() for p in m.parameters()) for name, m in modules.items()}


def fail(message: str) -> None:
    """One line naming what is wrong, exit status 2 (as a bad command line)."""
    print(f"official_speed.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def import_official(root: Path, needs: tuple[str, ...], marker: str = "src/models/world_model.py",
                    src: str = "src") -> None:
    """Put the checkout's ``src`` first on the path, with another official code's modules of the
    same names forgotten (the codes name theirs ``models``, ``utils``, …)."""
    if not (root / marker).is_file():
        fail(f"{root} is not a checkout of the official code (no {marker})")
    for name in needs:
        try:
            importlib.import_module(name)
        except ImportError:
            fail(f"the official code at {root} needs {name}: see this script's docstring for the install line")
    for name in TRAINING_ONLY:
        try:
            importlib.import_module(name)
        except ImportError:
            stand_in = types.ModuleType(name)
            stand_in.Env = object  # type annotations of the official env wrappers
            stand_in.models = types.SimpleNamespace()  # the LPIPS network's VGG (not built)
            sys.modules[name] = stand_in
    for name in list(sys.modules):
        if name.split(".")[0] in TOP_LEVEL:
            del sys.modules[name]
    if not (root / src / "data").is_dir():  # Δ-IRIS's replay package (data) imports as it is
        replay = types.ModuleType("dataset")  # the official replay buffer: only its Batch type is read
        replay.Batch = dict
        sys.modules["dataset"] = replay
    sys.path = [p for p in sys.path if p not in _OFFICIAL_PATHS]
    _OFFICIAL_PATHS.append(str(root / src))
    sys.path.insert(0, str(root / src))


_OFFICIAL_PATHS: list[str] = []


def _config(root: Path, name: str) -> dict:
    cfg = yaml.safe_load((root / "config" / name).read_text())
    return {k: _config_value(v) for k, v in cfg.items() if not k.startswith("_")}


def _config_value(value: object) -> object:
    if isinstance(value, dict):
        return {k: _config_value(v) for k, v in value.items() if not k.startswith("_")}
    if isinstance(value, str) and value.startswith("("):  # REM's input_resolution: (64, 64)
        return ast.literal_eval(value)
    if isinstance(value, str):  # YAML 1.1 reads 1e-4 as a string
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _official_batches(batch: int, seq_len: int) -> tuple[dict, dict]:
    """The world-model batch and the actor-critic's segments in the official codes' format, of the
    same synthetic data wmzoo's side gets."""
    info = SYNTHETIC_ENV
    data = synthetic_batch(info, batch, seq_len, torch.device("cpu"))
    segments = synthetic_batch(info, batch, BURN_IN + 1, torch.device("cpu"), seed=1)
    ones = torch.ones(batch, seq_len, dtype=torch.bool)
    wm_batch = {"observations": data.obs.float() / 255, "actions": data.action, "rewards": data.reward,
                "ends": torch.zeros(batch, seq_len, dtype=torch.long), "mask_padding": ones}
    ac_batch = {"observations": segments.obs.float() / 255, "actions": segments.action,
                "mask_padding": torch.ones(batch, BURN_IN + 1, dtype=torch.bool)}
    return wm_batch, ac_batch


def _official_units(tokenizer, world_model, actor_critic, batch: int, seq_len: int, horizon: int,
                    acted: int) -> tuple[Units, dict[str, int]]:
    """A token code's two units: its world-model update on ``B × seq_len`` frames, and its
    actor-critic's imagination of ``horizon`` (credited with the ``acted`` actions it takes)."""
    wm_batch, ac_batch = _official_batches(batch, seq_len)
    optimizer = torch.optim.AdamW(world_model.parameters(), lr=1e-4, weight_decay=0.01)

    def world_model_update() -> None:
        tokenizer.train(), world_model.train()
        losses = world_model.compute_loss(wm_batch, tokenizer)
        loss = (losses[0] if isinstance(losses, tuple) else losses).loss_total  # REM: (losses, info)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(world_model.parameters(), 10.0)
        optimizer.step()

    @torch.no_grad()
    def imagination() -> None:
        actor_critic.eval()
        actor_critic.imagine(ac_batch, tokenizer, world_model, horizon)

    units = {"world_model_update": (world_model_update, batch * seq_len), "imagination": (imagination, batch * acted),
             "imagination_equal_actions": (imagination, batch * acted)}
    return units, params(tokenizer=tokenizer, world_model=world_model, actor_critic=actor_critic)


def official_iris(root: Path, batch: int) -> tuple[Units, dict[str, int]]:
    """eloialonso/iris at ``config/{tokenizer,world_model}/default.yaml`` (no LPIPS: it trains the
    tokenizer only); horizon 20."""
    import_official(root, ("einops",))
    from models.actor_critic import ActorCritic
    from models.tokenizer import Decoder, Encoder, EncoderDecoderConfig, Tokenizer
    from models.world_model import TransformerConfig, WorldModel

    tok, wm = _config(root, "tokenizer/default.yaml"), _config(root, "world_model/default.yaml")
    coder = EncoderDecoderConfig(**tok["encoder"]["config"])
    tokenizer = Tokenizer(tok["vocab_size"], tok["embed_dim"], Encoder(coder), Decoder(coder), with_lpips=False)
    world_model = WorldModel(tok["vocab_size"], SYNTHETIC_ENV.num_actions, TransformerConfig(**wm))
    actor_critic = ActorCritic(SYNTHETIC_ENV.num_actions, use_original_obs=False)
    return _official_units(tokenizer, world_model, actor_critic, batch, wm["max_blocks"], 20, 20)


def official_rem(root: Path, batch: int) -> tuple[Units, dict[str, int]]:
    """leor-c/REM at ``config/{tokenizer,world_model,actor_critic}/default.yaml`` (POP world model,
    the latent actor-critic ``LSAC``); horizon 10, of which ``10 − context + 1`` steps act."""
    import_official(root, ("einops", "loguru", "yet_another_retnet"))
    from models.actor_critic import ActorCriticLS
    from models.tokenizer import SimpleDecoder, SimpleEncoder, SimpleEncoderConfig, Tokenizer
    from models.world_model import POPRetNetWorldModel, RetNetConfig

    tok, wm = _config(root, "tokenizer/default.yaml"), _config(root, "world_model/default.yaml")
    ac = _config(root, "actor_critic/default.yaml")
    coder = SimpleEncoderConfig(**tok["encoder"]["config"])
    tokenizer = Tokenizer(tok["vocab_size"], tok["embed_dim"], "", SimpleEncoder(coder), SimpleDecoder(coder),
                          with_lpips=False)
    retnet = RetNetConfig(**wm.pop("retnet"))
    world_model = POPRetNetWorldModel(tok["vocab_size"], SYNTHETIC_ENV.num_actions, retnet, **wm)
    actor_critic = ActorCriticLS(**ac, act_vocab_size=SYNTHETIC_ENV.num_actions, token_embed_dim=tok["embed_dim"],
                                 tokens_per_obs=retnet.tokens_per_block - 1, context_len=wm["context_length"])
    horizon = retnet.max_blocks  # training.actor_critic.imagine_horizon = common.sequence_length
    acted = horizon - wm["context_length"] + 1  # ActorCriticLS.imagine's effective horizon
    return _official_units(tokenizer, world_model, actor_critic, batch, retnet.max_blocks, horizon, acted)


def official_dreamerv3(root: Path, batch: int) -> tuple[Units, dict[str, int]]:
    """NM512/dreamerv3-torch at ``configs.yaml`` ``defaults`` + ``atari100k`` (eager, fp32, on this
    CPU): the world model's ``_train`` on ``B × 64`` frames, and ``ImagBehavior._imagine`` of
    ``imag_horizon`` = 15 steps from every posterior state of that batch (``B · 64`` starts) with
    the reward and continue heads on the imagined states (as its ``_train`` reads them next; wmzoo's
    ``imagine_step`` predicts both in each step)."""
    import_official(root, (), marker="models.py", src="")
    import models

    configs = yaml.safe_load((root / "configs.yaml").read_text())
    cfg = _config_value(merge(configs["defaults"], configs["atari100k"]))
    cfg.update(device="cpu", compile=False, precision=32, num_actions=SYNTHETIC_ENV.num_actions)
    config = types.SimpleNamespace(**cfg)
    C, H, W = SYNTHETIC_ENV.obs_shape
    obs_space = types.SimpleNamespace(spaces={"image": types.SimpleNamespace(shape=(H, W, C))})
    act_space = types.SimpleNamespace(n=config.num_actions)
    world_model = models.WorldModel(obs_space, act_space, 0, config)
    behavior = models.ImagBehavior(config, world_model)
    seq_len = config.batch_length
    data = synthetic_batch(SYNTHETIC_ENV, batch, seq_len, torch.device("cpu"))
    arrays = {
        "image": data.obs.permute(0, 1, 3, 4, 2).numpy(), "reward": data.reward.numpy(),
        "action": torch.nn.functional.one_hot(data.action, config.num_actions).float().numpy(),
        "discount": (1.0 - data.terminal.float()).numpy(), "is_first": data.is_first.numpy(),
        "is_terminal": data.terminal.numpy(),
    }
    post, _, _ = world_model._train(arrays)

    def world_model_update() -> None:
        world_model._train(arrays)

    @torch.no_grad()
    def imagination() -> None:  # the rollout, then its rewards and continues as ImagBehavior._train reads them
        _, states, _ = behavior._imagine(post, behavior.actor, config.imag_horizon)
        feat = world_model.dynamics.get_feat(states)
        world_model.heads["reward"](feat).mode(), world_model.heads["cont"](feat).mean

    units = {"world_model_update": (world_model_update, batch * seq_len),
             "imagination": (imagination, batch * seq_len * config.imag_horizon)}
    return units, params(world_model=world_model, actor=behavior.actor, critic=behavior.value)


def official_delta_iris(root: Path, batch: int) -> tuple[Units, dict[str, int]]:
    """vmicheli/delta-iris at ``config/params/atari.yaml`` (its hydra interpolations written out
    below: the encoder reads 2 frames and the action map, 3 · 2 + 1 channels; the decoder 16 + 4 +
    64; blocks of 1 + 1 + 4 tokens, 26 per segment; revival during the tokenizer's first 400
    updates): the world model's update on ``B × 26`` frames as its trainer runs it
    (``train_component``: ``compute_loss`` in a bfloat16 autocast region, backward, clip 10,
    ``configure_optimizer``'s AdamW lr 1e-4, wd 0.01), and the same in float32
    (``world_model_update_fp32``); the actor-critic update (float32, as its trainer) and its rollout
alone (``imagination``: ``ActorCritic.imagine`` without gradient, the online and the target network
at every imagined frame)."""
    import_official(root, ("einops",))
    from data import Batch
    from models.actor_critic import ActorCritic, ActorCriticConfig, CnnLstmActorCritic
    from models.convnet import FrameCnnConfig
    from models.tokenizer import Tokenizer
    from models.tokenizer.tokenizer import TokenizerConfig
    from models.transformer import TransformerConfig
    from models.world_model import WorldModel, WorldModelConfig
    from utils import configure_optimizer

    params_yaml = yaml.safe_load((root / "config" / "params" / "atari.yaml").read_text())
    tok, wm, train = params_yaml["tokenizer"], params_yaml["world_model"], params_yaml["training"]
    cnn = {k: tok["encoder_config"][k] for k in ("num_channels", "mult", "down")}
    channels = tok["image_channels"]
    frame_cnn = FrameCnnConfig(**tok["frame_cnn_config"] | {"image_channels": channels})
    tokenizer = Tokenizer(TokenizerConfig(
        image_channels=channels, image_size=tok["image_size"], num_actions=SYNTHETIC_ENV.num_actions,
        num_tokens=tok["num_tokens"], decoder_act_channels=tok["decoder_act_channels"],
        codebook_size=tok["codebook_size"], codebook_dim=tok["codebook_dim"],
        max_codebook_updates_with_revival=train["tokenizer"]["steps_first_epoch"],
        encoder_config=FrameCnnConfig(image_channels=channels * 2 + 1, latent_dim=tok["encoder_config"]["latent_dim"], **cnn),
        decoder_config=FrameCnnConfig(image_channels=channels, latent_dim=frame_cnn.latent_dim + tok["decoder_act_channels"]
                                      + tok["encoder_config"]["latent_dim"], **cnn),
        frame_cnn_config=frame_cnn,
    ))
    transformer = {k: v for k, v in wm["transformer_config"].items() if not k.startswith("_")}
    seq_len = train["world_model"]["sequence_length"]
    transformer.update(tokens_per_block=1 + 1 + tok["num_tokens"], max_blocks=seq_len)
    world_model = WorldModel(WorldModelConfig(
        latent_vocab_size=tok["codebook_size"], num_actions=SYNTHETIC_ENV.num_actions, image_channels=channels,
        image_size=tok["image_size"], latents_weight=wm["latents_weight"], rewards_weight=wm["rewards_weight"],
        ends_weight=wm["ends_weight"], two_hot_rews=wm["two_hot_rews"],
        transformer_config=TransformerConfig(**transformer),
        frame_cnn_config=FrameCnnConfig(**{k: v for k, v in wm["frame_cnn_config"].items()} | {"image_channels": channels}),
    ))
    tokenizer.eval()
    data = synthetic_batch(SYNTHETIC_ENV, batch, seq_len, torch.device("cpu"))
    official_batch = Batch(data.obs.float() / 255, data.action, data.reward, data.terminal.long(),
                           torch.ones(batch, seq_len, dtype=torch.bool), [])
    optimizer = configure_optimizer(world_model, train["learning_rate"], train["world_model"]["weight_decay"])

    def update(bf16: bool) -> None:
        world_model.train()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):  # the trainer: float32 dtype, i.e. off
            losses, _ = world_model.compute_loss(official_batch, tokenizer=tokenizer)
        losses.loss_total.backward()
        torch.nn.utils.clip_grad_norm_(world_model.parameters(), train["world_model"]["max_grad_norm"])
        optimizer.step()
        optimizer.zero_grad()

    ac = params_yaml["actor_critic"]
    model = ac["model"]
    actor_critic = ActorCritic(ActorCriticConfig(
        burn_in_length=ac["burn_in_length"], imagination_horizon=ac["imagination_horizon"], gamma=ac["gamma"],
        lambda_=ac["lambda_"], entropy_weight=ac["entropy_weight"], two_hot_rets=ac["two_hot_rets"],
        model=CnnLstmActorCritic(FrameCnnConfig(**model["frame_encoder_config"]), SYNTHETIC_ENV.num_actions,
                                 ac["two_hot_rets"]),
    ))
    segments = synthetic_batch(SYNTHETIC_ENV, batch, ac["burn_in_length"] + 1, torch.device("cpu"), seed=1)
    ac_batch = Batch(segments.obs.float() / 255, segments.action, segments.reward, segments.terminal.long(),
                     torch.ones(batch, ac["burn_in_length"] + 1, dtype=torch.bool), [])
    ac_optimizer = torch.optim.Adam(actor_critic.parameters(), lr=train["learning_rate"])

    def actor_critic_update() -> None:  # its trainer: float32, the world model in eval mode
        world_model.eval(), actor_critic.train()
        losses, _ = actor_critic.compute_loss(ac_batch, tokenizer=tokenizer, world_model=world_model)
        losses.loss_total.backward()
        torch.nn.utils.clip_grad_norm_(actor_critic.parameters(), train["actor_critic"]["max_grad_norm"])
        ac_optimizer.step()
        ac_optimizer.zero_grad()

    def imagination() -> None:  # the update's rollout alone: online and target network at every frame
        world_model.eval(), actor_critic.train()
        with torch.no_grad():
            actor_critic.imagine(ac_batch, tokenizer=tokenizer, world_model=world_model)

    units = {"world_model_update": (lambda: update(True), batch * seq_len),
             "world_model_update_fp32": (lambda: update(False), batch * seq_len),
             "actor_critic_update": (actor_critic_update, batch * ac["imagination_horizon"]),
             "imagination": (imagination, batch * ac["imagination_horizon"])}
    return units, params(tokenizer=tokenizer, world_model=world_model, actor_critic=actor_critic)  # with its target


def wmzoo_delta_iris_agent() -> Agent:
    """wmzoo's ``delta-iris:paper-atari`` agent as its trainer builds it, on the synthetic env."""
    spec = world_model_spec("delta-iris", "paper-atari")
    return Agent(bench_run("delta-iris", "paper-atari", spec, SYNTHETIC_ENV, "cpu", "fp32", False), SYNTHETIC_ENV)


def wmzoo_delta_iris_units(batch: int, seq_len: int, agent: Agent | None = None) -> tuple[Units, dict[str, int]]:
    """wmzoo's ``delta-iris:paper-atari`` world-model update as its trainer runs it (the
    Δ-tokens without gradient, G's loss and step), in bfloat16 autocast (the preset's
    ``bf16``, as the official trainer) and in float32; the actor-critic update from the policy's
    own segments, and its rollout alone (``imagination``) with the target network over the imagined
    frames, as the official rollout computes it."""
    agent = agent or wmzoo_delta_iris_agent()
    wm = agent.world_model
    data = synthetic_batch(SYNTHETIC_ENV, batch, seq_len, agent.device)

    def update(bf16: bool) -> None:
        wm.train()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            with torch.no_grad():
                tokens = wm.encode_transitions(data)
            loss, _ = wm._world_model_loss(data, tokens)
        agent.optimizers["world_model"].step(loss.float())

    policy = agent.policy
    segments = synthetic_batch(SYNTHETIC_ENV, batch, policy.spec.segment, agent.device, seed=1)

    def actor_critic_update() -> None:  # the trainer's policy update from its own segments
        agent.train_policy(None, segments=segments)  # type: ignore[arg-type]  # read only without segments

    def imagination() -> None:  # the update's rollout, then the target network over its frames, as the
        with torch.no_grad():  # official's imagine runs it at every imagined frame (returns and baselines)
            trajectory = agent._imagine_for_policy(None, None, segments)  # type: ignore[arg-type]
            th, tc = trajectory.policy_state["th"], trajectory.policy_state["tc"]
            for frames in trajectory.features:
                _, _, th, tc = policy.target(frames, th, tc)

    units = {"world_model_update": (lambda: update(True), batch * seq_len),
             "world_model_update_fp32": (lambda: update(False), batch * seq_len),
             "actor_critic_update": (actor_critic_update, batch * policy.spec.horizon),
             "imagination": (imagination, batch * policy.spec.horizon)}
    components = wm.components()
    sizes = {name: sum(p.numel() for p in components[name][0]) for name in ("tokenizer", "world_model")}
    return units, {**sizes, **params(actor_critic=policy)}


DREAMERV3_SIZE = {  # wmzoo's RSSM at dreamerv3-torch's defaults (DreamerV3 size S): 15.7M parameters
    "deter": 512, "stoch": 32, "classes": 32, "hidden": 512, "mlp_layers": 2, "cnn_depth": 32,
    "cnn_stages": 4, "batch_size": 16, "seq_len": 64,
}


def wmzoo_rssm_units(batch: int, seq_len: int, horizon: int = 15) -> tuple[Units, dict[str, int]]:
    """wmzoo's RSSM at :data:`DREAMERV3_SIZE` with the ``dreamer`` policy's ``paper`` preset
    (DreamerV3's 2 × 512 actor and critic, every posterior state a start)."""
    info = SYNTHETIC_ENV
    spec = world_model_spec("rssm", "paper", DREAMERV3_SIZE)
    agent = Agent(bench_run("rssm", "paper", spec, info, "cpu", "fp32", False, {"horizon": horizon}), info)
    wm, policy = agent.world_model, agent.policy
    data = synthetic_batch(info, batch, seq_len, agent.device)
    start, cont, _ = agent.train_world_model(data).imagination_start()

    def world_model_update() -> None:
        agent.train_world_model(data, starts=False)

    @torch.no_grad()
    def imagination() -> None:
        wm.eval()
        imagine(wm, policy, start, horizon, start_cont=cont)

    units = {"world_model_update": (world_model_update, batch * seq_len),
             "imagination": (imagination, batch * seq_len * horizon)}
    return units, params(world_model=wm, actor=policy.actor, critic=policy.critic)


def wmzoo_agent(backbone: str) -> Agent:
    """wmzoo's ``backbone:paper`` with its default policy's ``paper`` preset, as its trainer builds them."""
    info = SYNTHETIC_ENV
    return Agent(bench_run(backbone, "paper", world_model_spec(backbone, "paper"), info, "cpu", "fp32", False), info)


def wmzoo_units(agent: Agent, batch: int, seq_len: int, acted: int | None = None) -> tuple[Units, dict[str, int]]:
    """The units in a token backbone's ``agent`` (IRIS, REM); ``imagination_equal_actions`` acts
    ``acted`` times (the official code's actions) instead of the policy's horizon."""
    info = SYNTHETIC_ENV
    wm, policy = agent.world_model, agent.policy
    if policy.spec.segment != BURN_IN + 1:
        fail(f"the policy's segments are {policy.spec.segment} frames, the official {BURN_IN + 1}")
    data = synthetic_batch(info, batch, seq_len, agent.device)
    segments = synthetic_batch(info, batch, policy.spec.segment, agent.device, seed=1)

    def world_model_update() -> None:
        wm.train()
        with torch.no_grad():
            tokens = wm.tokenizer.encode(data.obs)
        loss, _ = wm._world_model_loss(data, tokens)
        agent.optimizers["world_model"].step(loss)

    @torch.no_grad()
    def imagination(horizon: int = policy.spec.horizon) -> None:
        wm.eval(), policy.eval()
        start, cont, context = wm.imagination_starts(segments)
        imagine(wm, policy, start, horizon, start_cont=cont, policy_state=policy.burn_in(context))

    acted = acted or policy.spec.horizon
    units = {"world_model_update": (world_model_update, batch * seq_len),
             "imagination": (imagination, batch * policy.spec.horizon),
             "imagination_equal_actions": (lambda: imagination(acted), batch * acted)}
    components = wm.components()
    sizes = {name: sum(p.numel() for p in components[name][0]) for name in ("tokenizer", "world_model")}
    return units, {**sizes, **params(actor_critic=policy)}


def time_rounds(sides: dict[str, Callable[[], None]], iters: int, warmup: int, rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each side in each of ``rounds`` alternated rounds (``iters`` calls a
    side per round, the order reversed every other round), after ``warmup`` calls of each."""
    for _ in range(warmup):
        for fn in sides.values():
            fn()
    per_round, _ = alternate(list(sides.values()), rounds, iters)
    return dict(zip(sides, per_round))


def compare(backbone: str, official: tuple[Units, dict[str, int]], batch: int, iters: int, warmup: int,
            units: list[str], rounds: int = 3) -> list[dict]:
    """Each of ``units`` timed in ``rounds`` alternated rounds in the official code and in wmzoo."""
    theirs, their_sizes = official
    seq_len = theirs["world_model_update"][1] // batch  # the official segment
    if backbone == "rssm":
        ours, our_sizes = wmzoo_rssm_units(batch, seq_len)
    elif backbone == "delta-iris":
        ours, our_sizes = wmzoo_delta_iris_units(batch, seq_len)
    else:
        acted = theirs["imagination_equal_actions"][1] // batch
        ours, our_sizes = wmzoo_units(wmzoo_agent(backbone), batch, seq_len, acted)
    print(f"{backbone}: parameters official {their_sizes}, wmzoo {our_sizes}", flush=True)
    rows = []
    for unit in units:
        if unit not in theirs or unit not in ours:
            continue
        sides = {"official": theirs[unit][0], "wmzoo": ours[unit][0]}
        seconds = time_rounds(sides, iters, warmup, rounds)
        frames = {"official": theirs[unit][1], "wmzoo": ours[unit][1]}
        median = {k: statistics.median(v) for k, v in seconds.items()}
        # per frame: frames/s ratio in each round; per call: seconds ratio in each round
        fps = [[frames[k] / s for s in seconds[k]] for k in ("official", "wmzoo")]
        ratio = ratio_stats([1 / f for f in fps[0]], [1 / f for f in fps[1]])
        per_call = ratio_stats(seconds["official"], seconds["wmzoo"])
        row = {"backbone": backbone, "unit": unit, "batch": batch, "rounds": rounds, "iters": iters,
               "official_params": their_sizes, "wmzoo_params": our_sizes,
               **{f"{k}_frames": frames[k] for k in sides}, **{f"{k}_s": median[k] for k in sides},
               **{f"{k}_round_s": seconds[k] for k in sides},
               **{f"{k}_fps": frames[k] / median[k] for k in sides},
               "ratio": ratio[0], "ratio_min": ratio[1], "ratio_max": ratio[2],
               "ratio_per_call": per_call[0], "ratio_per_call_min": per_call[1], "ratio_per_call_max": per_call[2]}
        rows.append(row)
        print(f"{backbone:<5} {unit:<25} B {batch:<3} official {row['official_fps']:7.1f} frames/s "
              f"({median['official']:6.2f} s)  wmzoo {row['wmzoo_fps']:7.1f} frames/s "
              f"({median['wmzoo']:6.2f} s)  ratio {ratio[0]:.2f} [{ratio[1]:.2f}, {ratio[2]:.2f}]  "
              f"per call {per_call[0]:.2f} [{per_call[1]:.2f}, {per_call[2]:.2f}]  ({rounds} rounds)", flush=True)
    return rows


UNITS = ("world_model_update", "world_model_update_fp32", "actor_critic_update", "imagination",
         "imagination_equal_actions")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iris", type=Path, help="root of a checkout of eloialonso/iris")
    p.add_argument("--rem", type=Path, help="root of a checkout of leor-c/REM")
    p.add_argument("--dreamerv3", type=Path, help="root of a checkout of NM512/dreamerv3-torch (RSSM)")
    p.add_argument("--delta-iris", type=Path, help="root of a checkout of vmicheli/delta-iris")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, nargs="+", default=[8], help="batch sizes, each timed in turn")
    p.add_argument("--units", nargs="+", choices=UNITS, default=list(UNITS),
                   help="units to time, where the code has them (world_model_update_fp32: Δ-IRIS's update in "
                   "float32; its world_model_update is in bfloat16, as its trainer runs it; actor_critic_update: "
                   "Δ-IRIS's, imagining from B segments of 6 frames and learning, float32; imagination: for Δ-IRIS "
                   "that rollout alone, the online and the target network at every imagined frame on both sides)")
    p.add_argument("--iters", type=int, default=1, help="calls of each side per round")
    p.add_argument("--rounds", type=int, default=3, help="alternated rounds (the order reversed every other round)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args(argv)
    if not (args.iris or args.rem or args.dreamerv3 or args.delta_iris):
        p.error("give at least one of --iris PATH, --rem PATH, --dreamerv3 PATH, --delta-iris PATH")
    if min(args.threads, args.iters, args.rounds, *args.batch) < 1 or args.warmup < 0:
        p.error("--threads, --batch, --iters and --rounds must be at least 1, --warmup at least 0")
    torch.set_num_threads(args.threads)
    rows = []
    codes = (("iris", args.iris, official_iris), ("rem", args.rem, official_rem),
             ("rssm", args.dreamerv3, official_dreamerv3), ("delta-iris", args.delta_iris, official_delta_iris))
    for backbone, root, build in codes:
        if root is None:
            continue
        for batch in args.batch:
            torch.manual_seed(0)
            theirs = build(root.expanduser(), batch)
            rows += compare(backbone, theirs, batch, args.iters, args.warmup, args.units, args.rounds)
    if args.json:
        meta = {"threads": args.threads, "iters": args.iters, "rounds": args.rounds, "warmup": args.warmup,
                "burn_in": BURN_IN}
        write_text_atomic(args.json, json.dumps({**meta, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
