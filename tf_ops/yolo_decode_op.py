"""YoloDecode in TensorFlow: the public wrapper, the composite and the gradient.

`op` runs the C++ kernel (yolo_decode.cc); `composite` computes the same from
standard TF ops that TFLite and ONNX both take (Reshape, Split, Sigmoid, Exp,
Mul, Add, Range, Tile), with the grid built from the input's shape so a dynamic
batch works; the gradient is registered on import.
"""
from __future__ import annotations

import tensorflow as tf

from bridge.ops import yolo_decode as _spec_module

SPEC = _spec_module.SPEC
_SCALE_X_Y = SPEC.attr("scale_x_y").default

# benchmarks/tflite.py's rows: (label, input shapes, TF attributes, in --quick), YOLOv3's heads
LITERT_BENCH_SHAPES = [(f"[1,{n},{n},255]", [(1, n, n, 255)],
                        {"anchors": [116.0, 90.0, 156.0, 198.0, 373.0, 326.0], "num_classes": 80, "stride": 8},
                        n == 52) for n in (52, 13)]
# benchmarks/tf_ops.py's rows (the op against its composite): as above, stride 416 / n
TF_BENCH_SHAPES = [(f"1x{n}x{n}x255", [(1, n, n, 255)],
                    {"anchors": [116.0, 90.0, 156.0, 198.0, 373.0, 326.0], "num_classes": 80, "stride": 416 // n},
                    n == 13) for n in (13, 52)]


def _attrs(anchors, num_classes, stride, scale_x_y):
    attrs = SPEC.resolve(dict(anchors=anchors, num_classes=num_classes, stride=stride, scale_x_y=scale_x_y))
    SPEC.infer_shapes([None], **attrs)  # the rule's attribute checks (a raw of unknown rank passes the rest)
    return attrs


def _raw(raw):
    raw = tf.convert_to_tensor(raw)
    SPEC.check_dtype(raw.dtype.as_numpy_dtype)
    return raw


def op(raw, anchors, num_classes, stride, scale_x_y=_SCALE_X_Y, name=None):
    """(boxes [N,H*W*A,4], objectness [N,H*W*A], class_probs [N,H*W*A,C]) from a YOLO
    head's raw output [N,H,W,A*(5+C)].

    Bad attributes raise ValueError (bridge.ops.OpError) here; bad shapes raise
    ValueError while tracing and tf.errors.InvalidArgumentError eagerly."""
    from bridge import tf_ops
    attrs = _attrs(anchors, num_classes, stride, scale_x_y)
    return tuple(tf_ops.load().yolo_decode(_raw(raw), name=name, **attrs))


def _dim(t, i):
    """A dimension as a Python int when static, else a scalar tensor."""
    d = t.shape[i] if t.shape.rank is not None else None
    return d if d is not None else tf.shape(t)[i]


def composite(raw, anchors, num_classes, stride, scale_x_y=_SCALE_X_Y, name=None):
    """The same math from standard TF ops, in the input's dtype."""
    attrs = _attrs(anchors, num_classes, stride, scale_x_y)
    raw = _raw(raw)
    SPEC.infer_shapes([None if raw.shape.rank is None else tuple(raw.shape.as_list())], **attrs)
    a, c = len(attrs["anchors"]) // 2, attrs["num_classes"]
    s, stride = attrs["scale_x_y"], float(attrs["stride"])
    dtype = raw.dtype
    with tf.name_scope(name or "YoloDecodeComposite"):
        n, h, w = _dim(raw, 0), _dim(raw, 1), _dim(raw, 2)
        rows = h * w * a
        p = tf.reshape(raw, tf.stack([n, rows, 5 + c]) if tf.is_tensor(rows) or tf.is_tensor(n) else [n, rows, 5 + c])
        txy, twh, to, tc = tf.split(p, [2, 2, 1, c], axis=-1)
        # Row r = (y*W + x)*A + a: its grid cell is r // A.
        cell = tf.range(rows) // a
        grid = tf.expand_dims(tf.cast(tf.stack([cell % w, cell // w], axis=-1), dtype), 0)
        xy = (tf.sigmoid(txy) * s - (s - 1.0) / 2.0 + grid) * stride
        anchor_rows = tf.tile(tf.constant(attrs["anchors"], dtype, shape=[a, 2]), tf.stack([h * w, 1]))
        wh = tf.exp(twh) * tf.expand_dims(anchor_rows, 0)
        boxes = tf.concat([xy, wh], axis=-1)
        objectness = tf.squeeze(tf.sigmoid(to), axis=-1)
        return boxes, objectness, tf.sigmoid(tc)


@tf.RegisterGradient(SPEC.name)
def _gradient(op_, d_boxes, d_obj, d_cls):
    """d/draw through all three outputs, from TF ops so that second derivatives
    compose; an output that received no gradient contributes nothing."""
    raw = op_.inputs[0]
    anchors = op_.get_attr("anchors")
    c = op_.get_attr("num_classes")
    scale = op_.get_attr("scale_x_y") * float(op_.get_attr("stride"))
    a = len(anchors) // 2
    shape = tf.shape(raw)
    p = tf.reshape(raw, tf.concat([shape[:3], [a, 5 + c]], axis=0))
    sig = tf.sigmoid(p)
    dsig = sig * (1.0 - sig)
    zeros = tf.zeros_like(p)

    def per_anchor(g, k):  # [N, H*W*A, k] -> [N, H, W, A, k]
        return tf.reshape(g, tf.concat([shape[:3], [a, k]], axis=0))

    parts = [zeros[..., :2], zeros[..., 2:4], zeros[..., 4:5], zeros[..., 5:]]
    if d_boxes is not None:
        gb = per_anchor(d_boxes, 4)
        parts[0] = gb[..., :2] * dsig[..., :2] * scale
        parts[1] = gb[..., 2:] * tf.exp(p[..., 2:4]) * tf.constant(anchors, raw.dtype, shape=[a, 2])
    if d_obj is not None:
        parts[2] = per_anchor(d_obj, 1) * dsig[..., 4:5]
    if d_cls is not None:
        parts[3] = per_anchor(d_cls, c) * dsig[..., 5:]
    return tf.reshape(tf.concat(parts, axis=-1), shape)
