"""`onnx-reference`: onnx's ReferenceEvaluator with bridge's reference kernels
(the numpy float64 judges of bridge.ops) for the com.bridge nodes. The
reference for an .onnx MODEL.

Pure numpy is slow on big models (YOLOv3-416, 66 GFLOP: ~6 s, as long as every
other ONNX runtime together), so for a TensorFlow MODEL it runs only under
`GFLOP_BUDGET`, unless named in --runtimes; the table says why it did not run.
For an .onnx MODEL it is the judge and always runs."""
from __future__ import annotations

import numpy as np

from bridge.parity.export import has_custom_nodes
from bridge.parity.onnx_base import OnnxRuntime
from bridge.parity.runtime import Unavailable

GFLOP_BUDGET = 20.0   # ~2 s of numpy on two cores


class OnnxReference(OnnxRuntime):
    name = "onnx-reference"
    description = (f"onnx ReferenceEvaluator with bridge's reference ops (TF models: up to {GFLOP_BUDGET:g} GFLOP "
                   f"unless named)")
    order = 50

    reference_for = ("onnx",)  # the judge only where there is no TF model

    def onnx_model(self, source):
        model = source.onnx_custom()
        if source.kind != "onnx" and self.name not in getattr(source, "requested", ()):
            from bridge.parity.cost import multiply_adds
            macs = multiply_adds(model)
            if macs is not None and 2 * macs > GFLOP_BUDGET * 1e9:
                raise Unavailable(f"skipped: {2 * macs / 1e9:.1f} GFLOP in numpy is over its {GFLOP_BUDGET:g} GFLOP "
                                  f"budget; name it in --runtimes to run it anyway")
        return model

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
