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


class YoloConvBnLeaky(ReferenceOp):
    spec = SPEC
