"""YoloDecode: YOLOv3 head decoding with static output shapes (ops.md)."""
from __future__ import annotations

import numpy as np

from .spec import Arg, Attr, OpError, OpSpec, Tolerance, dims

NAME = "YoloDecode"


def check_attrs(anchors, num_classes, stride):
    if len(anchors) == 0 or len(anchors) % 2:
        raise OpError(NAME, "anchors", f"needs 2*A values [w0,h0,w1,h1,...], got {len(anchors)}")
    bad = [a for a in anchors if not a > 0]
    if bad:
        raise OpError(NAME, "anchors", f"must all be positive, got {bad[0]!r} in {list(anchors)}")
    if num_classes < 1:
        raise OpError(NAME, "num_classes", f"must be >= 1, got {num_classes}")
    if stride < 1:
        raise OpError(NAME, "stride", f"must be >= 1, got {stride}")


def _infer(raw, *, anchors, num_classes, stride, scale_x_y):
    check_attrs(anchors, num_classes, stride)
    a = len(anchors) // 2
    c = a * (5 + num_classes)
    if raw is None:
        return (None, None, 4), (None, None), (None, None, num_classes)  # ranks known from the attrs
    if len(raw) != 4:
        raise OpError(NAME, "raw", f"must have rank 4 [N,H,W,A*(5+C)], got {dims(raw)}")
    n, h, w, ch = raw
    if ch is not None and ch != c:
        raise OpError(NAME, "raw", f"last dim must be A*(5+C) = {a}*(5+{num_classes}) = {c}, got {dims(raw)}")
    rows = None if h is None or w is None else h * w * a
    return (n, rows, 4), (n, rows), (n, rows, num_classes)


def _reference(raw, *, anchors, num_classes, stride, scale_x_y):
    n, h, w, _ = raw.shape
    a = len(anchors) // 2
    p = raw.reshape(n, h, w, a, 5 + num_classes)
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))
    gx = np.arange(w, dtype=np.float64).reshape(1, 1, w, 1)
    gy = np.arange(h, dtype=np.float64).reshape(1, h, 1, 1)
    anc = np.asarray(anchors, dtype=np.float64).reshape(a, 2)
    off = (scale_x_y - 1.0) / 2.0
    bx = (scale_x_y * sig(p[..., 0]) - off + gx) * stride
    by = (scale_x_y * sig(p[..., 1]) - off + gy) * stride
    bw = np.exp(p[..., 2]) * anc[:, 0]
    bh = np.exp(p[..., 3]) * anc[:, 1]
    rows = h * w * a
    boxes = np.stack([bx, by, bw, bh], axis=-1).reshape(n, rows, 4)
    obj = sig(p[..., 4]).reshape(n, rows)
    cls = sig(p[..., 5:]).reshape(n, rows, num_classes)
    return boxes, obj, cls


SPEC = OpSpec(
    name=NAME,
    module="yolo_decode",
    doc="YOLOv3 head decoding: raw [N,H,W,A*(5+C)] to boxes, objectness and class probabilities.",
    inputs=(Arg("raw", "[N,H,W,A*(5+C)]"),),
    outputs=(Arg("boxes", "[N,H*W*A,4] (x_center, y_center, w, h) in input pixels"),
             Arg("objectness", "[N,H*W*A]"),
             Arg("class_probs", "[N,H*W*A,C]")),
    attrs=(Attr("anchors", "list(float)", doc="[w0,h0,w1,h1,...] in input pixels"),
           Attr("num_classes", "int", doc=">= 1"),
           Attr("stride", "int", doc="input pixels per grid cell, >= 1"),
           Attr("scale_x_y", "float", 1.0)),
    onnx_attrs=(Attr("anchors", "list(float)"), Attr("num_classes", "int"),
                Attr("stride", "int"), Attr("scale_x_y", "float", 1.0)),
    dtypes=("float32", "float16"),
    tolerance={"float32": Tolerance(1e-5), "float16": Tolerance(2e-3)},
    _reference=_reference,
    _infer=_infer,
    _to_onnx=lambda _shapes=None, **a: dict(a),
    _from_onnx=lambda **a: dict(a),
)
