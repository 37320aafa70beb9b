"""`ort-functions`: the same com.bridge file on plain onnxruntime, no kernel
library: onnxruntime inlines each custom node's model-local function."""
from __future__ import annotations

from bridge.parity.onnx_base import OnnxRuntime


class OrtFunctions(OnnxRuntime):
    name = "ort-functions"
    description = "com.bridge ONNX on onnxruntime, no library (functions inlined)"
    order = 30
    model_key = "onnx-custom"
    kernels = "none"


RUNTIME = OrtFunctions
