"""How much arithmetic an ONNX model is: the multiply-adds of its convolutions
and matrix products (everything else is noise next to them), from the shapes
ONNX's inference finds. onnx-reference uses it to stay out of models that
pure numpy would take minutes on. A fused op (bridge's or a team's) counts
as its spec's decomposition: the nodes are inlined first, so no op is known
here by name."""
from __future__ import annotations

from typing import Dict, Optional, Sequence

import numpy as np

SMALL_BYTES = 4096


def _weightless(model):
    """The graph with every large initializer turned into a typed input: shape
    inference needs their shapes only (copying 250 MB of weights for it would
    cost more than the inference); small ones (Reshape's shapes) stay."""
    import onnx
    from onnx import helper
    g = model.graph
    graph = onnx.GraphProto(name=g.name)
    graph.node.extend(g.node)
    graph.input.extend(g.input)
    have = {i.name for i in g.input}
    small = [t for t in g.initializer if t.ByteSize() <= SMALL_BYTES]  # shape operands: inference reads them
    graph.initializer.extend(small)
    kept = {t.name for t in small}
    graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                       for t in g.initializer if t.name not in have and t.name not in kept)
    graph.output.extend(g.output)
    graph.value_info.extend(g.value_info)
    out = onnx.ModelProto(ir_version=model.ir_version, graph=graph)
    out.opset_import.extend(model.opset_import)
    out.functions.extend(model.functions)
    return out


def _inlined(model):
    """`model` with every node of a known spec replaced by its body; as it is
    when a body cannot be written (an estimate never fails for it)."""
    from bridge import onnx_plugins
    try:
        return onnx_plugins.inline_custom_ops(model)
    except Exception:  # noqa: BLE001 - the fused nodes then count as zero
        return model


def _shapes(model) -> Dict[str, Sequence[int]]:
    import onnx
    g = onnx.shape_inference.infer_shapes(model).graph
    shapes = {t.name: list(t.dims) for t in model.graph.initializer}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        t = vi.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shapes[vi.name] = [d.dim_value for d in t.shape.dim]
    return shapes


def _attr(node, name, default=None):
    from onnx import helper
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def multiply_adds(model) -> Optional[int]:
    """Multiply-adds of one inference (Conv, ConvTranspose, MatMul, Gemm, and
    the fused ops through their bodies); None when shape inference fails. Ops
    whose shapes stay unknown count as zero, so this is a lower bound."""
    model = _inlined(_weightless(model))
    try:
        shapes = _shapes(model)
    except Exception:  # noqa: BLE001 - an estimate, never a reason to fail
        return None
    total = 0
    for node in model.graph.node:
        ins = [shapes.get(i) for i in node.input]
        out = shapes.get(node.output[0]) if node.output else None
        if out is None or len(ins) < 2 or ins[1] is None:
            continue
        size = int(np.prod(out, dtype=np.int64))
        w = ins[1]
        if node.op_type == "Conv" and len(w) >= 3:
            total += size * int(np.prod(w[1:], dtype=np.int64))
        elif node.op_type == "ConvTranspose" and ins[0] is not None and len(w) >= 3:
            total += int(np.prod(ins[0], dtype=np.int64)) * int(np.prod(w[1:], dtype=np.int64))
        elif node.op_type == "MatMul" and ins[0]:
            total += size * ins[0][-1]
        elif node.op_type == "Gemm" and ins[0] and len(ins[0]) == 2:
            total += size * ins[0][0 if _attr(node, "transA", 0) else 1]
    return total
