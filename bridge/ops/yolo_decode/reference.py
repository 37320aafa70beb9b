"""YoloDecode's numpy float64 reference."""
from __future__ import annotations

import numpy as np


def reference(raw, *, anchors, num_classes, stride, scale_x_y):
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
