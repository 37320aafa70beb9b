"""The Body protocol: how an op's one decomposition is written, and what every road
that reads it implements.

A spec's `body(b, *inputs, outputs)` calls the builder `b` in standard ONNX terms
(op types, attributes, opset); the inputs, outputs and every value are names
(str). Three roads implement it:

- onnx_plugins/functions.py `Body`: ONNX nodes (function bodies, the lowered export);
- ascend/from_body.py `GeBody`: a Decomposition of GE built-in operators;
- tf_ops/from_body.py `TfBody`: TensorFlow ops (the op's composite: TFLite lowering).

A road that cannot take an op a body uses raises `UnmappedOp`, naming the op, the
road and what it does take. This module imports nothing heavier than numpy.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Union

Name = str
Sizes = Sequence[Union[int, Name]]


class UnmappedOp(ValueError):
    """A body uses something a road cannot build: names the op, the road and what it maps."""

    def __init__(self, op: str, message: str):
        self.op = op
        super().__init__(f"{op}: {message}")


class Ref:
    """An attribute of the calling node, by its com.bridge name (`b.ref(name)`)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"Ref({self.name!r})"


class Body:
    """The builder interface a spec's body is written against.

    Attributes: `spec` (the OpSpec), `opset` (the ONNX opset the body may use),
    `dtype` (the element type the body is typed for, None when generic), `FLOAT`
    (float32 as `dtype` and Cast's `to` spell it on this road).

    A road implements `op`, `const`, `attr_const` and `like`; the helpers below
    are written on top of `op` in their newest-opset form, and a road overrides
    one where it builds it differently.
    """

    spec: Any
    opset: int
    dtype: Optional[Any] = None
    FLOAT: Any = 1
    # how this road words a refusal: "<op>: its decomposition uses <what>, which <cannot>"
    cannot: str = "this road cannot build"

    _count = 0

    # -- what every road implements -------------------------------------------
    def op(self, op_type: str, *inputs: Name, out: Union[None, Name, Sequence[Name]] = None, n_out: int = 1,
           **attrs) -> Union[Name, List[Name]]:
        """One ONNX op: a name, or a list of names for n_out > 1 or a list `out`.
        An attribute may be a `Ref` to the calling node's attribute."""
        raise NotImplementedError

    def const(self, value, dtype: str = "int64") -> Name:
        """A constant tensor of numpy dtype `dtype`."""
        raise NotImplementedError

    def attr_const(self, name: str) -> Name:
        """The calling node's attribute as a tensor: float/int scalars, lists 1-D;
        floats float32, ints int64."""
        raise NotImplementedError

    def like(self, x: Name, like: Name) -> Name:
        """`x` cast to the element type of `like` (the op's T)."""
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------
    def fresh(self, hint: str) -> Name:
        self._count += 1
        return f"{getattr(self, 'prefix', '')}{hint}_{self._count}"

    def ref(self, name: str) -> Ref:
        """The calling node's attribute `name`, as an attribute value of `op`."""
        return Ref(name)

    def refuse(self, what: str, takes: Sequence[str] = (), hint: str = ""):
        """UnmappedOp: "<op>: its decomposition uses <what>, which <cannot> (it maps ONNX <takes>); <hint>"."""
        known = f" (it maps ONNX {', '.join(sorted(takes))})" if takes else ""
        raise UnmappedOp(self.spec.name, f"its decomposition uses {what}, which {self.cannot}{known}"
                         + (f"; {hint}" if hint else ""))

    def reduce_mean(self, x: Name, axes: Sequence[int], keepdims: int = 1) -> Name:
        return self.op("ReduceMean", x, axes=[int(a) for a in axes], keepdims=int(keepdims))

    def unsqueeze(self, x: Name, axes: Sequence[int]) -> Name:
        return self.op("Unsqueeze", x, axes=[int(a) for a in axes])

    def size_of(self, name: str) -> Union[int, Name]:
        """An int attribute as a Split size (or a shape's entry): the value where the
        road knows it, else a [1] int64 tensor."""
        return self.unsqueeze(self.attr_const(name), [0])

    def split(self, x: Name, sizes: Sizes, axis: int) -> List[Name]:
        """Pieces of `x` along `axis`; a size is an int or a [1] int64 tensor (size_of)."""
        raise NotImplementedError
