"""`ort-contrib`: the com.bridge export with onnxruntime's transformer operators
(converters/ort_transformer.py: com.microsoft Attention and
BiasGelu where the graph matches), what `bridge export --to onnx` writes by
default, on onnxruntime with bridge's native kernels. The other ONNX rows
(ort, ort-functions, ort-lowered, onnx-reference) run the unrewritten twin:
onnx's reference evaluator has no com.microsoft kernels. Opt-in (its own
session of the whole model); name it in --runtimes."""
from __future__ import annotations

from bridge.parity.runtimes.ort import Ort


class OrtContrib(Ort):
    name = "ort-contrib"
    description = "com.bridge ONNX with onnxruntime's transformer ops (com.microsoft), native kernels"
    order = 21
    model_key = "onnx-ort-contrib"
    default = False

    def onnx_model(self, source):
        def build():
            from bridge.converters import ort_transformer
            model, report = ort_transformer.rewrite(source.onnx_custom())
            self.description = f"{OrtContrib.description}; {report.line().split(': ', 1)[1]}"
            return model
        return source.cached(self.model_key, build, "rewriting onto onnxruntime's transformer ops")


RUNTIME = OrtContrib
