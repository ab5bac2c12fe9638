"""Pre-trained encoders read from a local folder: nothing downloads, at run time or ever.

The TokenWM paper (section 4) encodes frames with a pre-trained DINOv2 (Oquab et al., 2023) and
instructions with a pre-trained "Universal Sentence Encoder ... from Reimers & Gurevych (2019)"
(sentence-transformers). A user who has such a model on disk points a spec field at its folder:

- :class:`DINOv2Encoder`: a DINOv2 in Hugging Face format (``config.json`` + ``model.safetensors``,
  e.g. ``facebook/dinov2-large`` fetched with ``huggingface-cli download facebook/dinov2-large
  --local-dir DIR`` on a machine with network), read by ``transformers``;
- :class:`SentenceEncoder`: a sentence-transformers folder (e.g.
  ``sentence-transformers/distiluse-base-multilingual-cased-v2``, the paper's, or
  ``all-MiniLM-L6-v2``), read by ``sentence-transformers``.

Both are frozen. Neither is part of the model's parameters or ``state_dict``: a checkpoint does not
carry their weights (hundreds of MB), so the folder must be where the spec says whenever the model
is built (training, ``--resume``, ``wmzoo eval``). Both need the ``pretrained`` extra
(``pip install 'wmzoo[pretrained]'``); loading is lazy, so nothing imports them otherwise.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from wmzoo.errors import MissingDependencyError, WmzooError

#: DINOv2's input normalisation: ImageNet's channel mean and std (its image processor's defaults).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _require(module: str, field: str) -> ModuleType:
    """Import ``module`` or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingDependencyError(
            f"{field} needs the optional dependency {module!r} ({err}); install it with: pip install 'wmzoo[pretrained]'"
        ) from None


def _quiet(transformers: ModuleType) -> None:
    """No progress bars or info lines from loading a local model."""
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def _folder(path: str | Path, field: str, example: str) -> Path:
    folder = Path(path).expanduser()
    if not folder.is_dir():
        what = "a file, not the model's folder" if folder.exists() else "no such folder"
        raise WmzooError(f"{field}={str(path)!r}: {what}; point it at a local copy of the model "
                         f"(nothing downloads here; on a machine with network: {example})")
    return folder


def _weights_error(field: str, folder: Path, err: Exception) -> str:
    """One line for weights that do not load: the field, the weights file, and why. A pickle
    (``pytorch_model.bin``) is never unpickled: it is named as not a safetensors file."""
    files = [folder / name for name in ("model.safetensors", "pytorch_model.bin") if (folder / name).is_file()]
    where = str(files[0]) if files else str(folder)
    if type(err).__name__ == "UnpicklingError":
        return (f"{field}: {where} is not a safetensors or weights-only file and is not unpickled; "
                "save the model as model.safetensors (save_pretrained's default)")
    if type(err).__name__ == "SafetensorError":
        return f"{field}: {where} is not a readable safetensors file ({_first_line(err)})"
    return f"{field}={str(folder)!r}: its weights do not load ({_first_line(err)})"


class DINOv2Encoder(nn.Module):
    """z_t = f_φ(o_t) with a frozen pre-trained DINOv2: uint8 frames ``[..., 3, H, W]`` → patch tokens
    ``[..., N_z, D_z]`` (the last layer's, after DINOv2's final LayerNorm; the class and register
    tokens dropped). Frames are scaled to ``[0, 1]``, resized to ``size × size`` (bilinear,
    antialiased) and normalised with ImageNet's mean and std, as DINOv2's image processor does
    (without its crop: the whole frame is seen). ``N_z = (size / patch)²``, ``D_z`` the model's width.

    The network is held outside the module tree (``parameters()`` and ``state_dict()`` do not see
    it); ``.to()``/``.float()`` still move it, and it stays in eval mode."""

    def __init__(self, path: str | Path, size: int, field: str = "model.encoder_weights") -> None:
        super().__init__()
        folder = _folder(path, field, "huggingface-cli download facebook/dinov2-small --local-dir DIR")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        transformers = _require("transformers", field)
        _quiet(transformers)
        try:
            config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
        except (OSError, ValueError) as err:
            raise WmzooError(f"{field}={str(path)!r}: not a Hugging Face model folder ({_first_line(err)})") from None
        if config.model_type not in ("dinov2", "dinov2_with_registers"):
            raise WmzooError(f"{field}={str(path)!r} holds a {config.model_type!r} model; it must be a DINOv2 "
                             "(model_type dinov2 or dinov2_with_registers)")
        if size % config.patch_size:
            raise WmzooError(f"model.encoder_size={size} must be a multiple of the DINOv2 patch size {config.patch_size}")
        try:
            model = transformers.AutoModel.from_pretrained(folder, local_files_only=True)
        except Exception as err:  # noqa: BLE001 - safetensors, pickle and transformers raise many types
            raise WmzooError(_weights_error(field, folder, err)) from None
        model.eval().requires_grad_(False)
        self.__dict__["model"] = model  # not a submodule: kept out of parameters() and state_dict()
        self.size, self.patch = size, config.patch_size
        self.skip = 1 + getattr(config, "num_register_tokens", 0)  # the class token, then the registers
        self.tokens, self.dim = (size // config.patch_size) ** 2, config.hidden_size
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(3, 1, 1), persistent=False)

    def _apply(self, fn: Any, recurse: bool = True) -> DINOv2Encoder:  # .to(device), .float(), ...
        self.__dict__["model"]._apply(fn, recurse)
        return super()._apply(fn, recurse)

    def train(self, mode: bool = True) -> DINOv2Encoder:
        super().train(mode)
        self.__dict__["model"].eval()  # frozen: dropout and the like stay off
        return self

    def pixel_values(self, obs: Tensor) -> Tensor:
        """uint8 ``[N, 3, H, W]`` → DINOv2's input ``[N, 3, size, size]``."""
        x = obs.float() / 255.0
        if x.shape[-2:] != (self.size, self.size):
            x = nn.functional.interpolate(x, size=(self.size, self.size), mode="bilinear", antialias=True,
                                          align_corners=False)
        return (x - self.mean) / self.std

    @torch.no_grad()
    def forward(self, obs: Tensor) -> Tensor:
        if obs.shape[-3] != 3:
            raise WmzooError(f"a DINOv2 encoder reads RGB frames; these have {obs.shape[-3]} channels")
        lead = obs.shape[:-3]
        hidden = self.__dict__["model"](pixel_values=self.pixel_values(obs.reshape(-1, *obs.shape[-3:]))).last_hidden_state
        z = hidden[:, self.skip:]
        return z.reshape(*lead, *z.shape[-2:])


class SentenceEncoder:
    """c = a frozen pre-trained sentence embedding of an instruction (sentence-transformers: its
    tokenizer, transformer, pooling and whatever modules the folder lists). Each distinct
    instruction is embedded once and cached; :attr:`dim` is the embedding's width."""

    def __init__(self, path: str | Path, field: str = "policy.text_encoder") -> None:
        folder = _folder(path, field, "huggingface-cli download sentence-transformers/all-MiniLM-L6-v2 --local-dir DIR")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        library = _require("sentence_transformers", field)
        _quiet(_require("transformers", field))
        try:
            self.model = library.SentenceTransformer(str(folder), device="cpu", local_files_only=True)
        except (OSError, ValueError, RuntimeError) as err:
            raise WmzooError(f"{field}={str(path)!r}: not a sentence-transformers model folder ({_first_line(err)})") from None
        self.model.eval()
        width = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        dim = width()  # sentence-transformers 6 renamed it
        if not dim:
            raise WmzooError(f"{field}={str(path)!r}: the model does not say its embedding width")
        self.dim: int = int(dim)
        self._cache: dict[str, np.ndarray] = {}

    def encode(self, text: str) -> np.ndarray:
        """``float32 [dim]``: the embedding of ``text``."""
        if text not in self._cache:
            with torch.no_grad():
                self._cache[text] = np.asarray(self.model.encode([text], convert_to_numpy=True)[0], np.float32)
        return self._cache[text]


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
