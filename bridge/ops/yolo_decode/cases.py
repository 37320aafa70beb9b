"""YoloDecode's case table: the examples every backend runs and the bad inputs every
backend refuses in the same words."""
from __future__ import annotations

import numpy as np

from ..cases import BadInput, Example
from . import NAME


COCO_ANCHORS = (116.0, 90.0, 156.0, 198.0, 373.0, 326.0)



def examples():
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



def bad_inputs():
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
