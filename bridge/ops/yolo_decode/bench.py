"""YoloDecode's benchmark rows and its onnxruntime road (numbers: benchmarks/RESULTS.md).

Rows: (label, input shapes, attributes, in --quick), YOLOv3-416's heads; ORT_ rows
take the ONNX node's attributes (benchmarks/onnx_ops.py), LITERT_ and TF_ rows
TensorFlow's (benchmarks/tflite.py, benchmarks/tf_ops.py)."""
from .cases import COCO_ANCHORS

# onnxruntime road for kernels="fastest" (onnx_plugins/__init__.py)
FASTEST = "native"

ORT_BENCH_SHAPES = [(f"1x{hw}x{hw}x255", [(1, hw, hw, 255)],
                     {"anchors": list(COCO_ANCHORS), "num_classes": 80, "stride": 416 // hw}, hw == 13)
                    for hw in (13, 52)]
LITERT_BENCH_SHAPES = [(f"[1,{n},{n},255]", [(1, n, n, 255)],
                        {"anchors": list(COCO_ANCHORS), "num_classes": 80, "stride": 8}, n == 52) for n in (52, 13)]
# the op against its composite: stride 416 / n
TF_BENCH_SHAPES = [(f"1x{n}x{n}x255", [(1, n, n, 255)],
                    {"anchors": list(COCO_ANCHORS), "num_classes": 80, "stride": 416 // n}, n == 13) for n in (13, 52)]
