"""YoloDecode's spec: its tensors, attributes, dtypes and bounds, with the parts of
its folder (shape rule, reference, body, cases, patterns) assembled into SPEC."""
from __future__ import annotations

from ..spec import Arg, Attr, OpSpec, Tolerance
from . import NAME
from .body import body
from .cases import bad_inputs, examples
from .patterns import GRAPH_FUSION, KERAS_FUSION
from .reference import reference
from .shape_rule import shape_rule

SPEC = OpSpec(
    name=NAME,
    module="yolo_decode",
    doc="YOLOv3 head decoding: raw [N,H,W,A*(5+C)] to boxes, objectness and class probabilities.",
    inputs=(Arg("raw", "[N,H,W,A*(5+C)]"),),
    outputs=(Arg("boxes", "[N,H*W*A,4] (x_center, y_center, w, h) in input pixels"),
             Arg("objectness", "[N,H*W*A]"),
             Arg("class_probs", "[N,H*W*A,C]")),
    attrs=(Attr("anchors", "list(float)", doc="[w0,h0,w1,h1,...] in input pixels"),
           Attr("num_classes", "int", doc=">= 1"),
           Attr("stride", "int", doc="input pixels per grid cell, >= 1"),
           Attr("scale_x_y", "float", 1.0)),
    onnx_attrs=(Attr("anchors", "list(float)"), Attr("num_classes", "int"),
                Attr("stride", "int"), Attr("scale_x_y", "float", 1.0)),
    dtypes=("float32", "float16"),
    tolerance={"float32": Tolerance(1e-5), "float16": Tolerance(2e-3)},
    _reference=reference,
    shape_rule=shape_rule(),
    _to_onnx=lambda _shapes=None, **a: dict(a),
    _from_onnx=lambda **a: dict(a),
    _examples=examples,
    _bad_inputs=bad_inputs,
    fusion=KERAS_FUSION,
    graph_fusion=GRAPH_FUSION,
    body=body,
)
