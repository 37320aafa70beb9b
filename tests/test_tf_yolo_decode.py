"""YoloDecode in TensorFlow: kernel, composite, gradient and shape function, all
against the numpy float64 reference of bridge.ops."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bridge import ops as specs
from bridge import tf_ops

SPEC = specs.get("YoloDecode")
YOLO_ANCHORS = (116, 90, 156, 198, 373, 326)  # docs/ops.md: the stride-32 head of YOLOv3-416

# Odd grids, a single cell, an empty batch, an empty grid, one anchor, one class,
# YOLOv3's 80 classes, saturated logits: the op's case table (bridge/ops/yolo_decode/cases.py).
TABLE = [pytest.param(e, dtype, id=f"{e.id}-{dtype}") for e in SPEC.examples() for dtype in e.dtypes]


def _attrs(anchors, num_classes, stride, scale_x_y):
    return dict(anchors=anchors, num_classes=num_classes, stride=stride, scale_x_y=scale_x_y)


def _raw(rng, nhw, attrs, dtype):
    channels = len(attrs["anchors"]) // 2 * (5 + attrs["num_classes"])
    raw = rng.normal(0.0, 1.5, size=(*nhw, channels))
    raw[raw == 0] = 0.5
    return raw.astype(dtype)


def _run(fn, mode, raw, attrs):
    if mode == "function":
        return tf.function(lambda r: fn(r, **attrs))(raw)
    return fn(raw, **attrs)


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("example,dtype", TABLE)
def test_kernel_and_composite_match_reference(close, example, dtype, mode):
    (raw,), attrs = example.cast(dtype), example.attrs
    ref = SPEC.reference(raw, **attrs)
    for name, fn in (("kernel", tf_ops.yolo_decode), ("composite", tf_ops.composite.yolo_decode)):
        got = _run(fn, mode, raw, attrs)
        assert len(got) == 3
        for out, r, arg in zip(got, ref, SPEC.outputs):
            assert out.dtype == tf.as_dtype(dtype)
            close("YoloDecode", out.numpy(), r, dtype, what=f"{name} {mode} {arg.name}")


def test_row_order_and_box_meaning():
    """The row of anchor a in cell (y, x) is (y*W + x)*A + a, and a zero logit puts
    the box centre in the middle of its cell."""
    attrs = _attrs((10, 20, 30, 40), 1, 8, 1.0)
    raw = np.zeros((1, 2, 3, 12), np.float32)
    boxes, obj, cls = (t.numpy() for t in tf_ops.yolo_decode(raw, **attrs))
    row = (1 * 3 + 2) * 2 + 1  # y=1, x=2, anchor 1
    np.testing.assert_allclose(boxes[0, row], [(2 + 0.5) * 8, (1 + 0.5) * 8, 30, 40], rtol=1e-6)
    np.testing.assert_allclose(obj, 0.5)
    np.testing.assert_allclose(cls, 0.5)


def test_extreme_logits_saturate_like_tensorflow(close):
    attrs = _attrs((10, 13), 2, 8, 1.0)
    raw = np.array([-200, 200, -100, -80, 120, -120, 60], np.float32).reshape(1, 1, 1, 7)
    boxes, obj, cls = tf_ops.yolo_decode(raw, **attrs)
    ref = SPEC.reference(raw, **attrs)
    for got, r in zip((boxes, obj, cls), ref):
        close("YoloDecode", got.numpy(), r)
    assert np.isinf(tf_ops.yolo_decode(np.full((1, 1, 1, 7), 100.0, np.float32), **attrs)[0].numpy()[0, 0, 2])


def test_logistic_and_exp_over_the_float_range(close):
    """Every channel swept from -104 to 88.7 (where exp still fits a float32):
    the kernel's own exp and logistic hold the tolerance everywhere."""
    attrs = _attrs((1.0, 1.0), 1, 1, 1.0)
    logits = np.linspace(-104.0, 88.7, 6 * 4001, dtype=np.float32)
    raw = np.stack([np.roll(logits, 4001 * k) for k in range(6)], axis=-1).reshape(1, 1, -1, 6)
    for got, ref in zip(tf_ops.yolo_decode(raw, **attrs), SPEC.reference(raw, **attrs)):
        close("YoloDecode", got.numpy(), ref)


def test_nan_stays_in_its_own_outputs():
    attrs = _attrs((10, 13), 1, 8, 1.0)
    raw = np.array([[0.1, np.nan, 0.3, -0.2, 0.5, np.nan], [0.2, 0.1, 0.3, -0.2, 0.5, 0.4]], np.float32)
    boxes, obj, cls = (t.numpy() for t in tf_ops.yolo_decode(raw.reshape(1, 1, 2, 6), **attrs))
    assert np.isnan(boxes[0, 0, 1]) and np.isnan(cls[0, 0, 0])
    assert np.all(np.isfinite(boxes[0, 0, [0, 2, 3]])) and np.all(np.isfinite(boxes[0, 1])) and np.isfinite(cls[0, 1, 0])
    assert np.all(np.isfinite(obj))


def test_large_grid_and_batch_use_every_row(rng, close):
    attrs = _attrs(YOLO_ANCHORS, 80, 8, 1.0)
    raw = _raw(rng, (2, 52, 52), attrs, "float32")
    ref = SPEC.reference(raw, **attrs)
    for got, r in zip(tf_ops.yolo_decode(raw, **attrs), ref):
        close("YoloDecode", got.numpy(), r)


# -- gradients ------------------------------------------------------------------

def _fd_reference(raw, attrs, output, weights, eps=1e-6):
    raw = raw.astype(np.float64)
    grad = np.zeros_like(raw)
    for i in np.ndindex(raw.shape):
        hi, lo = raw.copy(), raw.copy()
        hi[i] += eps
        lo[i] -= eps
        grad[i] = np.sum(weights * (SPEC.reference(hi, **attrs)[output] - SPEC.reference(lo, **attrs)[output])) / (2 * eps)
    return grad


@pytest.mark.parametrize("output", [0, 1, 2], ids=[a.name for a in SPEC.outputs])
def test_gradient_matches_finite_differences(rng, output):
    attrs = _attrs((1.5, 2.5, 0.5, 1.0), 2, 2, 1.1)
    raw = _raw(rng, (1, 2, 3), attrs, "float32") * 0.5
    weights = rng.normal(size=SPEC.reference(raw, **attrs)[output].shape).astype(np.float32)

    def f(t):
        return tf.reduce_sum(weights * tf_ops.yolo_decode(t, **attrs)[output])

    (theoretical,), (numeric,) = tf.test.compute_gradient(f, [raw], delta=1e-2)
    np.testing.assert_allclose(theoretical, numeric, atol=5e-3, rtol=5e-3)
    expected = _fd_reference(raw, attrs, output, weights).reshape(1, -1)
    assert np.count_nonzero(expected) > 0
    np.testing.assert_allclose(theoretical, expected, atol=1e-4, rtol=1e-4)


def test_gradient_of_all_outputs_in_a_function_matches_composite(rng):
    attrs = _attrs((10, 13, 16, 30), 3, 8, 1.0)
    raw = tf.constant(_raw(rng, (2, 3, 2), attrs, "float32") * 0.5)

    def grad(fn):
        @tf.function
        def g(r):
            with tf.GradientTape() as tape:
                tape.watch(r)
                b, o, c = fn(r, **attrs)
                loss = tf.reduce_sum(b * 0.01) + tf.reduce_sum(o * o) + tf.reduce_sum(c * tf.range(1.0, 4.0))
            return tape.gradient(loss, r)
        return g(raw).numpy()

    np.testing.assert_allclose(grad(tf_ops.yolo_decode), grad(tf_ops.composite.yolo_decode), rtol=1e-5, atol=1e-6)


# -- shape function ---------------------------------------------------------------

ATTRS = _attrs((10, 13, 16, 30), 3, 8, 1.0)  # A=2, C=3: 16 channels


@pytest.mark.parametrize("shape", [(2, 13, 13, 16), (None, 13, 13, 16), (1, None, 4, 16), (None, None, None, None),
                                   (0, 3, 3, 16)], ids=str)
def test_shape_inference_static_and_unknown_dims(shape):
    outs = tf.function(lambda r: tf_ops.yolo_decode(r, **ATTRS)).get_concrete_function(
        tf.TensorSpec(shape, tf.float32)).structured_outputs
    expected = SPEC.infer_shapes([shape], **ATTRS)
    assert [o.shape.as_list() for o in outs] == [list(e) for e in expected]
    if None not in shape:
        assert all(o.shape.is_fully_defined() for o in outs)


def test_shape_inference_unknown_rank():
    outs = tf.function(lambda r: tf_ops.yolo_decode(r, **ATTRS)).get_concrete_function(
        tf.TensorSpec(None, tf.float32)).structured_outputs
    # The rank follows from the op, and C from the attributes.
    assert [o.shape.as_list() for o in outs] == [[None, None, 4], [None, None], [None, None, 3]]


@pytest.mark.parametrize("shape", [(1, 13, 13, 15), (None, 4, 4, 255), (13, 13, 16), (1, 1, 1, 1, 16)], ids=str)
def test_shape_mismatch_raises_at_trace_time_like_the_spec(shape):
    with pytest.raises(specs.OpError) as spec_error:
        SPEC.infer_shapes([shape], **ATTRS)
    assert spec_error.value.arg == "raw"
    with pytest.raises(ValueError) as e:
        tf.function(lambda r: tf_ops.yolo_decode(r, **ATTRS)).get_concrete_function(tf.TensorSpec(shape, tf.float32))
    assert str(spec_error.value) in str(e.value)
