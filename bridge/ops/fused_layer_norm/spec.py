"""FusedLayerNorm's spec: its tensors, attributes, dtypes and bounds, with the parts
of its folder (shape rule, reference, body, cases, patterns) assembled into SPEC."""
from __future__ import annotations

from ..spec import Arg, Attr, OpSpec, Tolerance
from . import NAME
from .body import body
from .cases import bad_inputs, examples
from .patterns import GRAPH_FUSION, KERAS_FUSION
from .reference import reference
from .shape_rule import shape_rule


def _same(_shapes=None, **attrs):
    return dict(attrs)


SPEC = OpSpec(
    name=NAME,
    module="fused_layer_norm",
    doc="Layer normalization over the last axis, fused into one pass over memory.",
    inputs=(Arg("x", "[..., H], rank >= 1"), Arg("gamma", "[H]"), Arg("beta", "[H]")),
    outputs=(Arg("y", "same shape as x"),),
    attrs=(Attr("epsilon", "float", 1e-6, doc="added to the variance"),),
    onnx_attrs=(Attr("epsilon", "float", 1e-6),),
    dtypes=("float32", "float16"),
    tolerance={"float32": Tolerance(1e-5), "float16": Tolerance(2e-3)},
    _reference=reference,
    shape_rule=shape_rule(),
    _to_onnx=_same,
    _from_onnx=lambda **a: dict(a),
    _examples=examples,
    _bad_inputs=bad_inputs,
    fusion=KERAS_FUSION,
    graph_fusion=GRAPH_FUSION,
    body=body,
)
