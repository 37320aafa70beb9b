"""`onnx-reference`: onnx's ReferenceEvaluator with bridge's reference kernels
(the numpy float64 judges of bridge.ops) for the com.bridge nodes. The
reference for an .onnx MODEL.

Pure numpy is slow on big models, so for a TensorFlow MODEL it runs only under
`GFLOP_BUDGET`, unless named in --runtimes; the table says why it did not run.
The budget lets the built-in models at their default configs in (YOLOv3-416,
66 GFLOP), so each of them gets this runtime's verdict.
For an .onnx MODEL it is the judge and always runs.

Where the evaluator itself cannot run a standard op that onnxruntime runs
(its kernels are incomplete: bridge.parity.reference_fixes mends the ones
met so far), the row is unavailable, naming the op and its message: that is
no verdict on the export. A failure inside a bridge op (its reference kernel
or its function body) stays the row's error: that is what this runtime
judges."""
from __future__ import annotations

import numpy as np

from bridge.parity.export import has_custom_nodes
from bridge.parity.onnx_base import OnnxRuntime
from bridge.parity.runtime import Unavailable

GFLOP_BUDGET = 100.0  # every built-in model at its default config fits (timings: benchmarks/RESULTS.md)


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
            try:
                return [np.asarray(a) for a in evaluator.run(list(names), feeds)]
            except Exception as e:  # noqa: BLE001 - sorted below: the evaluator's gap, or a real failure
                standard = failed_standard_op(e)
                if standard is None:
                    raise
                raise Unavailable(standard) from None
        return run


STANDARD_DOMAINS = ("", "ai.onnx")


def failed_standard_op(error: BaseException):
    """"onnx's reference evaluator cannot run OP (its message)" when `error` was
    raised inside the evaluator's kernels of standard ops only (the innermost
    op named, with the ops it ran inside); None when a node of another domain
    (a bridge op, its function body) is on the way, or no evaluator node is."""
    from onnx.reference.op_run import OpRun
    nodes = []
    tb = error.__traceback__
    while tb is not None:
        me = tb.tb_frame.f_locals.get("self")
        node = getattr(me, "onnx_node", None) if isinstance(me, OpRun) else None
        if node is not None and (not nodes or nodes[-1] is not node):
            nodes.append(node)
        tb = tb.tb_next
    if not nodes or any(n.domain not in STANDARD_DOMAINS for n in nodes):
        return None
    inner = nodes[-1].op_type
    outer = [n.op_type for n in nodes[:-1]]
    where = f" inside {' > '.join(outer)}" if outer else ""
    text = str(error).strip().splitlines()
    message = f"{type(error).__name__}: {text[0] if text else ''}"[:200]
    return f"onnx's reference evaluator cannot run {inner}{where} ({message})"


RUNTIME = OnnxReference
