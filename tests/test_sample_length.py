"""The sample length of a model's open dims (bridge.modelsource.keras_sample_dims)
where the zoo gives no --input-shape: an unpadded Conv1D stack (an audio
encoder: keras_hub's Moonshine) is sampled at the shortest input it turns into
one output step, found here against Keras itself (one sample shorter fails),
and PARSeq's max_label_length bounds its token length."""
from __future__ import annotations

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from bridge import modelsource  # noqa: E402


def _runs(model, length) -> bool:
    """Whether Keras takes `length`: its own shape inference, not a run (TensorFlow's
    oneDNN Conv1D on an AVX-512 CPU reads garbage from a too-short input instead of
    failing: conftest.tf_conv_breaks_on_empty_batches)."""
    try:
        model.compute_output_shape((1, length, 1))
        return True
    except Exception:  # noqa: BLE001 - Keras' own refusal of a too short input
        return False


@pytest.mark.parametrize("stack", [
    [(127, 64, 1), (7, 3, 1), (3, 2, 1)],        # Moonshine's encoder: 895 samples
    [(5, 1, 4), (3, 2, 1), (3, 2, 1)],           # dilated, then strided: 23
    [(1, 1, 1)],                                 # nothing to raise: the default length stays
])
def test_an_unpadded_conv1d_stack_is_sampled_at_the_least_it_takes(stack):
    x = keras.Input((None, 1), name="audio")
    h = x
    for k, s, d in stack:
        h = keras.layers.Conv1D(2, k, strides=s, dilation_rate=d)(h)
    h = keras.layers.Conv1D(2, 3, padding="same")(h)   # a padded one takes any length
    model = keras.Model(x, keras.layers.GlobalAveragePooling1D()(h))
    src = modelsource.from_object(model)
    (length,) = {shape[1] for shape in src.concrete_shapes().values()}
    lo, hi = 1, 4096   # Keras' own answer: the shortest length it runs (bisected; running is monotonic)
    while lo < hi:
        lo, hi = (lo, (lo + hi) // 2) if _runs(model, (lo + hi) // 2) else ((lo + hi) // 2 + 1, hi)
    least = lo
    assert length == max(least, modelsource.SAMPLE_LENGTH), (stack, length, least)
    if least > modelsource.SAMPLE_LENGTH:
        assert "Conv1D" in src.sample_note() and _runs(model, length) and not _runs(model, length - 1)


def test_a_label_length_bounds_the_sample():
    class Decoder(keras.layers.Layer):   # PARSeq's decoder: a position query of max_label_length + 1
        def __init__(self, **kw):
            super().__init__(**kw)
            self.max_label_length = 6

        def call(self, x):
            return x

    ids = keras.Input((None,), dtype="int32", name="token_ids")
    src = modelsource.from_object(keras.Model(ids, Decoder()(ids)))
    assert src.concrete_shapes() == {"token_ids": (1, 6)} and "max_label_length 6" in src.sample_note()
