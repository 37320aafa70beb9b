"""Realistic random weights for the built-in models.

Weights are drawn with numpy from one seed, in the model's weight order, so a
model is the same for a given seed whatever Keras' global random state is. They
are "realistic" in the sense that matters for parity tests: BatchNorm and
LayerNorm parameters are far from their identity values (gamma 1, beta 0, mean
0, variance 1), so a fusion that drops or double-counts one of them shows.
"""
from __future__ import annotations

import numpy as np


def he_normal(rng, shape, fan_in, gain=2.0):
    return (rng.standard_normal(shape) * np.sqrt(gain / max(1, fan_in))).astype(np.float32)


def norm_scale_shift(rng, n, scale=(0.5, 1.5), shift=0.2):
    """gamma, beta for a normalisation layer: never the identity."""
    gamma = rng.uniform(*scale, size=n).astype(np.float32)
    beta = (rng.standard_normal(n) * shift).astype(np.float32)
    return gamma, beta


def calibrate_batchnorm(model, sample, rng, mean_jitter=0.1, var_range=(0.6, 1.5)):
    """Sets every BatchNormalization's moving statistics from the statistics of its
    input on `sample`, jittered, walking the graph once in order.

    Trained BatchNorm statistics track the data; random ones make activations
    explode or vanish over 75 layers. Calibrating layer by layer keeps every
    block's output of order 1 (as in a trained network) while mean/variance stay
    far from 0/1, which is what folding bugs need to show.
    """
    import keras
    from keras import ops

    def operation_fn(op):
        if not isinstance(op, keras.layers.BatchNormalization):
            return op

        def call(x, *args, **kwargs):
            axes = tuple(a for a in range(len(x.shape)) if a != op.axis % len(x.shape))
            mean = ops.convert_to_numpy(ops.mean(x, axis=axes)).astype(np.float64)
            var = ops.convert_to_numpy(ops.var(x, axis=axes)).astype(np.float64)
            std = np.sqrt(var)
            op.moving_mean.assign((mean + mean_jitter * std * rng.standard_normal(mean.shape)).astype(np.float32))
            op.moving_variance.assign((var * rng.uniform(*var_range, size=var.shape) + 1e-3).astype(np.float32))
            return op(x, *args, **kwargs)
        return call

    model._run_through_graph(sample, operation_fn=operation_fn)
