"""The study spec: which backbones, on which environments, with which seeds, for what budget.

A study is a YAML file (``wmzoo study init`` writes a commented example, :data:`EXAMPLE`)::

    name: memory-and-gridworld
    backbones: [rssm:tiny, s4wm:tiny, {name: rem:tiny, set: {train.prefill: 500}}]
    envs: [minigrid-empty-6x6, distracting-memory-100]
    seeds: 3                      # 0, 1, 2 (or a list)
    budget: {steps: 20000}        # online env steps per cell, or {updates: N, episodes: E}
    eval: {episodes: 20}          # greedy; temperature: T samples at T
    params: null                  # or 2_000_000: every world model scaled to ~2M parameters
    set: {train.image_size: 32}   # --set fields of every cell
    expect:                       # optional: directions a paper reports, checked by the report
      - {metric: inference_accuracy, order: [s4wm:tiny, rssm:tiny], source: "s4wm paper, Table 2"}

Every field is validated once, here; names are checked against the registry before anything is
written (an unknown backbone or env is one line naming the field).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from wmzoo.errors import WmzooError
from wmzoo.limits import IMAGINE_FRAMES, TEMPERATURES
from wmzoo.specs import Spec, describe_error, load_config


class BackboneChoice(Spec):
    """One backbone of the study: ``name[:preset]`` and ``--set`` fields of its cells only."""

    name: str = Field(description="backbone name, optionally with :PRESET (default: the study's preset)")
    set: dict[str, Any] = Field(default_factory=dict, description="--set KEY=VALUE fields for this backbone")
    row: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.:+-]+$",
        description="its name in the report (default: backbone:preset); name a backbone listed twice with "
        "other --set fields, e.g. an ablation (letters, digits and _ . : + -)",
    )

    @property
    def backbone(self) -> str:
        return self.name.split(":", 1)[0]

    def preset(self, default: str) -> str:
        return self.name.split(":", 1)[1] if ":" in self.name else default

    def label(self, default: str) -> str:
        """``row``, else ``backbone:preset``: the name of its cells and of its row in the report."""
        return self.row or f"{self.backbone}:{self.preset(default)}"


class Budget(Spec):
    """Online: ``steps`` env steps per cell (``wmzoo run --steps``). Offline: ``updates``
    world-model updates per cell on one dataset per env, shared by every backbone and seed
    (``wmzoo data generate`` with ``episodes`` episodes at ``size`` pixels, then
    ``wmzoo run --offline``)."""

    steps: int | None = Field(None, ge=1, description="online: env steps per cell")
    updates: int | None = Field(None, ge=1, description="offline: world-model updates per cell")
    episodes: int = Field(200, ge=5, description="offline: episodes of each env's dataset (80/10/10 split; 5 gives one test episode)")
    size: int = Field(64, ge=8, le=256, description="offline: image size of the datasets")
    data_seed: int = Field(0, ge=0, description="offline: episode i of a dataset is reset with data_seed + i")
    imitation: bool = Field(
        False, description="offline: train each backbone's imitation policy with its world model on the "
        "datasets' demonstrations (wmzoo run --imitation) and score cells by eval episodes in the env "
        "(success rate where the env reports one)",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> Budget:
        if (self.steps is None) == (self.updates is None):
            raise ValueError("give exactly one of steps (online env steps) or updates (offline updates)")
        if self.imitation and self.updates is None:
            raise ValueError("imitation trains on recorded demonstrations: give updates, not steps")
        return self

    @property
    def offline(self) -> bool:
        return self.updates is not None

    @property
    def mode(self) -> str:
        """``online``, ``offline`` (a world model alone) or ``imitation``."""
        return "imitation" if self.imitation else "offline" if self.offline else "online"

    @property
    def in_env(self) -> bool:
        """Cells are scored by episodes in the env (``wmzoo eval``), not on the dataset."""
        return not self.offline or self.imitation


class EvalSpec(Spec):
    """How each finished cell is scored. Online and imitation cells: mean return (success rate
    where the env reports one) over ``episodes`` evaluation episodes (greedy, or sampled at
    ``temperature``). Offline cells: the s4wm paper's memory
    protocols on the dataset's test split (Gen. MSE of ``imagination``; where the dataset has one,
    the reward protocol's accuracy and AUC: ``reward`` on Distracting Memory, ``reasoning`` on Multi
    Doors Keys), ``context`` observed frames where the env has no context phase."""

    episodes: int = Field(10, ge=1, le=100_000, description="online, imitation: evaluation episodes per cell")
    temperature: float | None = Field(
        None, ge=TEMPERATURES[0], le=TEMPERATURES[1], description="online: sample at T (null: greedy)"
    )
    max_steps: int = Field(1000, ge=1, le=1_000_000, description="online: cap on steps per evaluation episode")
    seed: int = Field(10_000, ge=0, description="online: evaluation episode i is reset with seed + i")
    context: int = Field(8, ge=1, le=IMAGINE_FRAMES, description="offline: observed frames before imagining, where the env has no phases")
    test_episodes: int | None = Field(None, ge=1, description="offline: test episodes scored (null: all)")


REWARD_METRICS = tuple(f"{form}{name}_{kind}" for kind in ("accuracy", "auc") for form in ("", "step_")
                       for name in ("inference", "imagination"))
"""The reward-based protocols' readouts (:func:`wmzoo.eval.memory.reward_accuracy`): accuracy and
AUC of inference and imagination, in the backbone's training form and, ``step_``, one row at a time."""
METRICS = {**dict.fromkeys(REWARD_METRICS, True), "gen_mse": False, "mean_return": True, "success_rate": True,
           "human_normalized_score": True}
"""What an expectation can order -> whether higher is better: a reward readout, or a cell score."""


class Expectation(Spec):
    """A direction reported elsewhere (a paper's table), checked by the report against the study's
    own seeds: ``order`` lists rows best first, an entry may be a list of rows it does not order
    among themselves (tied); each row is expected better than every row of a later entry, and the
    report says of each such pair whether the study supports it, contradicts it or does not
    separate the two (:func:`~wmzoo.eval.verdicts.separated`, paired by seed offline)."""

    metric: str = Field(description=f"what is ordered: {', '.join(METRICS)}")
    order: list[str | list[str]] = Field(
        min_length=2, description="row names (backbones[].row, else backbone:preset), best first; "
        "[A, B] in it: A and B not ordered")
    envs: list[str] | None = Field(None, min_length=1, description="where it is expected (default: every env)")
    source: str | None = Field(None, description="where the direction comes from, e.g. 's4wm paper, Table 2'")

    @field_validator("metric")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in METRICS:
            raise ValueError(f"unknown metric '{value}'; expected one of {', '.join(METRICS)}")
        return value

    def tiers(self) -> list[list[str]]:
        return [[entry] if isinstance(entry, str) else list(entry) for entry in self.order]

    def pairs(self) -> list[tuple[str, str]]:
        """``(expected better, expected worse)`` for every two rows of different entries."""
        tiers = self.tiers()
        return [(a, b) for i, tier in enumerate(tiers) for later in tiers[i + 1:] for a in tier for b in later]


class StudySpec(Spec):
    """A comparison study: every backbone × env × seed is one ordinary wmzoo run directory."""

    name: str = Field(min_length=1, description="the study's name (its report's title)")
    backbones: list[BackboneChoice] = Field(min_length=1, description="name[:preset] entries")
    envs: list[str] = Field(min_length=1, description="environment names")
    seeds: list[int] = Field(min_length=1, description="training seeds (an integer N: 0..N-1)")
    preset: str = Field("tiny", description="preset of backbones named without :PRESET")
    budget: Budget
    eval: EvalSpec = Field(default_factory=EvalSpec)
    params: int | None = Field(
        None, ge=1_000, description="match every world model to this many parameters through its width knob"
    )
    set: dict[str, Any] = Field(default_factory=dict, description="--set KEY=VALUE fields of every cell")
    expect: list[Expectation] = Field(
        default_factory=list, description="directions reported elsewhere, each checked by the report")

    @field_validator("backbones", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"name": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("seeds", mode="before")
    @classmethod
    def _count(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 1:
                raise ValueError(f"seeds {value}: give a count >= 1 or a list of seeds")
            return list(range(value))
        return value

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value) or min(value) < 0:
            raise ValueError(f"seeds {value}: must be distinct and >= 0")
        return value

    @model_validator(mode="after")
    def _distinct(self) -> StudySpec:
        labels = [b.label(self.preset) for b in self.backbones]
        for what, names in (("backbones", labels), ("envs", self.envs)):
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise ValueError(f"{what}: {', '.join(twice)} listed twice")
        return self

    @model_validator(mode="after")
    def _expected_rows(self) -> StudySpec:
        """Every row and env an expectation names is the study's, each row once."""
        labels = self.labels()
        for i, expectation in enumerate(self.expect):
            rows = [row for tier in expectation.tiers() for row in tier]
            unknown = [row for row in rows if row not in labels]
            if unknown:
                raise ValueError(f"expect[{i}].order: {unknown[0]!r} is not a row of the study "
                                 f"(rows: {', '.join(labels)})")
            twice = sorted({row for row in rows if rows.count(row) > 1})
            if twice:
                raise ValueError(f"expect[{i}].order: {', '.join(twice)} listed twice")
            if not expectation.pairs():
                raise ValueError(f"expect[{i}].order: give at least two entries (one row better than another)")
            other = [env for env in expectation.envs or [] if env not in self.envs]
            if other:
                raise ValueError(f"expect[{i}].envs: {other[0]!r} is not an env of the study "
                                 f"(envs: {', '.join(self.envs)})")
        return self

    @model_validator(mode="after")
    def _fields_the_study_sets(self) -> StudySpec:
        """A ``set`` field that every cell gets from the study itself is refused, naming it."""
        decided = {"train.steps": "the budget sets it (budget.steps or budget.updates)",
                   "seed": "the study's seeds set it", "train.threads": "`wmzoo study run --threads N` sets it"}
        where = [("set", self.set)] + [(f"backbones[{i}].set", b.set) for i, b in enumerate(self.backbones)]
        for name, fields in where:
            for key, why in decided.items():
                if key in fields:
                    raise ValueError(f"{name}: {key}: {why}; remove it")
            size = fields.get("train.image_size")
            if self.budget.offline and size is not None and size != self.budget.size:
                raise ValueError(f"{name}: train.image_size {size}: an offline study trains at its datasets' "
                                 f"size (budget.size {self.budget.size}); remove it, or change budget.size")
        return self

    def labels(self) -> list[str]:
        return [b.label(self.preset) for b in self.backbones]


def load_study(path: str | Path) -> StudySpec:
    """Read and validate a study YAML; every problem is one line naming the field."""
    data = load_config(path, what="study ")
    return study_from_dict(data, f"study {path}: ")


def study_from_dict(data: Mapping[str, Any], prefix: str = "study: ") -> StudySpec:
    try:
        study = StudySpec.model_validate(dict(data))
    except ValidationError as exc:
        raise WmzooError(prefix + describe_error(exc, cls=StudySpec)) from None
    check_names(study, prefix)
    return study


def check_names(study: StudySpec, prefix: str = "study: ") -> None:
    """Every cell as ``wmzoo run`` would check it, before anything is written: an unknown
    backbone, preset, env or ``set`` field, an env that cannot be made (a name only its maker
    knows, a missing package) or an action space the backbone or its policy cannot take is one
    line naming the study field."""
    from wmzoo.config import build_on_meta, made_env_info, run_spec
    from wmzoo.registry import default_registry

    registry = default_registry()
    for i, choice in enumerate(study.backbones):
        try:
            registry.backbone(choice.backbone)
        except WmzooError as exc:
            raise WmzooError(f"{prefix}backbones[{i}]: {exc}") from None
    for j, env in enumerate(study.envs):
        try:
            registry.env(env)
        except WmzooError as exc:
            raise WmzooError(f"{prefix}envs[{j}]: {exc}") from None
    for j, env in enumerate(study.envs):
        for i, choice in enumerate(study.backbones):
            cell = f"{prefix}backbones[{i}] ({choice.name}) on {env}"
            try:
                run = run_spec(choice.backbone, env, choice.preset(study.preset), None, 0, None,
                               {**study.set, **choice.set}, imitation=study.budget.imitation)
            except WmzooError as exc:
                raise WmzooError(f"{cell}: {exc}") from None
            try:  # offline cells train at the datasets' size
                info = made_env_info(env, study.budget.size if study.budget.offline else run.train.image_size)
            except WmzooError as exc:
                raise WmzooError(f"{prefix}envs[{j}]: {exc}") from None
            try:
                build_on_meta(run, info)
            except WmzooError as exc:
                raise WmzooError(f"{cell}: {exc}") from None


EXAMPLE = """\
# A wmzoo comparison study: `wmzoo study run THIS.yaml --out DIR`, then `wmzoo study report DIR`.
# Every backbone x env x seed is one ordinary run directory under DIR/cells (eval, imagine and
# --resume work on it); re-running `study run` skips finished cells and resumes interrupted ones.
name: my-study

# name[:preset] (default preset below); `set` holds --set fields of that backbone's cells only
backbones:
  - rssm
  - s4wm
  - name: rem
    set: {train.prefill: 500}

# environment names (`wmzoo list`)
envs: [minigrid-empty-6x6, minigrid-memory-s7]

# training seeds: a count (0..N-1) or a list
seeds: 3

# preset of backbones named without :PRESET (tiny: CPU minutes, small: a CPU hour, paper)
preset: tiny

# online: env steps per cell; or offline: world-model updates per cell on one generated dataset
# per env shared by all backbones: {updates: 2000, episodes: 200, size: 64}
budget:
  steps: 20000

# online cells: mean return over `episodes` (greedy, or sampled at `temperature`);
# offline cells: the memory protocols on the dataset's test split
eval:
  episodes: 10
  temperature: null

# optional: scale every world model to about this many parameters through the width knob its
# plugin declares (backbones without one run at their preset's size; the report says so)
params: null

# --set fields of every cell
set:
  train.image_size: 64

# optional: directions reported elsewhere (a paper's table), checked against this study's seeds;
# `order` lists rows best first ([a, b]: not ordered among themselves); the report says of each
# expected pair: supported, contradicted or not separated. Metrics: the score (gen_mse,
# mean_return, success_rate, human_normalized_score) or, offline on a memory task with a reward
# protocol, inference_accuracy, imagination_accuracy, inference_auc, imagination_auc (step_*: one
# row at a time)
expect: []
#  - {metric: mean_return, order: [s4wm:tiny, rssm:tiny], envs: [minigrid-memory-s7], source: "..."}
"""
