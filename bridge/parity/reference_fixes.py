"""Standard-op kernels the onnx-reference runtime uses instead of onnx's own
where those are wrong. onnx 1.23's ReferenceEvaluator MaxPool mis-sizes
asymmetric pads (kernel 2, stride 1, pads [0,0,1,1] on 3x3 gives 2x4, not
3x3): YOLOv3-tiny's stride-1 pool has exactly those pads."""
from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun


class MaxPool(OpRun):
    op_domain = ""

    def _run(self, x, auto_pad=None, ceil_mode=None, dilations=None, kernel_shape=None, pads=None,
             storage_order=None, strides=None):
        k = list(kernel_shape)
        n = len(k)
        strides = list(strides or [1] * n)
        dilations = list(dilations or [1] * n)
        pads = list(pads or [0] * (2 * n))
        if (auto_pad not in (None, "NOTSET", b"NOTSET") or ceil_mode or len(k) != 2 or storage_order
                or len(self.output) > 1):
            from onnx.reference.ops.op_max_pool import MaxPool as Stock  # outside the bug: the stock kernel
            return Stock._run(self, x, auto_pad=auto_pad, ceil_mode=ceil_mode, dilations=dilations,
                              kernel_shape=kernel_shape, pads=pads, storage_order=storage_order, strides=strides)
        padded = np.pad(x, [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])], constant_values=-np.inf)
        oh = (padded.shape[2] - ((k[0] - 1) * dilations[0] + 1)) // strides[0] + 1
        ow = (padded.shape[3] - ((k[1] - 1) * dilations[1] + 1)) // strides[1] + 1
        out = np.full(x.shape[:2] + (oh, ow), -np.inf, dtype=x.dtype)
        for i in range(k[0]):
            for j in range(k[1]):
                di, dj = i * dilations[0], j * dilations[1]
                window = padded[:, :, di:di + (oh - 1) * strides[0] + 1:strides[0], dj:dj + (ow - 1) * strides[1] + 1:strides[1]]
                out = np.maximum(out, window)
        return (out.astype(x.dtype),)


OPS = [MaxPool]
