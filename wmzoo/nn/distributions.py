"""Distributions of DreamerV3 (Hafner et al., 2023): symlog, two-hot, unimix categoricals."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor


_modes_only = False
# a test's replacement of every gaussian_sample draw (wmzoo.testing_wiring.gaussian_teacher_forcing)
_gaussian_draw: Callable[[Tensor, Tensor], Tensor] | None = None


@contextmanager
def modes() -> Iterator[None]:
    """Within the block every draw made through ``wmzoo.nn`` (:meth:`OneHotCategoricalST.sample`,
    :func:`wmzoo.nn.heads.sample_class`, :func:`gaussian_sample`) returns its distribution's mode
    (the arg-max class, the mean), gradients unchanged: a stochastic model becomes deterministic, so
    two forms of it that sample in different orders (a parallel training pass and a step-by-step
    recurrence) can be compared exactly (:func:`wmzoo.testing.check_parallel_equals_recurrent`).
    Process-wide and not thread-safe: meant for tests."""
    global _modes_only
    before, _modes_only = _modes_only, True
    try:
        yield
    finally:
        _modes_only = before


def sampling_modes() -> bool:
    """True inside :func:`modes`."""
    return _modes_only


def gaussian_sample(mean: Tensor, std: Tensor) -> Tensor:
    """A reparameterised draw ``mean + std · ε``, ``ε ~ N(0, I)`` (the mean inside :func:`modes`):
    a Gaussian latent drawn through it can be checked like the categorical ones, and teacher-forced
    (:func:`wmzoo.testing_wiring.gaussian_teacher_forcing` replaces its draws inside :func:`forced_gaussians`)."""
    if _gaussian_draw is not None:
        return _gaussian_draw(mean, std)
    return mean if _modes_only else mean + std * torch.randn_like(mean)


@contextmanager
def forced_gaussians(draw: Callable[[Tensor, Tensor], Tensor]) -> Iterator[None]:
    """Within the block :func:`gaussian_sample` returns ``draw(mean, std)`` instead of a draw.
    Process-wide and not thread-safe, as :func:`modes`: meant for tests (teacher forcing)."""
    global _gaussian_draw
    before, _gaussian_draw = _gaussian_draw, draw
    try:
        yield
    finally:
        _gaussian_draw = before


def symlog(x: Tensor) -> Tensor:
    """``sign(x) · ln(|x| + 1)`` (DreamerV3 eq. 1)."""
    return torch.sign(x) * torch.log1p(x.abs())


def symexp(x: Tensor) -> Tensor:
    """Inverse of :func:`symlog`."""
    return torch.sign(x) * torch.expm1(x.abs())


def unimix_logits(logits: Tensor, unimix: float) -> Tensor:
    """Logits of ``(1 - unimix) · softmax(logits) + unimix / K`` (1 % uniform mixture)."""
    if unimix <= 0:
        return logits
    probs = logits.softmax(-1)
    probs = (1 - unimix) * probs + unimix / logits.shape[-1]
    return probs.log()


class OneHotCategoricalST:
    """Categorical over the last axis; samples are one-hot with straight-through gradients."""

    def __init__(self, logits: Tensor) -> None:
        self.logits = logits.log_softmax(-1)
        self._probs: Tensor | None = None

    @property
    def probs(self) -> Tensor:
        """``exp(logits)``, computed once (sampling, the mode, the entropy and the KL all read it)."""
        if self._probs is None:
            self._probs = self.logits.exp()
        return self._probs

    def sample(self) -> Tensor:
        """One-hot sample whose gradient flows to ``probs`` (straight-through estimator); the
        mode inside :func:`modes`."""
        if _modes_only:
            return self.mode()
        probs = self.probs
        index = torch.multinomial(probs.detach().reshape(-1, probs.shape[-1]), 1)
        onehot = F.one_hot(index.reshape(probs.shape[:-1]), probs.shape[-1]).to(probs.dtype)
        return onehot + probs - probs.detach()

    def mode(self) -> Tensor:
        probs = self.probs
        onehot = F.one_hot(self.logits.argmax(-1), self.logits.shape[-1]).to(self.logits.dtype)
        return onehot + probs - probs.detach()

    def log_prob(self, onehot: Tensor) -> Tensor:
        return (onehot * self.logits).sum(-1)

    def entropy(self) -> Tensor:
        return -(self.probs * self.logits).sum(-1)

    def kl(self, other: OneHotCategoricalST) -> Tensor:
        """``KL(self ‖ other)`` summed over the last axis."""
        return (self.probs * (self.logits - other.logits)).sum(-1)


class TwoHot:
    """Two-hot encoded symlog regression over fixed bins (DreamerV3 §2, eq. 9–10).

    ``logits [..., bins]``; the prediction is ``symexp(Σ softmax(logits) · bins)`` and the loss is
    the cross-entropy against the two-hot encoding of ``symlog(target)``. Defaults: 255 bins
    spaced evenly over ``[-20, 20]`` in symlog space.
    """

    def __init__(self, logits: Tensor, low: float = -20.0, high: float = 20.0) -> None:
        # float32 whatever the autocast: 255 bins over [-20, 20] are 0.157 apart, finer than
        # bfloat16 resolves near ±20 (its 8-bit mantissa: steps of 0.125 there), and CUDA's autocast
        # runs symlog's log1p in float32, so bf16 bins met float32 weights in the scatter below
        self.logits = logits.float()
        self.bins = torch.linspace(low, high, logits.shape[-1], device=logits.device, dtype=torch.float32)

    def mean(self) -> Tensor:
        return symexp((self.logits.softmax(-1) * self.bins).sum(-1))

    def log_prob(self, target: Tensor) -> Tensor:
        return (self.encode(target) * self.logits.log_softmax(-1)).sum(-1)

    def encode(self, target: Tensor) -> Tensor:
        """Two-hot weights of ``symlog(target)`` on the bins, ``[..., bins]``."""
        x = symlog(target.float()).clamp(self.bins[0], self.bins[-1])
        above = torch.bucketize(x, self.bins).clamp(1, len(self.bins) - 1)
        below = above - 1
        lo, hi = self.bins[below], self.bins[above]
        w_hi = ((x - lo) / (hi - lo)).clamp(0, 1)
        out = torch.zeros(*x.shape, len(self.bins), device=x.device, dtype=self.bins.dtype)
        out.scatter_(-1, below.unsqueeze(-1), (1 - w_hi).unsqueeze(-1))
        out.scatter_add_(-1, above.unsqueeze(-1), w_hi.unsqueeze(-1))
        return out
