"""tf2onnx handler for YoloConvBnLeaky: the TF node becomes one com.bridge YoloConvBnLeaky node
(see tf2onnx_common.to_custom_node). The lowered export inlines that node's
model-local function, so both export modes start from this handler."""
from bridge import ops

from .tf2onnx_common import register_handler

SPEC = ops.get("YoloConvBnLeaky")
HANDLES = SPEC.name
Handler = register_handler(SPEC)
