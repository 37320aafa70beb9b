"""YoloConvBnLeaky's one decomposition into standard ops (the Body protocol, bridge/ops/body.py)."""
from __future__ import annotations


def body(b, x, filt, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance, *, outputs):
    """The decomposition into standard ONNX ops (the Body protocol, bridge/ops/body.py): BatchNorm
    folded into the weights (constant folding removes it when the parameters are
    initializers), then an NCHW Conv and LeakyRelu between transposes."""
    (y,) = outputs
    eps = b.like(b.attr_const("epsilon"), x)
    s = b.op("Div", bn_gamma, b.op("Sqrt", b.op("Add", bn_variance, eps)))
    w = b.op("Transpose", b.op("Mul", filt, s), perm=[3, 2, 0, 1])          # HWIO -> OIHW
    bias = b.op("Add", b.op("Mul", b.op("Sub", conv_bias, bn_mean), s), bn_beta)
    z = b.op("Conv", b.op("Transpose", x, perm=[0, 3, 1, 2]), w, bias,        # NHWC -> NCHW
             strides=b.ref("strides"), pads=b.ref("pads"), dilations=b.ref("dilations"))
    b.op("Transpose", b.op("LeakyRelu", z, alpha=b.ref("alpha")), perm=[0, 2, 3, 1], out=y)
