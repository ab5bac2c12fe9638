"""Small pre-trained-model folders in the formats a user downloads (written here: nothing is fetched).

- :func:`write_dinov2`: a DINOv2 in Hugging Face format (``config.json`` + ``model.safetensors``),
  as ``huggingface-cli download facebook/dinov2-small --local-dir DIR`` lays it out, with random
  weights and a tiny width;
- :func:`write_sentence_encoder`: a sentence-transformers folder (``modules.json``, a BERT with its
  WordPiece tokenizer, mean pooling), as ``SentenceTransformer.save`` writes it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

WORDS = ["go", "to", "the", "red", "blue", "green", "ball", "box", "key", "pick", "up", "a", "put", "next"]


def write_dinov2(folder: Path, size: int = 16, patch: int = 4, width: int = 32, registers: int = 0) -> Path:
    transformers = pytest.importorskip("transformers")
    import torch

    torch.manual_seed(0)
    kwargs = dict(hidden_size=width, num_hidden_layers=1, num_attention_heads=4, mlp_ratio=2, image_size=size,
                  patch_size=patch, layerscale_value=1.0)
    if registers:
        config = transformers.Dinov2WithRegistersConfig(num_register_tokens=registers, **kwargs)
        model = transformers.Dinov2WithRegistersModel(config)
    else:
        model = transformers.Dinov2Model(transformers.Dinov2Config(**kwargs))
    model.save_pretrained(folder)
    return folder


def write_sentence_encoder(folder: Path, width: int = 24) -> Path:
    transformers = pytest.importorskip("transformers")
    st = pytest.importorskip("sentence_transformers")
    import torch

    torch.manual_seed(0)
    bert = folder.parent / f"{folder.name}-bert"
    bert.mkdir(parents=True, exist_ok=True)
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    try:  # transformers 5 takes the vocabulary itself
        tokenizer = transformers.BertTokenizerFast(vocab=vocab)
    except TypeError:
        (bert / "vocab.txt").write_text("\n".join(vocab) + "\n")
        tokenizer = transformers.BertTokenizerFast(vocab_file=str(bert / "vocab.txt"))
    assert tokenizer("go to")["input_ids"] == [2, 5, 6, 3], "the fake tokenizer must know the words"
    tokenizer.save_pretrained(bert)
    config = transformers.BertConfig(vocab_size=5 + len(WORDS), hidden_size=width, num_hidden_layers=1,
                                     num_attention_heads=4, intermediate_size=2 * width, max_position_embeddings=64)
    transformers.BertModel(config).save_pretrained(bert)
    try:  # sentence-transformers 6 moved its modules
        from sentence_transformers.sentence_transformer.modules import Dense, Pooling, Transformer
    except ImportError:
        from sentence_transformers.models import Dense, Pooling, Transformer
    # as distiluse-base-multilingual-cased (the paper's): transformer, mean pooling, a tanh Dense layer
    modules = [Transformer(str(bert), max_seq_length=32), Pooling(width, pooling_mode="mean"),
               Dense(width, width // 2, activation_function=torch.nn.Tanh())]
    st.SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    return folder
