"""`ge-builtin`: the other Ascend plugin route. The ParseOpToGraphFn plugins
expand each fused op into GE built-in operators; bridge.ascend.expand_builtin
builds the same subgraph as standard ONNX from the GE-bound model (see
`ge`), and plain onnxruntime runs it: no kernel library, no function bodies,
so it checks the expansion itself against TF."""
from __future__ import annotations

from bridge.parity.onnx_base import OnnxRuntime
from bridge.parity.runtime import Unavailable


class GEBuiltin(OnnxRuntime):
    name = "ge-builtin"
    description = "GE built-in-operator expansion (what ParseOpToGraphFn builds) on plain onnxruntime"
    order = 71
    model_key = "onnx-ge-builtin"   # plain onnxruntime: no kernels

    def onnx_model(self, source):
        def build():
            from bridge.ascend import expand_builtin
            from bridge.ops import OpError
            try:
                return expand_builtin(source.onnx_ge())
            except OpError as e:  # e.g. a float16 model: the expansion is float32 only
                raise Unavailable(str(e)) from None
        model = source.cached(self.model_key, build, "expanding onto GE built-in operators")
        if getattr(source, "ge_float32", False):
            from bridge.parity.runtimes.ge import FLOAT32_NOTE
            self.description = f"{GEBuiltin.description}; {FLOAT32_NOTE}"
        return model

    def attach(self, source, model, path=None) -> None:
        """This row on the expansion of a written GE-bound model (bridge.parity.verify)."""
        from bridge.ascend import expand_builtin
        super().attach(source, expand_builtin(model))


RUNTIME = GEBuiltin
