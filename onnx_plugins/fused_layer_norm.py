"""FusedLayerNorm in ONNX: function body and reference kernel (the schema and
its shape inference come from the spec, see schemas.py)."""
from __future__ import annotations

import onnx

from bridge.ops import get

from .functions import Body, Ref
from .reference import ReferenceOp

SPEC = get("FusedLayerNorm")

# onnxruntime road for kernels="fastest" (onnx_plugins/__init__.py). 4-layer
# BERT-base, seq 128: native 25.5 ms / function (opset 18) 25.4 ms, a tie (the
# MatMuls are ~73% of the time); alone [4,128,768] native 2x; and the body that
# is correct on large means is 2.3-3.1x slower than the native kernel.
FASTEST = "native"


def body(b: Body, x, gamma, beta, *, outputs):
    (y,) = outputs
    # In float32 (ops.md: float16 accumulates in float32), on the row shifted by
    # its float32 mean m0: x - m0 is exact where x is near m0, and normalising it
    # removes what m0 missed. Unshifted, a mean of 3e4 costs ~1e-3 of y: the mean's
    # own float32 rounding (2^-10 at 3e4), in onnxruntime and onnx's evaluator alike.
    to_float = b.dtype != onnx.TensorProto.FLOAT
    xf = x
    if to_float:
        xf, gamma, beta = (b.op("Cast", t, to=onnx.TensorProto.FLOAT) for t in (x, gamma, beta))
    xs = b.op("Sub", xf, b.reduce_mean(xf, [-1]))
    y32 = b.fresh("y") if to_float else y
    if b.opset >= 17:
        b.op("LayerNormalization", xs, gamma, beta, out=y32, axis=-1, epsilon=Ref("epsilon"))
    else:
        # The decomposition onnxruntime's LayerNormFusion recognises: the square must
        # be Pow(d, 2) (it does not match Mul(d, d)), mean and variance by ReduceMean.
        d = b.op("Sub", xs, b.reduce_mean(xs, [-1]))
        var = b.reduce_mean(b.op("Pow", d, b.const(2.0, "float32")), [-1])
        std = b.op("Sqrt", b.op("Add", var, b.attr_const("epsilon")))
        b.op("Add", b.op("Mul", b.op("Div", d, std), gamma), beta, out=y32)
    if to_float:
        if b.dtype is None:
            b.op("CastLike", y32, x, out=y)
        else:
            b.op("Cast", y32, out=y, to=b.dtype)


class FusedLayerNorm(ReferenceOp):
    spec = SPEC
