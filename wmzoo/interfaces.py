"""The contract between wmzoo's core and every backbone and policy.

Data conventions (docs/architecture.md, "Alignment"): a batch holds sequences ``obs`` (an
:data:`Obs`: uint8 ``[B, T, C, H, W]`` for a pixel env, else a dict of the env's named entries,
images uint8 ``[B, T, C, H, W]`` and vectors float32 ``[B, T, D]``; see :class:`ObsEntry`),
``action`` ``[B, T]`` int64 (discrete) or ``[B, T, A]`` float32, ``reward`` float32 ``[B, T]``,
``terminal`` bool ``[B, T]`` and ``is_first`` bool ``[B, T]``. ``action[t]`` is taken after
seeing ``obs[t]``; ``reward[t]`` and ``terminal[t]`` result from it. An episode of ``n`` steps is
stored as ``n + 1`` rows: the last row holds the final observation with a zero action, zero reward
and ``terminal = False``; the next episode starts with ``is_first = True``.

A recurrent *state* is a ``dict[str, Tensor]`` whose tensors all have the batch as their leading
dimension, so the core can index, flatten, detach and reset it without knowing what is inside.

The abstract classes below are the parts a backbone is built from (:class:`Encoder`,
:class:`Dynamics`, :class:`Decoder`) and the two objects the core drives (:class:`WorldModel`,
:class:`Policy`). The core only ever calls :class:`WorldModel` and :class:`Policy`; the parts exist
so that backbones share and swap them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from wmzoo.optim import Optimizer
    from wmzoo.specs import OptimSpec, PolicySpec, WorldModelSpec

State = dict[str, Tensor]
"""A recurrent state: named tensors, batch first."""

Obs = Any
"""Observations of a batch, a row or a step: one array (a tensor or a numpy array) for a pixel
env, whose spec is the one ``image`` entry (every env before the observation spec was one), or a
dict of named arrays, one per entry of the env's spec, for every other spec
(:attr:`EnvInfo.obs_space`). :func:`map_obs` applies a function to every array of either."""

IMAGE = "image"
"""The entry name of a pixel env's one image."""


def map_obs(fn: Callable[[Any], Any], obs: Obs) -> Obs:
    """``fn`` applied to the one array of a pixel env's observations or to every entry of a dict."""
    return {key: fn(value) for key, value in obs.items()} if isinstance(obs, dict) else fn(obs)


def obs_entries(obs: Obs) -> dict[str, Any]:
    """Observations as a dict of named entries (a pixel env's array is its ``image`` entry)."""
    return dict(obs) if isinstance(obs, dict) else {IMAGE: obs}


def pack_obs(entries: dict[str, Any]) -> Obs:
    """The inverse of :func:`obs_entries`: the one array when ``entries`` is the ``image`` alone."""
    return entries[IMAGE] if set(entries) == {IMAGE} else dict(entries)


def stack_obs(rows: list[Obs], dim: int = 0) -> Obs:
    """Stack per-row observations (numpy arrays or tensors) into one, entry by entry."""
    import numpy as np

    def stack(values: list[Any]) -> Any:
        return torch.stack(values, dim) if isinstance(values[0], Tensor) else np.stack(values, dim)

    if isinstance(rows[0], dict):
        return {key: stack([row[key] for row in rows]) for key in rows[0]}
    return stack(rows)


# --------------------------------------------------------------------------- state helpers


def map_state(fn: Callable[[Tensor], Tensor], state: State) -> State:
    """Apply ``fn`` to every tensor of ``state``."""
    return {key: fn(value) for key, value in state.items()}


def detach_state(state: State) -> State:
    """Cut the gradient into past segments (truncated BPTT)."""
    return map_state(Tensor.detach, state)


def flatten_state(state: State, dims: int = 2) -> State:
    """Merge the leading ``dims`` dimensions, e.g. ``[B, T, ...] -> [B*T, ...]``."""
    return map_state(lambda x: x.reshape(-1, *x.shape[dims:]), state)


def index_state(state: State, index: Any) -> State:
    """Select along the leading (batch) dimension or dimensions."""
    return map_state(lambda x: x[index], state)


def stack_states(states: list[State], dim: int = 1) -> State:
    """Stack per-step states into a sequence state (time at ``dim``)."""
    return {key: torch.stack([s[key] for s in states], dim) for key in states[0]}


def reset_state(state: State, initial: State, mask: Tensor) -> State:
    """Where ``mask[b]`` is true, replace row ``b`` of ``state`` with row ``b`` of ``initial``."""
    out = {}
    for key, value in state.items():
        m = mask.reshape(-1, *([1] * (value.dim() - 1))).to(torch.bool)
        out[key] = torch.where(m, initial[key].to(value.dtype), value)
    return out


# --------------------------------------------------------------------------- data types


@dataclass(frozen=True)
class ObsEntry:
    """One named entry of an env's observations: an *image*, uint8 ``(C, H, W)``, or a *vector*,
    float32 ``(D,)`` (proprioception, a classic-control state)."""

    shape: tuple[int, ...]
    dtype: str  # "uint8" (an image) or "float32" (a vector)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))
        whole = all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in self.shape)
        if not whole or not (
            (len(self.shape) == 3 and self.dtype == "uint8") or (len(self.shape) == 1 and self.dtype == "float32")
        ):
            raise ValueError(f"{self.dtype} {list(self.shape)} is neither an image (uint8 [C, H, W]) "
                             "nor a vector (float32 [D])")

    @property
    def kind(self) -> str:
        """``"image"`` or ``"vector"``."""
        return "image" if len(self.shape) == 3 else "vector"

    def describe(self) -> str:
        return f"{self.dtype} {list(self.shape)}"


@dataclass(frozen=True)
class EnvInfo:
    """What a model needs to know about an environment: shapes, not the env itself.

    ``obs_space`` is the observation spec: named :class:`ObsEntry` pairs in the env's order.
    A *pixel env* is one entry, ``image`` (every env before the spec was one): give it as
    ``obs_shape`` ``(C, H, W)`` alone, as before, and its observations stay one array. Any other
    spec leaves ``obs_shape`` ``None`` and its observations are dicts (:data:`Obs`).
    """

    name: str
    obs_shape: tuple[int, int, int] | None  # (C, H, W) uint8 of a pixel env; None for other specs
    num_actions: int  # discrete actions; for continuous control the action dimension
    discrete: bool = True
    obs_space: tuple[tuple[str, ObsEntry], ...] = ()

    def __post_init__(self) -> None:
        space = self.obs_space
        if isinstance(space, dict):
            space = tuple(space.items())
        space = tuple((str(k), v if isinstance(v, ObsEntry) else ObsEntry(**v) if isinstance(v, dict)
                       else ObsEntry(*v)) for k, v in space)
        if not space:
            if self.obs_shape is None:
                raise ValueError("an env needs obs_shape (a pixel env) or obs_space")
            space = ((IMAGE, ObsEntry(tuple(self.obs_shape), "uint8")),)
        if len({k for k, _ in space}) != len(space):
            raise ValueError(f"observation entry names repeat: {[k for k, _ in space]}")
        pixel = len(space) == 1 and space[0][0] == IMAGE and space[0][1].kind == "image"
        object.__setattr__(self, "obs_space", space)
        object.__setattr__(self, "obs_shape", space[0][1].shape if pixel else None)

    @property
    def obs_spec(self) -> dict[str, ObsEntry]:
        """The observation entries by name, in the env's order."""
        return dict(self.obs_space)

    @property
    def pixel(self) -> bool:
        """Whether the spec is the one ``image`` entry (observations are one array)."""
        return self.obs_shape is not None

    def describe_obs(self) -> str:
        """The spec in words, e.g. ``image uint8 [3, 64, 64], state float32 [4]``."""
        return ", ".join(f"{k} {v.describe()}" for k, v in self.obs_space)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields; a pixel env's are those written before the spec (no ``obs_space``),
        so its env.json, manifest and checkpoint header do not change."""
        out: dict[str, Any] = {"name": self.name, "obs_shape": None if self.obs_shape is None else list(self.obs_shape),
                               "num_actions": self.num_actions, "discrete": self.discrete}
        if not self.pixel:
            out["obs_space"] = {k: {"shape": list(v.shape), "dtype": v.dtype} for k, v in self.obs_space}
        return out

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> EnvInfo:
        """From :meth:`to_dict` (or ``dataclasses.asdict``) output read back from JSON;
        ``ValueError`` when the fields do not describe an env (an edited or foreign file)."""
        try:
            shape = fields["obs_shape"]
            space = fields.get("obs_space") or ()
            if isinstance(space, dict):
                space = tuple(space.items())
            info = cls(**{**fields, "obs_shape": None if shape is None else tuple(shape),
                          "obs_space": tuple((k, ObsEntry(**v) if isinstance(v, dict) else ObsEntry(*v))
                                             for k, v in space)})
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{type(exc).__name__}: {exc}") from None
        whole = isinstance(info.num_actions, int) and not isinstance(info.num_actions, bool) and info.num_actions >= 1
        if not (isinstance(info.name, str) and whole and isinstance(info.discrete, bool)):
            raise ValueError("name, obs_shape [C, H, W] or obs_space, num_actions and discrete do not describe an env")
        return info

    @property
    def action_shape(self) -> tuple[int, ...]:
        return () if self.discrete else (self.num_actions,)

    @property
    def action_dtype(self) -> torch.dtype:
        return torch.int64 if self.discrete else torch.float32


@dataclass
class Batch:
    """A batch of sequences (see the module docstring for shapes and alignment)."""

    obs: Obs  # a tensor for a pixel env, else a dict of the spec's entries (module docstring)
    action: Tensor
    reward: Tensor
    terminal: Tensor
    is_first: Tensor

    @property
    def shape(self) -> tuple[int, int]:
        """``(B, T)``."""
        return tuple(self.reward.shape[:2])  # type: ignore[return-value]

    def map(self, fn: Callable[[Tensor], Tensor]) -> Batch:
        """``fn`` applied to every tensor (each observation entry included)."""
        return Batch(**{f.name: map_obs(fn, getattr(self, f.name)) for f in fields(self)})

    def to(self, device: torch.device | str) -> Batch:
        return self.map(lambda x: x.to(device))

    def slice(self, start: int, stop: int) -> Batch:
        """The time window ``[start, stop)`` of every field."""
        return self.map(lambda x: x[:, start:stop])

    def windows(self, size: int, stride: int | None = None) -> Batch:
        """``[B, T]`` → ``[B · n, size]``: the windows of ``size`` steps starting every ``stride``
        (default ``size``) steps, ``n = (T − size) // stride + 1``; steps past the last whole window
        are left out. ``stride = size − 1`` overlaps consecutive windows by one step, so every
        transition ``t → t + 1`` falls in exactly one window."""
        B, T = self.shape
        stride = size if stride is None else stride
        if not 1 <= size <= T or stride < 1:
            raise ValueError(f"windows of {size} steps every {stride} do not fit {T} steps")
        n = (T - size) // stride + 1
        index = (torch.arange(n)[:, None] * stride + torch.arange(size)).to(self.reward.device)
        return self.map(lambda x: x[:, index].flatten(0, 1))

    def validate(self, env: EnvInfo) -> None:
        """Raise ``ValueError`` naming the first field whose dtype or shape breaks the contract."""
        B, T = self.shape
        if isinstance(self.obs, dict) == env.pixel or (
                isinstance(self.obs, dict) and set(self.obs) != set(env.obs_spec)):
            got = sorted(self.obs) if isinstance(self.obs, dict) else "one tensor"
            raise ValueError(f"batch.obs: expected {'one tensor' if env.pixel else sorted(env.obs_spec)}, got {got}")
        dtypes = {"uint8": torch.uint8, "float32": torch.float32}
        expected = {
            **{("obs" if env.pixel else f"obs[{k!r}]"): ((B, T, *v.shape), dtypes[v.dtype]) for k, v in env.obs_space},
            "action": ((B, T, *env.action_shape), env.action_dtype),
            "reward": ((B, T), torch.float32),
            "terminal": ((B, T), torch.bool),
            "is_first": ((B, T), torch.bool),
        }
        for name, (shape, dtype) in expected.items():
            value = self.obs[name[5:-2]] if name.startswith("obs[") else getattr(self, name)
            if tuple(value.shape) != shape or value.dtype != dtype:
                raise ValueError(
                    f"batch.{name}: expected {dtype} {list(shape)}, got {value.dtype} {list(value.shape)}"
                )


@dataclass
class Step:
    """One imagined step, as returned by :meth:`WorldModel.imagine_step`."""

    state: State
    reward: Tensor  # [B] predicted reward of the action just taken
    cont: Tensor  # [B] a probability in [0, 1] that the episode continues (not a logit, not a sample)
    features: Tensor  # [B, *feature_shape] what the policy reads in the new state


@dataclass
class Filtered:
    """What :meth:`WorldModel.observe_sequence` returns for a batch of ``T`` real rows.

    - ``state``: the state after the last row (a batch-first dict, as :meth:`WorldModel.observe`
      returns): observe on from it, or imagine from it.
    - ``rewards``: float ``[B, T − 1]``, the predicted reward of each transition ``t`` (row ``t`` →
      row ``t + 1``: the reward of ``action[:, t]``, whose target is ``reward[:, t]``), read where
      the backbone's loss trains its reward head. There is no entry for the last row (its
      transition leaves the batch). :func:`wmzoo.testing.check_world_model` checks the shape;
      :func:`wmzoo.testing.check_parallel_equals_recurrent` that both forms (``step``) agree.
    """

    state: State  # after the last row: observe on from it, or imagine from it
    rewards: Tensor  # [B, T - 1] the predicted reward of each transition t (row t → row t + 1)


@dataclass
class BurnIn:
    """The real steps before each imagination start, for a policy with a recurrent state
    (:meth:`Policy.burn_in`; IRIS's and REM's LSTM actor-critics). ``N`` starts, ``T_c`` steps."""

    features: Tensor  # [N, T_c, *F] world-model features of the real steps before each start
    is_first: Tensor  # [N, T_c + 1] bool: those steps and the start; reset the policy state there
    actions: Tensor | None = None  # [N, T_c, ...] actions taken at those steps (for rem-ac)

    def index(self, keep: Tensor) -> BurnIn:
        """The rows ``keep`` of every field (the starts the trainer imagines from)."""
        return BurnIn(self.features[keep], self.is_first[keep], None if self.actions is None else self.actions[keep])


@dataclass
class TrainOutput:
    """What :meth:`WorldModel.loss` returns for one training batch."""

    losses: dict[str, Tensor]  # one scalar per component name of WorldModel.components()
    metrics: dict[str, float]  # scalars to log (already detached floats)
    # states imagination starts from, batch-flattened [N, ...], detached; None while ``starts``
    # defers them (read them through imagination_start())
    start: State | None = None
    start_cont: Tensor | None = None  # [N] whether each start state is non-terminal (1.0) or terminal (0.0)
    carry: State | None = None  # last state of each row, detached, when training is stateful
    burn_in: BurnIn | None = None  # the real context of each start, for recurrent policies
    # [B, T, *F] the features of every step of the batch from this pass, with their gradient (what
    # a policy trained with the world model reads: imitation, ``wmzoo run --imitation``); None:
    # this backbone does not expose them
    features: Tensor | None = None
    # a backbone whose start states cost real work (IRIS, REM) may defer them: a function of no
    # argument returning (start, start_cont, burn_in), called (once) only when a policy imagines
    # from this batch, right after the loss and before the optimizer steps (the same weights)
    starts: Callable[[], tuple[State, Tensor, BurnIn | None]] | None = None

    def imagination_start(self) -> tuple[State, Tensor, BurnIn | None]:
        """``(start, start_cont, burn_in)``, built now when the backbone deferred them."""
        if self.starts is not None:
            self.start, self.start_cont, self.burn_in = self.starts()
            self.starts = None
        if self.start is None or self.start_cont is None:
            raise ValueError("this TrainOutput holds no imagination start states (neither start nor starts)")
        return self.start, self.start_cont, self.burn_in

    def discard_starts(self) -> None:
        """Drop deferred start states unbuilt (no policy imagines from this batch), and the
        tensors their builder holds."""
        self.starts = None


@dataclass
class Trajectory:
    """An imagined rollout of horizon ``H`` from ``B`` start states (time first)."""

    features: Tensor  # [H + 1, B, *F]  features[0] is the start state's
    actions: Tensor  # [H, B, ...]      actions[t] taken in features[t]
    rewards: Tensor  # [H, B]           reward of actions[t]
    conts: Tensor  # [H, B]           continue probability after actions[t]
    weights: Tensor  # [H + 1, B]       product of continues up to t (termination mask)
    policy_state: State = field(default_factory=dict)  # policy state at the start
    images: Obs = None  # [H + 1, B, C, H, W] uint8 when decoding was asked for (a dict of entries: WorldModel.decode)

    @property
    def horizon(self) -> int:
        return self.actions.shape[0]


# --------------------------------------------------------------------------- components


class Encoder(nn.Module, ABC):
    """Maps observations (``uint8 [..., C, H, W]``, or a dict of entries) to embeddings ``[..., out_dim]``."""

    out_dim: int

    @abstractmethod
    def forward(self, obs: Obs) -> Tensor: ...


class Decoder(nn.Module, ABC):
    """Maps features ``[..., in_dim]`` to images ``float [..., C, H, W]`` in ``[0, 1]`` scale."""

    @abstractmethod
    def forward(self, features: Tensor) -> Tensor: ...


class Dynamics(nn.Module, ABC):
    """The sequence model: filters real steps and predicts imagined ones."""

    @abstractmethod
    def initial_state(self, batch_size: int) -> State: ...

    @abstractmethod
    def observe(
        self, embed: Tensor, action: Tensor, is_first: Tensor, state: State | None
    ) -> tuple[State, State]:
        """Posterior and prior states ``[B, T, ...]`` for embeddings ``[B, T, E]``.

        ``action[:, t]`` follows ``embed[:, t]``; the transition into step ``t`` uses
        ``action[:, t - 1]`` (from ``state`` at ``t = 0``), reset where ``is_first``.
        """

    @abstractmethod
    def imagine_step(self, state: State, action: Tensor) -> State:
        """The prior state after taking ``action`` in ``state``."""

    @abstractmethod
    def features(self, state: State) -> Tensor: ...


class WorldModel(nn.Module, ABC):
    """A backbone's world model: everything the trainer, imagination engine and bench call.

    Besides the methods below, the core reads four attributes; set the first three in
    ``__init__`` (``wmzoo.registry.build_world_model`` checks them after every build):

    - ``spec``: the validated spec it was built from (the trainer samples batches of
      ``spec.batch_size`` × ``spec.seq_len``);
    - ``env``: the :class:`EnvInfo` it was built for;
    - ``feature_shape``: the shape of one row of :meth:`features` (a tuple of positive ints),
      which policies are built for;
    - ``stateful_training``: a class attribute, true when training carries the state across
      consecutive segments (truncated BPTT): the trainer then streams consecutive segments per
      batch row and passes ``carry`` back.
    """

    spec: WorldModelSpec
    env: EnvInfo
    feature_shape: tuple[int, ...]
    stateful_training: bool = False

    @abstractmethod
    def components(self) -> dict[str, tuple[list[nn.Parameter], OptimSpec]]:
        """Parameter groups trained with one optimizer each, with their optimizer spec."""

    @abstractmethod
    def initial_state(self, batch_size: int) -> State:
        """The state before any observation (also prepended to every ``carry``)."""

    @abstractmethod
    def loss(self, batch: Batch, carry: State | None = None) -> TrainOutput:
        """Training losses on a batch (parallel form where the backbone has one)."""

    @abstractmethod
    def observe_step(
        self, state: State, obs: Obs, prev_action: Tensor, is_first: Tensor
    ) -> State:
        """Filter one real step: ``obs`` uint8 ``[B, C, H, W]`` (a pixel env; else a dict of its
        entries, each ``[B, ...]``) after ``prev_action``. Where
        ``is_first`` (an episode's first observation) ``prev_action`` is zeros (action 0 for
        discrete actions) and the state must be reset before use."""

    @abstractmethod
    def imagine_step(self, state: State, action: Tensor) -> Step:
        """One imagined step from ``state`` under ``action``, however the backbone computes it."""

    @abstractmethod
    def features(self, state: State) -> Tensor:
        """What the policy reads: ``[B, *feature_shape]``."""

    @abstractmethod
    def decode(self, state: State) -> Obs:
        """The observation the model predicts for ``state``: images ``uint8 [B, C, H, W]`` (a
        pixel env), or a dict of the entries it decodes (images uint8, vectors float32 ``[B, D]``)."""

    def imagination_starts(self, segments: Batch) -> tuple[State, Tensor, BurnIn | None]:
        """For a policy that samples its own segments (``policy.segment > 0``, as the official
        IRIS, REM and Δ-IRIS actor-critics do): the start state at the last step of each row
        (detached), its continue flag ``[N]``, and the row's steps before it as a :class:`BurnIn`
        (or ``None``). Called without gradient. The default: this backbone has none (the agent
        refuses such a policy when it is built)."""
        raise NotImplementedError

    def observe(self, batch: Batch, state: State | None = None) -> State:
        """Filter a whole batch of real sequences and return the state after its last step.

        The default runs :meth:`observe_step` step by step; backbones with a parallel form
        override it.
        """
        last = self.initial_state(batch.shape[0]) if state is None else state
        for last in filter_rows(self, batch, last):
            pass
        return last

    def observe_sequence(self, batch: Batch, state: State | None = None, *, step: bool = False) -> Filtered:
        """Filter real rows in the form the backbone *trains* in and predict the reward of every
        transition the way its training reads it: the reading behind the s4wm paper's *inference
        accuracy* (section 5.5: "the model takes the full sequence of observations as input").
        ``step``: one row at a time instead, as acting and imagination filter (the two differ
        where a backbone's training form sees more context than its step, e.g. TSSM-XL's
        Transformer-XL segments: ``m + i`` steps for query ``i`` against ``m`` per step).

        ``batch`` starts an episode (``is_first[:, 0]``) or continues ``state``. The default has
        one form: :meth:`observe_step` row by row, and transition ``t``'s reward is
        ``imagine_step(state after row t, action[t]).reward``, predicted before row ``t + 1`` is
        seen, which is where the token backbones (IRIS, REM, Δ-IRIS) read the reward in training
        too. A backbone whose loss reads the reward head on the state after row ``t + 1`` (the
        posterior: RSSM, S4WM, TSSM-XL, any model trained with
        :meth:`wmzoo.nn.RewardContinueHeads.loss`) must override it to read the head there
        (:class:`wmzoo.nn.LatentWorldModel` does); both readings have the right shape, and
        :func:`wmzoo.testing_wiring.check_imagined_rewards_and_ends` is what detects the
        mismatch. Returns a :class:`Filtered` (``rewards`` ``[B, T − 1]``).
        """
        T = batch.shape[1]
        rewards = []
        for t, state in enumerate(filter_rows(self, batch, state)):
            if t < T - 1:
                rewards.append(self.imagine_step(state, batch.action[:, t]).reward)
        return Filtered(state, torch.stack(rewards, 1) if rewards else batch.reward[:, :0].float())


def filter_rows(wm: WorldModel, batch: Batch, state: State | None = None) -> Iterator[State]:
    """The state after each row of ``batch`` (``T ≥ 1``), filtered one row at a time with
    ``wm.observe_step`` from ``state`` (the initial state if None); row 0's previous action is
    taken as none (zeros), so ``batch`` starts an episode or continues where ``state`` was; at
    an episode start inside ``batch`` the previous action is zeros too, as
    :meth:`WorldModel.observe_step` asks."""
    state = wm.initial_state(batch.shape[0]) if state is None else state
    prev_action = torch.zeros_like(batch.action[:, 0])
    for t in range(batch.shape[1]):
        first = batch.is_first[:, t]
        prev_action = prev_action.masked_fill(first if prev_action.dim() == 1 else first.unsqueeze(-1), 0)
        state = wm.observe_step(state, map_obs(lambda x: x[:, t], batch.obs), prev_action, first)
        prev_action = batch.action[:, t]
        yield state


class Policy(nn.Module, ABC):
    """An agent that acts on world-model features and learns from imagined trajectories.

    ``imagine_with_grad``: true when :meth:`learn` backpropagates through the imagined steps
    (DreamerV3's dynamics backpropagation); the trainer then imagines with gradients under frozen
    world-model parameters (:func:`wmzoo.imagination.imagine` with ``grad=True``), and :meth:`act`
    must return actions differentiable in the policy's parameters when grad mode is on.
    """

    spec: PolicySpec
    imagine_with_grad: bool = False

    def initial_state(self, batch_size: int) -> State:
        """Recurrent policy state (empty for feed-forward policies)."""
        return {}

    def condition(self, info: dict[str, Any]) -> Tensor | None:
        """The condition ``c`` of an episode for a policy π(a | features, c), from the env's
        reset ``info`` (an instruction: BabyAI's ``info["mission"]``), batch first ``[1, ...]``;
        :meth:`act` then finds it in its state as ``state["condition"]``. ``None`` (the default):
        the policy is unconditioned."""
        return None

    def burn_in(self, context: BurnIn) -> State:
        """The policy state at imagination start after the real steps of ``context`` (called
        when the world model's :class:`TrainOutput` has a ``burn_in``). The default ignores it."""
        return self.initial_state(context.features.shape[0])

    @abstractmethod
    def act(
        self, features: Tensor, state: State, sample: bool = True, temperature: float = 1.0
    ) -> tuple[Tensor, State]:
        """An action for each row of ``features``; greedy when ``sample`` is false.

        ``temperature`` (sampling only) divides categorical logits, or scales a continuous
        policy's spread. Callers pass it only when it is not 1, so a policy written without the
        argument still acts; it fails only when someone asks it for a temperature."""

    @abstractmethod
    def learn(self, trajectory: Trajectory) -> dict[str, float]:
        """One update from an imagined trajectory; returns scalars to log."""

    @abstractmethod
    def optimizers(self) -> dict[str, Optimizer]:
        """The policy's own optimizers, by name (saved and restored with checkpoints). Each is
        a :class:`wmzoo.optim.Optimizer` that :meth:`learn` steps, so a step with a non-finite
        loss or gradient is skipped and the trainer sees it."""

