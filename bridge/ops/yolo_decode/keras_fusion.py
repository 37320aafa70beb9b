"""YoloDecode's Keras matcher (its spec's fusion hook): a
`bridge.models.yolo.YoloDecodeHead` becomes one FusedYoloDecode, its
attributes read from the head.

The head is known by its Keras registered name, not by importing it: models/
sits above converters and the op folders (bridge.models.register_layers imports fuse_layers)."""
from __future__ import annotations

from bridge.converters.fuse_layers_common import dtype_problem

HEAD = "bridge>YoloDecodeHead"   # keras.saving.register_keras_serializable(package="bridge") in models/yolo.py


def match(rw, node) -> None:
    import keras
    from . import SPEC
    from .keras_layer import FusedYoloDecode
    head = node.operation
    if not any(keras.saving.get_registered_name(c) == HEAD for c in type(head).__mro__):
        return
    attrs = dict(anchors=head.anchors, num_classes=head.num_classes, stride=head.stride,
                 scale_x_y=head.scale_x_y)
    try:
        SPEC.infer_shapes([tuple(node.input_tensors[0].shape)], **attrs)
    except ValueError as e:
        return rw.report.skip("yolo_decode", [head.name], f"the fused op rejects it: {e}")
    problem = dtype_problem(SPEC, head)
    if problem:
        return rw.report.skip("yolo_decode", [head.name], problem)

    def make(layer_name):
        return FusedYoloDecode(replaces=[head.name], name=layer_name, dtype=head.dtype_policy, **attrs)

    rw.plan(node, "yolo_decode", head.name, make, lambda: [], node, [], [head.name])
