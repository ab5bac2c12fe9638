"""``bc``: a policy learned by behaviour cloning from demonstrations, jointly with the world model.

The TokenWM paper's setting (Zhai et al., sections 2, 3.6 and 3.7): a language-conditioned policy
π_ψ(a_t | h*_t, c) is trained on demonstrations ``{(o_{1:T}, a_{1:T}, l)}`` by the eq. 1 term
``−γ log π(a_t | h*_t, c)`` added to the world model's loss. Here the policy reads any backbone's
features of the training pass (:attr:`wmzoo.interfaces.TrainOutput.features`: RSSM's
``[h, z]``, TokenWM's h*) and its instruction:

- reader: the features as they are (flattened); a backbone's own policy may read them otherwise
  (``tokenwm-bc``: the perceiver read-out of section 3.6) through :meth:`ImitationPolicy.reader`;
- c: the instruction's embedding, "repeated" for every step (figure 1b) and concatenated with the
  read-out (3.6): by default a small text encoder learned from scratch over the demonstrations'
  vocabulary (word and position embeddings, averaged over the words; :class:`MissionEncoder`);
  with ``text_encoder``, the paper's choice, a frozen pre-trained sentence encoder read from a local
  folder (:class:`wmzoo.nn.pretrained.SentenceEncoder`), its embedding concatenated as it is;
- an MLP to the action: categorical logits for discrete actions; for continuous actions 256 bins
  per dimension between the data's 1st and 99th percentile (section 4, as OpenVLA does).

``detach`` stops the policy's gradient at the features: appendix B found an RSSM "cheats" when the
policy trains its state (it stores the previous action) and detaches it; TokenWM trains jointly.
So ``bc`` detaches by default and ``tokenwm-bc`` does not.

Named deviations: the default language encoder is learned from scratch, not the paper's
pre-trained Universal Sentence Encoder (nothing downloads here; ``text_encoder`` reads one a user
has on disk); acting in imagination is not what this policy does (``wmzoo run
--imitation`` trains it; ``wmzoo run`` online refuses it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import Tensor, nn
from torch.distributions import Categorical

from wmzoo.data.demos import PAD, Vocabulary
from wmzoo.errors import SpecError, WmzooError
from wmzoo.hookspecs import PolicyEntry, hookimpl
from wmzoo.interfaces import EnvInfo, Policy, State, Trajectory
from wmzoo.nn import MLP
from wmzoo.nn.pretrained import SentenceEncoder
from wmzoo.optim import Optimizer
from wmzoo.specs import OptimSpec, PolicySpec

# --------------------------------------------------------------------------- spec


class ImitationSpec(PolicySpec):
    """Behaviour cloning from demonstrations (table 2: policy MLP 2 layers, lr 1e-4, γ = 1).

    The imagination fields of every policy spec (``horizon``, ``max_starts``, ``start``,
    ``segment``, ``epsilon``) do not apply: this policy never imagines, and values other than the
    defaults are refused."""

    units: int = Field(256, ge=1, le=8192, description="hidden units of the action MLP")
    layers: int = Field(2, ge=0, le=16, description="hidden layers of the action MLP (table 2: 2)")
    text_dim: int = Field(64, ge=1, le=4096, description="width of the learned instruction embedding c "
                          "(a pre-trained text_encoder's c has its own width)")
    text_encoder: str = Field("", description="a local folder of a pre-trained sentence encoder "
                              "(sentence-transformers format, e.g. distiluse-base-multilingual-cased-v2, "
                              "the paper's; needs wmzoo[pretrained]; nothing downloads): c is its frozen "
                              "embedding; empty: a small text encoder learned from scratch")
    max_words: int = Field(32, ge=1, le=512, description="longest instruction, in words")
    vocabulary: list[str] = Field(
        default_factory=list, description="the instructions' words, filled from the demonstrations' "
        "train split when a run starts (saved with the run, so evaluation reads missions the same way)",
    )
    weight: float = Field(1.0, gt=0, le=1000, description="γ, weight of −log π(a | h*, c) in eq. 1 (table 2: 1)")
    detach: bool = Field(True, description="stop the policy's gradient at the world model's features "
                         "(appendix B: RSSM must; TokenWM trains jointly)")
    bins: int = Field(256, ge=2, le=4096, description="continuous actions: bins per dimension (section 4: 256)")
    action_low: list[float] = Field(default_factory=list, description="continuous actions: lowest bin per "
                                    "dimension (filled from the demonstrations' 1st percentile)")
    action_high: list[float] = Field(default_factory=list, description="continuous actions: highest bin per "
                                     "dimension (filled from the demonstrations' 99th percentile)")
    optim: OptimSpec = Field(default_factory=lambda: OptimSpec(lr=1e-4, clip=100.0),
                             description="policy optimizer (table 2: AdamW lr 1e-4, clip 100)")

    @model_validator(mode="after")
    def _imitation_only(self) -> ImitationSpec:
        for name in ("horizon", "max_starts", "start", "segment", "epsilon"):
            if getattr(self, name) != PolicySpec.model_fields[name].default:
                raise ValueError(f"{name}: an imitation policy never imagines or collects; leave it unset")
        if len(self.action_low) != len(self.action_high):
            raise ValueError("action_low and action_high must have one value per action dimension")
        return self


# --------------------------------------------------------------------------- the network


class MissionEncoder(nn.Module):
    """c = mean over the words of (word embedding + position embedding) → linear, ``[..., L]`` ids
    → ``[..., text_dim]``; an empty instruction (all padding) gives the learned ``empty`` vector."""

    def __init__(self, vocabulary_size: int, max_words: int, dim: int) -> None:
        super().__init__()
        self.word = nn.Embedding(vocabulary_size + 2, dim, padding_idx=PAD)
        self.position = nn.Parameter(torch.randn(max_words, dim) * 0.02)
        self.empty = nn.Parameter(torch.zeros(dim))
        self.out = nn.Linear(dim, dim)

    def forward(self, ids: Tensor) -> Tensor:
        present = (ids != PAD).unsqueeze(-1).float()
        total = ((self.word(ids) + self.position[: ids.shape[-1]]) * present).sum(-2)
        count = present.sum(-2)
        mean = torch.where(count > 0, total / count.clamp(min=1), self.empty)
        return self.out(mean)


class ImitationPolicy(Policy):
    """π(a_t | features_t, c) trained by :meth:`imitation_loss`; see the module docstring."""

    spec: ImitationSpec
    conditioned = True

    def __init__(self, spec: ImitationSpec, feature_shape: tuple[int, ...], env: EnvInfo) -> None:
        super().__init__()
        self.spec, self.env = spec, env
        self.vocabulary = Vocabulary(tuple(spec.vocabulary), spec.max_words)
        if not env.discrete and len(spec.action_low) != env.num_actions:
            raise SpecError(f"continuous actions of {env.num_actions} dimensions need policy.action_low and "
                            "policy.action_high (filled from the demonstrations by wmzoo run --imitation)")
        self.categoricals = 1 if env.discrete else env.num_actions
        self.choices = env.num_actions if env.discrete else spec.bins
        self.read, width = self.reader(feature_shape)
        self.sentences = SentenceEncoder(spec.text_encoder) if spec.text_encoder else None
        if self.sentences is None:
            self.text: nn.Module = MissionEncoder(len(spec.vocabulary), spec.max_words, spec.text_dim)
            self.text_width = spec.text_dim
        else:  # figure 1b: the pre-trained embedding c, concatenated as it is
            self.text, self.text_width = nn.Identity(), self.sentences.dim
        self.head = self.action_head(width)
        if not env.discrete:
            self.register_buffer("low", torch.tensor(spec.action_low, dtype=torch.float32))
            self.register_buffer("high", torch.tensor(spec.action_high, dtype=torch.float32))
        self._optimizer = Optimizer(self.parameters(), spec.optim)

    def reader(self, feature_shape: tuple[int, ...]) -> tuple[nn.Module, int]:
        """The module that turns features ``[..., *feature_shape]`` into one vector, and its width.
        The default flattens them; a backbone's own imitation policy overrides it."""
        return nn.Flatten(-len(feature_shape)), math.prod(feature_shape)

    def action_head(self, width: int) -> nn.Module:
        """The MLP from the read-out (``width``) and c to the logits of every action group."""
        return MLP(width + self.text_width, self.categoricals * self.choices, self.spec.units, self.spec.layers)

    # -- π(a | features, c) ----------------------------------------------------------------
    def logits(self, features: Tensor, condition: Tensor) -> Tensor:
        """``[..., groups, choices]``: one categorical per action group (1 for discrete actions,
        one per dimension of a continuous action)."""
        x = torch.cat([self.read(features), self.text(condition)], -1)
        return self.head(x).unflatten(-1, (self.categoricals, -1))

    def to_bins(self, action: Tensor) -> Tensor:
        """Continuous actions ``[..., A]`` → the nearest of ``bins`` bins per dimension ``[..., A]``."""
        unit = ((action - self.low) / (self.high - self.low).clamp(min=1e-8)).clamp(0, 1)
        return (unit * (self.spec.bins - 1)).round().long()

    def from_bins(self, index: Tensor) -> Tensor:
        return self.low + index.float() / (self.spec.bins - 1) * (self.high - self.low)

    def encode_mission(self, mission: str) -> np.ndarray:
        """What ``condition`` holds for an instruction: its word ids ``int64 [max_words]``, or with a
        pre-trained ``text_encoder`` its embedding ``float32 [dim]``."""
        return self.vocabulary.encode(mission) if self.sentences is None else self.sentences.encode(mission)

    def imitation_loss(self, features: Tensor, condition: Tensor, action: Tensor, acted: Tensor
                       ) -> tuple[Tensor, dict[str, float]]:
        """Eq. 1's −log π(a_t | h*_t, c), averaged over the rows with a demonstrated action
        (``acted``; ``features`` ``[B, T, *F]``, ``condition`` ``[B, T, L]``, ``action`` ``[B, T, ...]``)
        and over action groups; also the share of rows whose greedy action is the demonstrated one."""
        features = features.detach() if self.spec.detach else features
        logits = self.logits(features, condition)
        target = action.unsqueeze(-1) if self.env.discrete else self.to_bins(action)
        nll = nn.functional.cross_entropy(logits.flatten(0, -2), target.flatten(), reduction="none")
        nll = nll.view(target.shape).mean(-1)
        weight = acted.float()
        loss = (nll * weight).sum() / weight.sum().clamp(min=1)
        with torch.no_grad():
            hit = (logits.argmax(-1) == target).all(-1).float()
            accuracy = (hit * weight).sum() / weight.sum().clamp(min=1)
        return loss, {"bc_nll": float(loss.detach()), "bc_accuracy": float(accuracy)}

    # -- the Policy interface ------------------------------------------------------------------
    def condition(self, info: dict[str, Any]) -> Tensor:
        """c's input ``[1, ...]`` (:meth:`encode_mission`) for an episode from its reset ``info``
        (``info["mission"]``; an env without one gives the empty instruction)."""
        mission = info.get("mission", "")
        return torch.as_tensor(self.encode_mission(mission if isinstance(mission, str) else ""))[None]

    def act(self, features: Tensor, state: State, sample: bool = True, temperature: float = 1.0
            ) -> tuple[Tensor, State]:
        condition = state.get("condition")
        if condition is None:  # no instruction given: the empty one
            condition = self.condition({})
        condition = condition.to(features.device).expand(features.shape[0], -1)
        logits = self.logits(features, condition)
        index = Categorical(logits=logits / temperature).sample() if sample else logits.argmax(-1)
        action = index[..., 0] if self.env.discrete else self.from_bins(index)
        return action, {}

    def learn(self, trajectory: Trajectory) -> dict[str, float]:
        raise WmzooError("an imitation policy learns from demonstrations (wmzoo run --imitation DATA), "
                         "not from imagined trajectories")

    def optimizers(self) -> dict[str, Optimizer]:
        return {"policy": self._optimizer}


PRESETS: dict[str, ImitationSpec] = {
    "tiny": ImitationSpec(units=64, layers=1, text_dim=32),
    "small": ImitationSpec(units=256, layers=2, text_dim=64),
    "paper": ImitationSpec(units=512, layers=2, text_dim=512),  # table 2: 2 MLP layers
}


@hookimpl
def wmzoo_policies() -> list[PolicyEntry]:
    return [
        PolicyEntry(
            name="bc", spec=ImitationSpec, presets=PRESETS, build=ImitationPolicy,
            description="behaviour cloning from demonstrations (wmzoo run --imitation), "
            "instruction-conditioned, features detached (TokenWM paper, eq. 1 and appendix B)",
        )
    ]
