"""One-op ONNX models for the Ascend tests, built with onnx.helper from the specs."""
from __future__ import annotations

import random

import numpy as np
from onnx import TensorProto, helper

from bridge import ops

# op -> list of (input shapes, ONNX attributes), from each built-in op's case table
# (bridge/ops/<op>.py examples()): its first row, a seeded pick of the others and,
# last, its first empty row; rows every dtype of the op takes (the float32-only
# stress rows, large means, are for the case-table tests: test_ascend_from_body
# runs every row). This many per op keeps the opset sweeps here cheap.
PER_OP = 4


def _cases(spec):
    rows = [e for e in spec.examples() if set(spec.dtypes) <= set(e.dtypes) and not e.large]
    empty = [e for e in rows if any(0 in s for s in e.shapes)]
    rest = [e for e in rows[1:] if e not in empty]
    random.Random(f"{spec.name}-1").shuffle(rest)
    picked = rows[:1] + rest[:PER_OP - 1 - len(empty[:1])] + empty[:1]
    return [([tuple(s) for s in e.shapes], dict(e.onnx_attrs)) for e in picked]


CASES = {spec.name: _cases(spec) for spec in ops.all_specs() if ops.is_builtin(spec)}


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
