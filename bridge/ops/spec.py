"""The shape of an op contract: what every backend reads about an op.

An `OpSpec` names the op's tensors and attributes (with types and defaults), the
dtypes it accepts, its numpy float64 reference, its shape function and its
tolerances. Nothing here imports anything heavier than numpy, so every layer
(TensorFlow, ONNX, onnxruntime, TFLite, Ascend) can read it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Tuple

import numpy as np

from . import nonfinite, shape_rules
from .op_error import OpError, Shape, dims  # noqa: F401 (dims: bridge.ops.spec.dims, as layers import it)

DOMAIN = "com.bridge"
DOMAIN_VERSION = 1


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()



@dataclass(frozen=True)
class Attr:
    """One attribute. `type` uses TensorFlow's attr spelling: float, int, string,
    list(int), list(float)."""

    name: str
    type: str
    default: Any = REQUIRED
    allowed: Tuple[str, ...] = ()
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def is_list(self) -> bool:
        return self.type.startswith("list(")

    @property
    def element_type(self) -> str:
        return self.type[5:-1] if self.is_list else self.type


@dataclass(frozen=True)
class Arg:
    """One tensor input or output; every tensor of an op has the type attr `T`."""

    name: str
    doc: str = ""


@dataclass(frozen=True)
class Tolerance:
    """How far a result may be from its reference, element by element (docs/ops.md):
    |got - ref| <= max(atol * max(1, |ref|), rtol * |ref|). An op's spec gives an
    atol per dtype; whole-model parity adds rtol (bridge.parity.compare)."""

    atol: float
    rtol: float = 0.0

    def with_overrides(self, atol: Optional[float] = None, rtol: Optional[float] = None) -> "Tolerance":
        return Tolerance(self.atol if atol is None else atol, self.rtol if rtol is None else rtol)

    def excess(self, got: np.ndarray, ref: np.ndarray, extra=0.0) -> float:
        """Largest ratio error / allowed over the elements; <= 1 passes. A NaN or
        Inf on either side is infinitely beyond, unless both sides hold the same
        one there (bridge.ops.nonfinite). `extra`: an absolute allowance added per
        element (e.g. the rounding a reduced-precision road is entitled to),
        scalar or shaped like ref."""
        got = np.asarray(got, dtype=np.float64)
        ref = np.asarray(ref, dtype=np.float64)
        if got.shape != ref.shape:
            raise AssertionError(f"shape {got.shape} != reference shape {ref.shape}")
        if got.size == 0:
            return 0.0
        bad = nonfinite.check(got, ref)
        if bad is not None and bad.failed:
            return float("inf")
        allowed = np.maximum(self.atol * np.maximum(1.0, np.abs(ref)), self.rtol * np.abs(ref)) + extra
        with np.errstate(invalid="ignore"):
            ratio = np.abs(got - ref) / allowed
        if bad is not None:
            ratio = np.where(bad.matched, 0.0, ratio)
        return float(np.max(ratio))


@dataclass(frozen=True)
class OpSpec:
    name: str                      # op type, the same in every backend
    module: str                    # file name of this op in every layer
    doc: str
    inputs: Tuple[Arg, ...]
    outputs: Tuple[Arg, ...]
    attrs: Tuple[Attr, ...]        # TensorFlow attributes (besides T)
    onnx_attrs: Tuple[Attr, ...]   # attributes of the com.bridge ONNX node
    dtypes: Tuple[str, ...]        # numpy names of the allowed T, first is the default
    tolerance: dict                # dtype name -> Tolerance
    _reference: Callable[..., Any] = field(repr=False)
    _to_onnx: Callable[..., dict] = field(repr=False)
    _from_onnx: Callable[..., dict] = field(repr=False)
    # The shape rule as data (shape_rules.py statements over the inputs and the
    # com.bridge node's attributes): what infer_shapes evaluates, and what the
    # kernels' checks, the TF shape function and GE's InferShape are rendered from.
    shape_rule: Tuple[Any, ...] = field(default=(), repr=False)
    # A shape function in Python, for an op whose TF attributes need the input
    # shapes to become the node's (YoloConvBnLeaky's SAME): used instead of
    # evaluating shape_rule here, which must then agree with it (tests).
    _infer: Optional[Callable[..., Tuple[Shape, ...]]] = field(default=None, repr=False)
    domain: str = DOMAIN
    domain_version: int = DOMAIN_VERSION
    # The op's one decomposition into standard ONNX ops, body(b, *inputs, outputs) on
    # the Body protocol (body.py): the ONNX function body, the lowered export, the GE
    # expansion and the TF composite (every op's) all come from it.
    body: Optional[Callable[..., None]] = field(default=None, repr=False)
    # The op's case tables (cases.py): () -> [Example], () -> [BadInput].
    _examples: Optional[Callable[[], Sequence[Any]]] = field(default=None, repr=False)
    _bad_inputs: Optional[Callable[[], Sequence[Any]]] = field(default=None, repr=False)
    # The Keras layers the op replaces: fusion.Pattern's, read by bridge.converters.fuse.
    fusion: Tuple[Any, ...] = field(default=(), repr=False)
    # The TensorFlow subgraphs it replaces: graph_fusion.GraphPattern's, read by bridge.converters.graph_fuse.
    graph_fusion: Tuple[Any, ...] = field(default=(), repr=False)

    # -- attributes --------------------------------------------------------
    def attr(self, name: str) -> Attr:
        for a in self.attrs:
            if a.name == name:
                return a
        raise KeyError(f"{self.name} has no attribute {name!r}")

    def onnx_attr(self, name: str) -> Attr:
        for a in self.onnx_attrs:
            if a.name == name:
                return a
        raise KeyError(f"{self.name} has no ONNX attribute {name!r}")

    def defaults(self) -> dict:
        return {a.name: a.default for a in self.attrs if not a.required}

    def resolve(self, attrs: dict) -> dict:
        """Fills in defaults, normalises lists to tuples and rejects unknown,
        missing or malformed attributes (OpError)."""
        return _resolve(self.name, self.attrs, attrs)

    def resolve_onnx(self, attrs: dict) -> dict:
        return _resolve(self.name, self.onnx_attrs, attrs)

    # -- the contract ------------------------------------------------------
    def infer_shapes(self, input_shapes: Sequence[Shape], **attrs) -> Tuple[Shape, ...]:
        """Output shapes from input shapes (None dims and None ranks allowed);
        raises OpError on every mismatch docs/ops.md lists."""
        attrs = self.resolve(attrs)
        if len(input_shapes) != len(self.inputs):
            raise OpError(self.name, "inputs", f"expected {len(self.inputs)} inputs, got {len(input_shapes)}")
        shapes = tuple(None if s is None else tuple(None if d is None or d < 0 else int(d) for d in s)
                       for s in input_shapes)
        if self._infer is not None:
            return tuple(self._infer(*shapes, **attrs))
        onnx_attrs = self.resolve_onnx(self._to_onnx(shapes, **attrs))
        return shape_rules.evaluate(self.name, self.shape_rule, len(self.outputs), shapes, onnx_attrs)

    def reference(self, *inputs, **attrs):
        """The numpy float64 reference: the judge every backend is tested against.
        Returns one array for a single-output op, else a tuple."""
        attrs = self.resolve(attrs)
        arrays = [np.asarray(x, dtype=np.float64) for x in inputs]
        self.infer_shapes([a.shape for a in arrays], **attrs)
        out = self._reference(*arrays, **attrs)
        return out

    def to_onnx_attrs(self, input_shapes: Sequence[Shape], **attrs) -> dict:
        """TF attributes -> the com.bridge node's attributes (e.g. SAME -> pads)."""
        attrs = self.resolve(attrs)
        self.infer_shapes(input_shapes, **attrs)
        return self.resolve_onnx(self._to_onnx(input_shapes, **attrs))

    def from_onnx_attrs(self, **onnx_attrs) -> dict:
        """The com.bridge node's attributes -> equivalent TF attributes."""
        return self.resolve(self._from_onnx(**self.resolve_onnx(onnx_attrs)))

    def reference_onnx(self, *inputs, **onnx_attrs):
        return self.reference(*inputs, **self.from_onnx_attrs(**onnx_attrs))

    # -- the case tables (cases.py) ------------------------------------------
    def examples(self) -> tuple:
        """Good inputs every backend must match the reference on (fresh arrays each call)."""
        return tuple(self._examples()) if self._examples else ()

    def bad_inputs(self) -> tuple:
        """Bad inputs every backend must refuse, with the words of the error."""
        return tuple(self._bad_inputs()) if self._bad_inputs else ()

    def check_dtype(self, dtype) -> str:
        name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
        if name not in self.dtypes:
            raise OpError(self.name, "T", f"dtype {name} is not one of {list(self.dtypes)}")
        return name


def _resolve(op: str, specs: Tuple[Attr, ...], attrs: dict) -> dict:
    known = {a.name: a for a in specs}
    unknown = sorted(set(attrs) - set(known))
    if unknown:
        raise OpError(op, unknown[0], f"unknown attribute; known: {sorted(known)}")
    out = {}
    for a in specs:
        if a.name in attrs and attrs[a.name] is not None:
            value = attrs[a.name]
        elif a.required:
            raise OpError(op, a.name, "required attribute is missing")
        else:
            value = a.default
        out[a.name] = _coerce(op, a, value)
    return out


def _coerce(op: str, a: Attr, value):
    try:
        if a.is_list:
            if isinstance(value, (str, bytes)):
                raise TypeError
            cast = float if a.element_type == "float" else int
            items = tuple(value)
            if cast is int and any(float(v) != int(v) for v in items):
                raise TypeError
            return tuple(cast(v) for v in items)
        if a.type == "float":
            return float(value)
        if a.type == "int":
            if isinstance(value, bool) or float(value) != int(value):
                raise TypeError
            return int(value)
        if a.type == "string":
            value = value.decode() if isinstance(value, bytes) else str(value)
            if a.allowed and value not in a.allowed:
                raise OpError(op, a.name, f"{value!r} is not one of {list(a.allowed)}")
            return value
    except OpError:
        raise
    except (TypeError, ValueError):
        pass
    raise OpError(op, a.name, f"expected {a.type}, got {value!r}")
