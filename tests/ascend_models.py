"""One-op ONNX models for the Ascend tests, built with onnx.helper from the specs."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from bridge import ops

# op -> list of (input shapes, ONNX attributes); odd sizes, size 1 included
CASES = {
    "FusedLayerNorm": [([(2, 3, 5), (5,), (5,)], dict(epsilon=1e-5)),
                       ([(1, 1), (1,), (1,)], dict()),
                       ([(0, 7), (7,), (7,)], dict(epsilon=1e-3))],
    "YoloConvBnLeaky": [([(1, 7, 6, 3), (3, 3, 3, 4), (4,), (4,), (4,), (4,), (4,)],
                         dict(strides=[2, 1], pads=[1, 0, 1, 2], dilations=[1, 1], epsilon=1e-3, alpha=0.1)),
                        ([(2, 5, 5, 1), (1, 1, 1, 1), (1,), (1,), (1,), (1,), (1,)], dict()),
                        ([(1, 9, 8, 2), (3, 2, 2, 3), (3,), (3,), (3,), (3,), (3,)],
                         dict(strides=[1, 2], pads=[2, 1, 2, 1], dilations=[2, 1], alpha=0.2))],
    "YoloDecode": [([(2, 3, 4, 2 * (5 + 3))], dict(anchors=[10., 13., 16., 30.], num_classes=3, stride=8,
                                                   scale_x_y=1.05)),
                   ([(1, 1, 1, 6)], dict(anchors=[5., 7.], num_classes=1, stride=32)),
                   ([(1, 5, 3, 3 * (5 + 2))], dict(anchors=[1., 2., 3., 4., 5., 6.], num_classes=2, stride=16))],
}


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
    xs = [(rng.standard_normal(s) + 0.1).astype(np.float32) for s in shapes]
    if name == "YoloConvBnLeaky":
        xs[6] = np.abs(xs[6]) + 0.5  # variance
    return xs
