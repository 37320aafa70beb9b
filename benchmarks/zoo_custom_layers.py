"""A team's own Keras layer, as the zoo's custom-layer-cnn row has it: a
registered class (`keras.saving.register_keras_serializable`) in a module of
the team's, so its `.keras` file loads only where that module is imported:
`bridge export custom-layer-cnn.keras --import benchmarks/zoo_custom_layers.py`.
Around it, the blocks bridge fuses (Conv-BN-LeakyReLU, LayerNormalization)."""
from __future__ import annotations

import keras
from keras import layers


@keras.saving.register_keras_serializable(package="acme")
class ScaledResidual(keras.layers.Layer):
    """x + scale * inner(x): a residual branch with a learnt per-channel scale."""

    def __init__(self, filters: int, **kwargs):
        super().__init__(**kwargs)
        self.filters = filters
        self.inner = layers.Conv2D(filters, 3, padding="same")

    def build(self, input_shape):
        self.inner.build(input_shape)
        self.scale = self.add_weight(name="scale", shape=(self.filters,), initializer=keras.initializers.Constant(0.5))

    def call(self, x):
        return x + self.scale * self.inner(x)

    def get_config(self):
        return {**super().get_config(), "filters": self.filters}


def classifier(size: int = 32) -> keras.Model:
    x = keras.Input((size, size, 3), name="image")
    h = x
    for filters in (8, 16):
        h = layers.Conv2D(filters, 3, strides=2, padding="same", use_bias=False)(h)
        h = layers.BatchNormalization()(h)
        h = layers.LeakyReLU(0.1)(h)
    h = ScaledResidual(16)(h)
    h = layers.GlobalAveragePooling2D()(h)
    h = layers.LayerNormalization()(layers.Dense(16)(h))
    return keras.Model(x, layers.Dense(10, name="logits")(h), name="custom_layer_cnn")
