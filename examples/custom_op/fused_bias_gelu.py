"""FusedBiasGelu: y = gelu(x + bias), the exact (erf) GELU, as one op.

A team's own fused op described once for bridge: this file is the whole op
(tensors, attributes, dtypes, tolerances, shape function, numpy float64
reference, and its one decomposition into standard ONNX ops). Give it to bridge
with `--op-spec examples/custom_op/fused_bias_gelu.py`, and the TensorFlow
kernel that a SavedModel needs with `--op-library libfused_bias_gelu.so`.

Like bridge's own specs, it imports nothing heavier than numpy.
"""
from __future__ import annotations

import math

import numpy as np

from bridge.ops import Arg, OpSpec, Tolerance, shape_rules
from bridge.ops.fusion import Link, Pattern
from bridge.ops.graph_fusion import GraphPattern

NAME = "FusedBiasGelu"


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _reference(x, bias):
    z = x + bias
    return 0.5 * z * (1.0 + _erf(z / math.sqrt(2.0)))


def _body(b, x, bias, *, outputs):
    """The decomposition: Add, Mul, Erf, Add, Mul, Mul (the Body protocol, bridge/ops/body.py)."""
    (y,) = outputs
    z = b.op("Add", x, bias)
    e = b.op("Erf", b.op("Mul", z, b.like(b.const(1.0 / math.sqrt(2.0), "float32"), x)))
    half_z = b.op("Mul", z, b.like(b.const(0.5, "float32"), x))
    b.op("Mul", half_z, b.op("Add", e, b.like(b.const(1.0, "float32"), x)), out=y)


# -- which Keras layers the op replaces (bridge.ops.fusion) -----------------------
# The conditions read the Keras layer by duck typing: this file imports no Keras.

def _gelu(activation):
    """'exact', 'approximate' (the tanh form) or None (not a GELU)."""
    fn = getattr(activation, "func", activation)  # functools.partial(gelu, approximate=...)
    name = getattr(fn, "__name__", "")
    if name == "gelu":
        given = dict(getattr(activation, "keywords", None) or {})
        args = getattr(activation, "args", ())
        return "approximate" if given.get("approximate", args[0] if args else False) else "exact"
    return "approximate" if name in ("gelu_approximate", "approximate_gelu") else None


def _exact(layer):
    if _gelu(layer.activation) != "exact":
        return (f"{type(layer).__name__} '{layer.name}' uses the approximate (tanh) GELU; "
                f"{NAME} is the exact erf GELU")
    return None


def _has_bias(dense):
    return None if dense.use_bias else f"Dense '{dense.name}' has no bias (use_bias=False)"


def _linear(dense):
    act = getattr(dense.activation, "__name__", str(dense.activation))
    return None if act == "linear" else f"Dense '{dense.name}' has activation '{act}' before the GELU"


# The Dense is kept without its bias and activation; the op adds the bias and applies GELU.
_DENSE_WITHOUT_BIAS = {"use_bias": False, "activation": "linear"}

FUSION = (
    Pattern("dense_gelu", "Dense with activation='gelu' (exact)",
            chain=(Link("Dense", "dense", checks=(_has_bias, _exact)),),
            when=lambda dense: _gelu(dense.activation) is not None,
            keep={"dense": _DENSE_WITHOUT_BIAS}, inputs=("dense.bias",)),
    Pattern("dense_then_gelu", "Dense -> Activation('gelu') (exact)",
            chain=(Link("Dense", "dense", checks=(_has_bias, _linear)), Link("Activation", "gelu", checks=(_exact,))),
            when=lambda act: _gelu(act.activation) is not None,
            keep={"dense": _DENSE_WITHOUT_BIAS}, inputs=("dense.bias",)),
)


# -- which TensorFlow subgraphs the op replaces (bridge.ops.graph_fusion) ---------
# In a SavedModel or frozen graph: x + bias (BiasAdd or Add of a constant vector)
# followed by the erf GELU as TensorFlow writes it (0.5 x erfc(-x/sqrt2)). The bias
# is read from the graph; bridge then checks the whole subgraph against
# `_reference` on random inputs: a tanh GELU is a near miss, and stays.

def _graph_bias(region):
    first = [n for n in region.nodes if any(region.is_x(i) for i in n.inputs)]
    if len(first) != 1 or first[0].op not in ("BiasAdd", "AddV2", "Add"):
        return "the subgraph does not start by adding a bias to its input"
    bias = [region.constant(i) for i in first[0].inputs if not region.is_x(i)]
    if len(bias) != 1 or bias[0] is None or bias[0].ndim != 1:
        return f"{first[0]} does not add a constant vector"
    return (bias[0],), {}


GRAPH_FUSION = (
    GraphPattern("bias_gelu_graph", "x + bias -> the exact (erf) GELU, as TensorFlow writes it",
                 ends=("Mul",), ops=("BiasAdd", "AddV2", "Add", "Mul", "RealDiv", "Neg", "Erf", "Erfc", "Tanh", "Pow", "Identity"),
                 start=("BiasAdd", "AddV2", "Add"),
                 when=lambda region: any(n.op in ("Erf", "Erfc", "Tanh") for n in region.nodes),
                 identify=_graph_bias),
)


SPEC = OpSpec(
    name=NAME,
    module="fused_bias_gelu",
    doc="y = gelu(x + bias) with the exact erf GELU, over the last axis's bias.",
    inputs=(Arg("x", "[..., C], rank >= 1"), Arg("bias", "[C]")),
    outputs=(Arg("y", "same shape as x"),),
    attrs=(),
    onnx_attrs=(),
    dtypes=("float32", "float16"),
    tolerance={"float32": Tolerance(1e-5), "float16": Tolerance(3e-3)},
    _reference=_reference,
    # y has the shape of x; bias is [C], C the last dim of x (bridge.ops.shape_rules)
    shape_rule=shape_rules.last_axis_params(("x", "bias")),
    _to_onnx=lambda _shapes=None, **attrs: dict(attrs),
    _from_onnx=lambda **attrs: dict(attrs),
    domain="com.example",
    body=_body,
    fusion=FUSION,
    graph_fusion=GRAPH_FUSION,
)
