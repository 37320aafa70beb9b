"""ONNX schemas for the com.bridge ops, generated from the op specs.

Registering them lets `onnx.checker.check_model(full_check=True)` and
`onnx.shape_inference.infer_shapes(strict_mode=True)` check every custom node:
types against `spec.dtypes`, attributes against `spec.onnx_attrs`, shapes through
`spec.infer_shapes` (so the ONNX side rejects exactly what every other backend
rejects, with the same message). onnxruntime never sees these schemas.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
import onnx
from onnx import defs, helper

from bridge import ops as specs
from bridge.ops import OpError, OpSpec

_ATTR_TYPES = {
    "float": defs.OpSchema.AttrType.FLOAT,
    "int": defs.OpSchema.AttrType.INT,
    "string": defs.OpSchema.AttrType.STRING,
    "list(float)": defs.OpSchema.AttrType.FLOATS,
    "list(int)": defs.OpSchema.AttrType.INTS,
    "list(string)": defs.OpSchema.AttrType.STRINGS,
}


def onnx_type_name(dtype: str) -> str:
    """numpy dtype name -> ONNX type string, e.g. float16 -> tensor(float16)."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return f"tensor({helper.tensor_dtype_to_string(elem).split('.')[-1].lower()})"


def allowed_elem_types(spec: OpSpec) -> List[int]:
    return [helper.np_dtype_to_tensor_dtype(np.dtype(d)) for d in spec.dtypes]


def attribute_value(attr: onnx.AttributeProto):
    """A Python value from an AttributeProto (lists as tuples, strings decoded)."""
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return tuple(v.decode() if isinstance(v, bytes) else v for v in value)
    return value


def node_attrs(spec: OpSpec, node: onnx.NodeProto) -> dict:
    """The node's com.bridge attributes resolved against the spec (defaults filled in)."""
    return spec.resolve_onnx({a.name: attribute_value(a) for a in node.attribute})


def _shape_of(type_proto: Optional[onnx.TypeProto]):
    if type_proto is None or not type_proto.tensor_type.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in type_proto.tensor_type.shape.dim)


def _inference(spec: OpSpec):
    def infer(ctx) -> None:
        attrs = {}
        for a in spec.onnx_attrs:
            proto = ctx.get_attribute(a.name)
            if proto is not None:
                attrs[a.name] = attribute_value(proto)
        in_types = [ctx.get_input_type(i) if ctx.has_input(i) else None for i in range(ctx.get_num_inputs())]
        elem = 0
        for arg, t in zip(spec.inputs, in_types):
            if t is None or not t.HasField("tensor_type"):
                continue
            e = t.tensor_type.elem_type
            if e and e not in allowed_elem_types(spec):
                raise OpError(spec.name, arg.name, f"element type {helper.tensor_dtype_to_string(e)} is not one of "
                                                   f"{list(spec.dtypes)}")
            if e and elem and e != elem:
                raise OpError(spec.name, arg.name, f"element type {helper.tensor_dtype_to_string(e)} differs from "
                                                   f"the first input's {helper.tensor_dtype_to_string(elem)}")
            elem = elem or e
        shapes = [_shape_of(t) for t in in_types]
        out_shapes = spec.infer_shapes(shapes, **spec.from_onnx_attrs(**attrs))
        for i, shape in enumerate(out_shapes[:ctx.get_num_outputs()]):
            if not ctx.has_output(i):
                continue
            out = onnx.TypeProto()
            out.tensor_type.elem_type = elem
            if shape is not None:
                out.tensor_type.shape.SetInParent()
                for d in shape:
                    dim = out.tensor_type.shape.dim.add()
                    if d is not None:
                        dim.dim_value = d
            ctx.set_output_type(i, out)
    return infer


def make_schema(spec: OpSpec) -> defs.OpSchema:
    param = defs.OpSchema.FormalParameter
    attributes = []
    for a in spec.onnx_attrs:
        if a.required:
            attributes.append(defs.OpSchema.Attribute(a.name, _ATTR_TYPES[a.type], a.doc, required=True))
        else:
            default = list(a.default) if a.is_list else a.default
            if a.is_list and not default:
                # make_attribute cannot tell the type of an empty list
                proto = onnx.AttributeProto(name=a.name, type=onnx.AttributeProto.AttributeType.Value(
                    "INTS" if a.element_type == "int" else "FLOATS"))
            else:
                proto = helper.make_attribute(a.name, default)
            attributes.append(defs.OpSchema.Attribute(a.name, proto, a.doc))
    schema = defs.OpSchema(
        spec.name, spec.domain, spec.domain_version, spec.doc,
        inputs=[param(i.name, "T", i.doc) for i in spec.inputs],
        outputs=[param(o.name, "T", o.doc) for o in spec.outputs],
        type_constraints=[("T", [onnx_type_name(d) for d in spec.dtypes], "the op's float type")],
        attributes=attributes,
    )
    schema.set_type_and_shape_inference_function(_inference(spec))
    return schema


def register_all() -> Dict[str, bool]:
    """Registers every op's schema once; {op: newly registered}."""
    done = {}
    for spec in specs.all_specs():
        if defs.has(spec.name, spec.domain):
            done[spec.name] = False
            continue
        defs.register_schema(make_schema(spec))
        done[spec.name] = True
    return done
