"""An op's GE decomposition, derived from its one decomposition, its ONNX body.

Every op (bridge's own and a team's) brings one decomposition into standard ONNX
ops (`spec.body`, written against the Body protocol, bridge/ops/body.py). Running that body on
`GeBody` instead records the same graph as a `Decomposition`, from which the GE
plugin's ParseOpToGraphFn and the ONNX expansion are rendered. `ONNX_TO_GE` is
the one table of ONNX ops the Ascend road can take this way; an op outside it is
refused by name (`UnmappedOp`), which the pre-flight reports.

The road is float32 only (expand.py refuses other inputs): a cast to float32 of
a float32 value, or a CastLike onto one, is no operator.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Sequence, Union

import numpy as np

from bridge.ascend.decomposition import Decomposition, Value, ints
from bridge.ops.body import Body, Ref, UnmappedOp  # noqa: F401 (UnmappedOp: this road's refusal)

FLOAT32, INT64 = "float32", "int64"
_ONNX_DTYPES = {1: FLOAT32, 7: INT64, FLOAT32: FLOAT32, INT64: INT64}  # TensorProto codes and names


@dataclass(frozen=True)
class Mapping:
    """One ONNX op onto a decomposition kind: `attrs` ONNX attribute -> kind
    parameter, `defaults` for parameters the node may leave out, `fixed` ONNX
    attributes the kind supports at one value only."""
    kind: str
    attrs: Dict[str, str] = field(default_factory=dict)
    defaults: Dict[str, Any] = field(default_factory=dict)
    fixed: Dict[str, Any] = field(default_factory=dict)


# ONNX ops that are the decomposition kind of the same name, without parameters
# (rendered back to ONNX as they came: render_onnx)
SAME_KIND = ("Add", "Sub", "Mul", "Div", "Sqrt", "Sigmoid", "Exp", "Erf", "Tanh", "Relu", "Neg", "Abs", "Pow",
             "Shape", "Range", "Reshape", "Slice")
_SAME = {op: Mapping(op) for op in SAME_KIND}

# ONNX op -> its GE decomposition kind (Cast, CastLike and Identity: see GeBody.op)
ONNX_TO_GE: Dict[str, Mapping] = {
    **_SAME,
    "LeakyRelu": Mapping("LeakyRelu", {"alpha": "alpha"}, {"alpha": 0.01}),
    "Transpose": Mapping("Transpose", {"perm": "perm"}),
    "Conv": Mapping("Conv", {"strides": "strides", "pads": "pads", "dilations": "dilations"},
                    {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1)}),
    "LayerNormalization": Mapping("LayerNorm", {"epsilon": "epsilon"}, {"epsilon": 1e-5}, {"axis": -1}),
    "ReduceMean": Mapping("ReduceMean", {"axes": "axes", "keepdims": "keepdims"}, {"keepdims": 1}),
    "Unsqueeze": Mapping("Unsqueeze", {"axes": "axes"}),
    "Gather": Mapping("Gather", {"axis": "axis"}, {"axis": 0}),
    "Concat": Mapping("Concat", {"axis": "axis"}),
}
_SPECIAL = ("Cast", "CastLike", "Identity")


class GeBody(Body):
    """The Body protocol (bridge/ops/body.py) recording into a Decomposition. Opset
    17: the newest the GE ONNX parsers read, where an op's LayerNormalization becomes
    GE's LayerNorm (render_onnx spells it out below 17)."""

    opset = 17
    FLOAT = FLOAT32
    dtype = FLOAT32
    cannot = "the Ascend road cannot map onto a GE built-in operator"

    def __init__(self, g: Decomposition):
        self.g, self.spec = g, g.spec
        self.values: Dict[str, Value] = {}
        self.types: Dict[str, str] = {}        # element type of every value
        self.sizes: Dict[str, Any] = {}        # size_of() tensors -> their Expr, for split()
        self._count = 0

    # -- plumbing ----------------------------------------------------------------
    def _value(self, name: str) -> Value:
        return self.values[name]

    def _put(self, out, hint: str, value: Value, dtype: str) -> str:
        name = out if isinstance(out, str) else self.fresh(hint)
        self.values[name], self.types[name] = value, dtype
        return name

    def _refuse(self, what: str):
        self.refuse(what, (*ONNX_TO_GE, *_SPECIAL), "write the body with those, or bring a GE custom operator")

    def _param(self, value):
        if isinstance(value, Ref):
            return self.g.attr(value.name)
        return tuple(value) if isinstance(value, list) else value

    def _cast(self, x: str, dtype: str, out) -> str:
        if dtype == self.types[x]:  # float32 to float32: no operator
            return self._put(out, "cast", self._value(x), dtype)
        return self._put(out, "cast", self.g.op("Cast", self._value(x), to=dtype), dtype)

    def op(self, op_type: str, *inputs: str, out: Union[None, str, Sequence[str]] = None, n_out: int = 1, **attrs):
        if op_type == "Identity":
            (x,) = inputs
            return self._put(out, "identity", self._value(x), self.types[x])
        if op_type == "Cast":
            to = _ONNX_DTYPES.get(attrs.get("to"))
            if to is None or len(inputs) != 1 or set(attrs) != {"to"}:
                self._refuse(f"ONNX Cast to {attrs.get('to')!r} (the road casts to float32 or int64)")
            return self._cast(inputs[0], to, out)
        if op_type == "CastLike":
            x, like = inputs
            return self._cast(x, self.types[like], out)
        mapping = ONNX_TO_GE.get(op_type)
        if mapping is None:
            self._refuse(f"the ONNX op {op_type}")
        for k, v in attrs.items():
            if k in mapping.fixed and v != mapping.fixed[k]:
                self._refuse(f"ONNX {op_type} with {k}={v!r} (GE's {mapping.kind} takes {k}={mapping.fixed[k]!r})")
            elif k not in mapping.fixed and k not in mapping.attrs:
                self._refuse(f"ONNX {op_type} with attribute {k!r}")
        params = dict(mapping.defaults)
        params.update({mapping.attrs[k]: self._param(v) for k, v in attrs.items() if k in mapping.attrs})
        missing = [p for p in mapping.attrs.values() if p not in params]
        if missing:
            self._refuse(f"ONNX {op_type} without attribute {missing[0]!r}")
        try:
            value = self.g.op(mapping.kind, *[self._value(i) for i in inputs], **params)
        except TypeError as e:
            self._refuse(f"ONNX {op_type} as written ({e})")
        dtype = INT64 if op_type == "Shape" else self.types[inputs[0]]
        return self._put(out, op_type.lower(), value, dtype)

    def const(self, value, dtype="int64") -> str:
        arr = np.asarray(value, dtype=dtype)
        kind = FLOAT32 if arr.dtype.kind == "f" else INT64
        return self._put(None, "const", self.g.const(arr.tolist(), kind, arr.shape), kind)

    def attr_const(self, name: str) -> str:
        a = self.spec.onnx_attr(name)
        kind = FLOAT32 if a.element_type == "float" else INT64
        return self._put(None, name, self.g.const(self.g.attr(name), kind, (-1,) if a.is_list else ()), kind)

    # -- the Body helpers, each one decomposition kind ----------------------------
    def like(self, x: str, like: str) -> str:
        return self._cast(x, self.types[like], None)

    def reduce_mean(self, x: str, axes: Sequence[int], keepdims: int = 1) -> str:
        return self.op("ReduceMean", x, axes=tuple(int(a) for a in axes), keepdims=int(keepdims))

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        return self.op("Unsqueeze", x, axes=tuple(int(a) for a in axes))

    def size_of(self, name: str) -> str:
        """An int attribute as a [1] int64 tensor that `split` also takes as a size."""
        a = self.spec.onnx_attr(name)
        if a.type != "int":
            self._refuse(f"size_of({name!r}) of a {a.type} attribute")
        out = self._put(None, name, self.g.const(ints(self.g.attr(name)), INT64, (1,)), INT64)
        self.sizes[out] = self.g.attr(name)
        return out

    def split(self, x: str, sizes: Sequence[Union[int, str]], axis: int):
        items = []
        for s in sizes:
            if isinstance(s, str):
                if s not in self.sizes:
                    self._refuse(f"a Split size {s!r} that is neither an int nor size_of(attribute)")
                items.append(self.sizes[s])
            else:
                items.append(int(s))
        values = self.g.op("Split", self._value(x), n_out=len(sizes), sizes=ints(*items), axis=int(axis))
        values = values if isinstance(values, tuple) else (values,)
        return [self._put(None, "split", v, self.types[x]) for v in values]


def decomposition_from_body(spec) -> Decomposition:
    if spec.body is None:
        raise UnmappedOp(spec.name, "its spec has no decomposition (`body`), so the Ascend road has nothing to map "
                         "onto GE operators")
    g = Decomposition(spec)
    b = GeBody(g)
    names = [a.name for a in spec.inputs]
    for name, value in zip(names, g.inputs):
        b.values[name], b.types[name] = value, FLOAT32
    outputs = [a.name for a in spec.outputs]
    spec.body(b, *names, outputs=outputs)
    missing = [o for o in outputs if o not in b.values]
    if missing:
        raise UnmappedOp(spec.name, f"its decomposition never writes output {missing[0]!r}")
    g.outputs = [b.values[o] for o in outputs]
    return g
