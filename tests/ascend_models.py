"""One-op ONNX models for the Ascend tests, built with onnx.helper from the specs."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from bridge import ops
from case_rows import builtin_specs, example_rows

# op -> list of (input shapes, ONNX attributes) from each built-in op's case table:
# rows every dtype of the op takes (the float32-only stress rows, large means, are
# for test_ascend_from_body's run of every row), 4 per op to keep the opset sweeps cheap.
CASES = {spec.name: [([tuple(s) for s in e.shapes], dict(e.onnx_attrs))
                     for e in example_rows(spec, every_dtype=True, per_op=4, seed="1")]
         for spec in builtin_specs()}


def one_op_model(name, shapes, attrs, opset=11, domain=None, dtype=TensorProto.FLOAT):
    spec = ops.get(name)
    out_shapes = spec.infer_shapes(shapes, **spec.from_onnx_attrs(**attrs))
    ins = [helper.make_tensor_value_info(a.name, dtype, s) for a, s in zip(spec.inputs, shapes)]
    outs = [helper.make_tensor_value_info(a.name, dtype, s) for a, s in zip(spec.outputs, out_shapes)]
    node = helper.make_node(spec.name, [a.name for a in spec.inputs], [a.name for a in spec.outputs],
                            name=f"{name}_node", domain=spec.domain if domain is None else domain, **attrs)
    graph = helper.make_graph([node], "g", ins, outs)
    imports = [helper.make_opsetid("", opset)]
    if (spec.domain if domain is None else domain) not in ("", "ai.onnx"):
        imports.append(helper.make_opsetid(spec.domain, spec.domain_version))
    return helper.make_model(graph, opset_imports=imports)


def inputs_for(name, shapes, rng):
    """The inputs of the op's case-table row with these shapes (its own values:
    a variance stays positive), else random non-zero ones."""
    for e in ops.get(name).examples():
        if [tuple(s) for s in e.shapes] == [tuple(s) for s in shapes]:
            return list(e.cast(np.float32))
    return [(rng.standard_normal(s) + 0.1).astype(np.float32) for s in shapes]
