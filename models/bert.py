"""A BERT-style encoder from standard Keras 3 layers.

Token + position (+ segment 0) embeddings, LayerNormalization, then per layer:
MultiHeadAttention, residual, LayerNormalization, Dense-GELU-Dense, residual,
LayerNormalization (post-norm, as BERT). Inputs: `token_ids` and `attention_mask`
(int32, [N, L]); output: the sequence output [N, L, hidden].

Three small layers have no standard Keras equivalent that exports cleanly, so they
are written here as a user would: `PositionEmbedding`, `Gelu` (with erf:
`tf.nn.gelu(approximate=False)` lowers to Erfc, which tf2onnx 1.17 cannot convert)
and `MaskedMeanPooling` (for sentence embeddings).
"""
from __future__ import annotations

import math

import numpy as np

import keras
import tensorflow as tf

from . import weights as _w

DEFAULT_SEQ_LEN = 128
DEFAULTS = dict(layers=2, hidden=128, heads=2, intermediate=512, vocab_size=30522, max_position=512,
                type_vocab=2, epsilon=1e-12)


@keras.saving.register_keras_serializable(package="bridge")
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned position embedding (rows 0..L-1) and the embedding of
    segment 0 to token embeddings [N, L, H]."""

    def __init__(self, max_position=512, type_vocab=2, **kwargs):
        super().__init__(**kwargs)
        self.max_position = int(max_position)
        self.type_vocab = int(type_vocab)

    def build(self, input_shape):
        hidden = input_shape[-1]
        self.positions = self.add_weight(shape=(self.max_position, hidden), name="positions", initializer="zeros")
        self.types = self.add_weight(shape=(max(1, self.type_vocab), hidden), name="types", initializer="zeros")

    def call(self, x):
        length = tf.shape(x)[1]
        return x + tf.cast(self.positions[:length] + self.types[0], x.dtype)[tf.newaxis]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "max_position": self.max_position, "type_vocab": self.type_vocab}


@keras.saving.register_keras_serializable(package="bridge")
class Gelu(keras.layers.Layer):
    """Exact GELU, x * Phi(x), written with erf."""

    def call(self, x):
        return 0.5 * x * (1.0 + tf.math.erf(x * (1.0 / math.sqrt(2.0))))

    def compute_output_shape(self, input_shape):
        return input_shape


@keras.saving.register_keras_serializable(package="bridge")
class MaskedMeanPooling(keras.layers.Layer):
    """Mean over the tokens whose mask is 1 (sentence-transformers' mean pooling)."""

    def call(self, x, mask):
        m = tf.cast(mask, x.dtype)[:, :, tf.newaxis]
        return tf.reduce_sum(x * m, axis=1) / tf.maximum(tf.reduce_sum(m, axis=1), 1e-9)

    def compute_output_shape(self, x_shape, mask_shape=None):
        return (x_shape[0], x_shape[2])


def _config(config):
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"bert: unknown config {unknown}; known: {sorted(DEFAULTS)}")
    cfg = {**DEFAULTS, **config}
    if cfg["hidden"] % cfg["heads"]:
        raise ValueError(f"bert: argument 'hidden': {cfg['hidden']} is not divisible by heads={cfg['heads']}")
    for key in ("layers", "hidden", "heads", "intermediate", "vocab_size", "max_position"):
        if int(cfg[key]) < 1:
            raise ValueError(f"bert: argument '{key}': must be >= 1, got {cfg[key]}")
    return cfg


DYNAMIC = "?"  # input_size for a model that takes any sequence length (up to max_position)


def _seq_len(input_size, cfg, model="bert"):
    """The static sequence length, or None for DYNAMIC."""
    if input_size == DYNAMIC:
        return None
    length = DEFAULT_SEQ_LEN if input_size is None else input_size
    if not isinstance(length, (int, np.integer)) or not 1 <= length <= cfg["max_position"]:
        raise ValueError(f"{model}: argument 'input_size' (sequence length): must be an int in "
                         f"[1, max_position={cfg['max_position']}] or {DYNAMIC!r} (any length), got {input_size!r}")
    return int(length)


def encoder(length, cfg):
    """(inputs [token_ids, attention_mask], sequence output) of a BERT encoder;
    `length` None: any sequence length (the position embedding takes the first L rows)."""
    hidden, heads = cfg["hidden"], cfg["heads"]
    ids = keras.Input((length,), dtype="int32", name="token_ids")
    mask = keras.Input((length,), dtype="int32", name="attention_mask")
    x = keras.layers.Embedding(cfg["vocab_size"], hidden, embeddings_initializer="zeros", name="token_embedding")(ids)
    x = PositionEmbedding(cfg["max_position"], cfg["type_vocab"], name="position_embedding")(x)
    x = keras.layers.LayerNormalization(epsilon=cfg["epsilon"], name="embedding_norm")(x)
    # [N, L] -> [N, 1, L]: MultiHeadAttention broadcasts it over the query positions
    mask3 = keras.layers.Reshape((1, -1 if length is None else length), name="attention_mask_3d")(mask)
    for i in range(cfg["layers"]):
        p = f"layer{i}_"
        a = keras.layers.MultiHeadAttention(heads, hidden // heads, name=p + "attention")(x, x, attention_mask=mask3)
        x = keras.layers.Add(name=p + "attention_residual")([x, a])
        x = keras.layers.LayerNormalization(epsilon=cfg["epsilon"], name=p + "attention_norm")(x)
        f = keras.layers.Dense(cfg["intermediate"], name=p + "intermediate")(x)
        f = Gelu(name=p + "gelu")(f)
        f = keras.layers.Dense(hidden, name=p + "output")(f)
        x = keras.layers.Add(name=p + "output_residual")([x, f])
        x = keras.layers.LayerNormalization(epsilon=cfg["epsilon"], name=p + "output_norm")(x)
    return [ids, mask], x


def bert(input_size=None, seed=0, name="bert", **config):
    cfg = _config(config)
    inputs, out = encoder(_seq_len(input_size, cfg), cfg)
    model = keras.Model(inputs, out, name=name)
    _randomize(model, seed)
    return model


def sample_tokens(batch, length, vocab_size, seed=0):
    """{token_ids, attention_mask}: each row a [CLS]-like first token, random ids in
    [1, vocab) and some padding (id 0, mask 0) at the end of all rows but the first."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab_size, size=(batch, length), dtype=np.int32)
    mask = np.ones((batch, length), dtype=np.int32)
    for r in range(1, batch):
        used = int(rng.integers(max(1, length // 2), length + 1))
        ids[r, used:] = 0
        mask[r, used:] = 0
    return {"token_ids": ids, "attention_mask": mask}


def _randomize(model, seed):
    """Every weight distinct (never one initializer for several layers: facts.md),
    dense kernels scaled 1/sqrt(fan_in) so sublayer outputs are of order 1, norm
    gamma/beta far from 1/0."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, keras.layers.LayerNormalization):
            gamma, beta = _w.norm_scale_shift(rng, layer.gamma.shape[0])
            layer.gamma.assign(gamma)
            layer.beta.assign(beta)
            continue
        for v in layer.weights:
            shape = tuple(v.shape)
            if isinstance(layer, (keras.layers.Embedding, PositionEmbedding)):
                value = rng.standard_normal(shape) * 0.5
            elif len(shape) == 1 or (isinstance(layer, keras.layers.MultiHeadAttention) and "bias" in v.path):
                value = rng.standard_normal(shape) * 0.1
            else:
                fan_in = int(np.prod(shape[:-1])) if not (isinstance(layer, keras.layers.MultiHeadAttention)
                                                           and len(shape) == 3) else _mha_fan_in(v, shape)
                value = rng.standard_normal(shape) / np.sqrt(fan_in)
            v.assign(value.astype(np.float32))


def _mha_fan_in(v, shape):
    # query/key/value kernels are [hidden, heads, head_dim]; the output kernel [heads, head_dim, hidden]
    return shape[0] if "attention_output" not in v.path else shape[0] * shape[1]
