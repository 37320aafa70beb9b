"""YoloConvBnLeaky's Keras layer: the fused Conv2D -> BatchNormalization -> LeakyReLU
layer. Host-side: imports Keras and
TensorFlow (bridge.converters.fused_layer_base); the spec never imports it;
bridge.converters.fuse_layers loads it by name."""
from __future__ import annotations

import keras
import tensorflow as tf

from bridge.converters.fused_layer_base import Fused, EagerKernel, infer_shapes, static_shape, tf_ops

from . import SPEC

__all__ = ["FusedConvBnLeaky"]


@keras.saving.register_keras_serializable(package="bridge")
class FusedConvBnLeaky(Fused):
    """Conv2D (+ bias) -> inference BatchNormalization -> LeakyReLU as one
    YoloConvBnLeaky. `kernel_size` is (KH, KW); the other attributes are the op's
    (strides [1,sh,sw,1], padding SAME/VALID/EXPLICIT, explicit_paddings,
    dilations, epsilon, alpha)."""

    def __init__(self, filters, kernel_size, use_bias=False, center=True, scale=True, strides=None, padding=None,
                 explicit_paddings=None, dilations=None, epsilon=None, alpha=None, **kwargs):
        super().__init__(**kwargs)
        self.filters = int(filters)
        self.kernel_size = tuple(int(k) for k in kernel_size)
        self.use_bias, self.center, self.scale = bool(use_bias), bool(center), bool(scale)
        self.op_attrs = SPEC.resolve(dict(strides=strides, padding=padding, explicit_paddings=explicit_paddings,
                                          dilations=dilations, epsilon=epsilon, alpha=alpha))

    def build(self, input_shape):
        c = self.filters
        self.kernel = self.add_weight(shape=(*self.kernel_size, input_shape[-1], c), name="kernel",
                                      initializer="glorot_uniform")
        self.bias = self.add_weight(shape=(c,), name="bias", initializer="zeros") if self.use_bias else None
        self.gamma = self.add_weight(shape=(c,), name="gamma", initializer="ones") if self.scale else None
        self.beta = self.add_weight(shape=(c,), name="beta", initializer="zeros") if self.center else None
        self.moving_mean = self.add_weight(shape=(c,), name="moving_mean", initializer="zeros", trainable=False)
        self.moving_variance = self.add_weight(shape=(c,), name="moving_variance", initializer="ones",
                                               trainable=False)

    def _params(self, dt):
        zeros, ones = tf.zeros([self.filters], dt), tf.ones([self.filters], dt)
        cast = lambda v, default: default if v is None else tf.cast(v, dt)  # noqa: E731
        return (tf.cast(self.kernel, dt), cast(self.bias, zeros), cast(self.gamma, ones), cast(self.beta, zeros),
                tf.cast(self.moving_mean, dt), tf.cast(self.moving_variance, dt))

    def _op(self, x):
        # The attributes were checked at construction: the raw op, without the
        # public wrapper's per-call re-checks (Python time that eager mode pays).
        return tf_ops().load().yolo_conv_bn_leaky(x, *self._params(x.dtype), **self.op_attrs)

    def call(self, x):
        ops = tf_ops()
        if ops.is_lowered():
            return ops.yolo_conv_bn_leaky(x, *self._params(x.dtype), **self.op_attrs)
        if tf.executing_eagerly():
            # TensorFlow shares one eager kernel among all layers with the same
            # attributes; through a function of its own this layer gets a kernel of
            # its own, whose packed filter (tf_ops/yolo_conv_bn_leaky.cc) then
            # survives from call to call. The holder is a plain object, so neither
            # Keras nor SavedModel tracks the function.
            holder = self.__dict__.get("_eager_kernel")
            if holder is None:
                fn = tf.function(self._op, autograph=False, reduce_retracing=True)
                # TensorFlow counts traces per code object, so seventy layers each
                # tracing its own function once read as "frequent retracing" and warn;
                # the flag is tf.function's own switch for that warning.
                fn._omit_frequent_tracing_warning = True
                holder = self.__dict__["_eager_kernel"] = EagerKernel(fn)
            return holder.fn(x)
        return self._op(x)

    def compute_outputstatic_shape(self, input_shape):
        c = (self.filters,)
        return infer_shapes(SPEC, [static_shape(input_shape), (*self.kernel_size, input_shape[-1], self.filters)] + [c] * 5,
                      **self.op_attrs)[0]

    def get_config(self):
        attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in self.op_attrs.items()}
        return {**super().get_config(), "filters": self.filters, "kernel_size": list(self.kernel_size),
                "use_bias": self.use_bias, "center": self.center, "scale": self.scale, **attrs}
