"""Building blocks shared by several backbones and policies (each lives here once).

A plugin imports what it builds from here (``from wmzoo.nn import ConvEncoder, Tokenizer``):

- pixels: :class:`ConvEncoder` / :class:`ConvDecoder` (DreamerV3's CNN) and :func:`recon_loss`;
- any observation spec: :class:`ObsEncoder` / :class:`ObsDecoder` (CNN for images, symlog MLP for
  vectors, per-entry losses) with the key selection of :class:`ObsKeysSpec`;
- latent-state backbones: :class:`CategoricalLatent` with :func:`kl_loss` (KL balancing, free
  bits), :class:`LatentWorldModelSpec` and :class:`LatentWorldModel` (encoder → your dynamics →
  decoder + heads) with :func:`latent_objective`;
- token backbones: the VQ :class:`Tokenizer` (:class:`TokenizerSpec`: REM's or IRIS's nets) and
  :func:`next_token_accuracy`; quantisers (:class:`VectorQuantizer`, the loss-trained codebook of
  IRIS/REM; :class:`CosineEMAQuantizer`, Δ-IRIS's factorised cosine codebook with EMA updates and
  dead-code revival; both return :class:`Quantized`); a GPT (:class:`CausalTransformer` with a
  :class:`KVCache` and episode masks, :func:`init_gpt_weights`); a RetNet (:class:`RetNet`, :class:`RetNetSpec`: parallel, recurrent
  and chunkwise retention);
- heads and targets: :class:`RewardContinueHeads` (two-hot reward, continue); the token models'
  :class:`TokenHead`, :class:`SignRewardHead` (3 sign classes), :class:`TwoHotRewardHead` (Δ-IRIS's Crafter reward) and :class:`EndHead` (2 classes)
  with :func:`sample_class`; :func:`encode_action`,
  :func:`reward_cont_targets`, :func:`start_conts`, :func:`masked_mean`;
- distributions and layers: :class:`TwoHot`, :func:`symlog` / :func:`symexp`,
  :class:`OneHotCategoricalST`, :func:`gaussian_sample`, :func:`unimix_logits`, :class:`MLP`,
  :class:`NormedLinear`; :func:`modes` makes every draw above its mode (for equivalence tests).
"""

from wmzoo.nn.cnn import ConvDecoder, ConvEncoder, recon_loss
from wmzoo.nn.distributions import (
    OneHotCategoricalST,
    TwoHot,
    gaussian_sample,
    modes,
    symexp,
    symlog,
    unimix_logits,
)
from wmzoo.nn.heads import (
    EndHead,
    RewardContinueHeads,
    SignRewardHead,
    TokenHead,
    TwoHotRewardHead,
    encode_action,
    masked_mean,
    reward_cont_targets,
    sample_class,
    start_conts,
)
from wmzoo.nn.latent import CategoricalLatent, KLSpec, kl_loss, sample_latent
from wmzoo.nn.mlp import MLP, NormedLinear
from wmzoo.nn.obs import ObsDecoder, ObsEncoder, ObsKeysSpec, select_entries
from wmzoo.nn.quantizer import CosineEMAQuantizer, Quantized, VectorQuantizer
from wmzoo.nn.retention import RetNet, RetNetSpec
from wmzoo.nn.specs import LatentWorldModelSpec
from wmzoo.nn.tokenizer import Tokenizer, TokenizerSpec, next_token_accuracy
from wmzoo.nn.transformer import CausalTransformer, KVCache, init_gpt_weights, restart_positions
from wmzoo.nn.world_model import LatentWorldModel, latent_objective

__all__ = [
    "gaussian_sample",
    "modes",
    "sample_class",
    "TokenHead",
    "SignRewardHead",
    "TwoHotRewardHead",
    "EndHead",
    "MLP",
    "CategoricalLatent",
    "CausalTransformer",
    "ConvDecoder",
    "ConvEncoder",
    "CosineEMAQuantizer",
    "KLSpec",
    "KVCache",
    "LatentWorldModel",
    "LatentWorldModelSpec",
    "NormedLinear",
    "ObsDecoder",
    "ObsEncoder",
    "ObsKeysSpec",
    "OneHotCategoricalST",
    "Quantized",
    "RetNet",
    "RetNetSpec",
    "RewardContinueHeads",
    "Tokenizer",
    "TokenizerSpec",
    "TwoHot",
    "VectorQuantizer",
    "encode_action",
    "init_gpt_weights",
    "restart_positions",
    "kl_loss",
    "latent_objective",
    "masked_mean",
    "next_token_accuracy",
    "recon_loss",
    "reward_cont_targets",
    "sample_latent",
    "select_entries",
    "start_conts",
    "symexp",
    "symlog",
    "unimix_logits",
]
