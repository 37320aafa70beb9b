"""Standard-op kernels the onnx-reference runtime uses instead of onnx's own
where those are wrong. onnx 1.23's ReferenceEvaluator:
- MaxPool mis-sizes asymmetric pads (kernel 2, stride 1, pads [0,0,1,1] on 3x3
  gives 2x4, not 3x3): YOLOv3-tiny's stride-1 pool has exactly those pads.
- Loop joins its scan outputs with np.vstack, which concatenates per-iteration
  values of rank >= 2 along their own first axis instead of stacking them on
  a new one (7 steps of [1,5] give [7,5], not [7,1,5]; a 0-d value gives
  [N,1]): tf2onnx's while loop of a Keras GRU/SimpleRNN scans exactly such
  values, and the next Transpose/Concat then fails."""
from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun
from onnx.reference.ops.op_loop import Loop as _StockLoop


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


class Loop(_StockLoop):
    op_domain = ""

    def __init__(self, onnx_node, run_params):
        super().__init__(onnx_node, run_params)
        stock_body = self._run_body  # set per instance by OpRun for the `body` attribute
        self._scan_shapes, self._steps = None, 0

        def body(*args, **kwargs):
            outs = stock_body(*args, **kwargs)
            self._steps += 1
            if self.K:
                self._scan_shapes = [np.shape(o) for o in outs[len(outs) - self.K:]]
            return outs
        self._run_body = body

    def _run(self, *args, **kwargs):
        self._scan_shapes, self._steps = None, 0
        res = list(super()._run(*args, **kwargs))
        if self._scan_shapes is not None:  # at least one iteration ran: its values' shape is known
            for k, shape in enumerate(self._scan_shapes):
                res[self.N + k] = np.asarray(res[self.N + k]).reshape((self._steps,) + tuple(shape))
        return tuple(res)


OPS = [MaxPool, Loop]
