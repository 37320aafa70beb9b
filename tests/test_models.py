"""The built-in models (bridge.models): architecture, determinism, realistic
weights, inputs, loading. MiniLM against sentence-transformers: test_minilm.py."""
from __future__ import annotations

import math

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from bridge import models  # noqa: E402
from bridge.models import bert, yolo  # noqa: E402


def _count(model, cls):
    return sum(1 for l in model.layers if type(l) is cls)


@pytest.fixture(scope="module")
def thin_yolov3():
    return models.build("yolov3", 64, width=0.125, decode=True)


@pytest.fixture(scope="module")
def small_bert():
    return models.build("bert", 12, vocab_size=500)


def test_names():
    assert models.names() == ("yolov3", "yolov3-tiny", "bert", "minilm")


def test_yolov3_full_architecture():
    m = models.build("yolov3")
    assert m.count_params() == 62_001_757  # the common Keras port's count
    assert m.input.shape == (None, 416, 416, 3)
    assert [tuple(o.shape) for o in m.outputs] == [(None, 13, 13, 255), (None, 26, 26, 255), (None, 52, 52, 255)]
    assert _count(m, keras.layers.BatchNormalization) == yolo.YOLOV3_BLOCKS == 72
    assert _count(m, keras.layers.LeakyReLU) == 72
    assert _count(m, keras.layers.Conv2D) == 75  # 72 blocks + 3 output convs with bias
    assert sum(1 for l in m.layers if isinstance(l, keras.layers.Conv2D) and l.use_bias) == 3
    pads = [l for l in m.layers if isinstance(l, keras.layers.ZeroPadding2D)]
    assert len(pads) == 5 and all(p.padding == ((1, 0), (1, 0)) for p in pads)
    assert _count(m, keras.layers.UpSampling2D) == 2 and _count(m, keras.layers.Concatenate) == 2


def test_thin_yolov3_is_the_same_architecture(thin_yolov3):
    m = thin_yolov3
    assert _count(m, keras.layers.BatchNormalization) == 72 and _count(m, keras.layers.Conv2D) == 75
    assert m.get_layer("conv_1").filters == 4 and m.get_layer("head_s8").filters == 255
    rows = sum((64 // s) ** 2 * 3 for s in (32, 16, 8))
    assert [tuple(o.shape) for o in m.outputs] == [(None, rows, 4), (None, rows), (None, rows, 80)]


def test_yolov3_tiny_architecture():
    m = models.build("yolov3-tiny", 96, width=0.5, num_classes=3)
    assert _count(m, keras.layers.BatchNormalization) == yolo.YOLOV3_TINY_BLOCKS == 11
    assert _count(m, keras.layers.Conv2D) == 13
    pools = [l for l in m.layers if isinstance(l, keras.layers.MaxPooling2D)]
    assert len(pools) == 6 and [p.strides for p in pools].count((1, 1)) == 1
    assert [tuple(o.shape) for o in m.outputs] == [(None, 3, 3, 24), (None, 6, 6, 24)]


@pytest.mark.parametrize("size", [0, 31, 100, (64,), "64"])
def test_bad_image_size(size):
    with pytest.raises(ValueError, match=r"yolov3: argument 'input_size': .*got"):
        models.build("yolov3", size, width=0.125)


def test_bad_names_and_configs():
    with pytest.raises(ValueError, match=r"unknown model 'resnet'.*yolov3"):
        models.build("resnet")
    with pytest.raises(ValueError, match=r"bert: argument 'hidden': 100 is not divisible by heads=3"):
        models.build("bert", 8, hidden=100, heads=3)
    with pytest.raises(ValueError, match=r"bert: unknown config \['hiden'\]"):
        models.build("bert", 8, hiden=64)
    with pytest.raises(ValueError, match=r"bert: argument 'input_size' \(sequence length\).*got 0"):
        models.build("bert", 0)
    with pytest.raises(ValueError, match=r"yolo: argument 'width': must be > 0, got 0"):
        models.build("yolov3-tiny", 64, width=0)


def test_deterministic_for_a_seed():
    a = models.build("yolov3-tiny", 64, width=0.25, seed=3)
    keras.utils.set_random_seed(99)  # Keras' global state must not matter
    b = models.build("yolov3-tiny", 64, width=0.25, seed=3)
    c = models.build("yolov3-tiny", 64, width=0.25, seed=4)
    for u, v, w in zip(a.weights, b.weights, c.weights):
        np.testing.assert_array_equal(u.numpy(), v.numpy())
    assert not np.allclose(a.get_layer("conv_3").kernel.numpy(), c.get_layer("conv_3").kernel.numpy())
    # weights do not depend on the input size either (BatchNorm is calibrated at a fixed size)
    d = models.build("yolov3-tiny", 96, width=0.25, seed=3)
    np.testing.assert_array_equal(a.get_layer("bn_7").moving_variance.numpy(),
                                  d.get_layer("bn_7").moving_variance.numpy())


def test_realistic_batchnorm(thin_yolov3):
    for l in thin_yolov3.layers:
        if isinstance(l, keras.layers.BatchNormalization):
            for v, identity in ((l.gamma, 1), (l.beta, 0), (l.moving_mean, 0), (l.moving_variance, 1)):
                assert np.abs(v.numpy() - identity).mean() > 0.05, f"{v.path} is close to its identity value"
            assert np.all(l.moving_variance.numpy() > 0)


def test_activations_stay_of_order_one(thin_yolov3):
    """Calibrated BatchNorm: no block output explodes or vanishes over 72 blocks."""
    m = thin_yolov3
    probe = keras.Model(m.input, [m.get_layer(f"leaky_{i}").output for i in (1, 26, 52, 72)])
    for out in probe(models.sample_inputs(m)):
        rms = float(np.sqrt(np.mean(np.square(out))))
        assert 0.05 < rms < 20, rms


def test_bert_weights_distinct_and_realistic(small_bert):
    m = small_bert
    mha = m.get_layer("layer0_attention")
    q, k, v = (d.kernel.numpy() for d in (mha._query_dense, mha._key_dense, mha._value_dense))
    assert not np.allclose(q, k) and not np.allclose(k, v)
    a0 = m.get_layer("layer0_intermediate").kernel.numpy()
    a1 = m.get_layer("layer1_intermediate").kernel.numpy()
    assert not np.allclose(a0, a1)
    for l in m.layers:
        if isinstance(l, keras.layers.LayerNormalization):
            assert np.abs(l.gamma.numpy() - 1).mean() > 0.05 and np.abs(l.beta.numpy()).mean() > 0.05
            assert l.epsilon == 1e-12


def test_yolo_sample_inputs():
    x = models.sample_inputs("yolov3", batch=2, input_size=(64, 96), seed=1)
    assert x.shape == (2, 64, 96, 3) and x.dtype == np.float32
    assert 0 <= x.min() and x.max() <= 1 and x.std() > 0.1
    np.testing.assert_array_equal(x, models.sample_inputs("yolov3", batch=2, input_size=(64, 96), seed=1))


def test_bert_sample_inputs(small_bert):
    x = models.sample_inputs(small_bert, batch=3, seed=2)
    ids, mask = x["token_ids"], x["attention_mask"]
    assert ids.shape == mask.shape == (3, 12) and ids.dtype == mask.dtype == np.int32
    assert ids.min() >= 0 and ids.max() < 500
    assert mask[0].all() and set(np.unique(mask)) <= {0, 1}
    assert np.all(ids[mask == 0] == 0) and np.all(ids[mask == 1] > 0)
    assert small_bert(x).shape == (3, 12, 128)


def test_yolo_decode_head_against_reference(rng):
    """The user-side decode layer computes docs/ops.md's YoloDecode (numpy float64 judge)."""
    from bridge import ops
    spec = ops.get("YoloDecode")
    for shape, anchors, classes, stride, sxy in [((2, 3, 5, 2 * 8), [10, 13, 16, 30], 3, 8, 1.0),
                                                 ((1, 1, 1, 6), [7.5, 3], 1, 32, 1.05),
                                                 ((0, 2, 2, 6), [1, 1], 1, 4, 1.0)]:
        raw = rng.normal(0, 2, size=shape).astype(np.float32)
        got = yolo.YoloDecodeHead(anchors, classes, stride, scale_x_y=sxy)(raw)
        ref = spec.reference(raw, anchors=anchors, num_classes=classes, stride=stride, scale_x_y=sxy)
        for g, r in zip(got, ref):
            assert g.shape == r.shape
            excess = spec.tolerance["float32"].excess(np.asarray(g), r)
            assert excess <= 1, excess


def test_gelu_is_exact_erf_gelu(rng):
    x = rng.normal(0, 3, size=(4, 7)).astype(np.float32)
    ref = np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))))(x.astype(np.float64))
    np.testing.assert_allclose(np.asarray(bert.Gelu()(x)), ref, rtol=1e-6, atol=1e-6)


def test_masked_mean_pooling(rng):
    x = rng.normal(size=(2, 5, 3)).astype(np.float32)
    mask = np.array([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1]], np.int32)
    got = np.asarray(bert.MaskedMeanPooling()(x, mask))
    np.testing.assert_allclose(got, [x[0, :2].mean(0), x[1].mean(0)], rtol=1e-6)


def test_padding_does_not_change_real_tokens(small_bert):
    """The attention mask works: padded positions do not leak into real ones."""
    x = models.sample_inputs(small_bert, batch=1)
    x["attention_mask"][0, 8:] = 0
    y1 = np.asarray(small_bert(x))
    x["token_ids"][0, 8:] = 7
    y2 = np.asarray(small_bert(x))
    np.testing.assert_allclose(y1[0, :8], y2[0, :8], atol=1e-5)
    assert not np.allclose(y1[0, 8:], y2[0, 8:])


def test_load_name_keras_file_and_errors(tmp_path, small_bert):
    m = models.load("yolov3-tiny", input_size=64, width=0.25)
    assert m.name == "yolov3_tiny"
    path = tmp_path / "bert.keras"
    small_bert.save(path)
    back = models.load(str(path))
    x = models.sample_inputs(small_bert, batch=2)
    np.testing.assert_array_equal(np.asarray(back(x)), np.asarray(small_bert(x)))
    with pytest.raises(ValueError, match=r"argument 'path_or_name': .*nope.*neither a built-in model"):
        models.load(str(tmp_path / "nope"))


def test_load_savedmodel(tmp_path):
    m = models.build("yolov3-tiny", 64, width=0.25)
    m.export(str(tmp_path / "sm"), verbose=False)
    sm = models.load(tmp_path / "sm")
    assert isinstance(sm, models.SavedModel)
    assert "not a Keras model" in sm.description and "serving_default" in sm.description
    x = models.sample_inputs(m)
    for got, ref in zip(sm(x), m(x)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), atol=1e-5, rtol=1e-5)
