"""YoloConvBnLeaky: conv2d with inference BatchNorm folded in, then LeakyReLU (docs/ops.md),
as its op folder. Layout NHWC, filter HWIO, padding exactly as tf.nn.conv2d.

spec.py assembles SPEC from shape_rule.py (with TF's padding arithmetic),
reference.py, body.py, cases.py and patterns.py; bench.py holds its benchmark rows
and onnxruntime road; keras_layer.py and keras_fusion.py its Keras side (host-side:
they import Keras and are never imported by the spec)."""
NAME = "YoloConvBnLeaky"
PARAMS = ("conv_bias", "bn_gamma", "bn_beta", "bn_mean", "bn_variance")

from .spec import SPEC  # noqa: E402  (the parts read NAME and PARAMS from here)
from .shape_rule import check_attrs, output_size, resolve_pads  # noqa: E402
from .reference import conv2d_nhwc, fold, tf32_error_bound  # noqa: E402

__all__ = ["NAME", "PARAMS", "SPEC", "check_attrs", "output_size", "resolve_pads", "conv2d_nhwc", "fold",
           "tf32_error_bound"]
