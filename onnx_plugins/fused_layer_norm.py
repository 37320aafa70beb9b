"""FusedLayerNorm in ONNX: function body and reference kernel (the schema and
its shape inference come from the spec, see schemas.py)."""
from __future__ import annotations

from bridge.ops import get

from .functions import Body, Ref
from .reference import ReferenceOp

SPEC = get("FusedLayerNorm")


def body(b: Body, x, gamma, beta, *, outputs):
    (y,) = outputs
    if b.opset >= 17:
        b.op("LayerNormalization", x, gamma, beta, out=y, axis=-1, epsilon=Ref("epsilon"))
        return
    # The decomposition onnxruntime's LayerNormFusion recognises: the square must
    # be Pow(d, 2) (it does not match Mul(d, d)), mean and variance by ReduceMean.
    mean = b.reduce_mean(x, [-1])
    d = b.op("Sub", x, mean)
    var = b.reduce_mean(b.op("Pow", d, b.like(b.const(2.0, "float32"), x)), [-1])
    std = b.op("Sqrt", b.op("Add", var, b.like(b.attr_const("epsilon"), x)))
    b.op("Add", b.op("Mul", b.op("Div", d, std), gamma), beta, out=y)


class FusedLayerNorm(ReferenceOp):
    spec = SPEC
