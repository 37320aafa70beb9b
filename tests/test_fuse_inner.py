"""The fusion rewriter finds LayerNormalization wherever a Keras model uses it:
graph nodes on 3-D and 4-D (ConvNeXt's channels-last) inputs, and sublayers
called from a layer's own Python `call` (keras_hub transformer blocks, held
as attributes or in lists), which are fused in a copy of the layer; near
misses are reported with their reason. Judged against the original Keras
layers (another implementation) on random inputs of awkward sizes."""
from __future__ import annotations

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from bridge.converters import fuse  # noqa: E402


@keras.saving.register_keras_serializable(package="bridge_tests")
class Block(keras.layers.Layer):
    """A transformer-style block: its norms are built in build() and called from call()."""

    def __init__(self, units, **kw):
        super().__init__(**kw)
        self.units = units

    def build(self, shape):
        self.pre = keras.layers.LayerNormalization(epsilon=1e-5, name="pre")
        self.dense = keras.layers.Dense(self.units, name="dense")
        self.norms = [keras.layers.LayerNormalization(center=False, name="no_center"),
                      keras.layers.LayerNormalization(scale=False, name="no_scale"),
                      keras.layers.LayerNormalization(rms_scaling=True, name="rms"),
                      keras.layers.LayerNormalization(axis=1, name="over_axis_1")]
        for layer in [self.pre, self.dense] + self.norms:
            layer.build(shape if layer is not self.dense else shape)
        self.pre_again = self.pre  # the same layer held twice: fused once

    def call(self, x):
        y = self.dense(self.pre_again(x)) + x
        for n in self.norms:
            y = n(y)
        return y

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def _randomize(model, rng):
    for w in model.weights:
        w.assign(rng.standard_normal(w.shape).astype("float32") * 0.5 + (1.0 if "gamma" in w.path else 0.0))


@pytest.mark.parametrize("shape", [(2, 5, 7), (1, 1, 3)])
def test_layer_norms_inside_a_layer(shape, rng):
    x = keras.Input(shape[1:])
    block = Block(shape[-1])
    model = keras.Model(x, block(x))
    _randomize(model, rng)
    fused, report = fuse(model)
    assert report.fused("layer_norm") == 3
    skipped = {s.layers[0].split("/")[-1]: s.reason for s in report.skipped("layer_norm")}
    assert set(skipped) == {"rms", "over_axis_1"}
    assert "rms_scaling" in skipped["rms"] and "axes [1]" in skipped["over_axis_1"]
    assert all(s.reason.startswith(f"inside Block '{block.name}'") for s in report.skipped("layer_norm"))
    assert isinstance(block.pre, keras.layers.LayerNormalization)  # the original is untouched
    data = (rng.standard_normal(shape) * 3 + 1).astype("float32")
    ref = np.asarray(model(data), np.float64)
    got = np.asarray(fused(data), np.float64)
    np.testing.assert_allclose(got, ref, atol=2e-5 * max(1.0, np.abs(ref).max()))
    copy = next(layer for layer in fused.layers if type(layer).__name__ == "Block")
    assert type(copy.pre).__name__ == type(copy.pre_again).__name__ == "FusedLayerNormalization"
    assert [type(n).__name__ for n in copy.norms] == ["FusedLayerNormalization"] * 2 + ["LayerNormalization"] * 2


@pytest.mark.parametrize("shape", [(2, 3, 5, 8), (1, 1, 1, 4)])
def test_channels_last_layer_norm_on_4d(shape, rng):
    x = keras.Input(shape[1:])
    y = keras.layers.LayerNormalization(epsilon=1e-6)(keras.layers.Conv2D(shape[-1], 1)(x))
    model = keras.Model(x, y)
    _randomize(model, rng)
    fused, report = fuse(model)
    assert report.fused("layer_norm") == 1
    data = rng.standard_normal(shape).astype("float32")
    np.testing.assert_allclose(np.asarray(fused(data)), np.asarray(model(data)), atol=2e-5)


def test_a_layer_called_twice_is_fused_once(rng):
    """ALBERT calls one block for every layer: one fused copy, shared, as the original is."""
    x = keras.Input((4, 6))
    block = Block(6)
    model = keras.Model(x, block(block(x)))
    _randomize(model, rng)
    fused, report = fuse(model)
    assert report.fused("layer_norm") == 3
    data = rng.standard_normal((2, 4, 6)).astype("float32")
    np.testing.assert_allclose(np.asarray(fused(data)), np.asarray(model(data)), atol=1e-4)
