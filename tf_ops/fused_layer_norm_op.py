"""FusedLayerNorm in TensorFlow: the public wrapper, the composite and the gradient.

`op` runs the C++ kernel (fused_layer_norm.cc); `composite` computes the same from
standard TF ops (what TFLite builtins and standard ONNX get when the model is
lowered); the gradient is registered on import.
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


def composite(x, gamma, beta, epsilon=_EPSILON, name=None):
    """The same math from standard TF ops (float16 computed in float32, as the kernel does)."""
    attrs = SPEC.resolve({"epsilon": epsilon})
    x, gamma, beta = _inputs(x, gamma, beta)
    SPEC.infer_shapes([_shape(x), _shape(gamma), _shape(beta)], **attrs)
    with tf.name_scope(name or "FusedLayerNormComposite"):
        dtype = x.dtype
        if dtype != tf.float32:
            x, gamma, beta = (tf.cast(t, tf.float32) for t in (x, gamma, beta))
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        centred = x - mean
        var = tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True)
        y = centred * tf.math.rsqrt(var + attrs["epsilon"]) * gamma + beta
        return tf.cast(y, dtype) if dtype != tf.float32 else y


def _shape(t):
    return None if t.shape.rank is None else tuple(t.shape.as_list())


@tf.RegisterGradient(SPEC.name)
def _gradient(op_, dy):
    """d/dx, d/dgamma, d/dbeta, in float32 for float16 (as the forward accumulates),
    from TF ops so that second derivatives compose."""
    x, gamma, _ = op_.inputs
    epsilon = op_.get_attr("epsilon")
    dtype = x.dtype
    x32, g32, dy32 = (tf.cast(t, tf.float32) for t in (x, gamma, dy))
    mean = tf.reduce_mean(x32, axis=-1, keepdims=True)
    centred = x32 - mean
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
