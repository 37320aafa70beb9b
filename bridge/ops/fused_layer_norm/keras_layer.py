"""FusedLayerNorm's Keras layer: the fused LayerNormalization layer. Host-side: imports Keras and
TensorFlow (bridge.converters.fused_layer_base); the spec never imports it;
bridge.converters.fuse_layers loads it by name."""
from __future__ import annotations

import keras
import tensorflow as tf

from bridge.converters.fused_layer_base import Fused, infer_shapes, static_shape, tf_ops

from . import SPEC

__all__ = ["FusedLayerNormalization"]


@keras.saving.register_keras_serializable(package="bridge")
class FusedLayerNormalization(Fused):
    """LayerNormalization over the last axis as one FusedLayerNorm; center=False
    passes beta zeros, scale=False gamma ones (as Keras does)."""

    def __init__(self, epsilon=None, center=True, scale=True, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = SPEC.resolve({"epsilon": epsilon})["epsilon"]
        self.center, self.scale = bool(center), bool(scale)
        self.supports_masking = True

    def build(self, input_shape):
        h = input_shape[-1]
        self.gamma = self.add_weight(shape=(h,), name="gamma", initializer="ones") if self.scale else None
        self.beta = self.add_weight(shape=(h,), name="beta", initializer="zeros") if self.center else None

    def call(self, x):
        dt = x.dtype
        h = tf.shape(x)[-1:]
        gamma = tf.ones(h, dt) if self.gamma is None else tf.cast(self.gamma, dt)
        beta = tf.zeros(h, dt) if self.beta is None else tf.cast(self.beta, dt)
        return tf_ops().fused_layer_norm(x, gamma, beta, epsilon=self.epsilon)

    def compute_outputstatic_shape(self, input_shape):
        h = (input_shape[-1],)
        return infer_shapes(SPEC, [static_shape(input_shape), h, h], epsilon=self.epsilon)[0]

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon, "center": self.center, "scale": self.scale}
