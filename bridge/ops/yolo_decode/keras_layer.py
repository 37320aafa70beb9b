"""YoloDecode's Keras layer: a YOLO head's fused decode layer. Host-side: imports Keras and
TensorFlow (bridge.converters.fused_layer_base); the spec never imports it;
bridge.converters.fuse_layers loads it by name."""
from __future__ import annotations

import keras

from bridge.converters.fused_layer_base import Fused, infer_shapes, static_shape, tf_ops

from . import SPEC

__all__ = ["FusedYoloDecode"]


@keras.saving.register_keras_serializable(package="bridge")
class FusedYoloDecode(Fused):
    """A YOLO head's decode step as one YoloDecode: raw -> (boxes, objectness, class_probs)."""

    def __init__(self, anchors, num_classes, stride, scale_x_y=None, **kwargs):
        super().__init__(**kwargs)
        self.op_attrs = SPEC.resolve(dict(anchors=anchors, num_classes=num_classes, stride=stride,
                                            scale_x_y=scale_x_y))
        SPEC.infer_shapes([None], **self.op_attrs)  # the attribute checks (anchors, stride, classes)

    def call(self, raw):
        a = self.op_attrs
        return tuple(tf_ops().yolo_decode(raw, a["anchors"], a["num_classes"], a["stride"],
                                           scale_x_y=a["scale_x_y"]))

    def compute_outputstatic_shape(self, raw_shape):
        return infer_shapes(SPEC, [static_shape(raw_shape)], **self.op_attrs)

    def get_config(self):
        attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in self.op_attrs.items()}
        return {**super().get_config(), **attrs}
