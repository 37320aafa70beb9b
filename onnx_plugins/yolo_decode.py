"""YoloDecode's onnxruntime layer: its fastest road and reference kernel (the
function body is the spec's `body`, bridge/ops/yolo_decode.py)."""
from __future__ import annotations

from bridge.ops import get

from .reference import ReferenceOp

SPEC = get("YoloDecode")

# onnxruntime road for kernels="fastest" (onnx_plugins/__init__.py). YOLOv3-416:
# native 143.9 / function 144.9 ms (3 heads, <1%); alone 13x13x255 0.029 / 0.038 ms,
# 52x52x255 0.12 / 0.45 ms.
FASTEST = "native"

# benchmarks/onnx_ops.py's rows: (label, input shapes, node attributes, in --quick), YOLOv3-416's heads
BENCH_SHAPES = [(f"1x{hw}x{hw}x255", [(1, hw, hw, 255)],
                 {"anchors": [116.0, 90.0, 156.0, 198.0, 373.0, 326.0], "num_classes": 80, "stride": 416 // hw},
                 hw == 13) for hw in (13, 52)]


class YoloDecode(ReferenceOp):
    spec = SPEC
