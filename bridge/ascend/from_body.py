"""A GE decomposition derived from an op's one decomposition, its ONNX body.

A team's op brings one decomposition into standard ONNX ops (`spec.body`, written
against onnx_plugins' Body API). Running that body on `GeBody` instead records
the same graph as a `Decomposition`, from which the GE plugin's
ParseOpToGraphFn and the ONNX expansion are rendered as for bridge's own ops.
`ONNX_TO_GE` is the one table of ONNX ops the Ascend road can take this way; an
op outside it is refused by name (`UnmappedOp`).
"""
from __future__ import annotations

from typing import Dict, Sequence, Union

import numpy as np

from bridge.ascend.decomposition import Decomposition, Value

# ONNX op -> (decomposition kind, {ONNX attribute: kind parameter})
ONNX_TO_GE = {
    "Add": ("Add", {}), "Sub": ("Sub", {}), "Mul": ("Mul", {}), "Div": ("Div", {}),
    "Sqrt": ("Sqrt", {}), "Sigmoid": ("Sigmoid", {}), "Exp": ("Exp", {}), "Erf": ("Erf", {}),
    "Tanh": ("Tanh", {}), "Relu": ("Relu", {}), "Neg": ("Neg", {}), "Abs": ("Abs", {}), "Pow": ("Pow", {}),
    "LeakyRelu": ("LeakyRelu", {"alpha": "alpha"}),
    "Transpose": ("Transpose", {"perm": "perm"}),
}


class UnmappedOp(ValueError):
    """The body uses an ONNX op the Ascend road has no GE operator for."""


class _Ref:
    def __init__(self, name: str):
        self.name = name


class GeBody:
    """Onnx_plugins' Body API, recording into a Decomposition (float32, as the
    GE-bound export is)."""

    opset = 13
    dtype = None

    def __init__(self, g: Decomposition):
        self.g, self.spec = g, g.spec
        self.values: Dict[str, Value] = {}
        self._count = 0

    def _fresh(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def _value(self, name: str) -> Value:
        return self.values[name]

    def _param(self, value):
        return self.g.attr(value.name) if isinstance(value, _Ref) else value

    def ref(self, name: str) -> _Ref:
        return _Ref(name)

    def op(self, op_type: str, *inputs: str, out: Union[None, str, Sequence[str]] = None, n_out: int = 1, **attrs):
        if op_type == "Identity":
            (x,) = inputs
            name = out if isinstance(out, str) else self._fresh("identity")
            self.values[name] = self._value(x)
            return name
        if op_type not in ONNX_TO_GE:
            raise UnmappedOp(f"{self.spec.name}: its decomposition uses the ONNX op {op_type}, which the Ascend road "
                             f"cannot map onto a GE built-in operator (it maps {', '.join(sorted(ONNX_TO_GE))}); write "
                             f"the body with those, or bring a GE custom operator")
        kind, names = ONNX_TO_GE[op_type]
        unknown = sorted(set(attrs) - set(names))
        if unknown:
            raise UnmappedOp(f"{self.spec.name}: ONNX {op_type} with attribute {unknown[0]!r} has no GE mapping")
        params = {names[k]: self._param(v) for k, v in attrs.items()}
        value = self.g.op(kind, *[self._value(i) for i in inputs], **params)
        name = out if isinstance(out, str) else self._fresh(op_type.lower())
        self.values[name] = value
        return name

    def const(self, value, dtype="int64") -> str:
        arr = np.asarray(value)
        dtype = "float32" if np.dtype(dtype).kind == "f" else "int64"
        name = self._fresh("const")
        self.values[name] = self.g.const(arr.tolist(), dtype, arr.shape)
        return name

    def like(self, x: str, like: str) -> str:
        return x  # one element type (float32) throughout

    def attr_const(self, name: str) -> str:
        a = self.spec.onnx_attr(name)
        dtype = "float32" if a.element_type == "float" else "int64"
        out = self._fresh(name)
        self.values[out] = self.g.const(self.g.attr(name), dtype, (-1,) if a.is_list else ())
        return out


def decomposition_from_body(spec) -> Decomposition:
    if spec.body is None:
        raise UnmappedOp(f"{spec.name}: its spec has no decomposition (`body`), so the Ascend road has nothing "
                         f"to map onto GE operators")
    g = Decomposition(spec)
    b = GeBody(g)
    names = [a.name for a in spec.inputs]
    for name, value in zip(names, g.inputs):
        b.values[name] = value
    outputs = [a.name for a in spec.outputs]
    spec.body(b, *names, outputs=outputs)
    missing = [o for o in outputs if o not in b.values]
    if missing:
        raise UnmappedOp(f"{spec.name}: its decomposition never writes output {missing[0]!r}")
    g.outputs = [b.values[o] for o in outputs]
    return g
