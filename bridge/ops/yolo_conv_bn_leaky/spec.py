"""YoloConvBnLeaky's spec: its tensors, attributes (TF's and the ONNX node's, with the
mapping between them), dtypes and bounds, with the parts of its folder (shape rule,
reference, body, cases, patterns) assembled into SPEC."""
from __future__ import annotations

from ..spec import Arg, Attr, OpError, OpSpec, Tolerance, dims
from . import NAME
from .body import body
from .cases import bad_inputs, examples
from .patterns import GRAPH_FUSION, KERAS_FUSION
from .reference import reference
from .shape_rule import infer, resolve_pads, shape_rule


def _to_onnx(input_shapes, *, strides, padding, explicit_paddings, dilations, epsilon, alpha):
    pads, _ = resolve_pads(input_shapes[0], input_shapes[1], strides, padding, explicit_paddings, dilations)
    if None in pads:
        raise OpError(NAME, "padding", f"SAME padding needs static H and W to resolve pads, got x {dims(input_shapes[0])}")
    return dict(strides=strides[1:3], pads=pads, dilations=dilations[1:3], epsilon=epsilon, alpha=alpha)


def _from_onnx(*, strides, pads, dilations, epsilon, alpha):
    # in the node's own terms, as the onnxruntime kernel words them
    for arg, values, what in (("strides", strides, "[sh,sw]"), ("dilations", dilations, "[dh,dw]")):
        if len(values) != 2 or any(v < 1 for v in values):
            raise OpError(NAME, arg, f"needs 2 positive values {what}, got {dims(values)}")
    if len(pads) != 4 or any(p < 0 for p in pads):
        raise OpError(NAME, "pads", f"needs 4 non-negative values [top,left,bottom,right], got {dims(pads)}")
    t, l, b, r = pads
    return dict(strides=(1, *strides, 1), padding="EXPLICIT", explicit_paddings=(0, 0, t, b, l, r, 0, 0),
                dilations=(1, *dilations, 1), epsilon=epsilon, alpha=alpha)


SPEC = OpSpec(
    name=NAME,
    module="yolo_conv_bn_leaky",
    doc="2-D convolution with inference BatchNorm folded into weights and bias, then LeakyReLU.",
    inputs=(Arg("x", "[N,H,W,Cin]"), Arg("filter", "[KH,KW,Cin,Cout]"), Arg("conv_bias", "[Cout]"),
            Arg("bn_gamma", "[Cout]"), Arg("bn_beta", "[Cout]"), Arg("bn_mean", "[Cout]"),
            Arg("bn_variance", "[Cout]")),
    outputs=(Arg("y", "[N,OH,OW,Cout]"),),
    attrs=(Attr("strides", "list(int)", (1, 1, 1, 1), doc="[1,sh,sw,1]"),
           Attr("padding", "string", "SAME", allowed=("SAME", "VALID", "EXPLICIT")),
           Attr("explicit_paddings", "list(int)", (), doc="TF Conv2D's 8 values"),
           Attr("dilations", "list(int)", (1, 1, 1, 1), doc="[1,dh,dw,1]"),
           Attr("epsilon", "float", 1e-5, doc="BatchNorm epsilon"),
           Attr("alpha", "float", 0.1, doc="LeakyReLU slope")),
    onnx_attrs=(Attr("strides", "list(int)", (1, 1)),
                Attr("pads", "list(int)", (0, 0, 0, 0), doc="[top,left,bottom,right]"),
                Attr("dilations", "list(int)", (1, 1)),
                Attr("epsilon", "float", 1e-5),
                Attr("alpha", "float", 0.1)),
    dtypes=("float32", "float16"),
    tolerance={"float32": Tolerance(1e-4), "float16": Tolerance(4e-3)},
    _reference=reference,
    _infer=infer,
    shape_rule=shape_rule(),
    _to_onnx=_to_onnx,
    _from_onnx=_from_onnx,
    _examples=examples,
    _bad_inputs=bad_inputs,
    fusion=KERAS_FUSION,
    graph_fusion=GRAPH_FUSION,
    body=body,
)
