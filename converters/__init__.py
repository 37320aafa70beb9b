"""From TensorFlow to the other runtimes: the Keras fusion rewriter (`fuse`), the
tf2onnx handlers (one per spec'd op, made from its spec: tf2onnx_common), and one
exporter per `bridge export --to` target (export_<to>.py)."""

from .fuse import fuse  # noqa: F401  (bridge.converters.fuse is the function; the module is converters/fuse.py)


def backend_status(spec) -> dict:
    """The `tf2onnx` column of `bridge ops` (TFLite's comes from bridge.litert)."""
    from tf2onnx.handler import tf_op
    from .tf2onnx_common import register_all
    status = register_all().get(spec.name, "no")
    if status == "yes":
        versions = tf_op.get_opsets().get(spec.domain, [])
        if not any(spec.name in handlers for handlers in versions):
            status = f"module present, no @tf_op({spec.name!r}, domain={spec.domain!r})"
    return {"tf2onnx": status}
