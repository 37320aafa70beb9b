"""YoloConvBnLeaky's onnxruntime layer: its fastest road and reference kernel (the
function body is the spec's `body`, bridge/ops/yolo_conv_bn_leaky.py)."""
from __future__ import annotations

from bridge.ops import get

from .reference import ReferenceOp

SPEC = get("YoloConvBnLeaky")

# onnxruntime road for kernels="fastest" (onnx_plugins/__init__.py). YOLOv3-416:
# native 120.7 ms on oneDNN (Winograd F(2x2,3x3) for 3x3 stride-1 Cin >= 128, else
# direct) / function 155.3 ms (onnxruntime's NCHWc Conv+LeakyRelu) / plain tf2onnx
# 153.2 ms. Without oneDNN the native kernel is the library's own GEMM, 171.0 ms,
# so the function serves there. Alone, native wins 2.3-3x on the four YOLOv3 shapes.
FASTEST = "native"
FASTEST_WITHOUT_ONEDNN = "function"


def _bench_row(x, cout, k, s, pads, quick):
    label = f"{'x'.join(map(str, x))}->{cout} {k}x{k}" + (f" s{s}" if s > 1 else "")
    attrs = {"strides": [s, s], "pads": pads, "dilations": [1, 1], "epsilon": 1e-5, "alpha": 0.1}
    return label, [x, (k, k, x[-1], cout)] + [(cout,)] * 5, attrs, quick


# benchmarks/onnx_ops.py's rows: (label, input shapes, node attributes, in --quick), YOLOv3's layers
BENCH_SHAPES = [_bench_row((1, 416, 416, 32), 64, 3, 2, [1, 1, 0, 0], True),
                _bench_row((1, 104, 104, 128), 128, 3, 1, [1, 1, 1, 1], True),
                _bench_row((1, 13, 13, 512), 1024, 3, 1, [1, 1, 1, 1], False),
                _bench_row((1, 52, 52, 256), 128, 1, 1, [0, 0, 0, 0], False)]


class YoloConvBnLeaky(ReferenceOp):
    spec = SPEC
