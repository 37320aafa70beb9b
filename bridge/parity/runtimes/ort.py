"""`ort`: the custom-domain export on onnxruntime with bridge's native kernels."""
from __future__ import annotations

from bridge.parity.onnx_base import OnnxRuntime


class Ort(OnnxRuntime):
    name = "ort"
    description = "com.bridge ONNX on onnxruntime, native kernels"
    order = 20
    model_key = "onnx-custom"
    kernels = "all"


RUNTIME = Ort
