"""`ort`: the custom-domain export on onnxruntime with bridge's native kernels."""
from __future__ import annotations

from bridge.parity.onnx_base import OnnxRuntime, ort_executor
from bridge.parity.runtime import Unavailable


def plugin_session(model, kernels):
    """An onnxruntime session through bridge.onnx_plugins (schemas, library);
    `model`: a ModelProto or a file."""
    try:
        from bridge import onnx_plugins
        make = onnx_plugins.session
    except (ImportError, AttributeError) as e:
        raise Unavailable(f"bridge.onnx_plugins.session is not available ({e})") from None
    from bridge.native import BuildError
    try:
        return make(model, kernels=kernels)
    except BuildError as e:  # no compiler / headers here: say so in the table
        raise Unavailable(f"the onnxruntime kernel library does not build here: {str(e).splitlines()[0]}") from None


class Ort(OnnxRuntime):
    name = "ort"
    description = "com.bridge ONNX on onnxruntime, native kernels"
    order = 20
    model_key = "onnx-custom"

    def onnx_model(self, source):
        return source.onnx_custom()

    def executor(self, model):
        return ort_executor(plugin_session(model, "all"))


RUNTIME = Ort
