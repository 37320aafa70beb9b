"""The ONNX exports the ort* runtimes share, made once per parity run.

The project's exporter (bridge.converters.export_onnx) does the work; parity
asks it for the custom-domain (com.bridge) model of the fused Keras model (the
one tf-fused runs) at the run's input shapes, and derives the standard-ops model by inlining the
com.bridge nodes (the same graph `--mode lowered` writes), so one tf2onnx
conversion serves every ONNX runtime.
"""
from __future__ import annotations

from typing import Any

from bridge.parity.runtime import Unavailable

CUSTOM_DOMAIN = "com.bridge"


def onnx_custom(source) -> Any:
    """The fused model (source.fused_model, shared with tf-fused) exported by
    bridge.converters.export_onnx at the run's input shapes, custom mode."""
    shapes = getattr(source, "input_shapes", None)
    if not shapes:
        raise RuntimeError("the run's input shapes must be set before exporting")
    try:
        from bridge.converters import export_onnx
    except ImportError as e:
        raise Unavailable(f"bridge.converters.export_onnx is not available ({e})") from None
    if source.kind == "keras":
        try:
            model, _ = source.fused_model()
        except Unavailable:
            model = source.keras_model()  # nothing fused: the plain export still checks the ONNX road
    else:
        model = source.saved_model()
    return export_onnx.export_model(model, input_shapes=dict(shapes), mode="custom", fuse=False)


def _opset(domain, version):
    from onnx import helper
    return helper.make_opsetid(domain, version)


def has_custom_nodes(model) -> bool:
    return any(n.domain == CUSTOM_DOMAIN for n in model.graph.node)


def inline(model) -> Any:
    """The model with every com.bridge node replaced by its function body."""
    if not has_custom_nodes(model) and not model.functions:
        return model
    try:
        from bridge import onnx_plugins
        fn = onnx_plugins.inline_custom_ops
    except (ImportError, AttributeError) as e:
        raise Unavailable(f"inlining com.bridge nodes needs bridge.onnx_plugins.inline_custom_ops ({e})") from None
    return fn(model)
