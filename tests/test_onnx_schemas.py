"""The generated com.bridge schemas: what onnx's checker and strict shape
inference accept and reject, with the spec's messages."""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import defs, helper

from bridge import onnx_plugins  # noqa: F401  (registers the schemas)
from bridge import ops as specs
from bridge.onnx_plugins.one_op import one_op_model


def test_schemas_follow_the_specs():
    for spec in specs.all_specs():
        s = defs.get_schema(spec.name, spec.domain_version, spec.domain)
        assert [i.name for i in s.inputs] == [i.name for i in spec.inputs]
        assert [o.name for o in s.outputs] == [o.name for o in spec.outputs]
        (tc,) = s.type_constraints
        onnx_names = {"float32": "tensor(float)", "float16": "tensor(float16)", "bfloat16": "tensor(bfloat16)"}
        assert sorted(tc.allowed_type_strs) == sorted(onnx_names[d] for d in spec.dtypes)
        assert set(s.attributes) == {a.name for a in spec.onnx_attrs}
        for a in spec.onnx_attrs:
            sa = s.attributes[a.name]
            assert sa.required == a.required, a.name
            if not a.required:
                value = helper.get_attribute_value(sa.default_value)
                expect = list(a.default) if a.is_list else a.default
                assert value == pytest.approx(expect), a.name


def test_registration_is_idempotent():
    from bridge.onnx_plugins import schemas
    assert not any(schemas.register_all().values())


def _infer(model):
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _dims(vi):
    return [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]


def test_shape_inference_fills_in_outputs_and_keeps_unknown_dims():
    raw = np.ones((1, 13, 13, 24), np.float32)
    model = one_op_model("YoloDecode", [raw], dict(anchors=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], num_classes=3, stride=32),
                         dynamic=(0,))
    del model.graph.output[:]
    model.graph.output.extend([helper.make_tensor_value_info(n, 0, None)
                               for n in ("boxes", "objectness", "class_probs")])
    out = {vi.name: vi for vi in _infer(model).graph.output}
    assert _dims(out["boxes"]) == [None, 507, 4]
    assert _dims(out["objectness"]) == [None, 507]
    assert _dims(out["class_probs"]) == [None, 507, 3]
    assert out["boxes"].type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def _node_model(op, inputs, attrs, elem=onnx.TensorProto.FLOAT):
    spec = specs.get(op)
    node = helper.make_node(op, [i.name for i in spec.inputs], [o.name for o in spec.outputs],
                            domain=spec.domain, **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(i.name, elem, s)
                                        for i, s in zip(spec.inputs, inputs)],
                          [helper.make_empty_tensor_value_info(o.name) for o in spec.outputs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(spec.domain, 1)])


def _bad_nodes():
    """The spec tables' bad inputs as nodes, plus what only the ONNX form can get wrong."""
    for spec in specs.all_specs():
        for bad in spec.bad_inputs():
            if bad.in_onnx:
                attrs, message = bad.onnx
                yield pytest.param(spec.name, [list(s) for s in bad.shapes], attrs, re.escape(message),
                                   id=f"{spec.name}-{bad.id}")
    yield pytest.param("YoloDecode", [[1, 2, 2, 8]], dict(anchors=[1.0, 2.0], num_classes=3),
                       "YoloDecode: argument 'stride': required attribute is missing", id="decode-stride-missing")


@pytest.mark.parametrize("op,shapes,attrs,message", list(_bad_nodes()))
def test_strict_shape_inference_rejects_bad_nodes(op, shapes, attrs, message):
    # the schema's inference function raises the spec's own error, and onnx passes it through as it is
    with pytest.raises(specs.OpError, match=message):
        _infer(_node_model(op, shapes, attrs))


def test_checker_rejects_non_float_types_and_unknown_attributes():
    def model(elem, **attrs):
        m = _node_model("FusedLayerNorm", [[2, 3], [3], [3]], attrs, elem)
        del m.graph.output[:]
        m.graph.output.append(helper.make_tensor_value_info("y", elem, [2, 3]))
        return m
    onnx.checker.check_model(model(onnx.TensorProto.FLOAT), full_check=True)
    with pytest.raises(ValueError, match=r"FusedLayerNorm: argument 'x': element type TensorProto.INT32 is not one of"):
        onnx.checker.check_model(model(onnx.TensorProto.INT32), full_check=True)
    with pytest.raises(onnx.checker.ValidationError, match="Unrecognized attribute: bogus"):
        onnx.checker.check_model(model(onnx.TensorProto.FLOAT, bogus=1), full_check=True)


def test_onnx_plugins_imports_without_tensorflow():
    """A deployment box has onnxruntime only: importing and using bridge.onnx_plugins
    must never touch TensorFlow."""
    code = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ImportError("tensorflow is blocked in this test")
        return None
sys.meta_path.insert(0, Block())
import numpy as np
from bridge import onnx_plugins
from bridge.onnx_plugins.one_op import one_op_model
from onnx.reference import ReferenceEvaluator
x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
m = one_op_model("FusedLayerNorm", [x, np.ones(3, np.float32), np.ones(3, np.float32)], opset=16)
ReferenceEvaluator(m, new_ops=onnx_plugins.reference_ops()).run(None, {"x": x, "gamma": x[0], "beta": x[1]})
onnx_plugins.inline_custom_ops(m)
onnx_plugins.backend_status(onnx_plugins.schemas.specs.get("YoloDecode"))
assert not any(k.startswith("tensorflow") for k in sys.modules), "tensorflow was imported"
print("ok")
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stderr[-2000:]
