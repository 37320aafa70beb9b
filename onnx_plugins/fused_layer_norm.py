"""FusedLayerNorm's onnxruntime layer: its fastest road and reference kernel (the
schema and its shape inference come from the spec, see schemas.py; the function
body is the spec's `body`, bridge/ops/fused_layer_norm.py)."""
from __future__ import annotations

from bridge.ops import get

from .reference import ReferenceOp

SPEC = get("FusedLayerNorm")

# onnxruntime road for kernels="fastest" (onnx_plugins/__init__.py). 4-layer
# BERT-base, seq 128: native 25.5 ms / function (opset 18) 25.4 ms, a tie (the
# MatMuls are ~73% of the time); alone [4,128,768] native 2x; and the body that
# is correct on large means is 2.3-3.1x slower than the native kernel.
FASTEST = "native"

# benchmarks/onnx_ops.py's rows: (label, input shapes, node attributes, in --quick).
# Its function road at opset 16 (the decomposition onnxruntime fuses back into its
# LayerNormalization kernel), and that kernel itself on the same node as a road.
BENCH_SHAPES = [("4x128x768", [(4, 128, 768), (768,), (768,)], {"epsilon": 1e-6}, True),
                ("32x512x1024", [(32, 512, 1024), (1024,), (1024,)], {"epsilon": 1e-6}, False)]
BENCH_FUNCTION_OPSET = 16
BENCH_BUILTIN = ("LayerNormalization", {"axis": -1})


class FusedLayerNorm(ReferenceOp):
    spec = SPEC
