"""Dense blocks in the DreamerV3 style: Linear (no bias) → LayerNorm → SiLU."""

from __future__ import annotations

from torch import Tensor, nn


class NormedLinear(nn.Sequential):
    """``Linear → LayerNorm(eps) → SiLU`` (DreamerV3's dense unit)."""

    def __init__(self, in_dim: int, out_dim: int, eps: float = 1e-3) -> None:
        super().__init__(nn.Linear(in_dim, out_dim, bias=False), nn.LayerNorm(out_dim, eps=eps), nn.SiLU())


class MLP(nn.Module):
    """``layers`` normed hidden units followed by a linear output layer.

    ``zero_init`` zero-initialises the output layer, as DreamerV3 does for the reward and critic
    heads so that their first predictions are exactly zero.
    """

    def __init__(
        self, in_dim: int, out_dim: int, hidden: int, layers: int, zero_init: bool = False
    ) -> None:
        super().__init__()
        blocks = [NormedLinear(in_dim if i == 0 else hidden, hidden) for i in range(layers)]
        self.hidden = nn.Sequential(*blocks)
        self.out = nn.Linear(hidden if layers else in_dim, out_dim)
        if zero_init:
            nn.init.zeros_(self.out.weight)
            nn.init.zeros_(self.out.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.hidden(x))
