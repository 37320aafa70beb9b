"""What every fused Keras layer shares (each op's own is its folder's keras_layer.py;
any other spec'd op's is fuse_layers.FusedOp): the base layer that records the
layers it replaces, the op library loaded on first use, and the op's shape
function with Keras's error type. Its own module so that the op folders' layers
need nothing of fuse_layers, which loads them."""
from __future__ import annotations

import keras

from bridge import ops as _specs


def tf_ops():
    from bridge import tf_ops as loaded  # loads (or builds) the op library on first use
    return loaded


def static_shape(shape):
    return None if shape is None else tuple(shape)


def infer_shapes(spec, shapes, **attrs):
    """spec.infer_shapes, raising a plain ValueError with the OpError's message:
    Keras re-raises errors from a layer call as `type(e)(message)`, which an
    OpError's constructor does not take (it would surface as a RuntimeError)."""
    try:
        return spec.infer_shapes(shapes, **attrs)
    except _specs.OpError as e:
        raise ValueError(str(e)) from e


class Fused(keras.layers.Layer):
    """`replaces`: the names of the original layers a fused layer stands for."""

    def __init__(self, replaces=(), **kwargs):
        super().__init__(**kwargs)
        self.replaces = [str(n) for n in replaces]

    def get_config(self):
        return {**super().get_config(), "replaces": list(self.replaces)}


class EagerKernel:
    """A plain holder of a layer's own tf.function (neither Keras nor SavedModel tracks it)."""

    def __init__(self, fn):
        self.fn = fn
