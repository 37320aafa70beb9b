"""YoloDecode in TensorFlow: the public wrapper and the gradient.

`op` runs the C++ kernel (the core bridge/ops/yolo_decode/kernel.h, hosted by host.cc); its composite is the spec's body on
TfBody (tf_ops/from_body.py), the grid built from the input's shape so a dynamic
batch works; the gradient is registered on import.
"""
from __future__ import annotations

import tensorflow as tf

from bridge.ops import yolo_decode as _spec_module

SPEC = _spec_module.SPEC
_SCALE_X_Y = SPEC.attr("scale_x_y").default


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
