"""Small TensorFlow graphs as their teams write them, for graph-level fusion
tests (tests/test_graph_fuse.py) and the zoo (benchmarks/zoo.py): each with a
numpy float64 forward pass from the same weights (the independent reference)
and planted near misses that must not fuse.

- `detector()`: Keras Conv(bias)-BN-LeakyReLU, ZeroPadding + Conv-BN-LeakyReLU,
  LayerNormalization, Dense; plus a LayerNormalization over axis 1 (a near miss);
  saved with `model.export`.
- `HandWritten`: a tf.Module (no Keras) with a tf.pad + VALID conv +
  FusedBatchNormV3 (inference) + Maximum(y, a*y) block, layer norms as
  tf.nn.moments + rsqrt, tf.nn.batch_normalization and a bare mean /
  squared-difference / rsqrt chain (no scale, no center); near misses: a layer
  norm over axis 1, one with its epsilon outside the square root, a BN in
  training mode, a conv + bias + LeakyReLU with no BN.
"""
from __future__ import annotations

import numpy as np

from bridge.ops import fused_layer_norm as _ln
from bridge.ops import yolo_conv_bn_leaky as _conv


def _leaky(z, a):
    return np.where(z > 0, z, a * z)


def _conv_ref(x, w, pads=(0, 0, 0, 0), strides=(1, 1), padding=None):
    if padding == "SAME":
        pads, _ = _conv.resolve_pads(x.shape, w.shape, (1, *strides, 1), "SAME", (), (1, 1, 1, 1))
    return _conv.conv2d_nhwc(x, w, pads, strides, (1, 1))


def _ln_ref(x, g=None, b=None, eps=1e-3):
    h = x.shape[-1]
    return _ln.SPEC.reference(x, np.ones(h) if g is None else g, np.zeros(h) if b is None else b, epsilon=eps)


# -- a Keras detector, saved with model.export ----------------------------------------
def detector(seed: int = 0):
    import keras
    L = keras.layers
    x = inp = keras.Input((8, 8, 3), name="image")
    x = L.Conv2D(8, 3, padding="same", use_bias=True, name="c1")(x)
    x = L.BatchNormalization(name="bn1")(x)
    x = L.LeakyReLU(0.1, name="l1")(x)
    x = L.ZeroPadding2D(((1, 0), (1, 0)), name="zp")(x)
    x = L.Conv2D(12, 3, strides=2, padding="valid", use_bias=False, name="c2")(x)
    x = L.BatchNormalization(epsilon=1e-2, name="bn2")(x)
    x = L.LeakyReLU(0.2, name="l2")(x)
    x = L.Reshape((16, 12), name="tokens")(x)
    t = L.LayerNormalization(epsilon=1e-3, name="ln")(x)
    a1 = L.LayerNormalization(axis=1, name="ln_axis1")(x)   # near miss: over the tokens, not the features
    out = L.Dense(5, name="head")(L.Add()([t, a1]))
    m = keras.Model(inp, out, name="detector")
    rng = np.random.default_rng(seed)
    for w in m.weights:
        v = rng.random(w.shape) + 0.5 if "variance" in w.path else rng.standard_normal(w.shape) * 0.5
        w.assign(v.astype("float32"))
    return m


def detector_reference(m, x):
    """The detector in numpy float64 from its weights."""
    W = {l.name: [w.numpy().astype(np.float64) for w in l.weights] for l in m.layers}

    def bn(z, name, eps):
        g, b, mean, var = W[name]
        return (z - mean) / np.sqrt(var + eps) * g + b
    x = np.asarray(x, np.float64)
    k, bias = W["c1"]
    h = _leaky(bn(_conv_ref(x, k, padding="SAME") + bias, "bn1", 1e-3), 0.1)
    h = np.pad(h, ((0, 0), (1, 0), (1, 0), (0, 0)))
    h = _leaky(bn(_conv_ref(h, W["c2"][0], strides=(2, 2)), "bn2", 1e-2), 0.2)
    t = h.reshape(len(x), 16, 12)
    ln = _ln_ref(t, *W["ln"], eps=1e-3)
    g, b = W["ln_axis1"]
    mean, var = t.mean(axis=1, keepdims=True), t.var(axis=1, keepdims=True)
    a1 = (t - mean) / np.sqrt(var + 1e-3) * g[:, None] + b[:, None]
    k, bias = W["head"]
    return (ln + a1) @ k + bias


# -- a tf.Module that writes its blocks by hand ---------------------------------------
EPS = 1e-3
# what the hand-written module fuses, and the near misses it plants (pattern -> count)
HAND_FUSED = {"layer_norm": 3, "conv_bn_leaky": 1, "zero_padding": 1}
HAND_SKIPPED = {"layer_norm": 2, "conv_bn_leaky": 2}


def hand_weights(seed: int = 0):
    rng = np.random.default_rng(seed)
    f = lambda *s: rng.standard_normal(s) * 0.5  # noqa: E731
    return dict(w1=f(3, 3, 4, 6), g1=f(6) + 1, b1=f(6), m1=f(6), v1=rng.random(6) + 0.5,
                w2=f(1, 1, 4, 6), g2=f(6) + 1, b2=f(6), w3=f(3, 3, 4, 6), c3=f(6),
                lg=f(6) + 1, lb=f(6), ng=f(6) + 1, nb=f(6), eg=f(6), ag=f(64), ab=f(64))


def hand_module(seed: int = 0):
    import tensorflow as tf
    W = {k: tf.Variable(v.astype("float32"), name=k) for k, v in hand_weights(seed).items()}

    class HandWritten(tf.Module):
        def __init__(self):
            super().__init__(name="hand_written")
            self.w = W

        @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 4], tf.float32, name="image")])
        def __call__(self, image):
            w = self.w
            # tf.pad + VALID conv + FusedBatchNormV3 (inference) + Maximum(y, 0.1 y): fuses
            p = tf.pad(image, [[0, 0], [1, 1], [1, 1], [0, 0]])
            c = tf.nn.conv2d(p, w["w1"], 1, "VALID")
            y, *_ = tf.compat.v1.nn.fused_batch_norm(c, w["g1"], w["b1"], w["m1"], w["v1"], epsilon=EPS,
                                                     is_training=False)
            h = tf.maximum(y, 0.1 * y)
            # near miss: a BN in training mode (batch statistics)
            c2 = tf.nn.conv2d(image, w["w2"], 1, "SAME")
            y2, *_ = tf.compat.v1.nn.fused_batch_norm(c2, w["g2"], w["b2"], epsilon=EPS, is_training=True)
            t2 = tf.nn.leaky_relu(y2, 0.1)
            # near miss: conv + bias + LeakyReLU, no BN
            t3 = tf.nn.leaky_relu(tf.nn.bias_add(tf.nn.conv2d(image, w["w3"], 1, "SAME"), w["c3"]), 0.1)
            r = tf.reshape(h + t2 + t3, [-1, 64, 6])
            # tf.nn.moments + rsqrt, scale and center: fuses
            mean, var = tf.nn.moments(r, [-1], keepdims=True)
            a = (r - mean) * tf.math.rsqrt(var + EPS) * w["lg"] + w["lb"]
            # tf.nn.batch_normalization over the last axis: fuses
            mean, var = tf.nn.moments(a, [2], keepdims=True)
            b = tf.nn.batch_normalization(a, mean, var, w["nb"], w["ng"], EPS)
            # mean / squared difference / rsqrt, no scale, no center: fuses
            m = tf.reduce_mean(b, -1, keepdims=True)
            v = tf.reduce_mean(tf.math.squared_difference(b, m), -1, keepdims=True)
            c = (b - m) * tf.math.rsqrt(v + EPS)
            # near miss: epsilon outside the square root
            m = tf.reduce_mean(c, -1, keepdims=True)
            v = tf.reduce_mean(tf.square(c - m), -1, keepdims=True)
            d = (c - m) / (tf.sqrt(v) + EPS) * w["eg"]
            # near miss: over axis 1 (the 64 tokens), not the last axis
            m, v = tf.nn.moments(d, [1], keepdims=True)
            e = (d - m) * tf.math.rsqrt(v + EPS) * w["ag"][:, None] + w["ab"][:, None]
            return {"features": e, "boxes": h}

    return HandWritten()


def hand_reference(x, seed: int = 0):
    """The hand-written module in numpy float64."""
    w = {k: v.astype(np.float32).astype(np.float64) for k, v in hand_weights(seed).items()}
    x = np.asarray(x, np.float64)
    c = _conv_ref(np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0))), w["w1"])
    y = (c - w["m1"]) / np.sqrt(w["v1"] + EPS) * w["g1"] + w["b1"]
    h = np.maximum(y, 0.1 * y)
    c2 = _conv_ref(x, w["w2"], padding="SAME")
    mean, var = c2.mean(axis=(0, 1, 2)), c2.var(axis=(0, 1, 2))
    t2 = _leaky((c2 - mean) / np.sqrt(var + EPS) * w["g2"] + w["b2"], 0.1)
    t3 = _leaky(_conv_ref(x, w["w3"], padding="SAME") + w["c3"], 0.1)
    r = (h + t2 + t3).reshape(-1, 64, 6)
    a = _ln_ref(r, w["lg"], w["lb"], EPS)
    b = _ln_ref(a, w["ng"], w["nb"], EPS)
    c = _ln_ref(b, eps=EPS)
    m, v = c.mean(-1, keepdims=True), c.var(-1, keepdims=True)
    d = (c - m) / (np.sqrt(v) + EPS) * w["eg"]
    m, v = d.mean(1, keepdims=True), d.var(1, keepdims=True)
    e = (d - m) / np.sqrt(v + EPS) * w["ag"][:, None] + w["ab"][:, None]
    return {"features": e, "boxes": h}


def frozen_pb(module, path):
    """The module's function frozen with convert_variables_to_constants_v2 and
    written as a TF1 GraphDef; returns (input tensor names, output tensor names)."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
    cf = module.__call__.get_concrete_function()
    frozen = convert_variables_to_constants_v2(cf)
    with open(path, "wb") as f:
        f.write(frozen.graph.as_graph_def().SerializeToString())
    keys = sorted(cf.structured_outputs)
    return [t.name for t in frozen.inputs], dict(zip(keys, [t.name for t in frozen.outputs]))
