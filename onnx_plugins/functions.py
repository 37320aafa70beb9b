"""Function bodies: each com.bridge op written in standard ONNX ops.

Each op's spec has `body(b, *inputs, outputs)` (bridge/ops/<op>/body.py, or a team's
spec file), which emits its nodes through a `Body`. A `Body` hides what changes between opsets
(ReduceMean's axes, Split's sizes, Unsqueeze's axes, CastLike) and between the
two ways a body is used:

- generic (`attrs=None`): a FunctionProto whose nodes reference the calling
  node's attributes (`ref_attr_name`), so one function serves every node;
  attribute values that must be tensors go through `Constant(value_float=@attr)`.
  Needs opset >= 13 (Split and Unsqueeze take their sizes as inputs);
  opsets 13-14 lack CastLike, so there the body is typed (`dtype` given).
- specialised (`attrs` given): the body of one node with its attribute values
  written in, as `inline_custom_ops` splices it into a graph; works down to
  opset 11 (what older Ascend toolchains read).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import onnx
from onnx import helper, numpy_helper

from bridge import ops as specs
from bridge.ops import OpSpec, body as body_protocol
from bridge.ops.body import Ref

from .schemas import allowed_elem_types, node_attrs

MIN_FUNCTION_OPSET = 13   # generic function bodies
MIN_INLINE_OPSET = 11     # specialised (inlined) bodies
MAX_OPSET = 18            # the newest opset the bodies are checked against
CASTLIKE_OPSET = 15

_ONNX_ATTR_TYPE = {"float": onnx.AttributeProto.FLOAT, "int": onnx.AttributeProto.INT,
                   "string": onnx.AttributeProto.STRING, "list(float)": onnx.AttributeProto.FLOATS,
                   "list(int)": onnx.AttributeProto.INTS}


def _spec(spec_or_name) -> OpSpec:
    return spec_or_name if isinstance(spec_or_name, OpSpec) else specs.get(spec_or_name)


class Body(body_protocol.Body):
    """The Body protocol (bridge/ops/body.py) building ONNX nodes."""

    FLOAT = onnx.TensorProto.FLOAT   # float32, as `dtype` and Cast's `to` spell it here

    def __init__(self, spec: OpSpec, opset: int, dtype: Optional[int] = None, attrs: Optional[dict] = None,
                 prefix: str = ""):
        low = MIN_INLINE_OPSET if attrs is not None else MIN_FUNCTION_OPSET
        if not low <= opset <= MAX_OPSET:
            what = "an inlined" if attrs is not None else "a function"
            raise ValueError(f"{spec.name}: {what} body needs opset {low}..{MAX_OPSET}, got {opset}")
        if opset < CASTLIKE_OPSET and dtype is None:
            raise ValueError(f"{spec.name}: below opset {CASTLIKE_OPSET} (no CastLike) the body is typed: "
                             f"pass dtype (one of {list(spec.dtypes)})")
        if dtype is not None and not isinstance(dtype, int):
            dtype = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        if dtype is not None and dtype not in allowed_elem_types(spec):
            raise ValueError(f"{spec.name}: dtype {helper.tensor_dtype_to_string(dtype)} is not one of {list(spec.dtypes)}")
        self.spec, self.opset, self.dtype, self.attrs, self.prefix = spec, opset, dtype, attrs, prefix
        self.nodes: List[onnx.NodeProto] = []
        self._count = 0

    # -- plumbing ---------------------------------------------------------------
    def _attr(self, key: str, value) -> onnx.AttributeProto:
        if isinstance(value, Ref):
            a = self.spec.onnx_attr(value.name)
            if self.attrs is not None:
                return helper.make_attribute(key, list(self.attrs[value.name]) if a.is_list else self.attrs[value.name])
            return onnx.AttributeProto(name=key, ref_attr_name=value.name, type=_ONNX_ATTR_TYPE[a.type])
        return helper.make_attribute(key, value)

    def op(self, op_type: str, *inputs: str, out: Union[None, str, Sequence[str]] = None, n_out: int = 1,
           **attrs) -> Union[str, List[str]]:
        if out is None:
            outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        else:
            outs = [out] if isinstance(out, str) else list(out)
        node = helper.make_node(op_type, list(inputs), outs, name=self.fresh(op_type))
        node.attribute.extend(self._attr(k, v) for k, v in attrs.items())
        self.nodes.append(node)
        return outs[0] if len(outs) == 1 and out is None or isinstance(out, str) else outs

    def const(self, value, dtype="int64") -> str:
        return self.op("Constant", value=numpy_helper.from_array(np.asarray(value, dtype=dtype)))

    def attr_const(self, name: str) -> str:
        """The calling node's attribute as a tensor: float/int scalars, lists 1-D;
        floats are float32, ints int64."""
        a = self.spec.onnx_attr(name)
        if self.attrs is not None:
            return self.const(self.attrs[name], "float32" if a.element_type == "float" else "int64")
        key = {"float": "value_float", "int": "value_int", "list(float)": "value_floats",
               "list(int)": "value_ints"}[a.type]
        return self.op("Constant", **{key: Ref(name)})

    # -- what changes between opsets -------------------------------------------
    def like(self, x: str, like: str) -> str:
        """`x` cast to the element type of `like` (the op's T). A typed body
        casts to the known type: CastLike on a graph input makes its result, and
        all that follows from it, non-constant to onnxruntime, which then
        refolds YOLOv3's 62 M filter values on every run (4x slower)."""
        if self.dtype is None:
            return self.op("CastLike", x, like)
        return self.op("Cast", x, to=self.dtype)

    def reduce_mean(self, x: str, axes: Sequence[int], keepdims: int = 1) -> str:
        if self.opset >= 18:
            return self.op("ReduceMean", x, self.const(list(axes)), keepdims=keepdims)
        return self.op("ReduceMean", x, axes=list(axes), keepdims=keepdims)

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        if self.opset >= 13:
            return self.op("Unsqueeze", x, self.const(list(axes)))
        return self.op("Unsqueeze", x, axes=list(axes))

    def split(self, x: str, sizes: Sequence[Union[int, str]], axis: int) -> List[str]:
        """Split into pieces; a size may be a 1-element int64 tensor name
        (generic bodies) or an int."""
        if self.opset >= 13:
            parts, run = [], []
            for s in sizes:
                if isinstance(s, str):
                    if run:
                        parts.append(self.const(run))
                        run = []
                    parts.append(s)
                else:
                    run.append(int(s))
            if run:
                parts.append(self.const(run))
            split = parts[0] if len(parts) == 1 else self.op("Concat", *parts, axis=0)
            return self.op("Split", x, split, axis=axis, n_out=len(sizes))
        if any(isinstance(s, str) for s in sizes):
            raise ValueError(f"{self.spec.name}: opset {self.opset} Split needs static sizes")
        return self.op("Split", x, axis=axis, split=[int(s) for s in sizes], n_out=len(sizes))

    def size_of(self, name: str) -> Union[int, str]:
        """An int attribute as a Split size: the value, or a [1] int64 tensor."""
        if self.attrs is not None:
            return int(self.attrs[name])
        return self.unsqueeze(self.attr_const(name), [0])

    def build(self, inputs: Sequence[str], outputs: Sequence[str]) -> List[onnx.NodeProto]:
        if self.spec.body is None:
            from .reference import origin
            raise ValueError(f"{self.spec.name}: its spec ({self.spec.name} from {origin(self.spec)}) has no "
                             f"decomposition (`body`): no ONNX function body, no lowered export")
        self.spec.body(self, *inputs, outputs=list(outputs))
        return self.nodes


def function_proto(spec_or_name, opset: int, dtype=None) -> onnx.FunctionProto:
    """The op as a model-local function (domain com.bridge, name = op type) of
    standard ops at `opset` (13..18; 13-14 need `dtype`)."""
    spec = _spec(spec_or_name)
    b = Body(spec, opset, dtype=dtype)
    nodes = b.build([i.name for i in spec.inputs], [o.name for o in spec.outputs])
    defaults = []
    for a in spec.onnx_attrs:
        if not a.required and not (a.is_list and not a.default):
            defaults.append(helper.make_attribute(a.name, list(a.default) if a.is_list else a.default))
    f = helper.make_function(
        spec.domain, spec.name, [i.name for i in spec.inputs], [o.name for o in spec.outputs], nodes,
        [helper.make_opsetid("", opset)],
        attributes=[a.name for a in spec.onnx_attrs if a.required],
        attribute_protos=defaults, doc_string=spec.doc)
    return f


# -- models -----------------------------------------------------------------------

def default_opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    raise ValueError("the model imports no default ONNX opset")


def all_nodes(graph: onnx.GraphProto):
    """Every node of `graph`, those in If/Loop/Scan bodies included (each node
    before the nodes of its subgraphs)."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from all_nodes(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from all_nodes(g)


def _custom_nodes(model):
    for node in all_nodes(model.graph):
        if specs.for_node(node.domain, node.op_type) is not None:
            yield node


def _elem_types(model: onnx.ModelProto) -> Dict[str, int]:
    """Element type of every value the model declares or shape inference finds."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        inferred = model
    types = {}
    g = inferred.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.HasField("tensor_type"):
            types[vi.name] = vi.type.tensor_type.elem_type
    for t in g.initializer:
        types[t.name] = t.data_type
    return types


def _node_dtype(spec, node, types) -> int:
    dtype = types.get(node.input[0]) if node.input else None
    if not dtype:
        raise ValueError(f"{spec.name}: node {node.name!r}: the element type of input {node.input[0]!r} is unknown "
                         f"(declare it, or use opset >= {CASTLIKE_OPSET})")
    return dtype


def add_functions(model: onnx.ModelProto, opset: Optional[int] = None) -> onnx.ModelProto:
    """Adds the model-local function of every com.bridge op the model uses
    (replacing older copies), the com.bridge opset_import, and writes every
    node's attribute defaults explicitly (ReferenceEvaluator ignores a
    function's defaults). `opset` defaults to the model's. Returns the model
    (changed in place)."""
    opset = opset or default_opset(model)
    used: Dict[str, set] = {}
    types = _elem_types(model) if opset < CASTLIKE_OPSET else {}
    for node in _custom_nodes(model):
        spec = specs.get(node.op_type)
        resolved = node_attrs(spec, node)
        present = {a.name for a in node.attribute}
        for a in spec.onnx_attrs:
            if a.name not in present:
                value = resolved[a.name]
                node.attribute.append(helper.make_attribute(a.name, list(value) if a.is_list else value)
                                      if not (a.is_list and not value) else
                                      onnx.AttributeProto(name=a.name, type=_ONNX_ATTR_TYPE[a.type]))
        used.setdefault(spec.name, set()).add(_node_dtype(spec, node, types) if types else None)
    keep = [f for f in model.functions if not (specs.for_node(f.domain, f.name) and f.name in used)]
    del model.functions[:]
    model.functions.extend(keep)
    for name, dtypes in used.items():
        if len(dtypes) > 1:
            raise ValueError(f"{name}: nodes of several element types "
                             f"{sorted(helper.tensor_dtype_to_string(d) for d in dtypes)}: below opset "
                             f"{CASTLIKE_OPSET} a function body is typed. Fix: export at opset >= {CASTLIKE_OPSET}, "
                             f"or use inline_custom_ops")
        model.functions.append(function_proto(name, opset, dtype=next(iter(dtypes))))
    for domain in sorted({specs.get(name).domain for name in used}):
        _set_opset(model, domain, specs.domains()[domain])
    return model


def _set_opset(model, domain, version):
    for o in model.opset_import:
        if o.domain == domain:
            o.version = version
            return
    model.opset_import.append(helper.make_opsetid(domain, version))


def inline_custom_ops(model: onnx.ModelProto, opset: Optional[int] = None,
                      only: Optional[Sequence[str]] = None) -> onnx.ModelProto:
    """A copy of `model` with every com.bridge node replaced by its body, attribute
    values written in (no com.bridge node, function or opset_import left). Works
    down to opset 11."""
    opset = opset or default_opset(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    types = _elem_types(out)
    counter = [0]

    def rewrite(graph: onnx.GraphProto):
        new_nodes = []
        for node in graph.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    rewrite(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for g in a.graphs:
                        rewrite(g)
            spec = specs.for_node(node.domain, node.op_type)
            if spec is None or (only is not None and spec.name not in only):
                new_nodes.append(node)
                continue
            counter[0] += 1
            prefix = f"{node.name or spec.module}__{counter[0]}/"
            dtype = types.get(node.input[0]) if node.input else None
            if opset < CASTLIKE_OPSET and not dtype:
                _node_dtype(spec, node, types)  # raises the clear message
            if opset >= CASTLIKE_OPSET and dtype not in allowed_elem_types(spec):
                dtype = None  # CastLike then; the checker or the runtime reports the bad type
            b = Body(spec, opset, dtype=dtype, attrs=node_attrs(spec, node), prefix=prefix)
            new_nodes.extend(b.build(list(node.input), list(node.output)))
        del graph.node[:]
        graph.node.extend(new_nodes)

    rewrite(out.graph)
    keep = [f for f in out.functions if specs.for_node(f.domain, f.name) is None or (only is not None and
                                                                                   f.name not in only)]
    del out.functions[:]
    out.functions.extend(keep)
    still = {n.domain for n in all_nodes(out.graph)} | {n.domain for f in out.functions for n in f.node}
    gone = set(specs.domains()) - still
    if gone:
        keep_ops = [o for o in out.opset_import if o.domain not in gone]
        del out.opset_import[:]
        out.opset_import.extend(keep_ops)
    return out
