"""Return estimates and return normalisation for actor-critics trained in imagination.

DreamerV3 (Hafner et al., 2023), section 3 "Actor critic learning": bootstrapped λ-returns (eq. 7)
and the percentile return normaliser (eq. 11–12). Both are shared by every actor-critic in wmzoo.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def lambda_returns(rewards: Tensor, conts: Tensor, values: Tensor, gamma: float, lam: float) -> Tensor:
    """Bootstrapped λ-returns ``R_0 .. R_{H-1}``, time first (DreamerV3 eq. 7).

    ``rewards [H, B]`` is the reward of the action taken at step ``t``, ``conts [H, B]`` the
    probability that the episode continues after it, ``values [H + 1, B]`` the critic's values of
    the states ``0 .. H``::

        R_H = v_H
        R_t = r_t + γ c_t ((1 − λ) v_{t+1} + λ R_{t+1})

    ``λ = 1`` gives the discounted reward sum bootstrapped from ``v_H``; ``λ = 0`` the one-step
    TD target ``r_t + γ c_t v_{t+1}``.
    """
    horizon = rewards.shape[0]
    aligned = values.shape[0] == horizon + 1 and values.shape[1:] == rewards.shape[1:]
    if conts.shape != rewards.shape or not aligned:
        raise ValueError(
            f"lambda_returns: expected rewards and conts [H, ...] and values [H + 1, ...], got "
            f"{list(rewards.shape)}, {list(conts.shape)} and {list(values.shape)}"
        )
    discount = gamma * conts
    partial = rewards + discount * (1 - lam) * values[1:]  # the part of R_t not depending on R_{t+1}
    returns = [values[-1]]
    for t in reversed(range(horizon)):
        returns.append(partial[t] + discount[t] * lam * returns[-1])
    return torch.stack(returns[:0:-1])


class PercentileNormalizer(nn.Module):
    """Scale of returns from running percentiles (DreamerV3 eq. 11–12).

    Each :meth:`update` moves exponential moving averages of the batch's low and high percentiles
    (5th and 95th by default), both starting at 0::

        low  ← d · low  + (1 − d) · P_low(R)
        high ← d · high + (1 − d) · P_high(R)
        S = high − low,  scale = max(1, S)

    Dividing advantages by ``scale`` shrinks large returns to a comparable range while leaving small
    ones (``S < 1``, e.g. sparse rewards) unamplified. The averages are buffers, so a checkpoint
    restores them and a resumed run continues from the same scale.
    """

    low: Tensor
    high: Tensor

    def __init__(self, decay: float = 0.99, percentiles: tuple[float, float] = (5.0, 95.0)) -> None:
        super().__init__()
        self.decay = decay
        self.register_buffer("quantiles", torch.tensor([p / 100 for p in percentiles]), persistent=False)
        self.register_buffer("low", torch.zeros(()))
        self.register_buffer("high", torch.zeros(()))

    @torch.no_grad()
    def update(self, returns: Tensor) -> Tensor:
        """Fold the percentiles of ``returns`` (any shape, pooled) into the averages; the new scale."""
        values = returns.detach().flatten().to(self.low)
        low, high = torch.quantile(values, self.quantiles.to(values))
        self.low.lerp_(low, 1 - self.decay)
        self.high.lerp_(high, 1 - self.decay)
        return self.scale

    @property
    def scale(self) -> Tensor:
        """``max(1, high − low)``, a scalar tensor."""
        return (self.high - self.low).clamp(min=1.0)
