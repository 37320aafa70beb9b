"""`ort-lowered`: the standard-ops export (every com.bridge node inlined) on
plain onnxruntime: what any ONNX runtime without bridge can run."""
from __future__ import annotations

from bridge.parity.onnx_base import OnnxRuntime


class OrtLowered(OnnxRuntime):
    name = "ort-lowered"
    description = "standard-ops ONNX (custom nodes inlined) on plain onnxruntime"
    order = 40
    model_key = "onnx-lowered"   # plain onnxruntime: no kernels


RUNTIME = OrtLowered
