"""A team op's TensorFlow composite, derived from its one decomposition.

The spec's `body(b, *inputs, outputs)` is written against onnx_plugins' Body API
in standard ONNX ops; run on `TfBody`, the same calls build standard TensorFlow
ops instead. That is the team op's composite: what `tf_ops.lowered()` traces in
its place, so a model that calls the op through `bridge.tf_ops` lowers to TFLite
builtins. `ONNX_TO_TF` is the one table of ONNX ops this road can take; an op
outside it is refused by name.
"""
from __future__ import annotations

from typing import Dict, Sequence, Union

import tensorflow as tf


def _reduce_mean(x, axes=None, keepdims=1):
    return tf.reduce_mean(x, axis=None if axes is None else list(axes), keepdims=bool(keepdims))


# ONNX op -> TF function of (inputs..., **ONNX attributes)
ONNX_TO_TF = {
    "Add": tf.add, "Sub": tf.subtract, "Mul": tf.multiply, "Div": tf.math.divide,
    "Sqrt": tf.sqrt, "Sigmoid": tf.sigmoid, "Exp": tf.exp, "Erf": tf.math.erf, "Tanh": tf.tanh,
    "Relu": tf.nn.relu, "Neg": tf.negative, "Abs": tf.abs, "Pow": tf.pow, "Log": tf.math.log,
    "Reciprocal": tf.math.reciprocal, "MatMul": tf.linalg.matmul, "Identity": tf.identity,
    "LeakyRelu": lambda x, alpha=0.01: tf.nn.leaky_relu(x, alpha=alpha),
    "Transpose": lambda x, perm=None: tf.transpose(x, perm=perm),
    "ReduceMean": _reduce_mean,
    "Softplus": tf.math.softplus,
}


class UnmappedOp(ValueError):
    """The body uses an ONNX op that has no TensorFlow equivalent here."""


class _Ref:
    def __init__(self, name: str):
        self.name = name


class TfBody:
    """onnx_plugins' Body API, building TensorFlow ops for one call of the op."""

    opset = 18
    FLOAT = "float32"   # Body.FLOAT: float32 as dtype and Cast's `to` spell it here
    dtype = None

    def __init__(self, spec, onnx_attrs: Dict):
        self.spec, self.attrs = spec, onnx_attrs
        self.values: Dict[str, tf.Tensor] = {}
        self._count = 0

    def _name(self, out, hint):
        if isinstance(out, str):
            return out
        self._count += 1
        return f"{hint}_{self._count}"

    def ref(self, name: str) -> _Ref:
        return _Ref(name)

    def op(self, op_type: str, *inputs: str, out: Union[None, str, Sequence[str]] = None, n_out: int = 1, **attrs):
        fn = ONNX_TO_TF.get(op_type)
        if fn is None:
            raise UnmappedOp(f"{self.spec.name}: its decomposition uses the ONNX op {op_type}, which has no "
                             f"TensorFlow equivalent here ({', '.join(sorted(ONNX_TO_TF))}): no composite, so "
                             f"no TFLite lowering")
        kwargs = {k: (self.attrs[v.name] if isinstance(v, _Ref) else v) for k, v in attrs.items()}
        if op_type == "ReduceMean" and len(inputs) == 2:  # opset 18: axes as an input
            inputs, kwargs["axes"] = inputs[:1], [int(a) for a in tf.get_static_value(self.values[inputs[1]])]
        name = self._name(out, op_type.lower())
        self.values[name] = fn(*[self.values[i] for i in inputs], **kwargs)
        return name

    def const(self, value, dtype="int64") -> str:
        name = self._name(None, "const")
        self.values[name] = tf.constant(value, dtype=tf.as_dtype(dtype))
        return name

    def like(self, x: str, like: str) -> str:
        name = self._name(None, "cast")
        self.values[name] = tf.cast(self.values[x], self.values[like].dtype)
        return name

    def attr_const(self, name: str) -> str:
        a = self.spec.onnx_attr(name)
        value = self.attrs[name]
        return self.const(list(value) if a.is_list else value, "float32" if a.element_type == "float" else "int64")


def composite(spec):
    """`composite(*inputs, name=None, **attrs)` from the spec's body, or None
    when it has none or uses an op outside ONNX_TO_TF (said by `why_not`)."""
    if why_not(spec):
        return None

    def call(*inputs, name=None, **attrs):
        attrs = spec.resolve(attrs)
        tensors = [tf.convert_to_tensor(x) for x in inputs]
        tensors = [tensors[0]] + [tf.convert_to_tensor(t, dtype_hint=tensors[0].dtype) for t in tensors[1:]]
        shapes = [None if t.shape.rank is None else tuple(t.shape.as_list()) for t in tensors]
        onnx_attrs = spec.to_onnx_attrs(shapes, **attrs)
        with tf.name_scope(name or f"{spec.name}Composite"):
            b = TfBody(spec, onnx_attrs)
            names = [a.name for a in spec.inputs]
            b.values.update(zip(names, tensors))
            outputs = [a.name for a in spec.outputs]
            spec.body(b, *names, outputs=outputs)
            result = [b.values[o] for o in outputs]
        return result[0] if len(result) == 1 else tuple(result)

    return call


def why_not(spec) -> str:
    """'' when the body converts, else the reason (checked on a symbolic trace)."""
    if spec.body is None:
        return "its spec has no decomposition (body)"

    class Probe(TfBody):
        def op(self, op_type, *inputs, out=None, n_out=1, **attrs):
            if op_type not in ONNX_TO_TF:
                raise UnmappedOp(op_type)
            name = self._name(out, op_type.lower())
            self.values[name] = None
            return name

        def const(self, value, dtype="int64"):
            name = self._name(None, "const")
            self.values[name] = None
            return name

        def like(self, x, like):
            return x

    try:
        b = Probe(spec, {a.name: a.default for a in spec.onnx_attrs})
        spec.body(b, *[a.name for a in spec.inputs], outputs=[a.name for a in spec.outputs])
    except UnmappedOp as e:
        return f"its decomposition uses ONNX {e}, which has no TensorFlow equivalent here"
    return ""
