"""YoloConvBnLeaky in ONNX: function body and reference kernel."""
from __future__ import annotations

from bridge.ops import get

from .functions import Body, Ref
from .reference import ReferenceOp

SPEC = get("YoloConvBnLeaky")

# onnxruntime road for kernels="fastest" (onnx_plugins/__init__.py). YOLOv3-416:
# native 120.7 ms on oneDNN (Winograd F(2x2,3x3) for 3x3 stride-1 Cin >= 128, else
# direct) / function 155.3 ms (onnxruntime's NCHWc Conv+LeakyRelu) / plain tf2onnx
# 153.2 ms. Without oneDNN the native kernel is the library's own GEMM, 171.0 ms,
# so the function serves there. Alone, native wins 2.3-3x on the four YOLOv3 shapes.
FASTEST = "native"
FASTEST_WITHOUT_ONEDNN = "function"


def body(b: Body, x, filt, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance, *, outputs):
    (y,) = outputs
    eps = b.like(b.attr_const("epsilon"), x)
    s = b.op("Div", bn_gamma, b.op("Sqrt", b.op("Add", bn_variance, eps)))
    w = b.op("Transpose", b.op("Mul", filt, s), perm=[3, 2, 0, 1])          # HWIO -> OIHW
    bias = b.op("Add", b.op("Mul", b.op("Sub", conv_bias, bn_mean), s), bn_beta)
    z = b.op("Conv", b.op("Transpose", x, perm=[0, 3, 1, 2]), w, bias,        # NHWC -> NCHW
             strides=Ref("strides"), pads=Ref("pads"), dilations=Ref("dilations"))
    b.op("Transpose", b.op("LeakyRelu", z, alpha=Ref("alpha")), perm=[0, 2, 3, 1], out=y)


class YoloConvBnLeaky(ReferenceOp):
    spec = SPEC
