"""YoloDecode's one decomposition into standard ops (the Body protocol, bridge/ops/body.py)."""
from __future__ import annotations


def body(b, raw, *, outputs):
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
