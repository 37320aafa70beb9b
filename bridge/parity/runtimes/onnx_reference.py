"""`onnx-reference`: onnx's ReferenceEvaluator with bridge's reference kernels
(the numpy float64 judges of bridge.ops) for the com.bridge nodes. The
reference for an .onnx MODEL."""
from __future__ import annotations

import numpy as np

from bridge.parity.onnx_base import OnnxRuntime
from bridge.parity.runtime import Unavailable
from bridge.parity.export import has_custom_nodes


class OnnxReference(OnnxRuntime):
    name = "onnx-reference"
    description = "onnx ReferenceEvaluator with bridge's reference ops"
    order = 50

    reference_for = ("onnx",)  # the judge only where there is no TF model

    def onnx_model(self, source):
        return source.onnx_custom()

    def executor(self, model):
        from onnx.reference import ReferenceEvaluator
        new_ops = []
        if has_custom_nodes(model):
            try:
                from bridge import onnx_plugins
                new_ops = list(onnx_plugins.reference_ops())
            except (ImportError, AttributeError) as e:
                raise Unavailable(f"bridge.onnx_plugins.reference_ops is not available ({e})") from None
        from bridge.parity.reference_fixes import OPS
        evaluator = ReferenceEvaluator(model, new_ops=new_ops + OPS)

        def run(feeds, names):
            return [np.asarray(a) for a in evaluator.run(list(names), feeds)]
        return run


RUNTIME = OnnxReference
