"""`ge`: the model.onnx that `bridge export --to ge` writes for Ascend (ATC's
opset, static shapes, no model-local functions, the fused ops as plain
com.bridge nodes, as the custom-operator plugin route hands them to GE), run
on onnxruntime with bridge's native kernels in place of the Ascend kernels.
It checks what that route depends on: the conversion at ATC's opset, the
static layout, and the nodes' attributes as the plugins parse them.

Outputs of the real thing come in with `--load-outputs ge=F` (msame's `.bin`
folder, or an .npz): they then take this row's place, read in this model's
output order (`output_layout`), which is the order msame writes them in.
"""
from __future__ import annotations

from bridge.ascend.origins import DEFAULT_OPSET
from bridge.parity.onnx_base import OnnxRuntime, export_names
from bridge.parity.runtime import canonical_names


# a model computing below float32 (mixed_float16), as `bridge export --to ge` writes it for the built-in route
FLOAT32_NOTE = "its float16 layers rebuilt in float32 (GE's built-in expansion is float32 only; ATC lowers precision)"


class GE(OnnxRuntime):
    name = "ge"
    description = (f"GE-bound model.onnx (ATC opset {DEFAULT_OPSET}, static shapes, no functions) on onnxruntime, "
                   f"native kernels")
    order = 70
    model_key = "onnx-ge"
    kernels = "all"

    def onnx_model(self, source):
        model = super().onnx_model(source)
        from bridge import ops
        from bridge.onnx_plugins import team_libraries
        from bridge.parity.runtime import Unavailable
        # this route runs native kernels in place of the Ascend ones: a team op needs its own
        # onnxruntime library (--ort-library), else there is nothing to stand in for its kernel
        team = sorted({n.op_type for n in model.graph.node
                       if (s := ops.for_node(n.domain, n.op_type)) is not None and not ops.is_builtin(s)
                       and not team_libraries.library_for(s.name)})
        if team:
            raise Unavailable(f"{', '.join(team)} has no onnxruntime kernel here to stand in for its Ascend kernel "
                              f"(give one with {team_libraries.FLAG}; the ge-builtin row checks its GE expansion)")
        note = getattr(source, "ge_opset_note", "")
        if note:
            self.description = self.description.replace(f"ATC opset {DEFAULT_OPSET}", f"ATC {note}")
        if getattr(source, "ge_float32", False):
            self.description += f"; {FLOAT32_NOTE}"
        return model

    def attach(self, source, model, path=None) -> None:
        """This row on a written GE-bound model (either parser; bridge.parity.verify)."""
        from bridge.ascend import legacy_to_runnable
        super().attach(source, legacy_to_runnable(model))

    def output_layout(self, source):
        renamed = export_names(source.onnx_ge())
        own = [renamed.get(o.name, o.name) for o in source.onnx_ge().graph.output]
        mapping = canonical_names(own, source.output_names)
        if mapping is None:  # no name in common: the model's outputs are in the reference's order
            return list(source.output_names), {}
        return [mapping[o] for o in own if o in mapping], mapping


RUNTIME = GE
