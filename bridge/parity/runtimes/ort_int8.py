"""`ort-int8`: the com.bridge export with onnxruntime's dynamic int8 quantization
(converters/quantize_onnx.py: MatMul/Gemm weights int8, activations at run time;
bridge's ops stay float32 on their native kernels), what `bridge export --to onnx
--quantize dynamic` writes. Opt-in; with `--task` its outputs past the float32
bounds are judged by the answers (bridge.parity.task), never by a wider bound."""
from __future__ import annotations

from bridge.parity.runtimes.ort import Ort


class OrtInt8(Ort):
    name = "ort-int8"
    description = "com.bridge ONNX, dynamic int8 (MatMul/Gemm weights), on onnxruntime with native kernels"
    order = 22
    model_key = "onnx-int8"
    default = False
    quantize = "dynamic"

    def onnx_model(self, source):
        from bridge.converters import quantize_onnx

        def build():
            return quantize_onnx.dynamic(source.onnx_custom())
        weights = quantize_onnx.weight_type()
        self.description = f"{self.description}; weights {weights}"
        return source.cached("onnx-int8", build, f"quantizing the export (dynamic int8, weights {weights})")


RUNTIME = OrtInt8
