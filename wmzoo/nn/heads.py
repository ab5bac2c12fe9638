"""Reward and continue heads, their targets under wmzoo's data alignment, and action encoding.

``reward[t]`` and ``terminal[t]`` result from ``action[t]``, so a model predicts them from its
features at step ``t + 1``; targets whose window crosses into a new episode (``is_first[t + 1]``)
are masked. Shared by every latent-state backbone (RSSM, S4WM, TSSM-XL, third-party ones).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from wmzoo.interfaces import Batch, EnvInfo
from wmzoo.nn.distributions import TwoHot, sampling_modes
from wmzoo.nn.mlp import MLP


def encode_action(action: Tensor, env: EnvInfo) -> Tensor:
    """Discrete actions ``[...]`` int64 → one-hot float ``[..., A]``; continuous ones as float."""
    if env.discrete:
        return F.one_hot(action.long(), env.num_actions).float()
    return action.float()


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def reward_cont_targets(batch: Batch) -> tuple[Tensor, Tensor, Tensor]:
    """Targets for heads read at features ``[:, 1:]``: ``(reward, cont, mask)``, each ``[B, T-1]``.

    ``features[:, t + 1]`` predicts ``reward[:, t]`` and ``1 − terminal[:, t]``; ``mask`` is false
    where step ``t + 1`` starts a new episode (no transition to learn).
    """
    reward = batch.reward[:, :-1]
    cont = 1.0 - batch.terminal[:, :-1].float()
    mask = ~batch.is_first[:, 1:]
    return reward, cont, mask


def start_conts(batch: Batch) -> Tensor:
    """``[B, T]``: 0 where ``obs[t]`` is a terminal observation (``terminal[t-1]`` within the same
    episode), else 1 — the weight of an imagination started there. Taken as 1 at ``t = 0``."""
    cont = torch.ones(batch.reward.shape, device=batch.reward.device)
    cont[:, 1:] = 1.0 - (batch.terminal[:, :-1] & ~batch.is_first[:, 1:]).float()
    return cont


class RewardContinueHeads(nn.Module):
    """DreamerV3's reward head (two-hot symlog, zero-initialised output) and continue head
    (Bernoulli logit), both MLPs on the model's features."""

    def __init__(self, features: int, hidden: int, layers: int, bins: int = 255) -> None:
        super().__init__()
        self.reward = MLP(features, bins, hidden, layers, zero_init=True)
        self.cont = MLP(features, 1, hidden, layers)

    def predict(self, features: Tensor) -> tuple[Tensor, Tensor]:
        """``(reward, continue probability)`` for features ``[..., F]``."""
        return TwoHot(self.reward(features)).mean(), torch.sigmoid(self.cont(features).squeeze(-1))

    def loss(self, features: Tensor, batch: Batch) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        """``(reward NLL, continue BCE, metrics)`` for sequence features ``[B, T, F]``."""
        reward_target, cont_target, mask = reward_cont_targets(batch)
        reward_dist = TwoHot(self.reward(features[:, 1:]))
        reward = masked_mean(-reward_dist.log_prob(reward_target), mask)
        cont_logit = self.cont(features[:, 1:]).squeeze(-1)
        cont = masked_mean(F.binary_cross_entropy_with_logits(cont_logit, cont_target, reduction="none"), mask)
        with torch.no_grad():
            metrics = {
                "reward_mae": masked_mean((reward_dist.mean() - reward_target).abs(), mask),
                "cont_acc": masked_mean(((cont_logit > 0).float() == cont_target).float(), mask),
            }
        return reward, cont, metrics


# --------------------------------------------------------------------------- token-model heads


class TokenHead(nn.Sequential):
    """The heads of IRIS and REM: ``Linear → ReLU → Linear`` on the transformer's output (IRIS
    appendix B; REM table 7 and its code)."""

    def __init__(self, dim: int, out: int) -> None:
        super().__init__(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, out))


class SignRewardHead(TokenHead):
    """The reward's sign as 3 classes ``sign(r) + 1`` (IRIS section 2.2, for Atari's clipped
    rewards; REM section 2.4), read at the output of the action that earned it."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim, 3)

    def loss(self, x: Tensor, reward: Tensor, mask: Tensor) -> Tensor:
        """Masked mean cross-entropy of outputs ``x [..., dim]`` against rewards ``[...]``."""
        target = (torch.sign(reward) + 1).long()
        return masked_mean(F.cross_entropy(self(x).movedim(-1, 1), target, reduction="none"), mask)

    def expected(self, x: Tensor) -> Tensor:
        """``p(+1) − p(−1)``: the expected sign."""
        p = self(x).softmax(-1)
        return p[..., 2] - p[..., 0]

    def sample(self, x: Tensor) -> Tensor:
        """A sampled sign in ``{−1, 0, +1}`` (float), as IRIS imagines."""
        return sample_class(self(x)).float() - 1.0


class TwoHotRewardHead(TokenHead):
    """The reward as a two-hot symlog distribution over 255 bins on ``[−20, 20]`` (DreamerV3's
    :class:`~wmzoo.nn.distributions.TwoHot`; Δ-IRIS's Crafter reward head, its code
    ``two_hot_rews``), read at the output of the action that earned it. Logits are taken in
    float32 (under bf16 autocast too: the bins are 0.16 apart)."""

    def __init__(self, dim: int, bins: int = 255) -> None:
        super().__init__(dim, bins)

    def loss(self, x: Tensor, reward: Tensor, mask: Tensor) -> Tensor:
        """Masked mean cross-entropy of the two-hot targets of ``reward [...]``."""
        return masked_mean(-TwoHot(self(x).float()).log_prob(reward), mask)

    def expected(self, x: Tensor) -> Tensor:
        """``symexp(Σ_i p_i b_i)``: the prediction."""
        return TwoHot(self(x).float()).mean()

    def sample(self, x: Tensor) -> Tensor:
        """The prediction: Δ-IRIS imagines the expected (not a sampled) two-hot reward."""
        return self.expected(x)


class EndHead(TokenHead):
    """Whether a transition ends the episode, as 2 classes (IRIS and REM's code: class 1 is an
    end), read at the action's output."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim, 2)

    def loss(self, x: Tensor, terminal: Tensor, mask: Tensor) -> Tensor:
        """Masked mean cross-entropy of outputs ``x [..., dim]`` against ``terminal [...]``."""
        return masked_mean(F.cross_entropy(self(x).movedim(-1, 1), terminal.long(), reduction="none"), mask)

    def continue_probability(self, x: Tensor) -> Tensor:
        """``1 − p(end)``."""
        return self(x).softmax(-1)[..., 0]

    def sample(self, x: Tensor) -> Tensor:
        """A sampled continue flag in ``{0, 1}`` (float), as IRIS imagines."""
        return 1.0 - sample_class(self(x)).float()


def sample_class(logits: Tensor) -> Tensor:
    """One draw per row of ``softmax(logits [..., n])`` (a Categorical without argument checks);
    the arg-max inside :func:`wmzoo.nn.distributions.modes`."""
    if sampling_modes():
        return logits.argmax(-1)
    flat = logits.reshape(-1, logits.shape[-1])
    return torch.multinomial(torch.softmax(flat, -1), 1).reshape(logits.shape[:-1])
