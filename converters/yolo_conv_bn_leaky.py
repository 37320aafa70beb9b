"""tf2onnx handler for YoloConvBnLeaky: the TF node becomes one com.bridge YoloConvBnLeaky node
(see tf2onnx_common.to_custom_node). The lowered export inlines that node's
model-local function, so both export modes start from this handler."""
from tf2onnx.handler import tf_op

from bridge import ops

from .tf2onnx_common import to_custom_node

SPEC = ops.get("YoloConvBnLeaky")
HANDLES = SPEC.name


@tf_op(SPEC.name, domain=SPEC.domain)
class YoloConvBnLeakyHandler:
    @classmethod
    def version_1(cls, ctx, node, **kwargs):
        to_custom_node(ctx, node, SPEC)
