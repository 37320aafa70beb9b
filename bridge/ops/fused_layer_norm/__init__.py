"""FusedLayerNorm: layer normalization over the last axis (docs/ops.md), as its op folder.

spec.py assembles SPEC from shape_rule.py, reference.py, body.py, cases.py and
patterns.py; bench.py holds its benchmark rows and onnxruntime road; kernel.h its
kernel core; keras_layer.py and keras_fusion.py its Keras side (host-side: they
import Keras and are never imported by the spec)."""
NAME = "FusedLayerNorm"

from .spec import SPEC  # noqa: E402  (the parts read NAME from here)
from .reference import BACKWARD_SCALE, reference_backward  # noqa: E402

__all__ = ["NAME", "SPEC", "BACKWARD_SCALE", "reference_backward"]
