"""What YoloDecode replaces: the Keras pattern (a YoloDecodeHead, matched by
keras_fusion.py) and the TensorFlow graph pattern (bridge/ops/graph_fusion.py)."""
from __future__ import annotations

import numpy as np

from ..fusion import Link, Pattern
from ..graph_fusion import GraphPattern
from . import NAME


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


KERAS_FUSION = (Pattern("yolo_decode", "YoloDecodeHead (bridge.models.yolo)", (Link("YoloDecodeHead"),),
                        hook="bridge.ops.yolo_decode.keras_fusion"),)
