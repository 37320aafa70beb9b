"""An op's TensorFlow composite, derived from its one decomposition.

The spec's `body(b, *inputs, outputs)` is written against the Body protocol
(bridge/ops/body.py) in standard ONNX ops; run on `TfBody`, the same calls build
standard TensorFlow ops. That is the op's composite, bridge's ops and a team's
alike: what `tf_ops.lowered()` traces in its place, so a model that calls the op
through `bridge.tf_ops` lowers to TFLite builtins. `HANDLERS` is the one table of
ONNX ops this road takes; an op outside it is refused by name (UnmappedOp).

Values are kept as (tensor, perm): a Transpose only records its permutation, and
an NCHW Conv reads its NHWC input and HWIO filter straight from the tensors the
body transposed, so the ONNX form (NHWC -> NCHW Conv -> NHWC) costs TensorFlow no
transposes and TFLite sees CONV_2D on NHWC as from tf.nn.conv2d.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from bridge.ops.body import Body, Ref, UnmappedOp

# ONNX TensorProto element types (Cast's `to`) and numpy names
_DTYPES = {1: tf.float32, 6: tf.int32, 7: tf.int64, 10: tf.float16, 11: tf.float64, 16: tf.bfloat16,
           "float32": tf.float32, "int32": tf.int32, "int64": tf.int64, "float16": tf.float16, "float64": tf.float64,
           "bfloat16": tf.bfloat16}

_UNARY = {"Sqrt": tf.sqrt, "Sigmoid": tf.sigmoid, "Exp": tf.exp, "Erf": tf.math.erf, "Tanh": tf.tanh,
          "Relu": tf.nn.relu, "Neg": tf.negative, "Abs": tf.abs, "Log": tf.math.log, "Reciprocal": tf.math.reciprocal,
          "Softplus": tf.math.softplus, "Identity": tf.identity}
_BINARY = {"Add": tf.add, "Sub": tf.subtract, "Mul": tf.multiply, "Pow": tf.pow,
           "Div": lambda a, b: (tf.truncatediv if a.dtype.is_integer else tf.math.truediv)(a, b)}


def _compose(p: Optional[Tuple[int, ...]], q: Sequence[int]) -> Tuple[int, ...]:
    """The perm of transpose(transpose(t, p), q) as one transpose of t."""
    return tuple(q) if p is None else tuple(p[i] for i in q)


def _is_identity(p) -> bool:
    return p is None or tuple(p) == tuple(range(len(p)))


class TfBody(Body):
    """The Body protocol building TensorFlow ops for one call of the op."""

    opset = 16   # LayerNormalization (17) would only be spelled out again here
    FLOAT = "float32"
    cannot = "has no TensorFlow equivalent here"

    def __init__(self, spec, onnx_attrs: Dict, dtype: Optional[str] = None):
        self.spec, self.attrs, self.dtype = spec, onnx_attrs, dtype
        self.values: Dict[str, Tuple[tf.Tensor, Optional[Tuple[int, ...]]]] = {}

    # -- values -------------------------------------------------------------------
    def _put(self, out, hint: str, tensor, perm=None) -> str:
        name = out if isinstance(out, str) else self.fresh(hint)
        self.values[name] = (tensor, None if _is_identity(perm) else tuple(perm))
        return name

    def tensor(self, name: str, perm: Sequence[int] = None) -> tf.Tensor:
        """The value `name`, transposed by `perm` (none: as the body sees it), with
        as few transposes as its recorded permutation allows."""
        t, p = self.values[name]
        want = p if perm is None else _compose(p, perm)
        return t if _is_identity(want) else tf.transpose(t, want)

    def _static(self, name: str, what: str):
        value = tf.get_static_value(self.tensor(name))
        if value is None:
            self.refuse(f"{what} that is no constant here")
        return value

    def _attr(self, value):
        return self.attrs[value.name] if isinstance(value, Ref) else value

    # -- the protocol ------------------------------------------------------------
    def op(self, op_type: str, *inputs: str, out: Union[None, str, Sequence[str]] = None, n_out: int = 1, **attrs):
        handler = HANDLERS.get(op_type)
        if handler is None:
            self.refuse(f"the ONNX op {op_type}", HANDLERS, "no composite, so no TFLite lowering")
        attrs = {k: self._attr(v) for k, v in attrs.items()}
        return handler(self, op_type, list(inputs), out, attrs)

    def const(self, value, dtype="int64") -> str:
        return self._put(None, "const", tf.constant(np.asarray(value, dtype=dtype)))

    def attr_const(self, name: str) -> str:
        a = self.spec.onnx_attr(name)
        value = self.attrs[name]
        return self.const(list(value) if a.is_list else value, "float32" if a.element_type == "float" else "int64")

    def like(self, x: str, like: str) -> str:
        t, p = self.values[x]
        return self._put(None, "cast", tf.cast(t, self.values[like][0].dtype), p)

    def size_of(self, name: str) -> int:
        return int(self.attrs[name])

    def split(self, x: str, sizes, axis: int) -> List[str]:
        sizes = [int(s) if not isinstance(s, str) else int(np.asarray(self._static(s, "a Split size")).reshape(-1)[0])
                 for s in sizes]
        return [self._put(None, "split", t) for t in tf.split(self.tensor(x), sizes, axis=axis)]

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        return self.op("Unsqueeze", x, axes=list(axes))


# -- the handlers: (body, op_type, inputs, out, attrs) -> name(s) ---------------------
def _unary(b, op_type, inputs, out, attrs):
    t, p = b.values[inputs[0]]
    if op_type == "LeakyRelu":
        return b._put(out, "leaky_relu", tf.nn.leaky_relu(t, alpha=attrs.get("alpha", 0.01)), p)
    return b._put(out, op_type.lower(), _UNARY[op_type](t), p)


def _binary(b, op_type, inputs, out, attrs):
    (x, px), (y, py) = b.values[inputs[0]], b.values[inputs[1]]
    fn = _BINARY[op_type]
    if px == py:                        # the same layout (or none): elementwise on the tensors as they are
        return b._put(out, op_type.lower(), fn(x, y), px)
    for perm, other in ((px, y), (py, x)):  # a scalar broadcasts under any layout
        if perm is not None and other.shape.rank == 0:
            return b._put(out, op_type.lower(), fn(x, y), perm)
    return b._put(out, op_type.lower(), fn(b.tensor(inputs[0]), b.tensor(inputs[1])))


def _transpose(b, op_type, inputs, out, attrs):
    t, p = b.values[inputs[0]]
    perm = attrs.get("perm")
    if perm is None:
        b.refuse("ONNX Transpose without attribute 'perm'")
    return b._put(out, "transpose", t, _compose(p, [int(i) for i in perm]))


class _SamePads:
    """The pads of TF's SAME where the input's H and W are unknown until run time."""


SAME_PADS = _SamePads()


def _node_attrs(spec, shapes, attrs):
    """The com.bridge node's attributes the body reads. TF's padding='SAME' needs H and
    W to become pads; where they are unknown the Conv keeps SAME itself (SAME_PADS)."""
    from bridge.ops import OpError
    try:
        return spec.to_onnx_attrs(shapes, **attrs)
    except OpError:
        if attrs.get("padding") != "SAME" or "pads" not in {a.name for a in spec.onnx_attrs} or shapes[0] is None:
            raise
        x = shapes[0]
        sized = (x[:1] + tuple(1 if d is None else d for d in x[1:-1]) + x[-1:],) + tuple(shapes[1:])
        return dict(spec.to_onnx_attrs(sized, **attrs), pads=SAME_PADS)


def _same_pads(size, k, stride, dilation):
    """TF's SAME pads (before, after) along one axis, or None for an unknown size."""
    if size is None or k is None:
        return None
    eff = (k - 1) * dilation + 1
    total = max((-(-size // stride) - 1) * stride + eff - size, 0)
    return total // 2, total - total // 2


def _conv(b, op_type, inputs, out, attrs):
    """ONNX Conv (NCHW, OIHW, pads [t,l,b,r]) as tf.nn.conv2d on NHWC / HWIO: SAME
    where the pads are TF's SAME for these sizes, VALID where none, else Pad + VALID
    (the form TFLite's CONV_2D and every converter read)."""
    if set(attrs) - {"strides", "pads", "dilations"}:
        b.refuse(f"ONNX Conv with attribute {sorted(set(attrs) - {'strides', 'pads', 'dilations'})[0]!r}")
    x = b.tensor(inputs[0], (0, 2, 3, 1))      # NCHW -> NHWC
    w = b.tensor(inputs[1], (2, 3, 1, 0))      # OIHW -> HWIO
    strides = [int(s) for s in attrs.get("strides", (1, 1))]
    dilations = [int(d) for d in attrs.get("dilations", (1, 1))]
    dynamic_same = attrs.get("pads") is SAME_PADS
    pads = [0, 0, 0, 0] if dynamic_same else [int(p) for p in attrs.get("pads", (0, 0, 0, 0))]
    dtype = x.dtype
    if dtype != tf.float32:                    # float16 accumulates in float32, as the kernels do
        x, w = tf.cast(x, tf.float32), tf.cast(w, tf.float32)
    xs, ws = x.shape.as_list() if x.shape.rank else [None] * 4, w.shape.as_list() if w.shape.rank else [None] * 4
    same = [_same_pads(xs[1 + i], ws[i], strides[i], dilations[i]) for i in (0, 1)]
    if dynamic_same:
        padding = "SAME"
    elif not any(pads):
        padding = "VALID"
    elif same == [(pads[0], pads[2]), (pads[1], pads[3])]:
        padding = "SAME"
    else:
        x = tf.pad(x, [[0, 0], [pads[0], pads[2]], [pads[1], pads[3]], [0, 0]])
        padding = "VALID"
    hw = [None if dynamic_same or xs[1 + i] is None or ws[i] is None else
          (xs[1 + i] + (pads[i] + pads[2 + i]) - (ws[i] - 1) * dilations[i] - 1) // strides[i] + 1 for i in (0, 1)]
    out_shape = [xs[0], *hw, ws[3]]
    if (None not in out_shape and 0 in out_shape) or 0 in (xs[3], ws[0], ws[1]):
        # TF's Conv2D hands an empty input back unchanged and refuses an empty filter: an empty sum is 0
        z = tf.zeros([0 if d is None else d for d in out_shape], tf.float32) if None not in out_shape else \
            tf.zeros(tf.stack([tf.shape(x)[0], *hw, ws[3]]), tf.float32)
    else:
        z = tf.nn.conv2d(x, w, strides=[1, *strides, 1], padding=padding, dilations=[1, *dilations, 1])
    if len(inputs) > 2:
        z = tf.nn.bias_add(z, tf.cast(b.tensor(inputs[2]), tf.float32))
    if dtype != tf.float32:
        z = tf.cast(z, dtype)
    return b._put(out, "conv", z, (0, 3, 1, 2))  # the body sees NCHW


def _reduce_mean(b, op_type, inputs, out, attrs):
    axes = attrs.get("axes")
    if len(inputs) == 2:  # opset 18: axes as an input
        axes = [int(a) for a in np.asarray(b._static(inputs[1], "ReduceMean axes")).reshape(-1)]
    keep = bool(attrs.get("keepdims", 1))
    return b._put(out, "reduce_mean", tf.reduce_mean(b.tensor(inputs[0]), axis=None if axes is None else list(axes),
                                                     keepdims=keep))


def _shape(b, op_type, inputs, out, attrs):
    t = b.tensor(inputs[0])
    if t.shape.is_fully_defined():  # a constant where TF knows it: what TFLite then folds
        return b._put(out, "shape", tf.constant(t.shape.as_list(), tf.int64))
    return b._put(out, "shape", tf.shape(t, out_type=tf.int64))


def _slice(b, op_type, inputs, out, attrs):
    x = b.tensor(inputs[0])
    starts, ends = (np.asarray(b._static(i, "a Slice bound")).reshape(-1) for i in inputs[1:3])
    axes = np.asarray(b._static(inputs[3], "Slice axes")).reshape(-1) if len(inputs) > 3 else range(len(starts))
    steps = np.asarray(b._static(inputs[4], "Slice steps")).reshape(-1) if len(inputs) > 4 else [1] * len(starts)
    if x.shape.rank is None:
        b.refuse("ONNX Slice of a value of unknown rank")
    index = [slice(None)] * x.shape.rank
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[int(a)] = slice(int(s), int(min(e, np.iinfo(np.int64).max // 2)), int(st))
    return b._put(out, "slice", x[tuple(index)])


def _gather(b, op_type, inputs, out, attrs):
    return b._put(out, "gather", tf.gather(b.tensor(inputs[0]), b.tensor(inputs[1]), axis=int(attrs.get("axis", 0))))


def _concat(b, op_type, inputs, out, attrs):
    return b._put(out, "concat", tf.concat([b.tensor(i) for i in inputs], axis=int(attrs["axis"])))


def _reshape(b, op_type, inputs, out, attrs):
    return b._put(out, "reshape", tf.reshape(b.tensor(inputs[0]), b.tensor(inputs[1])))


def _range(b, op_type, inputs, out, attrs):
    start, limit, delta = (b.tensor(i) for i in inputs)
    return b._put(out, "range", tf.range(start, limit, delta))


def _cast(b, op_type, inputs, out, attrs):
    t, p = b.values[inputs[0]]
    if op_type == "CastLike":
        to = b.values[inputs[1]][0].dtype
    else:
        to = _DTYPES.get(attrs.get("to"))
        if to is None:
            b.refuse(f"ONNX Cast to {attrs.get('to')!r}")
    return b._put(out, "cast", tf.cast(t, to), p)


def _unsqueeze(b, op_type, inputs, out, attrs):
    x = b.tensor(inputs[0])
    axes = attrs.get("axes")
    if len(inputs) == 2:
        axes = np.asarray(b._static(inputs[1], "Unsqueeze axes")).reshape(-1)
    rank = (x.shape.rank or 0) + len(axes)
    for a in sorted(int(a) % rank for a in axes):
        x = tf.expand_dims(x, a)
    return b._put(out, "unsqueeze", x)


def _split(b, op_type, inputs, out, attrs):
    sizes = attrs.get("split")
    if len(inputs) == 2:
        sizes = [int(s) for s in np.asarray(b._static(inputs[1], "Split sizes")).reshape(-1)]
    parts = tf.split(b.tensor(inputs[0]), sizes, axis=int(attrs.get("axis", 0)))
    outs = [out] if isinstance(out, str) else list(out or [None] * len(parts))
    return [b._put(o, "split", t) for o, t in zip(outs, parts)]


def _matmul(b, op_type, inputs, out, attrs):
    return b._put(out, "matmul", tf.linalg.matmul(b.tensor(inputs[0]), b.tensor(inputs[1])))


HANDLERS = {**{op: _unary for op in (*_UNARY, "LeakyRelu")}, **{op: _binary for op in _BINARY},
            "Transpose": _transpose, "Conv": _conv, "ReduceMean": _reduce_mean, "Shape": _shape, "Slice": _slice,
            "Gather": _gather, "Concat": _concat, "Reshape": _reshape, "Range": _range, "Cast": _cast,
            "CastLike": _cast, "Unsqueeze": _unsqueeze, "Split": _split, "MatMul": _matmul}


def composite(spec):
    """`composite(*inputs, name=None, **attrs)` from the spec's body, or None
    when it has none or uses an op outside HANDLERS (said by `why_not`)."""
    if why_not(spec):
        return None

    def call(*args, name=None, **attrs):
        # as the op's own wrapper: the inputs, then attributes by position in the spec's order
        inputs, extra = args[:len(spec.inputs)], args[len(spec.inputs):]
        if len(extra) > len(spec.attrs):
            from bridge.ops import OpError
            raise OpError(spec.name, "inputs", f"expected {len(spec.inputs)} inputs and at most {len(spec.attrs)} "
                          f"attributes by position, got {len(args)} values")
        attrs = spec.resolve({**{a.name: v for a, v in zip(spec.attrs, extra)}, **attrs})
        if len(inputs) != len(spec.inputs):
            from bridge.ops import OpError
            raise OpError(spec.name, "inputs", f"expected {len(spec.inputs)} inputs "
                          f"({', '.join(a.name for a in spec.inputs)}), got {len(inputs)}")
        first = tf.convert_to_tensor(inputs[0])
        dtype = spec.check_dtype(first.dtype.as_numpy_dtype if first.dtype != tf.bfloat16 else "bfloat16")
        tensors = [first] + [tf.convert_to_tensor(t, dtype_hint=first.dtype) for t in inputs[1:]]
        shapes = [None if t.shape.rank is None else tuple(t.shape.as_list()) for t in tensors]
        onnx_attrs = _node_attrs(spec, shapes, attrs)
        with tf.name_scope(name or f"{spec.name}Composite"):
            b = TfBody(spec, onnx_attrs, dtype)
            names = [a.name for a in spec.inputs]
            for n, t in zip(names, tensors):
                b.values[n] = (t, None)
            outputs = [a.name for a in spec.outputs]
            spec.body(b, *names, outputs=outputs)
            missing = [o for o in outputs if o not in b.values]
            if missing:
                raise UnmappedOp(spec.name, f"its decomposition never writes output {missing[0]!r}")
            result = [b.tensor(o) for o in outputs]
        return result[0] if len(result) == 1 else tuple(result)

    return call


class _Probe(TfBody):
    """The body traced on names only: which ONNX ops it asks for."""

    def op(self, op_type, *inputs, out=None, n_out=1, **attrs):
        if op_type not in HANDLERS:
            self.refuse(f"the ONNX op {op_type}", HANDLERS)
        if isinstance(out, (list, tuple)):
            return list(out)
        return out if isinstance(out, str) else (self.fresh(op_type.lower()) if n_out == 1 else
                                                 [self.fresh(op_type.lower()) for _ in range(n_out)])

    def const(self, value, dtype="int64"):
        return self.fresh("const")

    def attr_const(self, name):
        return self.fresh(name)

    def like(self, x, like):
        return x

    def size_of(self, name):
        return self.fresh(name)

    def split(self, x, sizes, axis):
        return [self.fresh("split") for _ in sizes]


def why_not(spec) -> str:
    """'' when the body converts, else the reason (checked on a symbolic trace)."""
    if spec.body is None:
        return "its spec has no decomposition (body)"
    try:
        b = _Probe(spec, {a.name: a.default for a in spec.onnx_attrs}, spec.dtypes[0])
        spec.body(b, *[a.name for a in spec.inputs], outputs=[a.name for a in spec.outputs])
    except UnmappedOp as e:
        return str(e).split(": ", 1)[1]
    return ""
