"""`ort-functions`: the same com.bridge file on plain onnxruntime, no kernel
library: onnxruntime inlines each custom node's model-local function."""
from __future__ import annotations

from bridge.parity.onnx_base import OnnxRuntime, ort_executor
from bridge.parity.runtimes.ort import plugin_session


class OrtFunctions(OnnxRuntime):
    name = "ort-functions"
    description = "com.bridge ONNX on onnxruntime, no library (functions inlined)"
    order = 30
    model_key = "onnx-custom"

    def onnx_model(self, source):
        return source.onnx_custom()

    def executor(self, model):
        return ort_executor(plugin_session(model, "none"))


RUNTIME = OrtFunctions
