"""The built-in-operator decomposition of an op (derived from its ONNX body by
from_body.py), rendered twice:
as standard ONNX (`render_onnx`, run here on onnxruntime) and as the C++ of the
GE plugin's ParseOpToGraphFn (`render_cpp`, run by ATC). Both renderers walk the
same step list, so the graph checked numerically here is the graph ATC builds.

Values that depend on the node's attributes are expressions (bridge/ops/shape_rules.py,
the tree the shape rules are written in): they evaluate in Python
(for the ONNX expansion, per node) and print as C++ (read from the GE operator at
parse time, per node). Names, kinds and defaults of attributes come from the
op's spec (`spec.onnx_attrs`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from bridge.ops import OpSpec
from bridge.ops.shape_rules import Attr, Const, Expr, Items, value_var

# spec attribute type -> expression kind
_KIND = {"float": "float", "int": "int", "list(int)": "ints", "list(float)": "floats"}
CPP_TYPE = {"float": "float", "int": "int64_t", "ints": "std::vector<int64_t>", "floats": "std::vector<float>"}


# -- values over the node's attributes: bridge/ops/shape_rules.py's expression tree,
# read as typed values (`value`, `value_cpp`, `value_kind`)
def ints(*items) -> Items:
    return Items(tuple(i if isinstance(i, Expr) else Const(int(i)) for i in items), "ints")


def cpp_var(attr_name: str) -> str:
    return value_var(attr_name)


def as_expr(value) -> Expr:
    if isinstance(value, Expr):
        return value
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, int) for v in value):
            return ints(*value)
        return Items(tuple(Const(float(v)) for v in value), "floats")
    return Const(value)


# -- the step list ------------------------------------------------------------
@dataclass(frozen=True)
class Value:
    step: str      # id of the producing step ("in0" for the op's inputs)
    index: int = 0


@dataclass
class Step:
    id: str                       # s0, s1, ...: the same id names the ONNX node(s) and the GE operator
    kind: str                     # an abstract op kind, see KINDS
    inputs: Tuple[Value, ...]
    n_out: int = 1
    params: Dict[str, Any] = field(default_factory=dict)


# kind -> (input count or None for variadic, the parameters it takes)
KINDS = {
    "Const": (0, ("value", "dtype", "shape")),
    "Add": (2, ()), "Sub": (2, ()), "Mul": (2, ()), "Div": (2, ()),
    "Sqrt": (1, ()), "Sigmoid": (1, ()), "Exp": (1, ()),
    "Erf": (1, ()), "Tanh": (1, ()), "Relu": (1, ()), "Neg": (1, ()), "Abs": (1, ()), "Pow": (2, ()),
    "LeakyRelu": (1, ("alpha",)),
    "Transpose": (1, ("perm",)),
    "Conv": (3, ("strides", "pads", "dilations")),
    "LayerNorm": (3, ("epsilon",)),
    "ReduceMean": (1, ("axes", "keepdims")),
    "Shape": (1, ()),
    "Slice": (None, ()),          # data, starts, ends[, axes[, steps]]
    "Gather": (2, ("axis",)),
    "Range": (3, ()),
    "Cast": (1, ("to",)),
    "Concat": (None, ("axis",)),
    "Reshape": (2, ()),
    "Unsqueeze": (1, ("axes",)),
    "Split": (1, ("sizes", "axis")),
}


class Decomposition:
    """Builder and result: `inputs` are the op's inputs (spec order), `outputs`
    its outputs (spec order), `steps` everything between, in topological order."""

    def __init__(self, spec: OpSpec):
        self.spec = spec
        self.inputs = [Value(f"in{i}") for i in range(len(spec.inputs))]
        self.steps: List[Step] = []
        self.outputs: List[Value] = []

    def attr(self, name: str) -> Attr:
        a = self.spec.onnx_attr(name)  # KeyError names the op when the spec lacks it
        return Attr(a.name, _KIND[a.type])

    def const(self, value, dtype: str, shape: Sequence[int] = ()) -> Value:
        """A constant tensor; `shape` may hold one -1 (resolved from the element
        count, e.g. anchors as [-1, 2]); () is a scalar."""
        assert dtype in ("float32", "int64"), dtype
        return self._add("Const", (), 1, dict(value=as_expr(value), dtype=dtype, shape=tuple(shape)))

    def op(self, kind: str, *inputs: Value, n_out: int = 1, **params):
        want, names = KINDS[kind]
        if want is not None and len(inputs) != want:
            raise TypeError(f"{kind} takes {want} inputs, got {len(inputs)}")
        if set(params) != set(names):
            raise TypeError(f"{kind} takes parameters {names}, got {sorted(params)}")
        out = self._add(kind, inputs, n_out, params)
        if n_out == 1:
            return out
        return tuple(Value(out.step, i) for i in range(n_out))

    def _add(self, kind, inputs, n_out, params) -> Value:
        step = Step(f"s{len(self.steps)}", kind, tuple(inputs), n_out, params)
        self.steps.append(step)
        return Value(step.id)

    def step_ids(self) -> List[Tuple[str, str]]:
        return [(s.id, s.kind) for s in self.steps]


def const_array(step: Step, attrs: Dict[str, Any]) -> np.ndarray:
    """A Const step's value for one node's attributes (Python side of the
    -1 resolution the C++ does with the vector's size)."""
    value = step.params["value"].value(attrs)
    arr = np.asarray(value, dtype=np.float32 if step.params["dtype"] == "float32" else np.int64)
    shape = step.params["shape"]
    return arr.reshape(shape) if shape else arr.reshape(())
