"""FusedLayerNorm's one decomposition into standard ops (the Body protocol, bridge/ops/body.py)."""
from __future__ import annotations


def body(b, x, gamma, beta, *, outputs):
    """The decomposition into standard ONNX ops (the Body protocol, bridge/ops/body.py)."""
    (y,) = outputs
    # In float32 (docs/ops.md: float16 accumulates in float32), on the row shifted by
    # its float32 mean m0: x - m0 is exact where x is near m0, and normalising it
    # removes what m0 missed. Unshifted, a mean of 3e4 costs ~1e-3 of y: the mean's
    # own float32 rounding (2^-10 at 3e4), in onnxruntime and onnx's evaluator alike.
    to_float = b.dtype != b.FLOAT
    xf = x
    if to_float:
        xf, gamma, beta = (b.op("Cast", t, to=b.FLOAT) for t in (x, gamma, beta))
    xs = b.op("Sub", xf, b.reduce_mean(xf, [-1]))
    y32 = b.fresh("y") if to_float else y
    if b.opset >= 17:
        b.op("LayerNormalization", xs, gamma, beta, out=y32, axis=-1, epsilon=b.ref("epsilon"))
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
