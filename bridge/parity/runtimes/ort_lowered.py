"""`ort-lowered`: the standard-ops export (every com.bridge node inlined) on
plain onnxruntime: what any ONNX runtime without bridge can run."""
from __future__ import annotations

import onnxruntime

from bridge.parity.onnx_base import OnnxRuntime, ort_executor


class OrtLowered(OnnxRuntime):
    name = "ort-lowered"
    description = "standard-ops ONNX (custom nodes inlined) on plain onnxruntime"
    order = 40
    model_key = "onnx-lowered"

    def onnx_model(self, source):
        return source.onnx_lowered()

    def executor(self, model):
        session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
        return ort_executor(session)


RUNTIME = OrtLowered
