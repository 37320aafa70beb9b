"""FusedLayerNorm in TensorFlow: the public wrapper and the gradient.

`op` runs the C++ kernel (the core bridge/ops/fused_layer_norm/kernel.h, hosted by host.cc); its composite (standard TF ops, what
TFLite builtins get when the model is lowered) is the spec's body on TfBody
(tf_ops/from_body.py); the gradient is registered on import: its first order is
the fused FusedLayerNormGrad op, higher orders differentiate the composite gradient.
"""
from __future__ import annotations

import tensorflow as tf

from bridge.ops import fused_layer_norm as _spec_module

SPEC = _spec_module.SPEC
_EPSILON = SPEC.attr("epsilon").default


def _inputs(x, gamma, beta):
    x = tf.convert_to_tensor(x)
    SPEC.check_dtype(x.dtype.as_numpy_dtype)
    return x, tf.convert_to_tensor(gamma, dtype_hint=x.dtype), tf.convert_to_tensor(beta, dtype_hint=x.dtype)


def op(x, gamma, beta, epsilon=_EPSILON, name=None):
    """y = gamma * (x - mean) / sqrt(var + epsilon) + beta over the last axis of x.

    Bad attributes raise ValueError (bridge.ops.OpError) here; bad shapes raise
    ValueError while tracing and tf.errors.InvalidArgumentError eagerly."""
    from bridge import tf_ops
    attrs = SPEC.resolve({"epsilon": epsilon})
    x, gamma, beta = _inputs(x, gamma, beta)
    return tf_ops.load().fused_layer_norm(x, gamma, beta, name=name, **attrs)


def _composite_gradient(dy, x, gamma, epsilon):
    """d/dx, d/dgamma, d/dbeta from TF ops, in float32 for float16 (as the forward
    accumulates): what the fused gradient op computes, differentiable again."""
    dtype = x.dtype
    x32, g32, dy32 = (tf.cast(t, tf.float32) for t in (x, gamma, dy))
    centred = x32 - tf.reduce_mean(x32, axis=-1, keepdims=True)
    centred -= tf.reduce_mean(centred, axis=-1, keepdims=True)  # as the forward
    rstd = tf.math.rsqrt(tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True) + epsilon)
    xhat = centred * rstd
    # gamma and beta broadcast over every leading axis of x: their gradients sum there.
    lead = tf.range(tf.rank(x32) - 1)
    dgamma = tf.reduce_sum(dy32 * xhat, axis=lead)
    dbeta = tf.reduce_sum(dy32, axis=lead)
    dxhat = dy32 * g32
    dx = rstd * (dxhat - tf.reduce_mean(dxhat, axis=-1, keepdims=True)
                 - xhat * tf.reduce_mean(dxhat * xhat, axis=-1, keepdims=True))
    return tf.cast(dx, dtype), tf.cast(dgamma, dtype), tf.cast(dbeta, dtype)


def gradient(dy, x, gamma, epsilon=_EPSILON, name=None):
    """(dx, dgamma, dbeta) of FusedLayerNorm at x for the output gradient dy, in one
    fused op (FusedLayerNormGrad: C++ on CPU, CUDA on GPU when built with --cuda)."""
    from bridge import tf_ops
    attrs = SPEC.resolve({"epsilon": epsilon})
    x, gamma, _ = _inputs(x, gamma, gamma)
    dy = tf.convert_to_tensor(dy, dtype_hint=x.dtype)
    return tuple(tf_ops.load().fused_layer_norm_grad(dy, x, gamma, name=name, **attrs))


@tf.RegisterGradient(SPEC.name)
def _gradient(op_, dy):
    """First order: the fused gradient op, one pass over dy and x."""
    from bridge import tf_ops
    x, gamma, _ = op_.inputs
    return tuple(tf_ops.load().fused_layer_norm_grad(dy, x, gamma, epsilon=op_.get_attr("epsilon")))


@tf.RegisterGradient("FusedLayerNormGrad")
def _gradient_of_gradient(op_, ddx, ddgamma, ddbeta):
    """Second order (and beyond): the composite gradient's own gradient."""
    dy, x, gamma = op_.inputs
    upstream = [g if g is not None else tf.zeros_like(t) for g, t in zip((ddx, ddgamma, ddbeta), op_.outputs)]
    with tf.GradientTape() as tape:
        tape.watch([dy, x, gamma])
        outs = _composite_gradient(dy, x, gamma, op_.get_attr("epsilon"))
    return tape.gradient(list(outs), [dy, x, gamma], output_gradients=upstream)
