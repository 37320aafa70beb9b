"""FusedLayerNorm's benchmark rows and its onnxruntime road (numbers: benchmarks/RESULTS.md).

Rows: (label, input shapes, attributes, in --quick); ORT_ rows take the ONNX
node's attributes (benchmarks/onnx_ops.py), LITERT_ and TF_ rows TensorFlow's
(benchmarks/tflite.py, benchmarks/tf_ops.py)."""

# onnxruntime road for kernels="fastest" (onnx_plugins/__init__.py): native ties the
# function on BERT and wins alone; the body correct on large means is the slower one.
FASTEST = "native"

# the function road at opset 16 (the decomposition onnxruntime fuses back into its
# LayerNormalization kernel), and that kernel itself on the same node as a road
ORT_BENCH_SHAPES = [("4x128x768", [(4, 128, 768), (768,), (768,)], {"epsilon": 1e-6}, True),
                    ("32x512x1024", [(32, 512, 1024), (1024,), (1024,)], {"epsilon": 1e-6}, False)]
ORT_BENCH_FUNCTION_OPSET = 16
ORT_BENCH_BUILTIN = ("LayerNormalization", {"axis": -1})

LITERT_BENCH_SHAPES = [("[4,128,768]", [(4, 128, 768), (768,), (768,)], {"epsilon": 1e-6}, True)]
