"""YoloDecode: YOLOv3 head decoding with static output shapes (docs/ops.md)."""
from __future__ import annotations

import numpy as np

from .cases import BadInput, Example
from .fusion import Link, Pattern
from .graph_fusion import GraphPattern
from .shape_rules import (Attr as AttrInt, Const, Dim, EachItem, FirstFailing, Len, Let, ListOf, Out, Rank, Require,
                          ShapeOf, Var, all_of)
from .spec import Arg, Attr, OpSpec, Tolerance

NAME = "YoloDecode"


def _shape_rule():
    """rows = H*W*A, A = len(anchors)/2: the one statement of YoloDecode's shapes."""
    n_anchor = Len("anchors")
    classes = AttrInt("num_classes")
    a, c = Var("a"), Var("c")
    rows = Var("rows")
    return (
        Require("anchors", all_of(n_anchor.ne(0), (n_anchor - (n_anchor // 2) * 2).eq(0)),
                "needs 2*A values [w0,h0,w1,h1,...], got ", n_anchor),
        Require("anchors", EachItem("anchors", "Gt", 0.0), "must all be positive, got ",
                FirstFailing("anchors", "Gt", 0.0), " in ", ListOf("anchors", "python")),
        Require("num_classes", classes.ge(1), "must be >= 1, got ", classes),
        Require("stride", AttrInt("stride").ge(1), "must be >= 1, got ", AttrInt("stride")),
        Let("a", n_anchor // 2),
        Let("c", a * (Const(5) + classes)),
        Require("raw", Rank(0).eq(4), "must have rank 4 [N,H,W,A*(5+C)], got ", ShapeOf(0)),
        Require("raw", Dim(0, 3).eq(c), "last dim must be A*(5+C) = ", a, "*(5+", classes, ") = ", c, ", got ",
                ShapeOf(0)),
        Let("rows", Dim(0, 1) * Dim(0, 2) * a),
        Out(0, [Dim(0, 0), rows, 4]),
        Out(1, [Dim(0, 0), rows]),
        Out(2, [Dim(0, 0), rows, classes]),
    )


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


COCO_ANCHORS = (116.0, 90.0, 156.0, 198.0, 373.0, 326.0)


def _examples():
    rng = np.random.default_rng(13)

    def decode(id, nhw, anchors, num_classes, stride, scale_x_y=None, spread=1.0, **kw):
        raw = spread * rng.standard_normal((*nhw, len(anchors) // 2 * (5 + num_classes)))
        attrs = dict(anchors=anchors, num_classes=num_classes, stride=stride)
        if scale_x_y is not None:
            attrs["scale_x_y"] = scale_x_y
        return Example(id, (raw,), attrs, dict(attrs, scale_x_y=1.0 if scale_x_y is None else scale_x_y), **kw)

    return [
        # anchors with w != h everywhere, so a swapped w/h shows
        decode("2x3x4-A2C3", (2, 3, 4), (10.0, 13.0, 16.0, 30.0), 3, 8, 1.1),
        decode("1x1x1-A1C1-stride1", (1, 1, 1), (5.0, 7.0), 1, 1),
        decode("2x5x7-A3C1", (2, 5, 7), (1.5, 2.0, 3.0, 4.5, 6.0, 5.0), 1, 64, 1.05),
        decode("13x13-coco", (1, 13, 13), COCO_ANCHORS, 80, 32, 1.05),
        decode("empty-batch", (0, 2, 3), (1.0, 2.0, 3.0, 4.0, 5.0, 6.0), 2, 16),
        decode("empty-grid", (1, 0, 3), (4.0, 5.0), 2, 16),
        decode("scale2", (1, 3, 2), (4.0, 9.0), 2, 8, 2.0),
        # logits out to +-25: saturated logistics, exp near float32's range of boxes
        decode("saturated", (1, 2, 3), (4.0, 9.0, 12.0, 3.0), 4, 16, spread=8.0, dtypes=("float32",)),
        decode("52x52-coco", (1, 52, 52), COCO_ANCHORS, 80, 8, large=True),
    ]


def _bad_inputs():
    dec = dict(anchors=(10.0, 13.0, 16.0, 30.0), num_classes=3, stride=8)  # A=2, C=3: 16 channels

    def bad(id, shape, arg, message, attrs=None, **kw):
        return BadInput(id, (shape,), dict(dec, **(attrs or {})), arg, f"{NAME}: argument '{arg}': {message}", **kw)

    return [
        bad("last-dim", (1, 2, 2, 15), "raw", "last dim must be A*(5+C) = 2*(5+3) = 16, got [1,2,2,15]"),
        bad("last-dim-classes", (1, 2, 2, 16), "raw", "last dim must be A*(5+C) = 2*(5+4) = 18, got [1,2,2,16]",
            dict(num_classes=4)),
        bad("rank-3", (2, 2, 16), "raw", "must have rank 4 [N,H,W,A*(5+C)], got [2,2,16]"),
        bad("rank-5", (1, 1, 2, 2, 16), "raw", "must have rank 4 [N,H,W,A*(5+C)], got [1,1,2,2,16]"),
        bad("anchors-odd", (1, 2, 2, 16), "anchors", "needs 2*A values [w0,h0,w1,h1,...], got 3",
            dict(anchors=(10.0, 13.0, 16.0)), kind="attr"),
        bad("anchors-negative", (1, 2, 2, 16), "anchors", "must all be positive, got -13",
            dict(anchors=(10.0, -13.0, 16.0, 30.0)), kind="attr"),
        bad("anchors-zero", (1, 2, 2, 16), "anchors", "must all be positive, got 0",
            dict(anchors=(10.0, 13.0, 0.0, 30.0)), kind="attr"),
        bad("num-classes-0", (1, 2, 2, 10), "num_classes", "must be >= 1, got 0", dict(num_classes=0), kind="attr"),
        bad("stride-0", (1, 2, 2, 16), "stride", "must be >= 1, got 0", dict(stride=0), kind="attr"),
        bad("stride-negative", (1, 2, 2, 16), "stride", "must be >= 1, got -8", dict(stride=-8), kind="attr"),
    ]


def _body(b, raw, *, outputs):
    """The decomposition into standard ONNX ops (the Body protocol, bridge/ops/body.py). The grid
    and the reshape targets come from the input's Shape, so a dynamic batch or
    size works (and a GE plugin, which cannot know H and W at parse time)."""
    boxes, objectness, class_probs = outputs
    shape = b.op("Shape", raw)
    dim = lambda i: b.op("Slice", shape, b.const([i]), b.const([i + 1]))   # [1] int64
    scalar = lambda i: b.op("Gather", shape, b.const(i))                    # int64 scalar
    n, h, w = dim(0), dim(1), dim(2)
    anchors = b.attr_const("anchors")                                       # float32 [2A]
    a = b.op("Div", b.op("Shape", anchors), b.const([2]))
    c = b.size_of("num_classes")                                            # int or [1] tensor
    c1 = b.const([c]) if isinstance(c, int) else c
    p = b.op("Reshape", raw, b.op("Concat", n, h, w, a, b.op("Add", c1, b.const([5])), axis=0))
    tx, ty, twh, to, tc = b.split(p, [1, 1, 2, 1, c], axis=4)
    zero, one = b.const(0), b.const(1)
    gx = b.op("Reshape", b.like(b.op("Range", zero, scalar(2), one), raw), b.const([1, 1, -1, 1, 1]))
    gy = b.op("Reshape", b.like(b.op("Range", zero, scalar(1), one), raw), b.const([1, -1, 1, 1, 1]))
    scale32 = b.attr_const("scale_x_y")                                     # float32 scalar
    scale = b.like(scale32, raw)
    off = b.like(b.op("Mul", b.op("Sub", scale32, b.const(1.0, "float32")), b.const(0.5, "float32")), raw)
    stride = b.like(b.attr_const("stride"), raw)
    centre = lambda t, g: b.op("Mul", b.op("Add", b.op("Sub", b.op("Mul", scale, b.op("Sigmoid", t)), off), g), stride)
    anc = b.op("Reshape", b.like(anchors, raw), b.const([-1, 2]))
    wh = b.op("Mul", b.op("Exp", twh), anc)
    box5 = b.op("Concat", centre(tx, gx), centre(ty, gy), wh, axis=-1)
    rows = b.op("Mul", b.op("Mul", h, w), a)
    b.op("Reshape", box5, b.op("Concat", n, rows, b.const([4]), axis=0), out=boxes)
    b.op("Reshape", b.op("Sigmoid", to), b.op("Concat", n, rows, axis=0), out=objectness)
    b.op("Reshape", b.op("Sigmoid", tc), b.op("Concat", n, rows, c1, axis=0), out=class_probs)


# -- the TensorFlow subgraphs it replaces (graph_fusion): a decode however TF code
# writes it (YoloDecodeHead as saved, a tf.Module's reshape / split / meshgrid /
# sigmoid / exp arithmetic), from the raw head output x to its three outputs (the
# rewriter grows the region forward until only three tensors leave it). Its
# attributes are read off by probing the subgraph: at raw = 0 each box is
# ((0.5 + grid) * stride, anchor), and tx = 2 gives scale_x_y; the rewriter
# then checks the whole subgraph numerically against the reference, so a
# decode off the contract (another grid offset, softplus for exp, anchors on
# the wrong logits, one axis at another stride) stays as it is.
# A decode with scale_x_y != 1 holds s and (s - 1) / 2 as two float32 constants,
# each rounded on its own: its centres sit up to ~3e-8 * stride pixels off any
# one scale_x_y (1.05 at stride 32: 8e-7 px, past the rewriter's 1e-6 for a box
# near 0). A real near miss is off by far more (0.33 and up for those planted in
# tests/test_graph_fuse_decode.py).
_GRAPH_TOLERANCE = 1e-5
GRAPH_OPS = ("Reshape", "Shape", "Size", "Rank", "StridedSlice", "Slice", "Pack", "Unpack", "ConcatV2", "SplitV",
             "Split", "Range",
             "Fill", "Tile", "BroadcastTo", "Transpose", "GatherV2", "Prod", "Cast", "ExpandDims", "Squeeze",
             "Identity", "ZerosLike", "OnesLike", "FloorDiv", "Mul", "AddV2", "Add", "Sub", "RealDiv", "Neg",
             "Reciprocal", "Sigmoid", "Exp", "Softplus")


def _is_decode(region) -> bool:
    return region.x_shape is not None and len(region.x_shape) == 4 and \
        {"Sigmoid", "Reshape"} <= {n.op for n in region.nodes}


def _graph_identify(region):
    _, h, w, ch = region.x_shape
    if ch is None:
        return "the raw input's channel count is unknown"
    if len(region.outputs) != 3:
        return f"{len(region.outputs)} tensors leave the subgraph; {NAME} gives 3 (boxes, objectness, class_probs)"
    h, w = h or 3, w or 4   # where the graph leaves the grid open, probe one of 3x4 cells
    zero = np.zeros((1, h, w, ch))
    outs = [np.asarray(v) for v in region.evaluate(zero, at=region.outputs)]
    ranks = sorted((v.ndim, k) for k, v in enumerate(outs))
    if [r for r, _ in ranks] != [2, 3, 3]:
        return f"its outputs have ranks {[v.ndim for v in outs]}; {NAME}'s are 3, 2, 3"
    obj = ranks[0][1]
    rows = outs[obj].shape[1]
    a, left = divmod(rows, h * w)
    if left or not a or ch % a or ch // a < 6:
        return f"{rows} rows from a {h}x{w} grid of {ch} channels is no whole number of anchors of 5+C channels"
    c = ch // a - 5
    # boxes: the rank-3 output of 4 columns that is not 0.5 everywhere (class probabilities at raw 0 are)
    box = next((k for _, k in ranks[1:] if outs[k].shape[-1] == 4 and not np.allclose(outs[k], 0.5)), None)
    cls = next((k for _, k in ranks[1:] if k != box), None)
    if box is None or outs[cls].shape[-1] != c:
        return f"no boxes [N,{rows},4] and class probabilities [N,{rows},{c}] among its outputs"
    boxes = outs[box][0]
    stride = 2.0 * float(boxes[0, 0])
    if not stride >= 1 or abs(stride - round(stride)) > 1e-6 * stride:
        return f"the first cell's centre at raw 0 is {boxes[0, 0]!r}: no whole stride (0.5 * stride)"
    anchors = tuple(float(v) for v in boxes[:a, 2:4].ravel())
    t = zero.reshape(1, h, w, a, 5 + c).copy()
    t[..., 0] = 2.0
    moved = float(np.asarray(region.evaluate(t.reshape(zero.shape), at=region.outputs[box]))[0, 0, 0])
    sig = 1.0 / (1.0 + np.exp(-2.0))
    # the slope of the centre in sigmoid(tx): scale_x_y as the graph's constant has it
    scale = (moved - float(boxes[0, 0])) / (round(stride) * (sig - 0.5))
    scale = 1.0 if abs(scale - 1.0) < 1e-9 else scale
    attrs = dict(anchors=anchors, num_classes=c, stride=int(round(stride)), scale_x_y=scale)
    return (), attrs, [region.outputs[k] for k in (box, obj, cls)]


GRAPH_FUSION = (GraphPattern("yolo_decode", "a YOLO head's decode in TF ops: sigmoid(xy) + grid, exp(wh) * anchors, "
                             "sigmoid objectness and classes, * stride",
                             ends=("Reshape",), ops=GRAPH_OPS, when=_is_decode, identify=_graph_identify,
                             tolerance=_GRAPH_TOLERANCE),)


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
    shape_rule=_shape_rule(),
    _to_onnx=lambda _shapes=None, **a: dict(a),
    _from_onnx=lambda **a: dict(a),
    _examples=_examples,
    _bad_inputs=_bad_inputs,
    fusion=(Pattern("yolo_decode", "YoloDecodeHead (bridge.models.yolo)", (Link("YoloDecodeHead"),),
                    hook="bridge.converters.fuse_yolo_decode"),),
    graph_fusion=GRAPH_FUSION,
    body=_body,
)
