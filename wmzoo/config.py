"""Resolve a :class:`~wmzoo.specs.RunSpec` from names, a preset, a config file and overrides.

Precedence, lowest first: the preset (``tiny``/``small``/``paper``) of the backbone, the policy
and the trainer (a variant ``family-variant`` that only the backbone or only the trainer defines,
such as ``paper-2d`` or ``paper-atari100k``, means ``family`` for the others) → the config file → ``--set`` overrides. Everything is validated by pydantic in
one place, so a bad value gives the same one-line error wherever it came from.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from wmzoo.errors import WmzooError
from wmzoo.registry import default_registry, policy_spec, preset, world_model_spec
from wmzoo.specs import TRAIN_PRESETS, RunSpec, TrainSpec, load_config, merge, parse_override, set_path, validate

SECTIONS = ("model", "policy", "train")


def run_spec(
    backbone: str | None = None,
    env: str | None = None,
    preset_name: str | None = None,
    policy: str | None = None,
    seed: int | None = None,
    config: str | Path | None = None,
    overrides: Iterable[str] | Mapping[str, Any] = (),
) -> RunSpec:
    """Build and validate a run. ``overrides`` are ``"train.steps=500"`` strings or a mapping."""
    file = load_config(config) if config else {}
    unknown = set(file) - set(RunSpec.model_fields)
    if unknown:
        raise WmzooError(f"--config {config}: unknown top-level field(s) {sorted(unknown)}; "
                         f"allowed: {', '.join(RunSpec.model_fields)}")
    backbone = backbone or file.get("backbone") or "rssm"
    env = env or file.get("env") or "minigrid-empty-5x5"
    preset_name = preset_name or file.get("preset") or "tiny"
    registry = default_registry()
    entry = registry.backbone(backbone)
    policy = policy or file.get("policy_name") or entry.default_policy
    registry.env(env)  # unknown names fail here, before anything is built

    tree: dict[str, Any] = {
        "model": {}, "policy": {}, "train": {},
        **{k: v for k, v in file.items() if k in SECTIONS},
    }
    if isinstance(overrides, Mapping):
        items = [(key, value, f"{key}={value}") for key, value in overrides.items()]
    else:
        items = [(*parse_override(text), text) for text in overrides]
    for key, value, text in items:
        section = key.split(".", 1)[0]
        if section == "seed":
            seed = value
            continue
        if section not in SECTIONS:
            raise WmzooError(_unrooted(text, backbone, policy))
        set_path(tree, key, value)

    # a trainer variant (paper-atari100k) uses the backbone's family preset (paper)
    model_preset = _family(preset_name, entry.presets) if preset_name in TRAIN_PRESETS else preset_name
    model = world_model_spec(backbone, model_preset, tree["model"])
    pol = policy_spec(policy, _family(preset_name, registry.policy(policy).presets), tree["policy"])
    # the trainer's preset of that name, else of its family; a backbone's own variant (iris's
    # rem-config, a paper-scale configuration) trains with the trainer's paper preset
    train_family = _family(preset_name, TRAIN_PRESETS)
    if train_family not in TRAIN_PRESETS and preset_name in entry.presets:
        train_family = "paper"
    train_base = preset(TRAIN_PRESETS, train_family, "the trainer").model_dump()
    # the backbone's own schedule for this preset (its exact name first, else its family's)
    schedule = entry.train_presets.get(_family(preset_name, entry.train_presets), {})
    train_base = merge(train_base, dict(schedule))
    train = validate(TrainSpec, merge(train_base, tree["train"]), prefix="train")
    data = {
        "backbone": backbone, "env": env, "preset": preset_name, "policy_name": policy,
        "seed": seed if seed is not None else file.get("seed", 0),
        "model": model.model_dump(), "policy": pol.model_dump(), "train": train,
    }
    return validate(RunSpec, data)  # type: ignore[return-value]


def _family(name: str, presets: Mapping[str, Any]) -> str:
    """A backbone's variant preset (``paper-2d``) uses its family's (``paper``) elsewhere."""
    if name not in presets and name.split("-", 1)[0] in presets:
        return name.split("-", 1)[0]
    return name


def _unrooted(text: str, backbone: str, policy: str) -> str:
    """Suggest the section a bare ``--set deter=512`` probably meant."""
    leaf = text.split(".", 1)[0].split("=", 1)[0]
    registry = default_registry()
    fields = {
        "model": registry.backbone(backbone).spec.model_fields,
        "policy": registry.policy(policy).spec.model_fields,
        "train": TrainSpec.model_fields,
    }
    for section, names in fields.items():
        if leaf in names:
            return f"--set {text}: did you mean --set {section}.{text}? (keys start with model., policy. or train.)"
    candidates = [f"{s}.{n}" for s, names in fields.items() for n in names]
    close = difflib.get_close_matches(leaf, [c.split(".", 1)[1] for c in candidates], n=1)
    hint = f"; did you mean {next(c for c in candidates if c.endswith('.' + close[0]))}?" if close else ""
    return f"--set {text}: unknown field (keys start with model., policy., train. or seed){hint}"
