"""Δ-IRIS (Micheli et al. 2024, "Efficient World Models with Context-Aware Tokenization").

So far only its context-aware discrete autoencoder, :mod:`.tokenizer`; the backbone (the
autoregressive transformer over I-tokens, actions and Δ-tokens) and its registration come later.
"""

from __future__ import annotations

from .tokenizer import ATARI, DeltaTokenizer, DeltaTokenizerSpec, FrameCnnSpec, FrameDecoder, FrameEncoder

__all__ = ["ATARI", "DeltaTokenizer", "DeltaTokenizerSpec", "FrameCnnSpec", "FrameDecoder", "FrameEncoder"]
