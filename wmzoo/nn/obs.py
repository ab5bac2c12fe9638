"""Encoders and decoders for any observation spec (DreamerV3's multi-encoder and multi-decoder).

An env's observations are named entries (:class:`~wmzoo.interfaces.EnvInfo.obs_space`): images
uint8 ``[C, H, W]`` and vectors float32 ``[D]``. Which entries a model encodes and which it
reconstructs are two spec fields, regular expressions over the entry names
(:class:`ObsKeysSpec`, DreamerV3's ``encoder.{cnn,mlp}_keys`` / ``decoder.{cnn,mlp}_keys``).

As in DreamerV3 (Hafner et al., 2023, appendix "Networks" and its code's ``MultiEncoder`` /
``MultiDecoder``), all selected images are stacked along channels into one CNN
(:class:`~wmzoo.nn.cnn.ConvEncoder`; they must share ``H × W``) and all selected vectors are
concatenated into one MLP; the two embeddings are concatenated. Vector inputs pass through
``symlog`` first, and the vector decoder predicts ``symlog(x)`` under a squared error (DreamerV3
§2, "Robust predictions", eq. 9–10: the symlog squared loss ``½ (f(x, θ) − symlog(y))²`` and
``symlog``/``symexp``, applied to the vector observations as the encoder's inputs and the
decoder's targets; decoding applies ``symexp``). Images keep the unit-variance Gaussian of
:func:`~wmzoo.nn.cnn.recon_loss`. Each decoded entry's loss is kept under its own name
(``recon_<name>`` in the metrics).

A pixel env (one ``image`` entry) builds exactly the CNN it built before the spec existed, and a
checkpoint saved then (``encoder.net.*``, ``decoder.linear.*`` / ``decoder.net.*``) loads into it.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from pydantic import Field, field_validator
from torch import Tensor, nn

from wmzoo.errors import SpecError
from wmzoo.interfaces import Decoder, Encoder, EnvInfo, Obs, ObsEntry, obs_entries, pack_obs
from wmzoo.nn.cnn import ConvDecoder, ConvEncoder, recon_loss
from wmzoo.nn.distributions import symexp, symlog
from wmzoo.nn.mlp import MLP, NormedLinear
from wmzoo.specs import Spec


class ObsKeysSpec(Spec):
    """Which observation entries a model encodes and reconstructs (DreamerV3's key selection)."""

    encoder_keys: str = Field(
        ".*", min_length=1, max_length=200,
        description="regular expression (full match) over the env's observation entry names: the "
        "entries the encoder reads (e.g. 'image', 'state', '.*')",
    )
    decoder_keys: str = Field(
        ".*", min_length=1, max_length=200,
        description="regular expression (full match) over the env's observation entry names: the "
        "entries the decoder reconstructs, each a loss of its own (recon_<name>)",
    )

    @field_validator("encoder_keys", "decoder_keys")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"{value!r} is not a regular expression ({exc})") from None
        return value


def select_entries(env: EnvInfo, keys: str, field: str) -> dict[str, ObsEntry]:
    """The entries of ``env`` whose names ``keys`` fully matches, in the env's order; a
    :class:`SpecError` naming the field when none is selected or the images differ in size."""
    chosen = {k: v for k, v in env.obs_space if re.fullmatch(keys, k)}
    if not chosen:
        raise SpecError(f"model.{field}={keys!r} selects none of env {env.name!r}'s observation entries "
                        f"({env.describe_obs()}); match at least one name")
    sizes = {v.shape[1:] for v in chosen.values() if v.kind == "image"}
    if len(sizes) > 1:
        raise SpecError(f"model.{field}={keys!r} selects images of different sizes ({env.describe_obs()}); "
                        "one CNN reads them stacked along channels: select images of one size")
    return chosen


def _split(entries: dict[str, ObsEntry]) -> tuple[list[str], list[str], tuple[int, int, int] | None, int]:
    images = [k for k, v in entries.items() if v.kind == "image"]
    vectors = [k for k, v in entries.items() if v.kind == "vector"]
    shape = None
    if images:
        _, height, width = entries[images[0]].shape
        shape = (sum(entries[k].shape[0] for k in images), height, width)
    return images, vectors, shape, sum(entries[k].shape[0] for k in vectors)


def _rename_legacy(module: nn.Module, names: tuple[str, ...]) -> None:
    """Load a pixel model's weights saved before the spec (``<prefix>net.*``) into ``cnn``."""

    def hook(state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        for key in [k for k in state_dict if k.startswith(tuple(prefix + n + "." for n in names))]:
            state_dict[prefix + "cnn." + key[len(prefix):]] = state_dict.pop(key)

    module._register_load_state_dict_pre_hook(hook)


class ObsEncoder(Encoder):
    """The selected entries → one embedding ``[..., out_dim]``: images (stacked channels) by
    DreamerV3's CNN, ``symlog`` vectors (concatenated) by ``layers`` normed dense layers of
    ``units``; both concatenated.

    ``env``: the :class:`~wmzoo.interfaces.EnvInfo` the model is built for; ``keys``: the
    spec's ``encoder_keys`` (:class:`ObsKeysSpec`); ``depth``, ``stages``: the CNN's first-stage
    channels and stride-2 stages; ``units``, ``layers``: the vector MLP (``layers = 0``: the
    symlog vectors themselves). Validates what a spec can get wrong, as one-line
    :class:`~wmzoo.errors.SpecError` messages naming the field: ``keys`` selecting no entry or images
    of different sizes (:func:`select_entries`), ``stages`` that do not divide the image
    (``cnn_stages=7: a 64x64 image must be divisible by ...``).

    ``out_dim``: the embedding size, the CNN's flattened output (when an image is selected)
    plus the vector part (``units``, or the vectors' total size when ``layers = 0``; when a vector
    is selected); size what reads the embedding (a posterior net) with it.
    """

    def __init__(self, env: EnvInfo, keys: str, depth: int, stages: int, units: int, layers: int) -> None:
        super().__init__()
        self.entries = select_entries(env, keys, "encoder_keys")
        self.images, self.vectors, shape, width = _split(self.entries)
        self.cnn = ConvEncoder(shape, depth, stages) if shape is not None else None
        self.mlp = None
        if self.vectors:
            self.mlp = nn.Sequential(*[NormedLinear(width if i == 0 else units, units) for i in range(layers)])
        self.out_dim = (self.cnn.out_dim if self.cnn is not None else 0) + (
            (units if layers else width) if self.vectors else 0)
        _rename_legacy(self, ("net",))

    def forward(self, obs: Obs) -> Tensor:
        """Embeddings ``float [..., out_dim]`` of observations with any leading axes (``[B]`` from
        ``observe_step``, ``[B, T]`` from a batch): one uint8 ``[..., C, H, W]`` tensor for a
        pixel env, else a dict of the env's entries (entries not selected are ignored)."""
        entries = obs_entries(obs)
        parts = []
        if self.cnn is not None:
            parts.append(self.cnn(torch.cat([entries[k] for k in self.images], -3)))
        if self.mlp is not None:
            vector = torch.cat([entries[k].float() for k in self.vectors], -1)
            parts.append(self.mlp(symlog(vector)))
        return torch.cat(parts, -1) if len(parts) > 1 else parts[0]


class ObsDecoder(Decoder):
    """Features ``[..., in_dim]`` → the selected entries: images by DreamerV3's transposed CNN
    (mean in ``[0, 1]`` scale), vectors in ``symlog`` space by an MLP (``layers`` × ``units``).

    ``keys``: the spec's ``decoder_keys``; validated as :class:`ObsEncoder` validates its own.
    Train with :meth:`losses` (one loss per entry; log each as ``recon_<name>``), implement
    :meth:`~wmzoo.interfaces.WorldModel.decode` with :meth:`decode`.
    """

    def __init__(self, env: EnvInfo, keys: str, in_dim: int, depth: int, stages: int, units: int, layers: int) -> None:
        super().__init__()
        self.entries = select_entries(env, keys, "decoder_keys")
        self.images, self.vectors, shape, width = _split(self.entries)
        self.cnn = ConvDecoder(shape, in_dim, depth, stages) if shape is not None else None
        self.mlp = MLP(in_dim, width, units, layers) if self.vectors else None
        _rename_legacy(self, ("net", "linear"))

    def forward(self, features: Tensor) -> Obs:
        """Each selected entry's prediction (one tensor for a pixel env's ``image`` alone, as
        :data:`~wmzoo.interfaces.Obs`): images float ``[..., C, H, W]`` in ``[0, 1]`` scale,
        vectors ``symlog`` values ``[..., D]``."""
        return pack_obs(self.predict(features))

    def predict(self, features: Tensor) -> dict[str, Tensor]:
        """:meth:`forward` as a dict of the selected entries."""
        out: dict[str, Tensor] = {}
        if self.cnn is not None:
            sizes = [self.entries[k].shape[0] for k in self.images]
            out.update(zip(self.images, self.cnn(features).split(sizes, -3)))
        if self.mlp is not None:
            sizes = [self.entries[k].shape[0] for k in self.vectors]
            out.update(zip(self.vectors, self.mlp(features).split(sizes, -1)))
        return out

    def losses(self, features: Tensor, obs: Obs) -> dict[str, Tensor]:
        """Per entry, the negative log-likelihood up to constants, summed over the entry and
        averaged over the leading axes: images :func:`recon_loss`, vectors the symlog squared
        error ``Σ_d (pred_d − symlog(x_d))²`` (DreamerV3 §2, eq. 9, without its ½ as the image loss)."""
        entries = obs_entries(obs)
        out = {}
        for key, pred in obs_entries(self(features)).items():  # forward: its hooks see the call
            if key in self.images:
                out[key] = recon_loss(pred, entries[key])
            else:
                out[key] = (pred - symlog(entries[key].to(pred.dtype))).square().sum(-1).mean()
        return out

    def decode(self, features: Tensor) -> Obs:
        """The predicted observation: images uint8, vectors float32 (``symexp`` of the output);
        one tensor when the one entry decoded is a pixel env's ``image``."""
        out = {}
        for key, pred in obs_entries(self(features)).items():  # forward: its hooks see the call
            if key in self.images:
                out[key] = (pred.clamp(0, 1) * 255).round().to(torch.uint8)
            else:
                out[key] = symexp(pred).float()
        return pack_obs(out)


__all__ = ["ObsDecoder", "ObsEncoder", "ObsKeysSpec", "select_entries"]
