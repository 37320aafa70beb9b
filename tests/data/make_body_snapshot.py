"""Writes body_snapshot.json.gz: the ONNX function bodies and lowered (inlined)
bodies of bridge's own ops, node by node, as test_body_snapshot.py compares them.

Taken at commit 1a3e2db, before the bodies moved into the specs, so the test
proves the move changed no node:

    PYTHONPATH=<checkout of 1a3e2db>:<checkout>/tests python tests/data/make_body_snapshot.py tests/data/body_snapshot.json.gz
"""
from __future__ import annotations

import gzip
import json
import sys

from onnx import TensorProto, helper


def node_rows(nodes):
    """(op_type, inputs, outputs, attributes) per node; a tensor attribute by its
    dtype, shape and values, a referenced attribute by the name it refers to."""
    rows = []
    for n in nodes:
        attrs = []
        for a in n.attribute:
            if a.ref_attr_name:
                attrs.append([a.name, "@" + a.ref_attr_name])
                continue
            v = helper.get_attribute_value(a)
            if a.type == a.TENSOR:
                from onnx import numpy_helper
                arr = numpy_helper.to_array(v)
                v = [str(arr.dtype), list(arr.shape), arr.ravel().tolist()]
            elif isinstance(v, bytes):
                v = v.decode()
            elif isinstance(v, (list, tuple)):
                v = list(v)
            attrs.append([a.name, v])
        rows.append([n.op_type, list(n.input), list(n.output), attrs])
    return rows


OPS = ("FusedLayerNorm", "YoloConvBnLeaky", "YoloDecode")

# The one-op models the snapshot was taken on (tests/ascend_models.py's CASES at
# 1a3e2db), fixed here: that table is now drawn from the specs' case tables.
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


def snapshot():
    from ascend_models import one_op_model
    from bridge.onnx_plugins import function_proto, inline_custom_ops

    out = {"function": {}, "inline": {}}
    for name in OPS:
        for opset in range(13, 19):
            for dtype in ("float32", "float16") + ((None,) if opset >= 15 else ()):
                f = function_proto(name, opset, dtype=dtype)
                out["function"][f"{name}/{opset}/{dtype}"] = node_rows(f.node)
        for i, (shapes, attrs) in enumerate(CASES[name]):
            for opset in range(11, 19):
                for dtype in (TensorProto.FLOAT, TensorProto.FLOAT16):
                    model = inline_custom_ops(one_op_model(name, shapes, attrs, opset, dtype=dtype))
                    key = f"{name}/{i}/{opset}/{TensorProto.DataType.Name(dtype)}"
                    out["inline"][key] = node_rows(model.graph.node)
    return out


if __name__ == "__main__":
    text = json.dumps(snapshot(), separators=(",", ":"), sort_keys=True)
    with open(sys.argv[1], "wb") as f:
        f.write(gzip.compress(text.encode(), mtime=0))
