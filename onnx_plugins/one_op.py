"""One-op ONNX models: a single com.bridge node with its model-local function,
for tests, benchmarks and `bridge` commands that probe a runtime."""
from __future__ import annotations

from typing import Dict, Iterable, Optional, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from bridge import ops as specs

from .functions import add_functions


def one_op_model(op: str, inputs: Sequence[np.ndarray], attrs: Optional[Dict] = None, *, opset: int = 17,
                 constants: Iterable[str] = (), dynamic: Iterable[int] = (), with_functions: bool = True,
                 ir_version: Optional[int] = None) -> onnx.ModelProto:
    """A model computing `op` on graph inputs shaped like `inputs` (arrays; their
    dtype is the model's T). Inputs named in `constants` become initializers
    holding those arrays. Axes listed in `dynamic` are left unnamed-symbolic in
    every graph input and output of rank > axis (e.g. 0: a dynamic batch)."""
    spec = specs.get(op)
    attrs = dict(attrs or {})
    arrays = [np.asarray(x) for x in inputs]
    elem = helper.np_dtype_to_tensor_dtype(arrays[0].dtype)
    constants, dynamic = set(constants), set(dynamic)
    out_shapes = spec.infer_shapes([a.shape for a in arrays], **spec.from_onnx_attrs(**attrs))

    def dims(shape, prefix):
        return [f"{prefix}{i}" if i in dynamic else d for i, d in enumerate(shape)]

    graph_inputs, inits = [], []
    for arg, a in zip(spec.inputs, arrays):
        if arg.name in constants:
            inits.append(numpy_helper.from_array(a, arg.name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(arg.name, elem, dims(a.shape, "d")))
    outputs = [helper.make_tensor_value_info(o.name, elem, dims(s, "d")) for o, s in zip(spec.outputs, out_shapes)]
    node = helper.make_node(spec.name, [i.name for i in spec.inputs], [o.name for o in spec.outputs],
                            name=spec.module, domain=spec.domain,
                            **{k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items()})
    graph = helper.make_graph([node], spec.module, graph_inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid(spec.domain, spec.domain_version)])
    if ir_version:
        model.ir_version = ir_version
    if with_functions:
        add_functions(model, opset)
    return model
