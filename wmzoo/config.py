"""The one resolver from names to a :class:`~wmzoo.specs.RunSpec`.

Every way a run is described goes through here and is validated once:

- :func:`run_spec` — names (``--backbone``, ``--env``, ``--preset``, ``--policy``), a config file
  and ``--set`` overrides, for a new run;
- :func:`load_run` — a saved run (``run.yaml``, a checkpoint's ``run``), for ``eval``,
  ``imagine`` and ``evaluate``;
- :func:`resume_spec` — a saved run plus the ``--set`` overrides that may change on resume.

Precedence of a new run, lowest first: the run preset → the config file → ``--set``. A run preset
is declared, never inferred from its spelling: the standard names (``tiny``, ``small``, ``paper``,
``paper-atari100k``, :data:`~wmzoo.specs.STANDARD_RUN_PRESETS`) select a preset of the world
model, the policy and the trainer; a backbone declares any other combination, and its own
changes to the trainer's preset, as :class:`~wmzoo.hookspecs.RunPreset`\\ s.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wmzoo.errors import UnknownNameError, WmzooError
from wmzoo.hookspecs import BackboneEntry, RunPreset
from wmzoo.interfaces import EnvInfo
from wmzoo.registry import default_registry
from wmzoo.specs import (
    RESUMABLE_TRAIN_FIELDS,
    STANDARD_RUN_PRESETS,
    TRAIN_PRESETS,
    RunSpec,
    TrainSpec,
    from_preset,
    load_config,
    merge,
    parse_override,
    set_path,
    validate,
)

if TYPE_CHECKING:
    from wmzoo.interfaces import Policy, WorldModel

SECTIONS = ("model", "policy", "train")
DEFAULTS = {"backbone": "rssm", "env": "minigrid-empty-5x5", "preset": "tiny"}


def run_presets(entry: BackboneEntry) -> dict[str, RunPreset]:
    """Every ``--preset`` name of a backbone: the standard ones its world model has a preset for,
    then the ones it declares (which add names or replace standard ones)."""
    table = {
        name: RunPreset(model=model, policy=model, train=name)
        for name, model in STANDARD_RUN_PRESETS.items()
        if model in entry.presets
    }
    table.update(entry.run_presets)
    return table


def run_spec(
    backbone: str | None = None,
    env: str | None = None,
    preset_name: str | None = None,
    policy: str | None = None,
    seed: int | None = None,
    config: str | Path | None = None,
    overrides: Iterable[str] | Mapping[str, Any] = (),
    imitation: bool = False,
) -> RunSpec:
    """Build and validate a new run. ``overrides`` are ``"train.steps=500"`` strings or a mapping
    of dotted keys; a name not given comes from the config file, else :data:`DEFAULTS`. The
    default policy is the backbone's own, or with ``imitation`` its imitation policy."""
    file = load_config(config) if config else {}
    unknown = set(file) - set(RunSpec.model_fields)
    if unknown:
        raise WmzooError(f"--config {config}: unknown top-level field(s) {sorted(unknown)}; "
                         f"allowed: {', '.join(RunSpec.model_fields)}")
    for section in SECTIONS:
        if not isinstance(file.get(section) or {}, Mapping):
            raise WmzooError(f"--config {config}: {section} must be a mapping of fields, "
                             f"got {type(file[section]).__name__} {file[section]!r}")
    for name in ("backbone", "env", "preset", "policy_name"):
        if not isinstance(file.get(name, ""), str):
            raise WmzooError(f"--config {config}: {name} must be a name (a string), "
                             f"got {type(file[name]).__name__} {file[name]!r}")
    backbone = backbone or file.get("backbone") or DEFAULTS["backbone"]
    env = env or file.get("env") or DEFAULTS["env"]
    preset_name = preset_name or file.get("preset") or DEFAULTS["preset"]
    registry = default_registry()
    entry = registry.backbone(backbone)
    policy = policy or file.get("policy_name") or (entry.imitation_policy if imitation else entry.default_policy)
    registry.env(env)  # unknown names fail here, before anything is built
    registry.policy(policy)

    tree: dict[str, Any] = {section: dict(file.get(section) or {}) for section in SECTIONS}
    for key, value, text in _items(overrides):
        if key == "seed":
            seed = value
        elif key.split(".", 1)[0] in SECTIONS:
            set_path(tree, key, value)
        else:
            raise WmzooError(_unrooted(text, entry.spec.model_fields, registry.policy(policy).spec.model_fields))

    combo = _run_preset(entry, preset_name)
    model = from_preset(entry.spec, entry.presets, combo.model, tree["model"], f"backbone '{backbone}'", "model")
    pol_entry = registry.policy(policy)
    # the registry checks a run preset's model preset; its policy's (another entry) shows here,
    # named as the run preset's, since the user typed only --preset
    named = f" (named by run preset '{preset_name}' of backbone '{backbone}')" if combo.policy != preset_name else ""
    pol = from_preset(pol_entry.spec, pol_entry.presets, combo.policy, tree["policy"], f"policy '{policy}'{named}",
                      "policy")
    train_base = merge(TRAIN_PRESETS[combo.train].model_dump(), dict(combo.schedule))
    train = validate(TrainSpec, merge(train_base, tree["train"]), prefix="train")
    return _run(backbone=backbone, env=env, preset=preset_name, policy_name=policy,
                seed=seed if seed is not None else file.get("seed", 0), model=model, policy=pol, train=train)


def load_run(saved: Mapping[str, Any], source: str = "the saved run") -> RunSpec:
    """A :class:`RunSpec` from its dumped form (``run.yaml``, a checkpoint's ``run``), each
    section validated against its plugin's spec class. Runs saved before the policy name was
    always recorded (an empty ``policy_name``) get the backbone's default policy."""
    missing = [k for k in ("backbone", "env", "model", "policy", "train") if k not in saved]
    if missing:
        raise WmzooError(f"{source}: not a wmzoo run (missing {', '.join(missing)})")
    registry = default_registry()
    entry = registry.backbone(str(saved["backbone"]))
    policy = str(saved.get("policy_name") or entry.default_policy)
    pol_entry = registry.policy(policy)
    try:
        return _run(**{
            **saved, "policy_name": policy, "preset": str(saved.get("preset", "")),
            "model": validate(entry.spec, saved["model"], "model"),
            "policy": validate(pol_entry.spec, saved["policy"], "policy"),
            "train": validate(TrainSpec, saved["train"], "train"),
        })
    except WmzooError as exc:
        raise WmzooError(f"{source}: {exc}") from None


def resume_spec(
    saved: Mapping[str, Any], overrides: Iterable[str] | Mapping[str, Any] = (), source: str = "run.yaml",
) -> RunSpec:
    """The saved run with the ``--set`` overrides that may change on resume applied
    (``train.`` + :data:`~wmzoo.specs.RESUMABLE_TRAIN_FIELDS`); any other key is refused with one
    line naming it, before anything is read or written."""
    run = load_run(saved, source)
    train = run.train.model_dump()
    for key, value, text in _items(overrides):
        section, _, field = key.partition(".")
        if section != "train" or field not in RESUMABLE_TRAIN_FIELDS:
            what = "cannot change on --resume (the checkpoint fixes it)" if _known(run, key) else "unknown field"
            raise WmzooError(
                f"--set {text}: {what}; on resume only "
                f"{', '.join('train.' + f for f in RESUMABLE_TRAIN_FIELDS)} may change"
            )
        train[field] = value
    return run.model_copy(update={"train": validate(TrainSpec, train, prefix="train")})


# --------------------------------------------------------------------------- helpers


def _run(**fields: Any) -> RunSpec:
    """Assemble a RunSpec from already validated sections (pydantic keeps the subclass instances)."""
    return validate(RunSpec, fields)  # type: ignore[return-value]


def _run_preset(entry: BackboneEntry, name: str) -> RunPreset:
    table = run_presets(entry)
    if name not in table:
        raise UnknownNameError(f"unknown preset '{name}' of backbone '{entry.name}'; known: {', '.join(sorted(table))}")
    return table[name]


def _items(overrides: Iterable[str] | Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    """``(dotted key, value, text as given)`` for override strings or a mapping."""
    if isinstance(overrides, Mapping):
        return [(key, value, f"{key}={value}") for key, value in overrides.items()]
    return [(*parse_override(text), text) for text in overrides]


def _known(run: RunSpec, key: str) -> bool:
    """Whether a dotted key names a field of the run (``train.steps``, ``model.optim.lr``)."""
    node: Any = run
    for part in key.split("."):
        fields = type(node).model_fields if hasattr(type(node), "model_fields") else {}
        if part not in fields:
            return False
        node = getattr(node, part)
    return True


def _unrooted(text: str, model_fields: Mapping[str, Any], policy_fields: Mapping[str, Any]) -> str:
    """Suggest the section a bare ``--set deter=512`` probably meant."""
    leaf = text.split(".", 1)[0].split("=", 1)[0]
    fields = {"model": model_fields, "policy": policy_fields, "train": TrainSpec.model_fields}
    for section, names in fields.items():
        if leaf in names:
            return f"--set {text}: did you mean --set {section}.{text}? (keys start with model., policy. or train.)"
    candidates = {name: f"{section}.{name}" for section, names in fields.items() for name in names}
    close = difflib.get_close_matches(leaf, list(candidates), n=1)
    hint = f"; did you mean {candidates[close[0]]}?" if close else ""
    return f"--set {text}: unknown field (keys start with model., policy., train. or seed){hint}"


def check_fits_in_memory(run: RunSpec, info: EnvInfo | None = None, rows: int | None = None) -> None:
    """Refuse, before anything is written or allocated, a run whose world model, policy and one
    batch cannot be trained in this machine's memory: both are built on the meta device (no
    memory) for ``info``'s frames and actions (default: ``train.image_size`` RGB frames and 18
    actions, Atari's full set); their float32 weights, gradients and two Adam moments, and a batch
    of ``rows`` frames (default ``model.batch_size x model.seq_len``) as uint8 and float32, are
    compared with the memory of ``train.device``. Only sizes that cannot work at all are refused
    (activations are not counted); a build that fails on the meta device is left to the real one."""
    import os
    from math import prod

    import torch

    from wmzoo.device import device_name
    size = run.train.image_size
    info = info or EnvInfo(run.env, (3, size, size), 18)
    rows = run.model.batch_size * run.model.seq_len if rows is None else rows
    try:
        world_model, policy = build_on_meta(run, info)
    except Exception:  # noqa: BLE001 - the real build reports its own error, with the real env
        return
    params = sum(p.numel() for module in (world_model, policy) for p in module.parameters())
    # every observation entry as stored (uint8 images, float32 vectors) and as float32 in the model
    frames = rows * sum(prod(e.shape) * (1 + 4 if e.kind == "image" else 4 + 4) for e in info.obs_spec.values())
    need = params * 4 * 4 + frames
    try:
        device = torch.device(device_name(run.train.device))
    except (RuntimeError, ValueError):  # the agent names a bad device in its own line
        return
    if device.type == "cuda" and torch.cuda.is_available():
        have, where = torch.cuda.get_device_properties(device.index or 0).total_memory, f"{device} has"
    else:
        have, where = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine has"
    if need > have:
        raise WmzooError(
            f"{run.backbone} at these sizes has {params / 1e9:.2f} B parameters and {rows:,} frames a batch: "
            f"training needs at least {need / 2**30:.1f} GiB (float32 weights, gradients, two Adam moments, "
            f"the batch's frames), {where} {have / 2**30:.1f} GiB; choose a smaller preset or smaller sizes"
        )


def build_on_meta(run: RunSpec, info: EnvInfo) -> tuple[WorldModel, Policy]:
    """The run's world model and policy as ``wmzoo run`` builds them, on the meta device (no
    memory, no time): a backbone or policy that cannot take ``info``'s observations or actions
    raises its one line here."""
    import torch

    from wmzoo.registry import build_policy, build_world_model

    with torch.device("meta"):
        world_model = build_world_model(run.backbone, run.model, info)
        return world_model, build_policy(run.policy_name, run.policy, world_model.feature_shape, info)


_ENV_INFOS: dict[tuple[str, int], EnvInfo] = {}


def made_env_info(env: str, size: int) -> EnvInfo:
    """The shapes of ``env`` made at ``size`` pixels, as ``wmzoo run`` makes it (cached: made once
    per process); an env name only its maker knows to be wrong, or a missing package, raises here."""
    from wmzoo.registry import env_info, make_env

    if (env, size) not in _ENV_INFOS:
        made = make_env(env, size=size)
        try:
            _ENV_INFOS[env, size] = env_info(made, env)
        finally:
            made.close()
    return _ENV_INFOS[env, size]
