"""Specs: the only configuration. Pydantic v2 models, frozen, ``extra="forbid"``, bounded.

Every component's hyperparameters are a :class:`Spec`. Presets are named spec instances; CLI
overrides (``--set model.deter=512``) and config files (``--config run.yaml``) are applied to the
same plain dict and validated once, so a bad value fails the same way wherever it came from::

    --set model.deter=abc: model.deter: Input should be a valid integer (got 'abc')
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import annotated_types
import yaml
from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo

from wmzoo.errors import UnknownNameError, WmzooError
from wmzoo.limits import IMAGINE_FRAMES

class Spec(BaseModel):
    """Base of every spec: immutable, no unknown fields, described fields."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


class OptimSpec(Spec):
    """AdamW with global-norm gradient clipping, optional linear warm-up, then a constant or a
    cosine-annealed learning rate (see :func:`wmzoo.optim.learning_rate`)."""

    lr: float = Field(1e-4, gt=0, le=1, description="learning rate")
    eps: float = Field(1e-8, gt=0, le=1, description="Adam epsilon")
    weight_decay: float = Field(0.0, ge=0, le=1, description="decoupled weight decay")
    clip: float = Field(1000.0, gt=0, description="global gradient-norm clip")
    warmup: int = Field(0, ge=0, description="linear learning-rate warm-up, in updates")
    schedule: Literal["constant", "cosine"] = Field(
        "constant", description="after warm-up: constant, or cosine annealing over decay_steps"
    )
    decay_steps: int = Field(
        0, ge=0, description="cosine: updates after warm-up until the rate reaches min_lr_ratio·lr"
    )
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="cosine: final rate as a fraction of lr")
    start: int = Field(
        0, ge=0, le=10**9,
        description="trainer updates before this component's first step (a table's 'start after "
        "epochs' x updates per epoch): before it, its loss is computed and logged but not trained",
    )

    @model_validator(mode="after")
    def _cosine_needs_a_length(self) -> OptimSpec:
        if self.schedule == "cosine" and self.decay_steps < 1:
            raise ValueError("schedule 'cosine' needs decay_steps >= 1 (updates to anneal over)")
        return self

    def started(self, update: int) -> bool:
        """Whether the component steps at the trainer's 0-based ``update``."""
        return update >= self.start


class WorldModelSpec(Spec):
    """Fields every backbone spec has: how the trainer samples world-model batches."""

    batch_size: int = Field(16, ge=1, le=4096, description="sequences per world-model batch")
    seq_len: int = Field(64, ge=2, le=100_000, description="steps per training sequence")


class PolicySpec(Spec):
    """Fields every policy spec has."""

    horizon: int = Field(15, ge=1, le=10_000, description="imagination horizon H")
    max_starts: int = Field(
        0, ge=0, description="imagine from at most this many start states per update (0: all)"
    )
    start: int = Field(
        0, ge=0, description="world-model updates before the policy starts learning (IRIS/REM "
        "table 3: the actor-critic starts 25 epochs of 200 updates after the world model)",
    )
    epsilon: float = Field(
        0.0, ge=0, le=1, description="ε-greedy collection: the chance of a uniformly random "
        "action at each env step of training (REM table 2: 0.01)",
    )
    segment: int = Field(
        0, ge=0, le=10_000,
        description="0: imagine from the world-model batch's start states; n >= 2: sample max_starts "
        "segments of n steps of the policy's own and imagine from each one's last step, the n - 1 "
        "before it burning the policy in (IRIS/REM table 3: 128 x 21; Δ-IRIS: 86 x 6)",
    )

    @model_validator(mode="after")
    def _segments_need_a_batch(self) -> PolicySpec:
        if self.segment == 1:
            raise ValueError("segment 1 leaves no step to burn in: use 0 (the world model's starts) or >= 2")
        if self.segment and not self.max_starts:
            raise ValueError(f"segment {self.segment} samples max_starts segments: set max_starts >= 1")
        return self


class TrainSpec(Spec):
    """The online loop: collect experience, train the world model, train the policy in imagination."""

    steps: int = Field(100_000, ge=1, description="the run's length: env steps online; updates offline "
                       "and with --imitation, which take no env steps (`wmzoo run --steps`)")
    envs: int = Field(1, ge=1, le=256, description="environments stepped side by side")
    vector: Literal["async", "sync"] = Field(
        "async", description="with envs > 1: async = one process per env (uses every core), "
        "sync = one after another in the trainer's process",
    )
    image_size: int = Field(64, ge=8, le=512, description="observation height and width in pixels")
    prefill: int = Field(1000, ge=0, description="random-policy env steps before training")
    train_ratio: float = Field(
        512.0, gt=0, description="replayed steps trained on per env step (DreamerV3 definition)"
    )
    policy_every: int = Field(1, ge=1, description="train the policy every n world-model updates")
    policy_updates: int = Field(
        1, ge=1, le=1000, description="policy updates each time it trains, each on its own batch "
        "(policy.segment) or imagination from the same starts (Δ-IRIS Atari: 200 actor-critic per 120 "
        "world-model updates an epoch = 5 every 3)",
    )
    final_updates: int = Field(
        0, ge=0, description="updates (world model, then policy as usual) after the last env step "
        "(REM table 2 / IRIS: 600 epochs of which 500 collect, so 100 x 200 = 20,000)",
    )
    replay_capacity: int = Field(1_000_000, ge=1, description="steps kept in replay")
    replay_chunk: int = Field(1024, ge=16, description="steps per replay file on disk")
    sampling: Literal["uniform", "recency"] = Field("uniform", description="replay segment sampling")
    windows: Literal["auto", "stream", "episodes"] = Field(
        "auto", description="training windows: 'stream' = anywhere in a stream (stateful models: "
        "consecutive segments across episodes); 'episodes' = aligned to episodes (--offline data of "
        "one episode length E: each window one whole episode when E <= model.seq_len, else E / seq_len "
        "consecutive segments of one); 'auto' = 'episodes' offline where that applies, else 'stream'",
    )
    log_every: int = Field(1000, ge=1, description="env steps between scalar logs")
    checkpoint_every: int = Field(10_000, ge=1, description="env steps (online) or updates (--offline) between checkpoints")
    gif_horizon: int = Field(32, ge=2, le=IMAGINE_FRAMES, description="imagined frames in the run's GIF")
    loggers: tuple[Literal["tensorboard", "wandb", "mlflow"], ...] = Field(
        ("tensorboard",), description="experiment trackers that receive the scalars, images and GIF: "
        'tensorboard (<logdir>/tb), wandb, mlflow (these two: pip install "wmzoo[trackers]")',
    )

    @field_validator("device")
    @classmethod
    def _a_device_name(cls, device: str) -> str:
        import torch

        if device != "auto":
            try:
                kind = torch.device(device).type
            except (RuntimeError, ValueError):
                raise ValueError(f"{device!r} is not a device: use cpu, cuda, cuda:N, mps or auto") from None
            if kind not in ("cpu", "cuda", "mps"):
                raise ValueError(f"{device!r}: wmzoo runs on cpu, cuda, cuda:N, mps or auto")
        return device

    @field_validator("loggers", mode="before")
    @classmethod
    def _one_logger_by_name(cls, loggers: Any) -> Any:
        return (loggers,) if isinstance(loggers, str) else loggers

    @field_validator("loggers")
    @classmethod
    def _each_logger_once(cls, loggers: tuple[str, ...]) -> tuple[str, ...]:
        twice = sorted({name for name in loggers if loggers.count(name) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} listed more than once")
        return loggers
    max_nonfinite: int = Field(
        10, ge=1, le=10_000, description="stop the run after this many updates in a row with a "
        "non-finite (NaN/inf) loss or gradient; each such step is skipped, and the last checkpoint kept",
    )
    device: str = Field("cpu", description="torch device: cpu, cuda, cuda:N, mps, or auto (cuda where "
                        "this machine has a GPU, else cpu); wmzoo run --device sets it")
    precision: Literal["fp32", "bf16"] = Field(
        "fp32", description="bf16: mixed precision (torch.autocast to bfloat16 on CPU and CUDA) for the "
        "world-model loss, imagination, the policy's losses and acting; weights, gradients and optimizer "
        "states stay float32",
    )
    compile: bool = Field(
        False, description="torch.compile the world model's loss and imagination step; a backbone whose "
        "code does not compile runs eagerly with one warning",
    )
    threads: int = Field(
        1, ge=0, description="torch CPU threads (0: torch's default; 1 leaves a core for the envs)"
    )


TRAIN_PRESETS: dict[str, TrainSpec] = {
    "tiny": TrainSpec(
        steps=600, prefill=200, train_ratio=64, replay_chunk=64, log_every=100,
        checkpoint_every=300, gif_horizon=16,
    ),
    # a CPU hour: 25k env steps, ~2.8k world-model updates of 8 x 32 frames (rssm small)
    "small": TrainSpec(
        steps=25_000, prefill=2500, train_ratio=32, replay_chunk=256, log_every=1000,
        checkpoint_every=5000,
    ),
    "paper": TrainSpec(),
    # The Atari 100k budget (Kaiser et al., 2020; REM appendix A.1, Table 2: 500 collection epochs
    # x 200 env steps, one env): 100k agent steps = 400k frames at frame skip 4; the default
    # prefill of 1000 steps matches their 5 collection epochs before the tokenizer trains. Select
    # it with --preset paper-atari100k (the backbone and policy use their paper presets).
    "paper-atari100k": TrainSpec(steps=100_000, envs=1),
}

# The standard run presets every backbone has: the name of a trainer preset → the preset its world
# model and policy use with it. Backbones declare any other combination (hookspecs.RunPreset).
STANDARD_RUN_PRESETS: dict[str, str] = {
    "tiny": "tiny", "small": "small", "paper": "paper", "paper-atari100k": "paper",
}

# What `wmzoo run --resume --set train.X=...` may change: when and how long to train, log and
# checkpoint, when to give up on non-finite losses, and where. Everything else (the model, the policy, how data is collected and
# sampled) is fixed by the checkpoint and the replay it was trained with.
RESUMABLE_TRAIN_FIELDS: tuple[str, ...] = (
    "steps", "final_updates", "log_every", "checkpoint_every", "gif_horizon", "max_nonfinite", "device",
    "precision", "compile", "threads", "loggers",
)


class RunSpec(Spec):
    """One run: which backbone on which env, and every hyperparameter, validated.

    ``model`` and ``policy`` are the backbone's and the policy's own spec classes (subclasses of
    :class:`WorldModelSpec` and :class:`PolicySpec`), so a RunSpec is built by
    :mod:`wmzoo.config` (``run_spec`` from names, ``load_run`` from a saved ``run.yaml`` or
    checkpoint), which knows those classes through the registry.
    """

    backbone: str
    env: str
    preset: str
    policy_name: str = Field(description="the policy plugin")
    seed: int = Field(0, ge=0, le=2**63 - 1)
    model: SerializeAsAny[WorldModelSpec]
    policy: SerializeAsAny[PolicySpec]
    train: TrainSpec

    @model_validator(mode="after")
    def _replay_holds_a_batch(self) -> RunSpec:
        rows = self.model.batch_size * self.model.seq_len
        if self.train.replay_capacity < rows:  # the trainer waits for one batch's rows in replay
            raise ValueError(
                f"train.replay_capacity {self.train.replay_capacity} holds less than one batch "
                f"(model.batch_size x model.seq_len = {rows}): nothing would ever train; raise it "
                f"to at least {rows}"
            )
        return self


# --------------------------------------------------------------------------- overrides


def parse_override(text: str) -> tuple[str, Any]:
    """``"a.b=value"`` -> ``("a.b", value)`` with ``value`` parsed as YAML (``1e-3``, ``true``)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise WmzooError(f"--set {text!r}: expected KEY=VALUE, e.g. --set model.deter=512")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
        try:
            value = float(value)
        except ValueError:
            pass
    return key, value


def set_path(tree: dict[str, Any], key: str, value: Any) -> None:
    """Set ``tree[a][b] = value`` for ``key = "a.b"``; unknown paths are left to validation."""
    *parents, leaf = key.split(".")
    node = tree
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[leaf] = value


def merge(tree: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge ``update`` into a copy of ``tree``."""
    out = dict(tree)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def load_config(path: str | Path, what: str = "--config ") -> dict[str, Any]:
    """Read a YAML (or JSON) config file of nested overrides (``what`` starts its errors)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise WmzooError(f"{what}{path}: no such file") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise WmzooError(f"{what}{path}: not valid YAML ({first})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise WmzooError(f"{what}{path}: expected a mapping of fields, got {type(data).__name__}")
    return data


def describe_error(exc: ValidationError, prefix: str = "", cls: type[BaseModel] | None = None) -> str:
    """One line for the first error: the field path, what is wrong, and the value given (for an
    unknown field of ``cls``, the closest known one)."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in (prefix, *err["loc"]) if p != "")
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        return f"{loc}: unknown field{_did_you_mean(cls, err['loc'])}"
    if err["type"] == "value_error":  # a validator's own sentence names its fields
        msg = msg.removeprefix("Value error, ")
        return f"{loc}: {msg}" if loc else msg
    given = err.get("input")
    if isinstance(given, (dict, list)):
        return f"{loc}: {msg}"
    return f"{loc}: {msg} (got {given!r})"


def _did_you_mean(cls: type[BaseModel] | None, loc: tuple[Any, ...]) -> str:
    """``"; did you mean deter?"`` for the unknown field at ``loc`` of ``cls``, if one is close."""
    for part in loc[:-1]:  # walk to the spec that holds the unknown field
        info = cls.model_fields.get(str(part)) if cls is not None else None
        ann = info.annotation if info is not None else None
        cls = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
    if cls is None:
        return ""
    close = difflib.get_close_matches(str(loc[-1]), list(cls.model_fields), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def validate(cls: type[Spec], data: Mapping[str, Any], prefix: str = "") -> Spec:
    """Validate ``data`` as ``cls``; a bad value raises :class:`WmzooError` with one line."""
    try:
        return cls.model_validate(dict(data))
    except ValidationError as exc:
        raise WmzooError(describe_error(exc, prefix, cls)) from None


def from_preset(
    cls: type[Spec], presets: Mapping[str, Spec], name: str, overrides: Mapping[str, Any], what: str,
    prefix: str,
) -> Spec:
    """The preset ``name`` of ``presets`` with nested ``overrides`` applied, validated as ``cls``
    (errors name ``prefix.field``; an unknown preset names ``what`` and the known ones)."""
    if name not in presets:
        raise UnknownNameError(f"unknown preset '{name}' of {what}; known: {', '.join(sorted(presets))}")
    return validate(cls, merge(presets[name].model_dump(), overrides), prefix=prefix)


def iter_fields(cls: type[Spec], prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    """``(dotted name, field)`` of every leaf field, recursing into sub-specs in field order."""
    for name, info in cls.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, Spec):
            yield from iter_fields(ann, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", info


def field_help(cls: type[Spec], prefix: str = "", values: Spec | None = None) -> Iterable[str]:
    """``name = value (default D; bounds)  description`` lines for every field, recursing into
    sub-specs: the value ``values`` (the resolved spec, e.g. a preset) holds, and the class default
    beside it where the two differ; bounds as :func:`bounds` writes them (``≥ 1, ≤ 4096``)."""
    try:
        defaults: Spec | None = cls()  # a sub-spec's defaults as the parent spec sets them
    except ValidationError:
        defaults = None
    for path, info in iter_fields(cls, prefix):
        default = info.get_default(call_default_factory=True)  # a list field's [] rather than "undefined"
        if defaults is not None:
            default = _field_value(defaults, path.removeprefix(prefix))
        value = default if values is None else _field_value(values, path.removeprefix(prefix))
        notes = [] if value == default else [f"default {_shown(default)}"]
        notes += [bound] if (bound := bounds(info)) else []
        extra = f" ({'; '.join(notes)})" if notes else ""
        yield f"{path} = {_shown(value)}{extra}  {info.description or ''}".rstrip()


def bounds(info: FieldInfo) -> str:
    """``≥ 1, ≤ 4096``: a field's bounds as a reader writes them."""
    signs = {annotated_types.Ge: ("≥", "ge"), annotated_types.Gt: (">", "gt"),
             annotated_types.Le: ("≤", "le"), annotated_types.Lt: ("<", "lt"),
             annotated_types.MultipleOf: ("multiple of", "multiple_of"),
             annotated_types.MinLen: ("length ≥", "min_length"), annotated_types.MaxLen: ("length ≤", "max_length")}
    parts = []
    for item in info.metadata:
        sign = signs.get(type(item))
        parts.append(f"{sign[0]} {getattr(item, sign[1])}" if sign else str(item))
    return ", ".join(parts)


def _field_value(spec: Spec, dotted: str) -> Any:
    for name in dotted.split("."):
        spec = getattr(spec, name)
    return spec


def _shown(value: Any) -> str:
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return json.dumps(value, default=str)


def check_option(value: int | float, cls: type[Spec], field: str, option: str) -> None:
    """One line when a command-line number lies outside the bounds of the spec field it stands for
    (``--size`` is ``train.image_size``, ``--batch`` ``model.batch_size``): a command refuses the
    sizes a run refuses, with the same range."""
    low = high = None
    for bound in cls.model_fields[field].metadata:
        low = getattr(bound, "ge", low)
        high = getattr(bound, "le", high)
    if (low is not None and value < low) or (high is not None and value > high):
        section = {TrainSpec: "train.", WorldModelSpec: "model.", PolicySpec: "policy."}.get(cls, "")
        raise WmzooError(f"{option} {value}: must be between {low} and {high} (the range of {section}{field})")
